/**
 * The reference's own scalar decoders (harness/formats/dtypes.ts), exhaustively, against independent
 * oracles: a from-the-bit-layout decoder in exact arithmetic (a power of two times an integer, built with
 * BigInt and divided once in float64, which is exact for these widths), and @petamoriken/float16 for the
 * IEEE half conversions.
 */
import { f16round, getFloat16 } from '@petamoriken/float16';
import { describe, expect, it } from 'vitest';
import { bf16ToF32, decodeToF32, e2m1ToF32, e4m3ToF32, e5m2ToF32, e8m0ToF32, f16ToF32, f32ToF16Bits, roundToF16 } from '../formats/dtypes.js';

/** (−1)^s · m · 2^e as a JS number, exactly (|m| < 2^53 and the result is a normal or subnormal double). */
function exact(sign: number, mant: bigint, exp: number): number {
  const v = exp >= 0 ? Number(mant << BigInt(exp)) : Number(mant) / Number(1n << BigInt(-exp));
  return sign ? -v : v;
}

/** A generic minifloat with `e` exponent and `m` mantissa bits (IEEE-style subnormals). */
function minifloat(bits: number, e: number, m: number, bias: number): number {
  const s = (bits >> (e + m)) & 1;
  const E = (bits >> m) & ((1 << e) - 1);
  const M = BigInt(bits & ((1 << m) - 1));
  if (E === 0) return exact(s, M, 1 - bias - m);
  return exact(s, (1n << BigInt(m)) | M, E - bias - m);
}

const same = (a: number, b: number) => (Number.isNaN(a) ? Number.isNaN(b) : Object.is(a, b));

describe('reference decoders, every code', () => {
  it('E2M1: all 16 codes (sign bit 3, bias 1, one mantissa bit); code 8 is −0, code 7 is 6', () => {
    for (let c = 0; c < 16; c++) expect(same(e2m1ToF32(c), minifloat(c, 2, 1, 1)), `code ${c}`).toBe(true);
    expect(Object.is(e2m1ToF32(0b1000), -0)).toBe(true);
    expect(e2m1ToF32(0b0111)).toBe(6);
  });

  it('E4M3fn: all 256 bytes; 0x7F/0xFF NaN, no Inf, max ±448', () => {
    for (let b = 0; b < 256; b++) {
      const want = (b & 0x7f) === 0x7f ? NaN : minifloat(b, 4, 3, 7);
      expect(same(e4m3ToF32(b), want), `byte ${b}`).toBe(true);
    }
    expect(e4m3ToF32(0x7e)).toBe(448);
  });

  it('E5M2: all 256 bytes, IEEE Inf/NaN at exponent 31', () => {
    for (let b = 0; b < 256; b++) {
      const E = (b >> 2) & 31;
      const want = E === 31 ? ((b & 3) === 0 ? ((b & 0x80) ? -Infinity : Infinity) : NaN) : minifloat(b, 5, 2, 15);
      expect(same(e5m2ToF32(b), want), `byte ${b}`).toBe(true);
    }
  });

  it('E8M0: all 256 bytes are 2^(b−127), 0xFF is NaN', () => {
    for (let b = 0; b < 255; b++) expect(e8m0ToF32(b)).toBe(exact(0, 1n, b - 127));
    expect(e8m0ToF32(255)).toBeNaN();
  });

  it('F16: all 65,536 patterns against @petamoriken/float16', () => {
    const dv = new DataView(new ArrayBuffer(2));
    for (let u = 0; u < 65536; u++) {
      dv.setUint16(0, u, true);
      expect(same(f16ToF32(u), getFloat16(dv, 0, true)), `bits ${u}`).toBe(true);
    }
  });

  it('BF16: all 65,536 patterns against the bit layout (8 exponent bits, bias 127, 7 mantissa bits)', () => {
    for (let u = 0; u < 65536; u++) {
      const E = (u >> 7) & 0xff;
      const want = E === 0xff ? ((u & 0x7f) === 0 ? ((u & 0x8000) ? -Infinity : Infinity) : NaN) : minifloat(u, 8, 7, 127);
      expect(same(bf16ToF32(u), want), `bits ${u}`).toBe(true);
    }
    const bytes = new Uint8Array([0x80, 0x3f, 0x00, 0xc0]); // 1.0, −2.0 little-endian
    expect([...decodeToF32('BF16', bytes, 2)]).toEqual([1, -2]);
  });

  it('f32 → f16 rounding (ties to even, subnormals, overflow) agrees with f16round', () => {
    const edge = [0, -0, 1, 65504, 65519.99, 65520, -65520, 2 ** -24, 2 ** -25, 2 ** -25 * 1.0000001, 3 * 2 ** -26, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 2 ** -14, 2 ** -14 - 2 ** -25, Infinity, -Infinity];
    let s = 12345;
    const rand = Array.from({ length: 20000 }, () => {
      s = (Math.imul(s, 1103515245) + 12345) >>> 0;
      return Math.fround((s / 2 ** 32 - 0.5) * 2 ** ((s % 60) - 30));
    });
    for (const x of [...edge, ...rand]) expect(same(roundToF16(x), f16round(Math.fround(x))), `x=${x}`).toBe(true);
    expect(f32ToF16Bits(NaN) & 0x7c00).toBe(0x7c00);
  });
});
