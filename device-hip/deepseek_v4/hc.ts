/**
 * Hyper-connections on the device path (spec §4.2–§4.3, §4.7). Precision choices, modelling an MI250 FP16
 * deployment that keeps DeepSeek's own fp32 islands:
 *   - the hc_mult streams X [S, hc, D] are stored in FP16 between kernels, like every activation;
 *   - the mixes, ρ, pre/post, the Sinkhorn iterations and the weighted stream sums run in FP32 inside
 *     hcPreF16 / hcPostF16 / hcHeadF16 (ld_deepseek.h): DeepSeek computes them in fp32, and FP16 Sinkhorn
 *     would visibly bias the doubly-stochastic residual mixing that carries the whole residual path;
 *   - hc_*_fn / base / scale stay FP32 (small: (2+hc)·hc × hc·D per sublayer).
 */
import type { StoredTensor } from '../../harness/formats/linear.js';
import type { HcPreResult } from '../binding.js';
import type { Kit } from './kit.js';

/** The block input from the f16 embedding rows: hc identical copies per token (`unsqueeze(2).repeat`, §4.2). */
export function expandStreams16(h: Uint16Array, S: number, hc: number, D: number): Uint16Array {
  const X = new Uint16Array(S * hc * D);
  for (let t = 0; t < S; t++) for (let j = 0; j < hc; j++) X.set(h.subarray(t * D, (t + 1) * D), (t * hc + j) * D);
  return X;
}

export interface HcParamsStored {
  fn: StoredTensor;
  base: StoredTensor;
  scale: StoredTensor;
}

/** hc_pre of one sublayer: (u f16 [S, D], post, comb) from the streams X f16 [S, hc, D]. */
export function hcPre(kit: Kit, X: Uint16Array, S: number, p: HcParamsStored): HcPreResult {
  const { hcMult: hc, hidden: D, normEps, hcEps, hcSinkhornIters } = kit.cfg;
  return kit.K.hcPreF16(X, kit.f32Now(p.fn), kit.f32Now(p.base), kit.f32Now(p.scale), S, hc, D, normEps, hcEps, hcSinkhornIters);
}

/** hc_post: the new streams from the sublayer output F f16 [S, D]. */
export function hcPost(kit: Kit, F: Uint16Array, X: Uint16Array, S: number, pre: HcPreResult): Uint16Array {
  return kit.K.hcPostF16(F, X, pre.post, pre.comb, S, kit.cfg.hcMult, kit.cfg.hidden);
}
