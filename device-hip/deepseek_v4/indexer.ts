/**
 * The CSA indexer on the device path (spec §4.5 step 6). Precision choices:
 *   - qI = W_iqb·qr and the head weights W_wp·a are ordinary FP16-output linears;
 *   - its compressor as compressor.ts (d_c = index_head_dim);
 *   - score(t, b) = Σ_h w_{t,h}·scale·ReLU(qI·e^I_b) in FP32 (indexerTopkF16), top-k with lowest-index ties.
 * DeepSeek's Hadamard rotation and FP4 simulation of qI / e^I are not modelled: like the reference, this path
 * models an FP16 deployment, where neither exists (the rotation is orthogonal, §4.5 step 6).
 */
import type { DeepseekV4Indexer } from '../../harness/models/deepseek_v4.js';
import { compress } from './compressor.js';
import type { Kit } from './kit.js';
import type { RopeTable } from './rope.js';

/** The picks per token (ascending block ids). a f16 [S, hidden], qr f16 [S, q_lora_rank]. */
export function indexerPicks(kit: Kit, a: Uint16Array, qr: Uint16Array, S: number, iw: DeepseekV4Indexer, ratio: number, tab: RopeTable, invFreq: Float64Array): number[][] {
  return indexerChoice(kit, a, qr, S, iw, ratio, tab, invFreq).picks;
}

/** The picks and the kernel's scores f32 [S, B] (−∞ where not visible), for the flip judgement. */
export function indexerChoice(kit: Kit, a: Uint16Array, qr: Uint16Array, S: number, iw: DeepseekV4Indexer, ratio: number, tab: RopeTable, invFreq: Float64Array): { picks: number[][]; scores: Float32Array; B: number } {
  const { indexHeads: nh, indexHeadDim: hd, indexTopk: topk, ropeDim: R } = kit.cfg;
  const qI = kit.N.ropeF16(kit.lin(qr, S, iw.wq_b), tab.cos, tab.sin, S, nh, hd, hd - R, R, true);
  const w = kit.lin(a, S, iw.weights_proj);
  const { e, B } = compress(kit, a, S, iw.compressor, invFreq);
  const { picks, scores } = kit.K.indexerTopkF16(qI, w, e, S, nh, hd, B, ratio, 0, topk, hd ** -0.5 * nh ** -0.5);
  const out: number[][] = [];
  for (let t = 0; t < S; t++) {
    const row: number[] = [];
    for (let j = 0; j < topk; j++) if (picks[t * topk + j] >= 0) row.push(picks[t * topk + j]);
    out.push(row);
  }
  return { picks: out, scores, B };
}
