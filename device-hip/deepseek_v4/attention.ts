/**
 * DeepSeek-V4 attention on the device path, op for op as reference-cpu/deepseek_v4/attention.ts (spec §4.5).
 * Precision choices (an MI250 FP16 deployment):
 *   - every linear (wq_a, wq_b, wkv, wo_a, wo_b, indexer) is FP16 weights × FP16 activations, FP32
 *     accumulation, FP16 output (gemmF16); the compressor projections keep FP32 output (compressor.ts);
 *   - q_norm, the unweighted per-head q norm and kv_norm in FP32 → FP16 (rmsnormF16; the head norm uses a
 *     weight of ones, exact in FP16), RoPE in FP32 → FP16 (ropeF16; the inverse rotation is the same
 *     kernel with −sin);
 *   - scores, the softmax with the sink and the denominator in FP32, P rounded to FP16 before P·V, as
 *     attentionF16 does (sparseAttentionF16).
 * Injected fp16-overflow: alpha 2^16 on wo_b, the attention output projection — "attention activations
 * overflow FP16" (DESIGN §9). Its Inf enters the streams through hc_post and the next hc_pre turns it into
 * NaN, all inside this layer, so the layer that overflowed is the first to fail.
 */
import type { LinearWeight } from '../../harness/formats/linear.js';
import type { DeepseekV4Attention } from '../../harness/models/deepseek_v4.js';
import { OVERFLOW_ALPHA } from '../../harness/faults/plan.js';
import { compress } from './compressor.js';
import { indexerChoice } from './indexer.js';
import type { Kit } from './kit.js';
import { layerInvFreq, ropeTable } from './rope.js';

export interface AttentionResult {
  /** f16 [S, hidden] */
  out: Uint16Array;
  /** CSA layers: the compressed blocks each token attended to (ascending); null otherwise */
  indexer: number[][] | null;
  /** CSA layers: the indexer kernel's scores f32 [S, B] (−∞ where not visible), also when the picks were forced */
  indexerScores: { scores: Float32Array; B: number } | null;
}

export function attention(kit: Kit, a: Uint16Array, S: number, w: DeepseekV4Attention, ratio: number, positions: readonly number[], forcedIndexer: number[][] | null): AttentionResult {
  const { N, K, cfg } = kit;
  const { heads: H, headDim: d, ropeDim: R, normEps: eps, qLoraRank, oGroups: G, oLoraRank } = cfg;
  // Window and block visibility are defined on absolute positions of a prefill from 0 (§4.5 step 4).
  positions.forEach((p, t) => {
    if (p !== t) throw new Error(`DeepSeek-V4 device path runs a prefill at positions 0..S−1; got position ${p} for token ${t}`);
  });
  const invFreq = layerInvFreq(cfg, ratio);
  const tab = ropeTable(positions, invFreq, kit.fault === 'rope-angle-fp16');

  const qr = N.rmsnormF16(kit.lin(a, S, w.wq_a), kit.vec16(w.q_norm), S, qLoraRank, eps);
  const qn = N.rmsnormF16(kit.lin(qr, S, w.wq_b), new Uint16Array(d).fill(0x3c00), S * H, d, eps);
  const q = N.ropeF16(qn, tab.cos, tab.sin, S, H, d, d - R, R, true);
  const kvn = N.rmsnormF16(kit.lin(a, S, w.wkv), kit.vec16(w.kv_norm), S, d, eps);
  const kv = N.ropeF16(kvn, tab.cos, tab.sin, S, 1, d, d - R, R, true);

  const { e: comp, B } = w.compressor !== null ? compress(kit, a, S, w.compressor, invFreq) : { e: new Uint16Array(0), B: 0 };
  const visible = (t: number) => (ratio > 0 ? Math.min(B, Math.floor((t + 1) / ratio)) : 0);
  let picks: number[][] | null = null;
  let indexerScores: { scores: Float32Array; B: number } | null = null;
  if (w.indexer !== null) {
    // scored also when the picks are forced: the isolated run's score error is what judges a flip
    const ch = indexerChoice(kit, a, qr, S, w.indexer, ratio, tab, invFreq);
    indexerScores = { scores: ch.scores, B: ch.B };
    picks = ch.picks;
    if (forcedIndexer !== null) {
      checkForced(forcedIndexer, S, visible);
      picks = forcedIndexer;
    }
  }
  // Compressed candidates per token, −1 padded: the indexer's picks (CSA) or every finished block (HCA).
  const width = picks !== null ? picks.reduce((m, p) => Math.max(m, p.length), cfg.indexTopk) : B;
  const cand = new Int32Array(S * width).fill(-1);
  for (let t = 0; t < S; t++) {
    const list = picks !== null ? picks[t] : Array.from({ length: visible(t) }, (_, b) => b);
    cand.set(list, t * width);
  }
  const o = K.sparseAttentionF16(q, kv, comp, S, H, d, B, cfg.window, cand, width, kit.f32(w.attn_sink), 1 / Math.sqrt(d));
  const oRot = N.ropeF16(o, tab.cos, tab.sinNeg, S, H, d, d - R, R, true);

  const y = groupedWoA(kit, oRot, S, H, d, G, oLoraRank, w.wo_a);
  const out = kit.lin(y, S, w.wo_b, kit.fault === 'fp16-overflow' ? OVERFLOW_ALPHA : 1);
  return { out, indexer: picks, indexerScores };
}

/**
 * Grouped low-rank output (wo_a): group g's H/G consecutive heads of each row times rows g·o_lora_rank.. of
 * wo_a; f16 [rows, G·o_lora_rank], group-major within a row. Shared with the cached decoder.
 */
export function groupedWoA(kit: Kit, oRot: Uint16Array, rows: number, H: number, d: number, G: number, oLoraRank: number, woAWeight: LinearWeight): Uint16Array {
  const gw = (H / G) * d;
  const y = new Uint16Array(rows * G * oLoraRank);
  for (let g = 0; g < G; g++) {
    const og = new Uint16Array(rows * gw);
    for (let t = 0; t < rows; t++) og.set(oRot.subarray(t * H * d + g * gw, t * H * d + (g + 1) * gw), t * gw);
    const yg = kit.linRows(og, rows, woAWeight, g * oLoraRank, oLoraRank);
    for (let t = 0; t < rows; t++) y.set(yg.subarray(t * oLoraRank, (t + 1) * oLoraRank), (t * G + g) * oLoraRank);
  }
  return y;
}

function checkForced(f: number[][], S: number, visible: (t: number) => number): void {
  if (f.length !== S) throw new Error(`forced indexer selections hold ${f.length} tokens, the layer has ${S}`);
  f.forEach((ids, t) => {
    for (const b of ids) if (!Number.isInteger(b) || b < 0 || b >= visible(t)) throw new Error(`forced indexer pick ${b} for token ${t} is not a visible block (< ${visible(t)})`);
  });
}
