/**
 * DeepSeek-V4 MoE on the device path, op for op as reference-cpu/deepseek_v4/moe.ts (spec §4.6).
 * Precision choices (an MI250 FP16 deployment):
 *   - router logits keep FP32 output (gemmF16F32) and sqrt-softplus, the biased top-k and the weights run
 *     in FP32 (routerF32): DeepSeek's Gate is fp32, and FP16 logits would flip near-tied experts;
 *   - expert linears (MXFP4 routed, FP8 shared) are FP16 weights × FP16 activations, FP32 accumulation,
 *     FP16 output;
 *   - SwiGLU with the routed-expert clamp, and the routing weight ω (applied before W2, as DeepSeek's
 *     Expert does), in FP32 → FP16 once (swigluRowsF16); the shared expert has no clamp and weight 1;
 *   - the routed W2 outputs and the shared one are summed in FP32 and rounded once (moeCombineF16).
 * A routed expert runs only on the tokens routed to it and its weights are read (w.expert(e)) and
 * dequantized to FP16 only then, for that call (not cached: DESIGN §10 bounds memory by one layer's working
 * set, and all of a layer's experts in FP16 would be 12 GiB at real width). The accumulated and isolated runs
 * each dequantize the experts they use; the packed bytes are read once (the layer's expert cache).
 */
import type { DeepseekV4LayerWeights } from '../../harness/models/deepseek_v4.js';
import type { Kit } from './kit.js';

export interface MoeResult {
  /** f16 [S, hidden] */
  out: Uint16Array;
  /** per token, expert ids ascending (duplicates of a tid2eid row kept) */
  ids: number[][];
  /** f32 [S, topk]: ω aligned with ids */
  weights: Float32Array;
  /** the router scores s = sqrt-softplus of this path's FP32 logits [S, E] and the selection bias (score layers only) */
  scores: { s: Float32Array; bias: Float32Array | null } | null;
}

/** sqrt(softplus(x)) in f32, PyTorch's threshold 20 (the router kernel's function, for the flip judgement). */
function sqrtSoftplusF32(x: number): number {
  return Math.fround(Math.sqrt(Math.fround(x > 20 ? x : Math.log1p(Math.exp(x)))));
}

/**
 * f f16 [S, hidden]; `given`: the hash layers' tid2eid rows or the reference's forced choice, else null.
 * Fault router-bias-dropped: the selection runs without gate.bias (ω never used it, so forced choices hide it).
 */
export function moe(kit: Kit, f: Uint16Array, S: number, w: DeepseekV4LayerWeights, given: number[][] | null): MoeResult {
  const { K, cfg } = kit;
  const { hidden: D, experts: E, topk: k, moeInter: I } = cfg;
  let givenIds: Int32Array | null = null;
  if (given !== null) {
    if (given.length !== S) throw new Error(`given expert selections hold ${given.length} tokens, the layer has ${S}`);
    givenIds = new Int32Array(S * k);
    given.forEach((ids, t) => {
      if (ids.length !== k) throw new Error(`given expert selection for token ${t} holds ${ids.length} ids, want ${k}`);
      givenIds!.set(ids, t * k);
    });
  }
  const logits = kit.lin32(f, S, w.ffn.gate.weight);
  const bias = w.ffn.gate.bias !== null ? kit.f32(w.ffn.gate.bias) : null;
  const r = K.routerF32(logits, kit.fault === 'router-bias-dropped' ? null : bias, S, E, k, cfg.routeScale, givenIds);

  // Rows per expert, expert ids ascending, tokens in order within an expert: moeCombineF16 sums a token's
  // rows in this order, the reference's order.
  const byExpert = new Map<number, number[]>();
  for (let q = 0; q < S * k; q++) {
    let l = byExpert.get(r.ids[q]);
    if (l === undefined) byExpert.set(r.ids[q], (l = []));
    l.push(q);
  }
  const Y = new Uint16Array(S * k * D);
  const rowToken = new Int32Array(S * k);
  let row = 0;
  const order = [...byExpert.keys()].sort((a, b) => a - b);
  w.expertsAhead?.(order);
  for (const e of order) {
    const slots = byExpert.get(e)!;
    const n = slots.length;
    const xe = new Uint16Array(n * D);
    const om = new Float32Array(n);
    slots.forEach((q, i) => {
      const t = Math.floor(q / k);
      xe.set(f.subarray(t * D, (t + 1) * D), i * D);
      om[i] = r.weights[q];
      rowToken[row + i] = t;
    });
    const ex = w.expert(e);
    const h = K.swigluRowsF16(kit.lin(xe, n, ex.w1, 1, true), kit.lin(xe, n, ex.w3, 1, true), n, I, om, cfg.swigluLimit);
    Y.set(kit.lin(h, n, ex.w2, 1, true), row * D);
    row += n;
  }
  const sh = w.ffn.shared_experts;
  const hs = K.swigluRowsF16(kit.lin(f, S, sh.w1), kit.lin(f, S, sh.w3), S, sh.w1.out, null, 0);
  const out = K.moeCombineF16(Y, rowToken, kit.lin(hs, S, sh.w2), S, D);

  const ids: number[][] = [];
  for (let t = 0; t < S; t++) ids.push(Array.from(r.ids.subarray(t * k, (t + 1) * k)));
  return { out, ids, weights: r.weights, scores: w.hash ? null : { s: logits.map(sqrtSoftplusF32), bias } };
}
