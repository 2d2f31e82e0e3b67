/**
 * The CSA indexer (compress ratio 4 layers), spec §4.5 step 6 and §10.1; DeepSeek's Indexer.
 *   e^I_b  = its own compressor (d_c = index_head_dim, overlap), RoPE at b·4 on the last R dims
 *   qI_t   = W_iqb·qr_t → [index_n_heads, index_head_dim], RoPE(p_t) on the last R dims of each head
 *   w_t    = (W_wp·a_t) · index_head_dim^−½ · index_n_heads^−½
 *   score(t, b) = Σ_h w_{t,h}·ReLU(qI_{t,h}·e^I_b) over visible blocks b < ⌊(t+1)/4⌋
 *   picks  = the top min(index_topk, #visible) blocks, ties → lowest block index (§10.1, DESIGN §5)
 * DeepSeek's code takes torch.topk over all ⌊S/4⌋ blocks with invisible ones at −∞ and k = min(topk, ⌊S/4⌋),
 * then drops the invisible picks: the same set as the top-min(topk, #visible) visible blocks.
 *
 * Skipped: the 128-point Hadamard transform (scale 1/√d, Sylvester order) DeepSeek applies to qI and e^I
 * before their FP4 simulation. H is orthogonal (H·Hᵀ = I), so qI·e^I = (H·qI)·(H·e^I): the scores are
 * unchanged in exact arithmetic, and it only exists to spread outliers before quantization, which the FP32
 * reference does not simulate (§4.5 step 6, §4.9).
 */
import type { DeepseekV4Indexer } from '../../harness/models/deepseek_v4.js';
import { rope } from '../ops.js';
import { compress } from './compressor.js';
import { linear } from '../linear.js';

export interface IndexerDims {
  heads: number;
  headDim: number;
  topk: number;
  ratio: number;
  ropeDim: number;
  eps: number;
}

/**
 * Indices of the k largest values, ties → lowest index, returned sorted ascending. A stable sort on
 * (value desc, index asc) makes the tie rule explicit rather than an accident of the selection algorithm.
 */
export function topkLowestIndex(values: ArrayLike<number>, k: number): number[] {
  const idx = Array.from({ length: values.length }, (_, i) => i);
  idx.sort((a, b) => (values[b] > values[a] ? 1 : values[b] < values[a] ? -1 : a - b));
  return idx.slice(0, Math.max(0, Math.min(k, values.length))).sort((a, b) => a - b);
}

/**
 * score(t, b) for every token and its visible blocks: qI [S, nh, hd], w [S, nh] (already scaled),
 * eI [B, hd] → one Float64Array per token of length ⌊(t+1)/ratio⌋.
 */
export function indexerScores(qI: Float32Array, w: ArrayLike<number>, eI: Float32Array, S: number, d: Pick<IndexerDims, 'heads' | 'headDim' | 'ratio'>): Float64Array[] {
  const { heads: nh, headDim: hd, ratio } = d;
  const out: Float64Array[] = [];
  for (let t = 0; t < S; t++) {
    const visible = Math.floor((t + 1) / ratio);
    const sc = new Float64Array(visible);
    for (let b = 0; b < visible; b++) {
      let total = 0;
      for (let h = 0; h < nh; h++) {
        let dot = 0;
        for (let i = 0; i < hd; i++) dot += qI[(t * nh + h) * hd + i] * eI[b * hd + i];
        total += w[t * nh + h] * Math.max(dot, 0);
      }
      sc[b] = total;
    }
    out.push(sc);
  }
  return out;
}

/** The indexer's picks per token (sorted block ids). a [S, hidden] is the normed attention input, qr [S, q_lora_rank]. */
export function indexerPicks(a: Float32Array, qr: Float32Array, S: number, iw: DeepseekV4Indexer, d: IndexerDims, positions: ArrayLike<number>, invFreq: ArrayLike<number>): number[][] {
  return indexerChoice(a, qr, S, iw, d, positions, invFreq).picks;
}

/**
 * Picks and the scores they came from, [S, B] with B = ⌊S/ratio⌋ and blocks not yet visible to a token at
 * −∞ (the device kernel's layout): the runner judges indexer flips by these scores (harness/compare/flips.ts).
 */
export function indexerChoice(a: Float32Array, qr: Float32Array, S: number, iw: DeepseekV4Indexer, d: IndexerDims, positions: ArrayLike<number>, invFreq: ArrayLike<number>): { picks: number[][]; scores: Float32Array; B: number } {
  const { heads: nh, headDim: hd, ropeDim: R } = d;
  const qI = rope(linear(qr, S, iw.wq_b), S, nh, hd, positions, invFreq, 'interleaved', hd - R);
  const scale = hd ** -0.5 * nh ** -0.5;
  const w = Float64Array.from(linear(a, S, iw.weights_proj), (v) => v * scale);
  const eI = compress(a, S, iw.compressor, R, invFreq, d.eps);
  const sc = indexerScores(qI, w, eI, S, d);
  const B = Math.floor(S / d.ratio);
  const scores = new Float32Array(S * B).fill(-Infinity);
  sc.forEach((row, t) => scores.set(row.subarray(0, B), t * B));
  return { picks: sc.map((row) => topkLowestIndex(row, d.topk)), scores, B };
}
