/**
 * Exact dequantization for the reference path. Every product below is exact in float32: an E2M1 value has
 * 2 significant bits and an E4M3 value 4, times a power of two (E8M0) — so W is the stored value, not an
 * approximation. F32 `weight_scale_inv` scales are the one inexact case (one float32 rounding, as PyTorch).
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
    const packed = lw.weight.bytes;
    const scales = lw.scale!.bytes;
    const nb = inn / 32;
    for (let o = 0; o < out; o++) {
      for (let i = 0; i < inn; i++) {
        const byte = packed[o * (inn / 2) + (i >> 1)];
        const nibble = i % 2 === 0 ? byte & 0x0f : byte >> 4; // low nibble = even input index
        w[o * inn + i] = E2M1_VALUES[nibble] * E8M0_TABLE[scales[o * nb + Math.floor(i / 32)]];
      }
    }
  } else {
    const [bo, bi] = lw.block;
    const nbi = Math.ceil(inn / bi);
    const scale = blockScales(lw.scale!);
    const codes = lw.weight.bytes;
    for (let o = 0; o < out; o++) {
      for (let i = 0; i < inn; i++) {
        w[o * inn + i] = E4M3_TABLE[codes[o * inn + i]] * scale[Math.floor(o / bo) * nbi + Math.floor(i / bi)];
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
