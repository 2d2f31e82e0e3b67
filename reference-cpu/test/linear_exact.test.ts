/**
 * linearExact (reference-cpu/native/gemm_f32.cc): the GEMM that decodes W exactly inside its row blocks must
 * give the bits of the two-step computation gemmF32(x, dequantExact(W)) — at every SIMD level, for every
 * stored format, row ranges included — and the product checked independently by gemm.test.ts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { LinearWeight } from '../../harness/formats/linear.js';
import { f32ToF16Bits } from '../../harness/formats/dtypes.js';
import { Rng } from '../../harness/rng.js';
import { InputError } from '../../harness/errors.js';
import { dequantRowsExact, kindOf } from '../dequant.js';
import { linearRows } from '../linear.js';
import { gemmF32, linearExact, setReferenceSimd } from '../native.js';

afterEach(() => {
  setReferenceSimd('auto');
});

const bytes = (r: Rng, n: number, f = (b: number) => b) => Uint8Array.from({ length: n }, () => f(r.int(256)));

function weight(r: Rng, format: string, out: number, inn: number): LinearWeight {
  if (format === 'mxfp4') {
    return {
      name: 'e.w1.weight', format: 'mxfp4', out, in: inn, block: [1, 32],
      weight: { name: 'e.w1.weight', dtype: 'I8', shape: [out, inn / 2], bytes: bytes(r, (out * inn) / 2) },
      scale: { name: 'e.w1.scale', dtype: 'F8_E8M0', shape: [out, inn / 32], bytes: bytes(r, (out * inn) / 32, (b) => 120 + (b % 10)) },
    };
  }
  if (format === 'bf16' || format === 'f32' || format === 'f16') {
    const f = Float32Array.from({ length: out * inn }, () => r.uniform() - 0.5);
    const u = new Uint32Array(f.buffer);
    // F16 bits made from the same draws by the format's definition (dtypes.ts f32ToF16Bits, not the code under test)
    const stored = format === 'bf16' ? new Uint8Array(Uint16Array.from(u, (x) => x >>> 16).buffer) : format === 'f16' ? new Uint8Array(Uint16Array.from(f, (x) => f32ToF16Bits(x)).buffer) : new Uint8Array(f.buffer);
    return {
      name: 'p.weight', format: 'plain', out, in: inn, block: [1, 1], scale: null,
      weight: { name: 'p.weight', dtype: format === 'bf16' ? 'BF16' : format === 'f16' ? 'F16' : 'F32', shape: [out, inn], bytes: stored },
    };
  }
  const R = Math.ceil(out / 128), C = Math.ceil(inn / 128);
  const f32 = format === 'fp8-f32';
  return {
    name: 'q.weight', format: 'fp8-block', out, in: inn, block: [128, 128],
    weight: { name: 'q.weight', dtype: 'F8_E4M3', shape: [out, inn], bytes: bytes(r, out * inn, (b) => ((b & 0x7f) === 0x7f ? 0 : b)) },
    scale: f32
      ? { name: 'q.scale', dtype: 'F32', shape: [R, C], bytes: new Uint8Array(Float32Array.from({ length: R * C }, () => Math.fround(r.uniform() * 1e-3)).buffer) }
      : { name: 'q.scale', dtype: 'F8_E8M0', shape: [R, C], bytes: bytes(r, R * C, (b) => 115 + (b % 8)) },
  };
}

describe('linearExact', () => {
  const CASES = [['mxfp4', 16, 1024, 512], ['mxfp4', 1, 70, 64], ['fp8-e8m0', 5, 300, 260], ['fp8-f32', 3, 129, 100], ['bf16', 7, 33, 37], ['f16', 4, 65, 96], ['f32', 2, 40, 130]] as const;
  CASES.forEach(([format, m, out, inn], c) => {
    it(`linear_exact(${format},m=${m},k=${inn},n=${out}): the bits of gemmF32 over the exact dequantization, at every SIMD level`, () => {
      const r = new Rng(700 + c);
      const lw = weight(r, format, out, inn);
      const x = Float32Array.from({ length: m * inn }, () => r.uniform() * 2 - 1);
      for (const mode of ['auto', 'avx2', 'scalar'] as const) {
        setReferenceSimd(mode);
        for (const [r0, n] of [[0, out], [1, out - 1], [Math.floor(out / 3), Math.ceil(out / 2)]]) {
          const want = gemmF32(x, dequantRowsExact(lw, r0, n), m, inn, n);
          const got = linearExact(x, m, kindOf(lw), lw.weight.bytes, lw.scale?.bytes ?? new Uint8Array(0), out, inn, lw.block[0], lw.block[1], r0, n);
          expect(got.firstNonFinite).toBe(-1);
          expect(new Uint32Array(got.y.buffer), `${mode} rows [${r0}, ${r0 + n})`).toEqual(new Uint32Array(want.buffer));
        }
      }
    });
  });

  it('a weight that decodes to NaN is bad input naming the tensor and its flat index', () => {
    const r = new Rng(5);
    const lw = weight(r, 'mxfp4', 40, 64);
    lw.scale!.bytes[2 * 7 + 1] = 0xff; // row 7, inputs 32..63
    const x = new Float32Array(2 * 64).fill(1);
    expect(() => linearRows(x, 2, lw, 0, 40)).toThrow(InputError);
    expect(() => linearRows(x, 2, lw, 0, 40)).toThrow(/NaN at flat index 480 \(check its scale e\.w1\.scale\)/);
    expect(() => linearRows(x, 2, lw, 8, 32)).not.toThrow();
    // the fused GEMM's own report of it, at every SIMD level (the row scan is SIMD): the lowest flat index
    lw.scale!.bytes[2 * 30] = 0xff; // row 30, inputs 0..31: a later row does not hide row 7
    try {
      for (const mode of ['auto', 'avx2', 'scalar'] as const) {
        setReferenceSimd(mode);
        const got = linearExact(x, 2, kindOf(lw), lw.weight.bytes, lw.scale!.bytes, 40, 64, 1, 32, 0, 40);
        expect(got.firstNonFinite, mode).toBe(480);
        expect(linearExact(x, 2, kindOf(lw), lw.weight.bytes, lw.scale!.bytes, 40, 64, 1, 32, 8, 32).firstNonFinite, `${mode} rows 8..39`).toBe(30 * 64);
      }
    } finally {
      setReferenceSimd('auto');
    }
  });

  it('MXFP4 scales at float32\'s edge: the first non-finite value is where the exact decode overflows, or none', () => {
    // E2M1 × 2^(s − 127) in float32: at s = 252 every code is finite (6 · 2^125 = 1.5 · 2^127), at s = 253 a code
    // of magnitude ≥ 4 overflows to Inf (4 · 2^126 = 2^128) and 3 does not, at s = 254 magnitude 2 does (2 · 2^127).
    // The expected index comes from the
    // format's definition (OCP MX: E2M1 magnitudes, the low nibble the even element, E8M0 0xFF NaN), each value
    // rounded once to float32 here (the decoders refuse a non-finite weight rather than return it)
    const r = new Rng(9);
    const out = 24, inn = 96;
    const E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6];
    const firstNonFinite = (lw: LinearWeight, r0: number, n: number): number => {
      for (let o = r0; o < r0 + n; o++) {
        for (let i = 0; i < inn; i++) {
          const byte = lw.weight.bytes[(o * inn + i) >> 1];
          const code = i % 2 === 0 ? byte & 15 : byte >> 4;
          const sb = lw.scale!.bytes[o * (inn / 32) + Math.floor(i / 32)];
          const v = sb === 255 ? NaN : Math.fround(E2M1[code & 7] * 2 ** (sb - 127));
          if (!Number.isFinite(v)) return (o - r0) * inn + i;
        }
      }
      return -1;
    };
    const cases: Array<[string, (lw: LinearWeight) => void]> = [
      ['s = 252, every code up to ±6: finite', (lw) => { lw.scale!.bytes.fill(252); lw.weight.bytes.fill(0x77); }],
      ['s = 253 over codes up to ±3 only: finite', (lw) => { lw.scale!.bytes[5 * 3 + 1] = 253; lw.weight.bytes.fill(0xd5, 5 * 48 + 16, 5 * 48 + 32); }],
      ['s = 253 with a 6 in row 5, block 1', (lw) => { lw.scale!.bytes[5 * 3 + 1] = 253; lw.weight.bytes.fill(0x11, 5 * 48 + 16, 5 * 48 + 32); lw.weight.bytes[5 * 48 + 20] = 0x71; }],
      ['s = 253 with a −4 in row 9, block 2 (its high nibble), the rest ±3', (lw) => { lw.scale!.bytes[9 * 3 + 2] = 253; lw.weight.bytes.fill(0x55, 9 * 48 + 32, 9 * 48 + 48); lw.weight.bytes[9 * 48 + 40] = 0xe5; }],
      ['s = 254 with a −2 in row 17 (its high nibble), and s = 253 over small codes in row 3', (lw) => {
        lw.scale!.bytes[17 * 3] = 254; lw.weight.bytes.fill(0x00, 17 * 48, 17 * 48 + 16); lw.weight.bytes[17 * 48 + 9] = 0xc0;
        lw.scale!.bytes[3 * 3 + 2] = 253; lw.weight.bytes.fill(0x22, 3 * 48 + 32, 3 * 48 + 48);
      }],
      ['s = 255 (NaN) in row 20', (lw) => { lw.scale!.bytes[20 * 3 + 2] = 255; }],
    ];
    const x = Float32Array.from({ length: 2 * inn }, () => r.uniform() - 0.5);
    // (the file's afterEach puts the reference back at 'auto')
    for (const [what, edit] of cases) {
      const lw = weight(r, 'mxfp4', out, inn);
      edit(lw);
      const want = firstNonFinite(lw, 0, out);
      if (what.includes('finite')) expect(want, what).toBe(-1);
      else expect(want, what).toBeGreaterThanOrEqual(0);
      for (const mode of ['auto', 'avx2', 'scalar'] as const) {
        setReferenceSimd(mode);
        expect(linearExact(x, 2, kindOf(lw), lw.weight.bytes, lw.scale!.bytes, out, inn, 1, 32, 0, out).firstNonFinite, `${what}, ${mode}`).toBe(want);
        const tail = firstNonFinite(lw, 4, out - 4);
        expect(linearExact(x, 2, kindOf(lw), lw.weight.bytes, lw.scale!.bytes, out, inn, 1, 32, 4, out - 4).firstNonFinite, `${what}, ${mode}, rows 4..`).toBe(tail < 0 ? -1 : tail + 4 * inn);
      }
    }
  });
});
