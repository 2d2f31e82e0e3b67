/**
 * Element-level numerics of the emulated device (ld_numerics.h through the ld_device addon), checked
 * exhaustively where the domain is small (every f16, every bf16, every FP4 code, every E4M3 byte) against
 * independent oracles: @petamoriken/float16 for f16 conversion, exact rational decoding for FP4/FP8, and
 * harness/formats/dtypes.ts (the reference side's decoders).
 */
import { getFloat16, setFloat16 } from '@petamoriken/float16';
import { beforeAll, describe, expect, it } from 'vitest';
import { E2M1_VALUES, E4M3_TABLE, NF4_VALUES, bf16ToF32, e8m0ToF32 } from '../../harness/formats/dtypes.js';
import { type DeviceNative, FAULT_CODES, loadDeviceNative } from '../binding.js';
import { firstF16Mismatch, fmaf, fr, ldExpf, randomBytes, rng } from './model.js';

let N: DeviceNative;
beforeAll(() => {
  N = loadDeviceNative();
});

const dv = new DataView(new ArrayBuffer(4));
/** Oracle: binary16 bits of the nearest f16 to v (ties to even), from @petamoriken/float16. */
function oracleBits(v: number): number {
  setFloat16(dv, 0, v, true);
  return dv.getUint16(0, true);
}
function oracleValue(h: number): number {
  dv.setUint16(0, h, true);
  return getFloat16(dv, 0, true);
}
function f32FromBits(u: number): number {
  dv.setUint32(0, u >>> 0, true);
  return dv.getFloat32(0, true);
}
function f32Bits(v: number): number {
  dv.setFloat32(0, v, true);
  return dv.getUint32(0, true);
}
const isNaN16 = (h: number) => (h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0;

/** f16 bits produced by the native f32→f16 for each value, compared with the oracle; returns mismatches. */
function checkF32ToF16(values: number[]): string[] {
  const got = N.f32ToF16(Float32Array.from(values));
  const bad: string[] = [];
  values.forEach((v, i) => {
    const want = oracleBits(fr(v));
    const ok = Number.isNaN(v) ? isNaN16(got[i]) : got[i] === want;
    if (!ok && bad.length < 5) bad.push(`f32 ${fr(v)} (0x${f32Bits(v).toString(16)}): got 0x${got[i].toString(16)}, want 0x${want.toString(16)}`);
  });
  return bad;
}

describe('f16 conversion', () => {
  it('every f16 pattern widens exactly and round-trips', () => {
    const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
    const wide = N.f16ToF32(all);
    const back = N.f32ToF16(wide);
    for (let h = 0; h < 65536; h++) {
      const want = oracleValue(h);
      if (Number.isNaN(want)) {
        expect(Number.isNaN(wide[h]), `f16 0x${h.toString(16)}`).toBe(true);
        expect(isNaN16(back[h]), `f16 0x${h.toString(16)} back`).toBe(true);
      } else {
        expect(Object.is(wide[h], want), `f16 0x${h.toString(16)}: ${wide[h]} vs ${want}`).toBe(true);
        expect(back[h], `round trip 0x${h.toString(16)}`).toBe(h);
      }
    }
  });

  it('f32→f16 edge cases: ties, subnormal boundaries, overflow, NaN', () => {
    const cases: Array<[number, number]> = [
      [0, 0x0000], [-0, 0x8000], [1, 0x3c00], [-2, 0xc000],
      [65504, 0x7bff], [f32FromBits(0x477fefff), 0x7bff] /* just below 65520 */, [65520, 0x7c00] /* tie → even = Inf */,
      [65536, 0x7c00], [-1e10, 0xfc00], [Infinity, 0x7c00], [-Infinity, 0xfc00], [f32FromBits(0x7f7fffff), 0x7c00],
      [2 ** -24, 0x0001], [2 ** -25, 0x0000] /* tie → even 0 */, [f32FromBits(0x33000001), 0x0001], [-(2 ** -25), 0x8000],
      [3 * 2 ** -25, 0x0002] /* tie 1|2 → 2 */, [5 * 2 ** -25, 0x0002] /* tie 2|3 → 2 */, [2 ** -26, 0x0000],
      [2 ** -14, 0x0400], [2 ** -14 - 2 ** -25, 0x0400] /* tie 0x3ff|0x400 → even 0x400 */, [2 ** -14 - 2 ** -24, 0x03ff],
      [1 + 2 ** -11, 0x3c00] /* tie → even */, [1 + 3 * 2 ** -11, 0x3c02], [f32FromBits(0x3f801001), 0x3c01],
      [f32FromBits(1), 0x0000] /* smallest f32 subnormal */, [2047, 0x67ff], [2049, 0x6800] /* tie → even */, [2051, 0x6802],
    ];
    const got = N.f32ToF16(Float32Array.from(cases.map((c) => c[0])));
    cases.forEach(([v, want], i) => {
      expect(got[i], `f32ToF16(${v})`).toBe(want);
      expect(oracleBits(fr(v)), `oracle agrees on ${v}`).toBe(want);
    });
    const nans = N.f32ToF16(Float32Array.from([NaN, f32FromBits(0xffc00001), f32FromBits(0x7f800001)]));
    for (const h of nans) expect(isNaN16(h)).toBe(true);
  });

  it('f32→f16 at every f16 midpoint and one f32 ulp either side', () => {
    const values: number[] = [];
    for (let h = 0; h < 0x7bff; h++) {
      const mid = (oracleValue(h) + oracleValue(h + 1)) / 2; // 12 significant bits: exact in f32
      const u = f32Bits(mid);
      values.push(mid, f32FromBits(u + 1), f32FromBits(u - 1), -mid);
    }
    values.push(65520 - 2 ** -8, 65520 + 2 ** -8);
    expect(checkF32ToF16(values)).toEqual([]);
  });

  it('f32→f16 on 300k random f32 bit patterns', () => {
    const rand = rng(0xf16);
    const values = Array.from({ length: 300_000 }, () => f32FromBits(Math.floor(rand() * 2 ** 32)));
    expect(checkF32ToF16(values)).toEqual([]);
  });

  it('bf16→f16 for every bf16 pattern', () => {
    const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
    const got = N.bf16ToF16(all);
    for (let b = 0; b < 65536; b++) {
      const v = bf16ToF32(b);
      if (Number.isNaN(v)) expect(isNaN16(got[b])).toBe(true);
      else expect(got[b], `bf16 0x${b.toString(16)}`).toBe(oracleBits(v));
    }
  });
});

// ---- exact decoders, from the format definitions (independent of dtypes.ts and of the C++) ----
/** E2M1 magnitude in halves: codes 0..7 → 0, 1, 2, 3, 4, 6, 8, 12. */
const E2M1_HALVES = [0, 1, 2, 3, 4, 6, 8, 12];
function e2m1Exact(code: number): number {
  const v = E2M1_HALVES[code & 7] / 2;
  return code & 8 ? -v : v;
}
function e8m0Exact(b: number): number {
  return b === 255 ? NaN : 2 ** (b - 127);
}
function e4m3Exact(b: number): number {
  const sign = b & 0x80 ? -1 : 1;
  const e = (b >> 3) & 15, m = b & 7;
  if (e === 15 && m === 7) return NaN;
  return sign * (e === 0 ? (m / 8) * 2 ** -6 : (1 + m / 8) * 2 ** (e - 7));
}
/** Products here are exact in binary64; the only rounding is f16's (f32 overflow and f16 overflow agree). */
function f16Of(v: number): number {
  return Number.isNaN(v) ? 0x7e00 : oracleBits(v);
}

describe('MXFP4 dequant', () => {
  const SCALES = [0, 1, 100, 120, 126, 127, 128, 135, 141, 142, 143, 200, 254, 255];

  it('every FP4 code in both nibble positions × E8M0 scales incl. 0, 127, 254, 255 (NaN)', () => {
    // Row r has scale SCALES[r] on both blocks; byte j holds low = j % 16, high = 15 − j % 16.
    const out = SCALES.length, inn = 64;
    const packed = new Uint8Array(out * 32);
    for (let r = 0; r < out; r++) for (let j = 0; j < 32; j++) packed[r * 32 + j] = (j % 16) | ((15 - (j % 16)) << 4);
    const scales = Uint8Array.from(SCALES.flatMap((s) => [s, s]));
    const got = N.dequantToF16(0, packed, scales, false, out, inn, 1, 32, 0);
    for (let r = 0; r < out; r++) {
      for (let i = 0; i < inn; i++) {
        const byte = packed[r * 32 + (i >> 1)];
        const code = i & 1 ? byte >> 4 : byte & 15;
        const exact = e2m1Exact(code) * e8m0Exact(SCALES[r]);
        expect(E2M1_VALUES[code] * e8m0ToF32(SCALES[r]), 'dtypes.ts agrees with the exact decode').toStrictEqual(exact);
        const h = got[r * inn + i];
        const where = `mxfp4 code ${code} scale ${SCALES[r]}`;
        if (Number.isNaN(exact)) expect(isNaN16(h), where).toBe(true);
        else expect(h, where).toBe(f16Of(exact));
      }
    }
    // DESIGN §9 trap: 0b1000 is −0, 0b0111 is +6 at scale 1.
    const r127 = SCALES.indexOf(127);
    expect(got[r127 * inn + 2 * 8]).toBe(0x8000);
    expect(got[r127 * inn + 2 * 7]).toBe(0x4600);
  });
});

describe('FP8 E4M3 dequant', () => {
  it('every E4M3 byte × E8M0 scales (2^0, 2^3, 2^-20, NaN)', () => {
    const sc = [127, 130, 107, 255];
    const out = sc.length, inn = 256;
    const w = new Uint8Array(out * inn);
    for (let r = 0; r < out; r++) for (let b = 0; b < 256; b++) w[r * inn + b] = b;
    const got = N.dequantToF16(1, w, Uint8Array.from(sc), false, out, inn, 1, 256, 0);
    for (let r = 0; r < out; r++) for (let b = 0; b < 256; b++) {
      const exact = e4m3Exact(b) * e8m0Exact(sc[r]);
      if (!Number.isNaN(e4m3Exact(b))) expect(E4M3_TABLE[b], 'dtypes.ts agrees').toBe(e4m3Exact(b));
      const h = got[r * inn + b];
      if (Number.isNaN(exact)) expect(isNaN16(h), `e4m3 0x${b.toString(16)} scale ${sc[r]}`).toBe(true);
      else expect(h, `e4m3 0x${b.toString(16)} scale ${sc[r]}`).toBe(f16Of(exact));
    }
  });

  it('every E4M3 byte × F32 scales: one f32 rounding of the product, then f16', () => {
    const sc = Float32Array.from([0.1, 3.3e-5, 1234.5678]);
    const out = sc.length, inn = 256;
    const w = new Uint8Array(out * inn);
    for (let r = 0; r < out; r++) for (let b = 0; b < 256; b++) w[r * inn + b] = b;
    const got = N.dequantToF16(1, w, new Uint8Array(sc.buffer), true, out, inn, 1, 256, 0);
    for (let r = 0; r < out; r++) for (let b = 0; b < 256; b++) {
      const v = fr(e4m3Exact(b) * sc[r]);
      const h = got[r * inn + b];
      if (Number.isNaN(v)) expect(isNaN16(h)).toBe(true);
      else expect(h, `e4m3 0x${b.toString(16)} × ${sc[r]}`).toBe(f16Of(v));
    }
  });
});

// ---- injected faults (DESIGN §9), modelled from the fault descriptions ----
function scaleIndex(R: number, C: number, r: number, c: number, fault: number): number {
  if (fault === FAULT_CODES['scale-axis']) return c * R + r;
  if (fault === FAULT_CODES['scale-stride']) return (r * (C + 1) + c) % (R * C);
  return r * C + c;
}

function mxfp4Model(packed: Uint8Array, scales: Uint8Array, out: number, inn: number, fault: number): Uint16Array {
  const y = new Uint16Array(out * inn);
  const C = inn / 32;
  for (let o = 0; o < out; o++) for (let i = 0; i < inn; i++) {
    const byte = packed[o * (inn / 2) + (i >> 1)];
    const high = (i & 1) === 1 ? fault !== FAULT_CODES['nibble-swap'] : fault === FAULT_CODES['nibble-swap'];
    const code = high ? byte >> 4 : byte & 15;
    let v: number;
    if (fault === FAULT_CODES['e3m0-table']) v = ((code & 7) === 0 ? 0 : 2 ** ((code & 7) - 1)) * (code & 8 ? -1 : 1);
    else if (fault === FAULT_CODES['code-table']) v = NF4_VALUES[code]; // E2M1 codes read with bitsandbytes' NF4 table
    else v = e2m1Exact(code);
    const b = scales[scaleIndex(out, C, o, Math.floor(i / 32), fault)];
    const s = fault === FAULT_CODES['scale-missing'] ? 1 : fault === FAULT_CODES['e8m0-as-int'] ? b : e8m0Exact(b);
    y[o * inn + i] = f16Of(fr(v * s));
  }
  return y;
}

function fp8Model(w: Uint8Array, scales: Uint8Array, f32: boolean, out: number, inn: number, bo: number, bi: number, fault: number): Uint16Array {
  const R = Math.ceil(out / bo), C = Math.ceil(inn / bi);
  const sv = new DataView(scales.buffer, scales.byteOffset, scales.byteLength);
  const y = new Uint16Array(out * inn);
  for (let o = 0; o < out; o++) for (let i = 0; i < inn; i++) {
    const at = scaleIndex(R, C, Math.floor(o / bo), Math.floor(i / bi), fault);
    let s: number;
    if (fault === FAULT_CODES['scale-missing']) s = 1;
    else if (f32) s = sv.getFloat32(4 * at, true);
    else s = fault === FAULT_CODES['e8m0-as-int'] ? scales[at] : e8m0Exact(scales[at]);
    y[o * inn + i] = f16Of(fr(e4m3Exact(w[o * inn + i]) * s));
  }
  return y;
}

// The NVFP4 faults (codes 7–9) act on NVFP4's two-level scales only, nested-absmax-raw on bitsandbytes' double
// quant only: on MXFP4 and FP8 blocks they are no-ops (code-table too on FP8, which has no 4-bit codes).
const NVFP4_ONLY = new Set<string>(['global-scale-inverted', 'e4m3-scale-as-e8m0', 'scale-block-size', 'nested-absmax-raw']);

describe('injected faults', () => {
  const rand = rng(0xfa17);
  const out = 4, inn = 96; // scale grid [4, 3]: transposed and strided reads land elsewhere
  const packed = randomBytes(rand, (out * inn) / 2);
  const scales = Uint8Array.from({ length: (out * inn) / 32 }, () => 110 + Math.floor(rand() * 30));
  const clean = () => N.dequantToF16(0, packed, scales, false, out, inn, 1, 32, 0);

  for (const [name, code] of Object.entries(FAULT_CODES)) {
    it(`mxfp4 fault ${name} (=${code}) on a [${out}×${inn}] weight matches its model and changes the result`, () => {
      const got = N.dequantToF16(0, packed, scales, false, out, inn, 1, 32, code);
      expect(firstF16Mismatch(got, mxfp4Model(packed, scales, out, inn, code))).toBe(-1);
      if (NVFP4_ONLY.has(name)) expect(firstF16Mismatch(got, clean())).toBe(-1);
      else expect(firstF16Mismatch(got, clean())).not.toBe(-1);
    });
  }

  // Rows of 8 blocks (an even count, two a step) at scales where every value's low FP16 byte is zero (2^-15 and up:
  // normals, the subnormals 2^-16 · {1, 2, 3, 4, 6, 8, 12}, ±0, and overflow's Inf) take the AVX2 row's form that
  // looks up high bytes only: rows all inside, at its lower edge (112) and 140 (the reference's upper edge), with one
  // block just below it (111, whose 2^-17 has a low byte) or at 141 (Inf: still inside), and anywhere from FP16
  // underflow to overflow; at every kernel level.
  it('mxfp4 rows of an even block count at trained scales, at the edges of zero low bytes and past them: every kernel level and fault matches its model', () => {
    const r2 = rng(0x4b1d);
    const eo = 6, ei = 256, C = ei / 32;
    const w = randomBytes(r2, (eo * ei) / 2);
    const pick = (xs: number[]) => xs[Math.floor(r2() * xs.length)];
    const s = Uint8Array.from({ length: eo * C }, (_, k) => {
      const row = Math.floor(k / C), last = k % C === C - 1;
      if (row < 2) return 118 + Math.floor(r2() * 16);
      if (row === 2) return pick([112, 140]);
      if (row === 3) return last ? 111 : pick([112, 140]);
      if (row === 4) return last ? 141 : pick([112, 140]);
      return 100 + Math.floor(r2() * 50);
    });
    for (const code of [0, ...Object.values(FAULT_CODES)]) {
      const want = mxfp4Model(w, s, eo, ei, code);
      for (const level of ['auto', 'avx2', 'scalar'] as const) {
        N.setSimd(level);
        expect(firstF16Mismatch(N.dequantToF16(0, w, s, false, eo, ei, 1, 32, code), want), `fault ${code}, ${level}`).toBe(-1);
      }
      N.setSimd('auto');
    }
  });

  const fo = 5, fi = 300, bo = 2, bi = 128; // scale grid [3, 3] with partial edge blocks
  const w8 = randomBytes(rand, fo * fi).map((b) => ((b & 0x7f) === 0x7f ? b - 1 : b)); // no NaN codes
  const s8 = Uint8Array.from({ length: 9 }, () => 120 + Math.floor(rand() * 14));
  const sf = new Uint8Array(Float32Array.from({ length: 9 }, () => fr(0.01 + rand())).buffer);
  for (const [name, code] of Object.entries({ none: 0, ...FAULT_CODES })) {
    it(`fp8-block fault ${name} (=${code}) on a [${fo}×${fi}] weight, block [${bo}, ${bi}], E8M0 and F32 scales`, () => {
      for (const [s, f32] of [[s8, false], [sf, true]] as const) {
        const got = N.dequantToF16(1, w8, s, f32, fo, fi, bo, bi, code);
        expect(firstF16Mismatch(got, fp8Model(w8, s, f32, fo, fi, bo, bi, code)), `f32 scales: ${f32}`).toBe(-1);
        // Nibble faults have no meaning for E4M3, nor e8m0-as-int for F32 scales: documented no-ops.
        const noop = code === 0 || NVFP4_ONLY.has(name) || code === FAULT_CODES['e3m0-table'] || code === FAULT_CODES['code-table'] || code === FAULT_CODES['nibble-swap'] || (f32 && code === FAULT_CODES['e8m0-as-int']);
        const base = N.dequantToF16(1, w8, s, f32, fo, fi, bo, bi, 0);
        expect(firstF16Mismatch(got, base) === -1, `no-op expected: ${noop}`).toBe(noop);
      }
    });
  }
});

describe('plain weights', () => {
  it('bf16 / f16 / f32 bytes, read from unaligned views', () => {
    const rand = rng(0xb16);
    const out = 3, inn = 37, n = out * inn;
    const raw = randomBytes(rand, 4 * n + 1);
    const view = (bytes: number) => raw.subarray(1, 1 + bytes * n); // byteOffset 1: not 2- or 4-aligned
    const dvr = new DataView(raw.buffer, 1);
    const bf = N.dequantToF16(2, view(2), null, false, out, inn, 1, 1, 0);
    const hf = N.dequantToF16(3, view(2), null, false, out, inn, 1, 1, 0);
    const ff = N.dequantToF16(4, view(4), null, false, out, inn, 1, 1, 0);
    for (let i = 0; i < n; i++) {
      const b = dvr.getUint16(2 * i, true);
      const vb = bf16ToF32(b), vf = dvr.getFloat32(4 * i, true);
      if (Number.isNaN(vb)) expect(isNaN16(bf[i])).toBe(true);
      else expect(bf[i]).toBe(oracleBits(vb));
      expect(hf[i]).toBe(b);
      if (Number.isNaN(vf)) expect(isNaN16(ff[i])).toBe(true);
      else expect(ff[i]).toBe(oracleBits(vf));
    }
  });
});

// ---- the test model's own exactness (the kernel tests lean on it) ----
/** a·b + c rounded once to f32, in BigInt (finite non-zero inputs). */
function exactFma(a: number, b: number, c: number): number {
  const dec = (v: number): [bigint, number] => {
    const u = f32Bits(v);
    const e = (u >>> 23) & 0xff, m = u & 0x7fffff;
    const M = BigInt(e === 0 ? m : m | 0x800000);
    return [u >>> 31 ? -M : M, e === 0 ? -149 : e - 150];
  };
  const [ma, ea] = dec(a), [mb, eb] = dec(b), [mc, ec] = dec(c);
  const e0 = Math.min(ea + eb, ec);
  const S = ma * mb * (1n << BigInt(ea + eb - e0)) + mc * (1n << BigInt(ec - e0));
  if (S === 0n) return 0;
  const neg = S < 0n, A = neg ? -S : S;
  const L = A.toString(2).length;
  const shift = Math.max(L - 24, -149 - e0);
  let q = A, qe = e0;
  if (shift > 0) {
    const sh = BigInt(shift);
    q = A >> sh;
    const rem = A - (q << sh), half = 1n << (sh - 1n);
    if (rem > half || (rem === half && (q & 1n) === 1n)) q += 1n;
    qe = e0 + shift;
  }
  const v = fr(Number(q) * 2 ** qe);
  return neg ? -v : v;
}

describe('test model', () => {
  it('fmaf emulation is exact, including double-rounding hazards (checked in BigInt)', () => {
    const rand = rng(0xf3a);
    const rf = (lo: number, hi: number) => fr((rand() < 0.5 ? -1 : 1) * (1 + rand()) * 2 ** Math.floor(lo + rand() * (hi - lo)));
    let hazards = 0;
    for (let t = 0; t < 40_000; t++) {
      let a: number, b: number, c: number;
      if (t % 2 === 0) {
        [a, b, c] = [rf(-20, 20), rf(-20, 20), rf(-40, 40)];
      } else {
        // a·b ≈ half an ulp of c, off by a few 2^-46 relative: the exact sum sits next to an f32 midpoint.
        c = rf(-10, 10);
        const ulp = 2 ** (Math.floor(Math.log2(Math.abs(c))) - 23);
        a = fr(1 + (Math.floor(rand() * 5) - 2) * 2 ** -23);
        b = fr((rand() < 0.5 ? -0.5 : 0.5) * ulp * (1 + (Math.floor(rand() * 5) - 2) * 2 ** -23));
      }
      const want = exactFma(a, b, c);
      if (fr(a * b + c) !== want) hazards++;
      expect(fmaf(a, b, c), `fmaf(${a}, ${b}, ${c})`).toBe(want);
    }
    expect(hazards, 'the set must contain cases where naive double rounding is wrong').toBeGreaterThan(100);
  });

  it('ldExpf is within 2 ulp of exp over the softmax range', () => {
    const rand = rng(0xe8);
    for (let t = 0; t < 20_000; t++) {
      const x = fr(-100 + rand() * 188);
      const want = fr(Math.exp(x));
      const got = ldExpf(x);
      const ulp = Math.max(2 ** (Math.floor(Math.log2(want)) - 23), 2 ** -149);
      expect(Math.abs(got - want) / ulp, `exp(${x})`).toBeLessThanOrEqual(2);
    }
    expect(ldExpf(0)).toBe(1);
    expect(ldExpf(100)).toBe(Infinity);
    expect(ldExpf(-110)).toBe(0);
  });
});
