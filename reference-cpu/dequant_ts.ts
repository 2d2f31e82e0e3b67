/**
 * The reference's exact dequantization written out in TypeScript, element by element: the readable
 * statement of each format's rule and the second implementation the native decoder (reference-cpu/native/
 * dequant_exact.cc, what every path runs) is tested against. Not on any hot path.
 *
 * Every product below is exact in float32: an E2M1 value has 2 significant bits and an E4M3 value 4, times
 * a power of two (E8M0) — so W is the stored value, not an approximation. F32 `weight_scale_inv` scales are
 * the one inexact case (one float32 rounding, as PyTorch).
 */
import { decodeToF32, E2M1_VALUES, E4M3_TABLE, E8M0_TABLE } from '../harness/formats/dtypes.js';
import type { LinearWeight, StoredTensor } from '../harness/formats/linear.js';

export function dequantLinearTs(lw: LinearWeight): Float32Array {
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
    w.set(dequantNvfp4RowsTs(lw, 0, out));
  } else if (lw.format === 'bnb4') {
    w.set(dequantBnb4RowsTs(lw, 0, out));
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
  return w;
}

function blockScales(s: StoredTensor): Float64Array {
  const n = s.shape.reduce((a, b) => a * b, 1);
  if (s.dtype === 'F32') return Float64Array.from(decodeToF32('F32', s.bytes, n));
  return Float64Array.from(s.bytes.subarray(0, n), (b) => E8M0_TABLE[b]);
}

/**
 * NVFP4 rows [r0, r0+n) as FP32 [n, in]: W[o,i] = E2M1(nibble) · fround(E4M3(S[o,⌊i/16⌋]) op g), byte j of a
 * row holding inputs 2j (low nibble) and 2j+1 (high). A float64 product or quotient of float32 values
 * rounded to float32 is the correctly rounded float32 result, so this is exactly the producers' float32
 * arithmetic; E2M1 · scale is exact in float64 and rounds once when stored.
 */
export function dequantNvfp4RowsTs(lw: LinearWeight, r0: number, n: number): Float32Array {
  const inn = lw.in;
  const w = new Float32Array(n * inn);
  const packed = lw.weight.bytes;
  const scales = lw.scale!.bytes;
  const g = lw.global!;
  const nb = inn / 16;
  for (let o = r0; o < r0 + n; o++) {
    for (let b = 0; b < nb; b++) {
      const e = E4M3_TABLE[scales[o * nb + b]];
      const s = Math.fround(g.op === 'mul' ? e * g.value : e / g.value);
      const src = o * (inn / 2) + b * 8;
      const dst = (o - r0) * inn + b * 16;
      for (let j = 0; j < 8; j++) {
        const byte = packed[src + j];
        w[dst + 2 * j] = E2M1_VALUES[byte & 0x0f] * s;
        w[dst + 2 * j + 1] = E2M1_VALUES[byte >> 4] * s;
      }
    }
  }
  return w;
}

/**
 * bitsandbytes 4-bit rows [r0, r0+n) as FP32 [n, in] (spec/fp4-formats.md §5). Element j of the row-major
 * flattened [out, in] is code j, two codes a byte HIGH-even (j even: byte >> 4); its block b = ⌊j/blocksize⌋
 * has absmax[b], stored as F32 or, with double quantization, as a U8 code a:
 *   absmax[b] = fround(fround(nested_quant_map[a] · nested_absmax[⌊b/nested_blocksize⌋]) + nested_offset)
 *   W[j]      = fround(quant_map[code j] · absmax[b])
 * with the stored quant_map (not the named table), every operation rounded to float32 as bitsandbytes'
 * float32 kernels round it: a float64 product or sum of two float32 values rounded to float32 is the
 * correctly rounded float32 result.
 */
export function dequantBnb4RowsTs(lw: LinearWeight, r0: number, n: number): Float32Array {
  const q = lw.bnb!;
  const inn = lw.in;
  const w = new Float32Array(n * inn);
  const packed = lw.weight.bytes;
  const a = lw.scale!;
  const absmaxF32 = a.dtype === 'F32' ? decodeToF32('F32', a.bytes, a.shape[0]) : null;
  const absmax = (b: number): number => {
    if (absmaxF32 !== null) return absmaxF32[b];
    const nest = q.nested!;
    return Math.fround(Math.fround(nest.quantMap[a.bytes[b]] * nest.absmax[Math.floor(b / nest.blocksize)]) + nest.offset);
  };
  let blk = -1, s = 0;
  for (let j = r0 * inn; j < (r0 + n) * inn; j++) {
    const b = Math.floor(j / q.blocksize);
    if (b !== blk) {
      blk = b;
      s = absmax(b);
    }
    const byte = packed[j >> 1];
    const code = j % 2 === 0 ? byte >> 4 : byte & 0x0f;
    w[j - r0 * inn] = Math.fround(q.quantMap[code] * s);
  }
  return w;
}
