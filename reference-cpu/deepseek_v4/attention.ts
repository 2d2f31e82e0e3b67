/**
 * DeepSeek-V4 attention for a prefill of S tokens at positions 0..S−1, spec §4.5 (DeepSeek's Attention):
 *   qr = RMSN_q_norm(W_qa·a); q = W_qb·qr → [H, d]; each head ← q_h / rms(q_h) (no weight); RoPE(q_h, t)
 *   kv = RMSN_kv_norm(W_kv·a) → [d], RoPE(kv, t): one head, key = value (MQA)
 *   candidates of t: raw kv_s, max(0, t − window + 1) ≤ s ≤ t, plus compressed entries b < ⌊(t+1)/r⌋
 *                    (all of them for HCA, the indexer's picks for CSA)
 *   o_h = Σ_c P_c·k_c with P_c = e^{z_c} / (Σ e^{z_c'} + e^{sink_h}), z_c = q_h·k_c / √d
 *   o_h ← RoPE⁻¹(o_h, t); y_g = W_oa[g]·concat(o_h of group g); out = W_ob·concat(y_g)
 * The sink is a logit without a value and without the 1/√d scale (sparse_attn adds exp(sink − max) to the
 * denominator only).
 */
import type { DeepseekV4Attention } from '../../harness/models/deepseek_v4.js';
import type { DeepseekV4Config } from '../../harness/models/deepseek_v4_config.js';
import { decodeStored } from '../llama.js';
import { rmsnorm, rope, softmaxInPlace } from '../ops.js';
import { type DeepseekV4Ablations, NO_ABLATIONS } from './ablations.js';
import { compress } from './compressor.js';
import { indexerChoice } from './indexer.js';
import { linear, linearRows } from '../linear.js';
import { attentionOutput, attentionScores } from '../native.js';
import { layerInvFreq } from './rope.js';

export interface AttentionResult {
  /** [S, hidden] */
  out: Float32Array;
  /** CSA layers: the compressed blocks each token attended to (sorted); null otherwise */
  indexer: number[][] | null;
  /** CSA layers: the indexer's scores [S, B] (−∞ where not visible), also when the picks were forced */
  indexerScores: { scores: Float32Array; B: number } | null;
}

/**
 * The attention core over explicit candidates: q [S, H, d]; raw rows kv [S, d]; compressed rows comp [B, d];
 * for token t the raw rows window[t] = [first, last] (inclusive) and the compressed rows picks[t].
 * → o [S, H, d]. Float64 scores, softmax and sums: attendWithSinkTs below states it; this is the same computation
 * with its two O(candidates · d) sums native (attentionScores, attentionOutput: the same float64 operations in the
 * same order, so the same bits) and the softmax here (Math.exp). In TypeScript the sums were the reference's
 * largest cost at a few hundred tokens (3.5 of 19 s of a 128-token wide diff).
 */
export function attendWithSink(
  q: Float32Array, kv: Float32Array, comp: Float32Array, S: number, H: number, d: number,
  window: (t: number) => [number, number], picks: (t: number) => readonly number[], sink: Float32Array,
): Float32Array {
  const o = new Float32Array(S * H * d);
  const scale = 1 / Math.sqrt(d);
  for (let t = 0; t < S; t++) {
    const [first, last] = window(t);
    const pk = Int32Array.from(picks(t));
    const p = attentionScores(q, t, H, d, kv, first, last, comp, pk, scale);
    const C = p.length / H;
    for (let h = 0; h < H; h++) softmaxInPlace(p.subarray(h * C, (h + 1) * C), sink[h]);
    attentionOutput(p, kv, first, last, comp, pk, t, H, d, o);
  }
  return o;
}

/** attendWithSink element by element in TypeScript: the statement the native sums are held to. */
export function attendWithSinkTs(
  q: Float32Array, kv: Float32Array, comp: Float32Array, S: number, H: number, d: number,
  window: (t: number) => [number, number], picks: (t: number) => readonly number[], sink: Float32Array,
): Float32Array {
  const o = new Float32Array(S * H * d);
  const scale = 1 / Math.sqrt(d);
  for (let t = 0; t < S; t++) {
    const [first, last] = window(t);
    const rows: Float32Array[] = [];
    for (let s = first; s <= last; s++) rows.push(kv.subarray(s * d, (s + 1) * d));
    for (const b of picks(t)) rows.push(comp.subarray(b * d, (b + 1) * d));
    const p = new Float64Array(rows.length);
    for (let h = 0; h < H; h++) {
      const qh = q.subarray((t * H + h) * d, (t * H + h + 1) * d);
      rows.forEach((k, c) => {
        let dot = 0;
        for (let i = 0; i < d; i++) dot += qh[i] * k[i];
        p[c] = dot * scale;
      });
      softmaxInPlace(p, sink[h]);
      for (let i = 0; i < d; i++) {
        let acc = 0;
        for (let c = 0; c < rows.length; c++) acc += p[c] * rows[c][i];
        o[(t * H + h) * d + i] = acc;
      }
    }
  }
  return o;
}

