/**
 * Exact dequantization for the reference path. Every product below is exact in float32: an E2M1 value has
 * 2 significant bits and an E4M3 value 4, times a power of two (E8M0) — so W is the stored value, not an
 * approximation. F32 `weight_scale_inv` scales are one inexact case (one float32 rounding, as PyTorch);
 * NVFP4 is the other: its block scale is formed in float32 as the producers do (E4M3(s) · weight_scale_2 for
 * ModelOpt, E4M3(s) / weight_global_scale for compressed-tensors), then E2M1 · scale, each rounded once to
 * float32. (A float64 product or quotient of float32 values rounded to float32 is the correctly rounded
 * float32 result, so JS arithmetic + Math.fround is exactly the producers' float32 arithmetic.)
 */
import { InputError } from '../harness/errors.js';
import { decodeToF32, E2M1_VALUES, E4M3_TABLE, E8M0_TABLE } from '../harness/formats/dtypes.js';
import type { LinearWeight, StoredTensor } from '../harness/formats/linear.js';

export function dequantLinear(lw: LinearWeight): Float32Array {
  const { out, in: inn } = lw;
  const w = new Float32Array(out * inn);
  if (lw.format === 'plain') {
    w.set(decodeToF32(lw.weight.dtype, lw.weight.bytes, out * inn));
  } else if (lw.format === 'mxfp4') {
    // W[o,i] = E2M1(nibble) · 2^(S[o,⌊i/32⌋]−127); byte j of a row holds inputs 2j (low nibble) and 2j+1 (high).
    const packed = lw.weight.bytes;
    const scales = lw.scale!.bytes;
    const nb = inn / 32;
    for (let o = 0; o < out; o++) {
      for (let b = 0; b < nb; b++) {
        const s = E8M0_TABLE[scales[o * nb + b]];
        const src = o * (inn / 2) + b * 16;
        const dst = o * inn + b * 32;
        for (let j = 0; j < 16; j++) {
          const byte = packed[src + j];
          w[dst + 2 * j] = E2M1_VALUES[byte & 0x0f] * s;
          w[dst + 2 * j + 1] = E2M1_VALUES[byte >> 4] * s;
        }
      }
    }
  } else if (lw.format === 'nvfp4') {
    // W[o,i] = E2M1(nibble) · fround(E4M3(S[o,⌊i/16⌋]) op g); byte j of a row holds inputs 2j (low) and 2j+1 (high).
    const packed = lw.weight.bytes;
    const scales = lw.scale!.bytes;
    const g = lw.global!;
    const nb = inn / 16;
    for (let o = 0; o < out; o++) {
      for (let b = 0; b < nb; b++) {
        const e = E4M3_TABLE[scales[o * nb + b]];
        const s = Math.fround(g.op === 'mul' ? e * g.value : e / g.value);
        const src = o * (inn / 2) + b * 8;
        const dst = o * inn + b * 16;
        for (let j = 0; j < 8; j++) {
          const byte = packed[src + j];
          w[dst + 2 * j] = E2M1_VALUES[byte & 0x0f] * s;
          w[dst + 2 * j + 1] = E2M1_VALUES[byte >> 4] * s;
        }
      }
    }
  } else {
    // W[o,i] = E4M3(w[o,i]) · scale[⌊o/bo⌋, ⌊i/bi⌋], one scale per bo×bi tile (edge tiles partial).
    const [bo, bi] = lw.block;
    const nbi = Math.ceil(inn / bi);
    const scale = blockScales(lw.scale!);
    const codes = lw.weight.bytes;
    for (let o = 0; o < out; o++) {
      const srow = Math.floor(o / bo) * nbi;
      for (let b = 0; b < nbi; b++) {
        const s = scale[srow + b];
        const end = Math.min(inn, (b + 1) * bi);
        for (let i = b * bi; i < end; i++) w[o * inn + i] = E4M3_TABLE[codes[o * inn + i]] * s;
      }
    }
  }
  assertFinite(w, lw, lw.weight.file);
  return w;
}

function blockScales(s: StoredTensor): Float64Array {
  const n = s.shape.reduce((a, b) => a * b, 1);
  if (s.dtype === 'F32') return Float64Array.from(decodeToF32('F32', s.bytes, n));
  return Float64Array.from(s.bytes.subarray(0, n), (b) => E8M0_TABLE[b]);
}

/** NaN in a weight is bad input (E8M0 0xFF, E4M3 0x7F/0xFF, a NaN BF16): name the tensor, do not compute. */
export function assertFinite(w: Float32Array, lw: { name: string; scale?: StoredTensor | null; file?: string }, file = lw.file): void {
  for (let i = 0; i < w.length; i++) {
    if (!Number.isFinite(w[i])) {
      const what = Number.isNaN(w[i]) ? 'NaN' : 'Inf';
      throw new InputError(`weight decodes to ${what} at flat index ${i}${lw.scale ? ` (check its scale ${lw.scale.name})` : ''}`, { file, tensor: lw.name });
    }
  }
}
