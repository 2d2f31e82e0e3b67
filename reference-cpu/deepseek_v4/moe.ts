/**
 * DeepSeek-V4 MoE, spec §4.6 (DeepSeek's Gate, Expert, MoE). Input f [S, hidden] is the normed sublayer input.
 *   l = W_gate·f (fp32); s_e = sqrt(softplus(l_e)), softplus(x) = ln(1 + eˣ), = x above 20 (PyTorch's threshold)
 *   ids: hash layers (L < num_hash_layers) tid2eid[token]; else top-k of s + gate.bias, ties → lowest id
 *   ω_i = routed_scaling_factor · s_{id_i} / Σ_j s_{id_j}  (unbiased s, hash layers too)
 *   routed e: W2·(ω·silu(min(W1x, lim)) ⊙ clamp(W3x, ±lim)); shared: the same SwiGLU, no clamp, weight 1
 *   MoE(f) = Σ_i expert_{id_i}(f) + shared(f)
 * A routed expert runs only on the tokens routed to it, and its weights are read (w.expert(e)) and decoded only
 * then, a few rows at a time inside the exact GEMM (reference-cpu/linear.ts, linearExact): no FP32 copy of an
 * expert, the extra memory of a call being its activations [T_e, 2048].
 */
import type { DeepseekV4Expert, DeepseekV4LayerWeights } from '../../harness/models/deepseek_v4.js';
import { decodeStored } from '../llama.js';
import { stored, swiglu } from '../ops.js';
import { linear } from '../linear.js';
import { topkLowestIndex } from './indexer.js';

/** sqrt(softplus(x)) with PyTorch's softplus (beta 1, threshold 20: linear above). */
export function sqrtSoftplus(x: number): number {
  return Math.sqrt(x > 20 ? x : Math.log1p(Math.exp(x)));
}

export interface Routing {
  /** per token, expert ids sorted ascending (a duplicate is kept: the binding refuses tid2eid rows holding one) */
  ids: number[][];
  /** per token, ω aligned with ids */
  weights: number[][];
}

export interface RouteInput {
  /** router scores s [S, E] (float64) */
  scores: Float64Array;
  S: number;
  experts: number;
  topk: number;
  routeScale: number;
  /** gate.bias for selection (non-hash layers); null: select on the scores alone */
  bias: Float32Array | null;
  /** expert ids per token for hash layers */
  hashIds: number[][] | null;
  /** ids to use instead of choosing (isolated mode); ω still from this path's scores */
  forced: number[][] | null;
}

/** Expert choice and routing weights, §4.6 steps 2–3. */
export function route(r: RouteInput): Routing {
  const { scores, S, experts: E, topk } = r;
  if (r.forced !== null) checkForced(r.forced, S, E, topk);
  const ids: number[][] = [];
  const weights: number[][] = [];
  for (let t = 0; t < S; t++) {
    const s = scores.subarray(t * E, (t + 1) * E);
    let chosen: number[];
    if (r.forced !== null) chosen = r.forced[t];
    else if (r.hashIds !== null) chosen = r.hashIds[t];
    else chosen = topkLowestIndex(r.bias === null ? s : Float64Array.from(s, (v, e) => v + r.bias![e]), topk);
    const sorted = [...chosen].sort((a, b) => a - b);
    let sum = 0;
    for (const e of sorted) sum += s[e];
    ids.push(sorted);
    weights.push(sorted.map((e) => (r.routeScale * s[e]) / sum));
  }
  return { ids, weights };
}

function checkForced(f: number[][], S: number, E: number, topk: number): void {
  if (f.length !== S) throw new Error(`forced expert selections hold ${f.length} tokens, the layer has ${S}`);
  f.forEach((ids, t) => {
    if (ids.length !== topk) throw new Error(`forced expert selection for token ${t} holds ${ids.length} ids, want ${topk}`);
    for (const e of ids) if (!Number.isInteger(e) || e < 0 || e >= E) throw new Error(`forced expert ${e} for token ${t} is outside [0, ${E})`);
  });
}

/**
 * One SwiGLU expert on `rows` input rows: W2·(ω_row · silu(g)·v), g/v clamped when limit > 0. `fp16`: the
 * floor pass's FP16 storage (LayerContext.fp16Storage) of W1x, W3x, the weighted activation and the output,
 * where the device path stores them.
 */
export function expertForward(x: Float32Array, rows: number, ex: DeepseekV4Expert, limit: number, rowWeights: ArrayLike<number> | null, fp16?: boolean): Float32Array {
  const I = ex.w1.out;
  const h = swiglu(stored(linear(x, rows, ex.w1), fp16), stored(linear(x, rows, ex.w3), fp16), limit);
  if (rowWeights !== null) for (let r = 0; r < rows; r++) for (let i = 0; i < I; i++) h[r * I + i] *= rowWeights[r];
  return stored(linear(stored(h, fp16), rows, ex.w2), fp16);
}

export interface MoeDims {
  hidden: number;
  experts: number;
  topk: number;
  routeScale: number;
  swigluLimit: number;
  /** the floor pass's FP16 storage inside the experts (expertForward); absent: FP32 */
  fp16?: boolean;
}

export interface MoeResult {
  /** [S, hidden] */
  out: Float32Array;
  routing: Routing;
  /** router scores s [S, E] (before the selection bias) and that bias, for the flip judgement; null on hash layers */
  scores: { s: Float64Array; bias: Float32Array | null } | null;
}

/**
 * The whole MoE on f [S, hidden]. `hashIds` are the tid2eid rows of the tokens (hash layers), else null.
 * Routed outputs and the shared output are summed per token in float64.
 */
export function moe(f: Float32Array, S: number, w: DeepseekV4LayerWeights, d: MoeDims, hashIds: number[][] | null, forced: number[][] | null): MoeResult {
  const { hidden: D, experts: E } = d;
  const logits = linear(f, S, w.ffn.gate.weight);
  const scores = Float64Array.from(logits, sqrtSoftplus);
  const bias = w.ffn.gate.bias !== null ? decodeStored(w.ffn.gate.bias) : null;
  const routing = route({ scores, S, experts: E, topk: d.topk, routeScale: d.routeScale, bias, hashIds, forced });

  // Tokens per expert, in token order; a token listing an expert twice would run it twice (the binding refuses
  // such tid2eid rows: DeepSeek's code applies one of them)
  const byExpert = new Map<number, Array<[number, number]>>();
  routing.ids.forEach((ids, t) => ids.forEach((e, i) => {
    let l = byExpert.get(e);
    if (l === undefined) byExpert.set(e, (l = []));
    l.push([t, routing.weights[t][i]]);
  }));
  const acc = new Float64Array(S * D);
  for (const e of [...byExpert.keys()].sort((a, b) => a - b)) {
    const list = byExpert.get(e)!;
    const xe = new Float32Array(list.length * D);
    list.forEach(([t], r) => xe.set(f.subarray(t * D, (t + 1) * D), r * D));
    const ye = expertForward(xe, list.length, w.expert(e), d.swigluLimit, list.map(([, om]) => om), d.fp16);
    list.forEach(([t], r) => {
      for (let i = 0; i < D; i++) acc[t * D + i] += ye[r * D + i];
    });
  }
  const shared = expertForward(f, S, w.ffn.shared_experts, 0, null, d.fp16);
  const out = new Float32Array(S * D);
  for (let i = 0; i < S * D; i++) out[i] = acc[i] + shared[i];
  return { out, routing, scores: hashIds === null ? { s: scores, bias } : null };
}