/** The attention sublayer on a [S, hidden] (the normed u). `ab`: test-only mechanism ablations (ablations.ts). */
export function attention(
  a: Float32Array, S: number, w: DeepseekV4Attention, ratio: number, cfg: DeepseekV4Config,
  positions: readonly number[], forcedIndexer: number[][] | null, ab: DeepseekV4Ablations = NO_ABLATIONS,
): AttentionResult {
  const { heads: H, headDim: d, ropeDim: R, normEps: eps, qLoraRank, oGroups: G, oLoraRank } = cfg;
  // Window and block visibility are defined on absolute positions of a prefill from 0 (§4.5 step 4).
  positions.forEach((p, t) => {
    if (p !== t) throw new Error(`DeepSeek-V4 reference runs a prefill at positions 0..S−1; got position ${p} for token ${t}`);
  });
  const invFreq = layerInvFreq(cfg, ratio);

  const qr = rmsnorm(linear(a, S, w.wq_a), S, qLoraRank, decodeStored(w.q_norm), eps);
  const q = rope(rmsnorm(linear(qr, S, w.wq_b), S * H, d, null, eps), S, H, d, positions, invFreq, 'interleaved', d - R);
  const kv = rope(rmsnorm(linear(a, S, w.wkv), S, d, decodeStored(w.kv_norm), eps), S, 1, d, positions, invFreq, 'interleaved', d - R);

  const comp = w.compressor !== null ? compress(a, S, w.compressor, R, invFreq, eps) : new Float32Array(0);
  const visible = (t: number) => (ratio > 0 ? Math.floor((t + 1) / ratio) : 0);
  const all = (t: number) => Array.from({ length: visible(t) }, (_, b) => b);
  let picks: number[][] | null = null;
  let indexerScores: AttentionResult['indexerScores'] = null;
  if (w.indexer !== null) {
    if (ab.indexerAll && forcedIndexer === null) {
      picks = positions.map((_, t) => all(t));
    } else {
      const dims = { heads: cfg.indexHeads, headDim: cfg.indexHeadDim, topk: cfg.indexTopk, ratio, ropeDim: R, eps };
      const ch = indexerChoice(a, qr, S, w.indexer, dims, positions, invFreq);
      indexerScores = { scores: ch.scores, B: ch.B };
      picks = ch.picks;
      if (forcedIndexer !== null) {
        checkForced(forcedIndexer, S, visible);
        picks = forcedIndexer;
      }
    }
  }
  const dropCompressed = ab.noCompression || (ab.noHca && w.indexer === null);
  const o = attendWithSink(
    q, kv, comp, S, H, d,
    (t) => [ab.windowInf ? 0 : Math.max(0, t - cfg.window + 1), t],
    dropCompressed ? () => [] : picks !== null ? (t) => picks![t] : all,
    ab.noSink ? new Float32Array(H).fill(-Infinity) : decodeStored(w.attn_sink),
  );
  const oRot = rope(o, S, H, d, positions, invFreq, 'interleaved', d - R, -1);

  // Grouped low-rank output: group g's heads (H/G consecutive heads) times rows g·o_lora_rank.. of wo_a.
  const gw = (H / G) * d;
  const y = new Float32Array(S * G * oLoraRank);
  for (let g = 0; g < G; g++) {
    const og = new Float32Array(S * gw);
    for (let t = 0; t < S; t++) og.set(oRot.subarray(t * H * d + g * gw, t * H * d + (g + 1) * gw), t * gw);
    const yg = linearRows(og, S, w.wo_a, g * oLoraRank, oLoraRank);
    for (let t = 0; t < S; t++) y.set(yg.subarray(t * oLoraRank, (t + 1) * oLoraRank), (t * G + g) * oLoraRank);
  }
  return { out: linear(y, S, w.wo_b), indexer: picks, indexerScores };
}

function checkForced(f: number[][], S: number, visible: (t: number) => number): void {
  if (f.length !== S) throw new Error(`forced indexer selections hold ${f.length} tokens, the layer has ${S}`);
  f.forEach((ids, t) => {
    for (const b of ids) if (!Number.isInteger(b) || b < 0 || b >= visible(t)) throw new Error(`forced indexer pick ${b} for token ${t} is not a visible block (< ${visible(t)})`);
  });
}
