/**
 * Exact dequantization for the reference path, in native code (reference-cpu/native/dequant_exact.cc,
 * written from the format definitions and independent of device-hip). The same rule element by element in
 * TypeScript is reference-cpu/dequant_ts.ts; tests hold both to identical bits and to an exact-rational
 * oracle. Every product is exact in float32 (E2M1/E4M3 times a power of two); F32 `weight_scale_inv`
 * scales are the one inexact case (one float32 rounding, as PyTorch).
 */
import { InputError } from '../harness/errors.js';
import type { LinearWeight, StoredTensor } from '../harness/formats/linear.js';
import { dequantBnb4RowsTs, dequantNvfp4RowsTs } from './dequant_ts.js';
import { dequantExact, type ExactKind, firstNonFinite } from './native.js';

/** The native decoder's name for a linear weight's stored encoding. */
export function kindOf(lw: LinearWeight): ExactKind {
  if (lw.format === 'mxfp4') return 'mxfp4';
  if (lw.format === 'fp8-block') return lw.scale!.dtype === 'F32' ? 'fp8-f32' : 'fp8-e8m0';
  switch (lw.weight.dtype) {
    case 'BF16': return 'bf16';
    case 'F16': return 'f16';
    case 'F32': return 'f32';
    default: throw new InputError(`dtype ${lw.weight.dtype} is not a plain linear weight (BF16/F16/F32)`, { file: lw.weight.file, tensor: lw.name });
  }
}

const NO_SCALE = new Uint8Array(0);

/**
 * Output rows [r0, r0+n) of W as FP32 [n, in], the stored values exactly. Rows are independent in every
 * format (an FP8 row's scale row is ⌊o/block[0]⌋, §3), so any range is cut directly, with no copy.
 * A NaN/Inf is bad input named by tensor and flat index in the whole tensor.
 */
export function dequantRowsExact(lw: LinearWeight, r0: number, n: number): Float32Array {
  if (r0 < 0 || n < 0 || r0 + n > lw.out) throw new Error(`${lw.name}: rows [${r0}, ${r0 + n}) outside [0, ${lw.out})`);
  const [bo, bi] = lw.block;
  // NVFP4 and bitsandbytes are decoded by the TypeScript statement of their rule (one float32 rounding per
  // operation, not products exact in float32 as the native decoder's formats are)
  const w = lw.format === 'nvfp4' ? dequantNvfp4RowsTs(lw, r0, n) : lw.format === 'bnb4' ? dequantBnb4RowsTs(lw, r0, n) : dequantExact(kindOf(lw), lw.weight.bytes, lw.scale?.bytes ?? NO_SCALE, lw.out, lw.in, bo, bi, r0, n);
  assertFinite(w, lw, lw.weight.file, r0 * lw.in);
  return w;
}

/** The whole weight [out, in] in FP32. */
export function dequantLinear(lw: LinearWeight): Float32Array {
  return dequantRowsExact(lw, 0, lw.out);
}

/** NaN in a weight is bad input (E8M0 0xFF, E4M3 0x7F/0xFF, a NaN BF16): name the tensor, do not compute. */
export function assertFinite(w: Float32Array, lw: { name: string; scale?: StoredTensor | null; file?: string }, file = lw.file, offset = 0): void {
  const i = firstNonFinite(w);
  if (i < 0) return;
  const what = Number.isNaN(w[i]) ? 'NaN' : 'Inf';
  throw new InputError(`weight decodes to ${what} at flat index ${offset + i}${lw.scale ? ` (check its scale ${lw.scale.name})` : ''}`, { file, tensor: lw.name });
}
