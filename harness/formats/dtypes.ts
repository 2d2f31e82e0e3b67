/**
 * Scalar number formats, decoded exactly into float64/float32. These decoders are the reference side's
 * own (written from the OCP MX / IEEE definitions); the device side decodes in C++ (`ld_numerics.h`), and
 * tests compare both against a third, exact-rational decoder.
 */

export type DType = 'F64' | 'F32' | 'F16' | 'BF16' | 'F8_E4M3' | 'F8_E5M2' | 'F8_E8M0' | 'I64' | 'I32' | 'I16' | 'I8' | 'U8' | 'BOOL';

export const DTYPE_BYTES: Record<DType, number> = {
  F64: 8, F32: 4, F16: 2, BF16: 2, F8_E4M3: 1, F8_E5M2: 1, F8_E8M0: 1, I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, BOOL: 1,
};

export function isDType(s: unknown): s is DType {
  return typeof s === 'string' && Object.prototype.hasOwnProperty.call(DTYPE_BYTES, s);
}

const f32buf = new Float32Array(1);
const u32view = new Uint32Array(f32buf.buffer);

/** BF16 is the top half of an IEEE binary32. */
export function bf16ToF32(bits: number): number {
  u32view[0] = (bits & 0xffff) << 16;
  return f32buf[0];
}

/** IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; e=31 is Inf/NaN. */
export function f16ToF32(bits: number): number {
  const s = bits & 0x8000 ? -1 : 1;
  const e = (bits >> 10) & 0x1f;
  const m = bits & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m === 0 ? s * Infinity : NaN;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** float32 → binary16 bits, round to nearest even, overflow to Inf, with subnormals (what a GPU cvt does). */
export function f32ToF16Bits(x: number): number {
  f32buf[0] = x;
  const u = u32view[0];
  const sign = (u >>> 16) & 0x8000;
  const exp = (u >>> 23) & 0xff;
  let mant = u & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign; // below half the smallest subnormal: rounds to zero
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rest = mant & ((1 << shift) - 1);
    let q = mant >>> shift;
    if (rest > half || (rest === half && (q & 1) === 1)) q += 1;
    return sign | q;
  }
  let q = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (q & 1) === 1)) q += 1; // may carry into the exponent: correct
  return sign | q;
}

/** Round a float to the nearest binary16 value (as a JS number). */
export function roundToF16(x: number): number {
  return f16ToF32(f32ToF16Bits(x));
}

/** F8 E4M3 "fn" (OCP): bias 7, no Inf, 0x7F/0xFF are NaN, max ±448. */
export function e4m3ToF32(byte: number): number {
  const s = byte & 0x80 ? -1 : 1;
  const e = (byte >> 3) & 0xf;
  const m = byte & 0x7;
  if (e === 0xf && m === 0x7) return NaN;
  if (e === 0) return s * m * 2 ** -9; // 2^-6 · m/8
  return s * (1 + m / 8) * 2 ** (e - 7);
}

/** F8 E5M2 (IEEE-like): bias 15, e=31 is Inf/NaN. */
export function e5m2ToF32(byte: number): number {
  return f16ToF32((byte & 0xff) << 8);
}

/** F8 E8M0 (OCP MX scale): 2^(byte − 127); 0xFF is NaN. */
export function e8m0ToF32(byte: number): number {
  if ((byte & 0xff) === 0xff) return NaN;
  return 2 ** ((byte & 0xff) - 127);
}

/** FP4 E2M1 (OCP MX element): sign bit 3; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6. Code 8 is −0. */
export const E2M1_VALUES: readonly number[] = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6];
/**
 * bitsandbytes' named 4-bit tables as the float32 values it stores in quant_map (functional.get_4bit_type):
 * NF4, and its "fp4", which is not OCP E2M1 (raw {0, 1/16, 8, 12, 4, 6, 2, 3}, sign bit 3, over 12).
 */
export const NF4_VALUES: readonly number[] = [
  -1, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0,
  0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1,
].map(Math.fround);
export const BNB_FP4_VALUES: readonly number[] = [0, 0.0625, 8, 12, 4, 6, 2, 3, -0, -0.0625, -8, -12, -4, -6, -2, -3].map((v) => Math.fround(v / 12));

export function e2m1ToF32(nibble: number): number {
  return E2M1_VALUES[nibble & 0xf];
}

/** Lookup tables for the 8-bit formats, built once from the scalar decoders. */
export const E4M3_TABLE = Float32Array.from({ length: 256 }, (_, b) => e4m3ToF32(b));
export const E5M2_TABLE = Float32Array.from({ length: 256 }, (_, b) => e5m2ToF32(b));
export const E8M0_TABLE = Float64Array.from({ length: 256 }, (_, b) => e8m0ToF32(b));

/** Decode a little-endian byte range of a given dtype into float32 (integers converted exactly where they fit). */
export function decodeToF32(dtype: DType, bytes: Uint8Array, count: number): Float32Array {
  const out = new Float32Array(count);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  switch (dtype) {
    case 'F32':
      for (let i = 0; i < count; i++) out[i] = dv.getFloat32(i * 4, true);
      break;
    case 'F64':
      for (let i = 0; i < count; i++) out[i] = dv.getFloat64(i * 8, true);
      break;
    case 'F16':
      for (let i = 0; i < count; i++) out[i] = f16ToF32(dv.getUint16(i * 2, true));
      break;
    case 'BF16': {
      const u32 = new Uint32Array(out.buffer);
      for (let i = 0; i < count; i++) u32[i] = dv.getUint16(i * 2, true) << 16;
      break;
    }
    case 'F8_E4M3':
      for (let i = 0; i < count; i++) out[i] = E4M3_TABLE[bytes[i]];
      break;
    case 'F8_E5M2':
      for (let i = 0; i < count; i++) out[i] = E5M2_TABLE[bytes[i]];
      break;
    case 'F8_E8M0':
      for (let i = 0; i < count; i++) out[i] = E8M0_TABLE[bytes[i]];
      break;
    case 'I8':
      for (let i = 0; i < count; i++) out[i] = dv.getInt8(i);
      break;
    case 'U8':
    case 'BOOL':
      for (let i = 0; i < count; i++) out[i] = bytes[i];
      break;
    case 'I16':
      for (let i = 0; i < count; i++) out[i] = dv.getInt16(i * 2, true);
      break;
    case 'I32':
      for (let i = 0; i < count; i++) out[i] = dv.getInt32(i * 4, true);
      break;
    case 'I64':
      for (let i = 0; i < count; i++) out[i] = Number(dv.getBigInt64(i * 8, true));
      break;
  }
  return out;
}
