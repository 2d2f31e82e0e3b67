/**
 * KV compressor, spec §4.5 step 3 (DeepSeek's Compressor, prefill branch). One entry per complete block of
 * r tokens: B = ⌊S/r⌋; trailing tokens wait in decode state and produce nothing here.
 *   K = W_kv·a, Z = W_gate·a (fp32), width c·d_c (c = 2 iff r = 4, "overlap")
 *   r ≠ 4: e_b[ch] = Σ_{i<r} softmax_i(Z_{br+i}[ch] + ape[i][ch]) · K_{br+i}[ch]   (per-channel softmax)
 *   r = 4: 2r slots — slots 0..r−1 are block b−1's tokens on channels [0, d_c) (empty for b = 0:
 *          kv 0, score −∞), slots r..2r−1 are block b's tokens on channels [d_c, 2d_c)
 *   then e_b ← RMSN_norm(e_b), RoPE(e_b, b·r) on its last R dims.
 * The official path also FP8- (main) or Hadamard+FP4- (indexer) simulates the entries (§4.9); the FP32
 * reference skips those round trips (§4.9 "Recommended FP32 reference").
 */
import type { DeepseekV4Compressor } from '../../harness/models/deepseek_v4.js';
import { decodeStored } from '../llama.js';
import { rmsnorm, rope } from '../ops.js';
import { linear } from '../linear.js';

/**
 * The gated pooling alone: K, Z [S, c·dc], ape [r, c·dc] → [⌊S/r⌋, dc] (no norm, no RoPE). Float64 softmax and
 * sums per channel.
 */
export function compressBlocks(K: Float32Array, Z: Float32Array, ape: Float32Array, S: number, ratio: number, dc: number, overlap: boolean): Float32Array {
  const B = Math.floor(S / ratio);
  const w = (overlap ? 2 : 1) * dc;
  const out = new Float32Array(B * dc);
  const nSlots = overlap ? 2 * ratio : ratio;
  const score = new Float64Array(nSlots);
  const kv = new Float64Array(nSlots);
  for (let b = 0; b < B; b++) {
    for (let ch = 0; ch < dc; ch++) {
      for (let i = 0; i < ratio; i++) {
        const cur = b * ratio + i;
        if (overlap) {
          // block b's own tokens on the second channel half
          score[ratio + i] = Z[cur * w + dc + ch] + ape[i * w + dc + ch];
          kv[ratio + i] = K[cur * w + dc + ch];
          // block b−1's tokens on the first half; nothing before block 0
          const prev = cur - ratio;
          score[i] = b > 0 ? Z[prev * w + ch] + ape[i * w + ch] : -Infinity;
          kv[i] = b > 0 ? K[prev * w + ch] : 0;
        } else {
          score[i] = Z[cur * w + ch] + ape[i * w + ch];
          kv[i] = K[cur * w + ch];
        }
      }
      let m = -Infinity;
      for (const s of score) m = Math.max(m, s);
      let sum = 0;
      let acc = 0;
      for (let i = 0; i < nSlots; i++) {
        const e = Math.exp(score[i] - m);
        sum += e;
        acc += e * kv[i];
      }
      out[b * dc + ch] = acc / sum;
    }
  }
  return out;
}

/** The full compressor on a [S, hidden] input: [⌊S/r⌋, dc] entries, normed and rotated at b·r. */
export function compress(a: Float32Array, S: number, c: DeepseekV4Compressor, ropeDim: number, invFreq: ArrayLike<number>, eps: number): Float32Array {
  const { ratio, headDim: dc, overlap } = c;
  const B = Math.floor(S / ratio);
  if (B === 0) return new Float32Array(0);
  const K = linear(a, S, c.wkv);
  const Z = linear(a, S, c.wgate);
  const e = rmsnorm(compressBlocks(K, Z, decodeStored(c.ape), S, ratio, dc, overlap), B, dc, decodeStored(c.norm), eps);
  const pos = Array.from({ length: B }, (_, b) => b * ratio);
  return rope(e, B, 1, dc, pos, invFreq, 'interleaved', dc - ropeDim);
}
