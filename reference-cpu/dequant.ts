/**
 * Exact dequantization for the reference path, in native code (reference-cpu/native/dequant_exact.cc,
 * written from the format definitions and independent of device-hip). The same rule element by element in
 * TypeScript is reference-cpu/dequant_ts.ts; tests hold both to identical bits and to an exact-rational
 * oracle. Every product is exact in float32 (E2M1/E4M3 times a power of two); F32 `weight_scale_inv`
 * scales are the one inexact case (one float32 rounding, as PyTorch).
 */
import { InputError } from '../harness/errors.js';
import type { LinearWeight, StoredTensor } from '../harness/formats/linear.js';
import { E4M3_TABLE } from '../harness/formats/dtypes.js';
import { bnbAbsmax, dequantExact, type ExactKind, firstNonFinite } from './native.js';

/** The native decoder's name for a linear weight's stored encoding. */
export function kindOf(lw: LinearWeight): ExactKind {
  if (lw.format === 'mxfp4') return 'mxfp4';
  if (lw.format === 'nvfp4') return 'e2m1-lut';
  if (lw.format === 'bnb4') return 'table4-flat-f32';
  if (lw.format === 'fp8-block') return lw.scale!.dtype === 'F32' ? 'fp8-f32' : 'fp8-e8m0';
  switch (lw.weight.dtype) {
    case 'BF16': return 'bf16';
    case 'F16': return 'f16';
    case 'F32': return 'f32';
    default: throw new InputError(`dtype ${lw.weight.dtype} is not a plain linear weight (BF16/F16/F32)`, { file: lw.weight.file, tensor: lw.name });
  }
}

const NO_SCALE = new Uint8Array(0);

/** What the native exact decoder reads for a weight: its kind, the stored codes, the scale bytes and block. */
export interface ExactOperands {
  kind: ExactKind;
  weight: Uint8Array;
  scale: Uint8Array;
  bo: number;
  bi: number;
}

const formed = new WeakMap<LinearWeight, Uint8Array>();

/**
 * The scales of NVFP4 and bitsandbytes formed once per weight by the format's float32 rule (the statement
 * the TypeScript decoders in dequant_ts.ts write element by element), so the native decoder only multiplies:
 *   NVFP4: [the 256 scales an E4M3 byte S can give, fround(E4M3(S) · g) or fround(E4M3(S) / g) | the stored
 *     bytes S[o, b]]: a block's scale is the table entry of its byte, looked up natively;
 *   bitsandbytes: [quant_map (16) | absmax per block], absmax of double quant fround(fround(map[a] · nested) + offset).
 * Every other format's scale bytes are passed as stored.
 * `alloc` (bytes → an 8-byte-aligned buffer that lives as long as lw's own bytes) is where the formed scales go:
 * the weights check's recycled read buffers, which it meets a weight once with; fresh memory otherwise (whose
 * first touch cost an NVFP4 checkpoint's check more than its compare on this kind of VM).
 */
export function exactOperands(lw: LinearWeight, alloc?: (bytes: number) => Uint8Array): ExactOperands {
  const kind = kindOf(lw);
  const weight = lw.weight.bytes;
  if (lw.format !== 'nvfp4' && lw.format !== 'bnb4') return { kind, weight, scale: lw.scale?.bytes ?? NO_SCALE, bo: lw.block[0], bi: lw.block[1] };
  // scales formed into the caller's buffers are not kept: those go back to their pool when the caller is done, and
  // a later call for the same weight must not find them reused
  let scale = alloc === undefined ? formed.get(lw) : undefined;
  if (scale === undefined) {
    const into = alloc ?? ((n: number) => new Uint8Array(n));
    scale = lw.format === 'nvfp4' ? nvfp4ScaleTable(lw, into) : bnb4TableAndAbsmax(lw, into);
    if (alloc === undefined) formed.set(lw, scale);
  }
  return { kind, weight, scale, bo: 1, bi: lw.block[1] };
}

function nvfp4ScaleTable(lw: LinearWeight, alloc: (bytes: number) => Uint8Array): Uint8Array {
  const g = lw.global!;
  const blocks = (lw.out * lw.in) / lw.block[1];
  // the 256 scales a block can have, each formed by the rule (the exact double product or quotient of two
  // float32s, rounded once to float32 by the store), then the blocks' bytes, each picking its own (per block in
  // TypeScript, forming each block's float32 cost 1.3 ms on a [2048×4096] weight, more than its whole native check)
  const byCode = Float32Array.from(E4M3_TABLE, (v) => (g.op === 'mul' ? v * g.value : v / g.value));
  if (lw.scale!.bytes.length < blocks) throw new InputError(`${lw.scale!.bytes.length} scale bytes for ${blocks} blocks`, { file: lw.scale!.file, tensor: lw.scale!.name });
  const out = alloc(4 * 256 + blocks);
  out.set(new Uint8Array(byCode.buffer));
  out.set(lw.scale!.bytes.subarray(0, blocks), 4 * 256);
  return out;
}

function bnb4TableAndAbsmax(lw: LinearWeight, alloc: (bytes: number) => Uint8Array): Uint8Array {
  const q = lw.bnb!;
  const a = lw.scale!;
  const nb = Math.ceil((lw.out * lw.in) / q.blocksize);
  const bytes = alloc(4 * (16 + nb));
  const out = new Float32Array(bytes.buffer, bytes.byteOffset, 16 + nb);
  out.set(q.quantMap);
  if (a.dtype === 'F32') {
    if (a.bytes.length < 4 * nb) throw new InputError(`${a.bytes.length} bytes for ${nb} float32 absmax values`, { file: a.file, tensor: a.name });
    bytes.set(a.bytes.subarray(0, 4 * nb), 64); // the stored little-endian float32s, as the host holds them
  }
  else {
    // absmax[b] = fround(fround(nested_quant_map[a[b]] · nested_absmax[⌊b/nested_blocksize⌋]) + nested_offset), natively
    const n = q.nested!;
    bnbAbsmax(out.subarray(16), n.quantMap, a.bytes.subarray(0, nb), n.absmax, n.blocksize, n.offset);
  }
  return bytes;
}

/**
 * Output rows [r0, r0+n) of W as FP32 [n, in], the stored values exactly. Rows are independent in every
 * format (an FP8 row's scale row is ⌊o/block[0]⌋, §3), so any range is cut directly, with no copy.
 * A NaN/Inf is bad input named by tensor and flat index in the whole tensor.
 */
export function dequantRowsExact(lw: LinearWeight, r0: number, n: number): Float32Array {
  if (r0 < 0 || n < 0 || r0 + n > lw.out) throw new Error(`${lw.name}: rows [${r0}, ${r0 + n}) outside [0, ${lw.out})`);
  const e = exactOperands(lw);
  const w = dequantExact(e.kind, e.weight, e.scale, lw.out, lw.in, e.bo, e.bi, r0, n);
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
