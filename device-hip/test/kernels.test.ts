/**
 * Emulated MI250 kernels (ld_device) against the plain-TypeScript model of the spec (./model.ts), bit for
 * bit, over seeded random inputs and several shapes; each case is named like
 * `gemm_f16(m=16,k=4096,n=64)` so a failure is its own repro id. Order of checks per case: NaN/Inf
 * first, then bits. Every kernel level (AVX-512, AVX2, scalar) must give the same bits, and results must not depend on
 * where the inputs sit in their buffers (guard elements around subarray views must stay untouched).
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadAddon } from '../../harness/io/addon.js';
import { type DeviceNative, loadDeviceNative } from '../binding.js';
import { guarded } from './guard.js';
import {
  attentionModel, countNonFinite16, firstF16Mismatch, firstF32Mismatch, fr, fromF16, gemmF16Model, randomF16, rmsnormModel, rng,
  ropeModel, swigluModel, toF16, toF16Array,
} from './model.js';

let N: DeviceNative;
beforeAll(() => {
  N = loadDeviceNative();
});
afterEach(() => {
  N.setSimd('auto');
});

/** Run f at every kernel level this CPU has (best, AVX2, scalar); all must give identical bits. */
function bothPaths<T extends Uint16Array | Float32Array>(f: () => T): T {
  N.setSimd('auto');
  const a = f();
  for (const mode of ['avx2', 'scalar'] as const) {
    const level = N.setSimd(mode);
    const b = f();
    if (a instanceof Float32Array) expect(firstF32Mismatch(a, b as Float32Array), `${level} vs best`).toBe(-1);
    else expect(firstF16Mismatch(a, b as Uint16Array), `${level} vs best`).toBe(-1);
  }
  N.setSimd('auto');
  return a;
}

function expectBits(got: Uint16Array, want: Uint16Array, what: string): void {
  const i = firstF16Mismatch(got, want);
  expect(i, i < 0 ? what : `${what}: first mismatch at ${i}: got 0x${got[i]?.toString(16)}, want 0x${want[i]?.toString(16)}`).toBe(-1);
}

describe('gemm', () => {
  // m ≤ 4 is the GEMV: with AVX-512 eight W rows at a time as zmm pairs, then ymm rows; n past 8 with ragged 16-row
  // units and k tails off the 8 lanes exercise both at every m
  const SHAPES: Array<[number, number, number]> = [
    [16, 4096, 64], [1, 4096, 64], [5, 100, 33], [3, 7, 5], [17, 1037, 13], [2, 520, 4], [4, 8, 1],
    [1, 1037, 29], [2, 1003, 45], [3, 264, 24], [4, 263, 19], [4, 5, 17],
  ];
  SHAPES.forEach(([m, k, n], s) => {
    it(`gemm_f16(m=${m},k=${k},n=${n})`, () => {
      const rand = rng(1000 + s);
      const x = randomF16(rand, m * k, 2), w = randomF16(rand, n * k, 0.5);
      const alpha = 0.3;
      const y = bothPaths(() => N.gemmF16(x, w, m, k, n, alpha));
      expect(countNonFinite16(y)).toBe(0);
      expectBits(y, toF16Array(gemmF16Model(x, w, m, k, n, alpha)), 'vs the ld_dot model');
      const y32 = bothPaths(() => N.gemmF16F32(x, w, m, k, n));
      expect(y32.every(Number.isFinite)).toBe(true);
      expect(firstF32Mismatch(y32, gemmF16Model(x, w, m, k, n, null)), 'f32 output vs model').toBe(-1);
    });
  });

  it('gemm_f16(m=4,k=45,n=6) with NaN/Inf inputs and FP16 overflow (alpha 2^16) follows the model', () => {
    const rand = rng(77);
    const m = 4, k = 45, n = 6;
    const x = randomF16(rand, m * k, 4), w = randomF16(rand, n * k, 4);
    x[3] = 0x7c00; // +Inf in row 0
    w[2 * k + 5] = 0x7e00; // NaN in column 2
    const y = bothPaths(() => N.gemmF16(x, w, m, k, n, 65536));
    expect(countNonFinite16(y)).toBeGreaterThan(0);
    expectBits(y, toF16Array(gemmF16Model(x, w, m, k, n, 65536)), 'vs model');
  });

  it('gemm_f16(m=3,k=21,n=7): results do not depend on byteOffset; inputs and guards untouched', () => {
    const rand = rng(78);
    const m = 3, k = 21, n = 7;
    const x = randomF16(rand, m * k), w = randomF16(rand, n * k);
    const want = N.gemmF16(x, w, m, k, n, 1);
    for (const pad of [1, 3, 8]) {
      const gx = guarded(x, pad), gw = guarded(w, pad + 1);
      expectBits(N.gemmF16(gx.view, gw.view, m, k, n, 1), want, `pad ${pad}`);
      expect(firstF32Mismatch(N.gemmF16F32(gx.view, gw.view, m, k, n), N.gemmF16F32(x, w, m, k, n))).toBe(-1);
      expect(gx.intact() && gw.intact()).toBe(true);
    }
  });
});

describe('rmsnorm', () => {
  for (const [rows, dim] of [[5, 4096], [1, 7], [3, 1000]] as const) {
    it(`rmsnorm_f16(rows=${rows},dim=${dim})`, () => {
      const rand = rng(rows * 31 + dim);
      const x = randomF16(rand, rows * dim, 3), w = randomF16(rand, dim, 1.5);
      const y = bothPaths(() => N.rmsnormF16(x, w, rows, dim, 1e-6));
      expect(countNonFinite16(y)).toBe(0);
      expectBits(y, rmsnormModel(x, w, rows, dim, 1e-6), 'vs model');
      const gx = guarded(x), gw = guarded(w);
      expectBits(N.rmsnormF16(gx.view, gw.view, rows, dim, 1e-6), y, 'subarray views');
      expect(gx.intact() && gw.intact()).toBe(true);
    });
  }
});

describe('rope', () => {
  const CASES: Array<[number, number, number, number, number, boolean]> = [
    [7, 3, 64, 0, 64, false], [5, 2, 128, 64, 64, true], [3, 4, 10, 2, 6, false], [4, 1, 8, 0, 8, true],
  ];
  for (const [T, H, D, off, rot, inter] of CASES) {
    it(`rope_f16(T=${T},H=${H},D=${D},off=${off},rot=${rot},interleaved=${inter})`, () => {
      const rand = rng(T * 1000 + D + off);
      const half = rot / 2;
      const cos = new Float32Array(T * half), sin = new Float32Array(T * half);
      for (let t = 0; t < T; t++) for (let j = 0; j < half; j++) {
        const ang = (t + 3) * 10000 ** (-j / half);
        cos[t * half + j] = Math.cos(ang);
        sin[t * half + j] = Math.sin(ang);
      }
      const x = randomF16(rand, T * H * D, 8);
      const gx = guarded(x);
      const y = bothPaths(() => N.ropeF16(gx.view, cos, sin, T, H, D, off, rot, inter));
      expect(gx.intact(), 'input left unrotated').toBe(true);
      expect(countNonFinite16(y)).toBe(0);
      expectBits(y, ropeModel(x, cos, sin, T, H, D, off, rot, inter), 'vs model');
    });
  }
});

describe('attention', () => {
  const CASES: Array<{ T: number; Hq: number; Hkv: number; D: number; Dv: number; window: number; sinks: boolean }> = [
    { T: 1, Hq: 2, Hkv: 1, D: 16, Dv: 16, window: 0, sinks: false },
    { T: 37, Hq: 8, Hkv: 2, D: 64, Dv: 64, window: 0, sinks: false },
    { T: 20, Hq: 4, Hkv: 1, D: 36, Dv: 20, window: 5, sinks: true },
    { T: 9, Hq: 2, Hkv: 2, D: 512, Dv: 512, window: 128, sinks: true },
  ];
  for (const c of CASES) {
    it(`attention_f16(T=${c.T},Hq=${c.Hq},Hkv=${c.Hkv},D=${c.D},Dv=${c.Dv},window=${c.window},sinks=${c.sinks})`, () => {
      const rand = rng(c.T * 100 + c.D);
      // q·k reaches about ±30 after scaling, so exp and the max subtraction are exercised.
      const q = randomF16(rand, c.T * c.Hq * c.D, 3), k = randomF16(rand, c.T * c.Hkv * c.D, 3);
      const v = randomF16(rand, c.T * c.Hkv * c.Dv, 2);
      const sinks = c.sinks ? Float32Array.from({ length: c.Hq }, () => (rand() - 0.5) * 8) : null;
      const scale = 1 / Math.sqrt(c.D);
      const gq = guarded(q);
      const y = bothPaths(() => N.attentionF16(gq.view, k, v, c.T, c.Hq, c.Hkv, c.D, c.Dv, scale, c.window, sinks));
      expect(gq.intact()).toBe(true);
      expect(countNonFinite16(y)).toBe(0);
      expectBits(y, attentionModel(q, k, v, c.T, c.Hq, c.Hkv, c.D, c.Dv, scale, c.window, sinks), 'vs model');
    });
  }

  it('attention_f16: window 1 attends to the token itself only, so the output is its own value', () => {
    const rand = rng(5);
    const T = 6, H = 2, D = 8;
    const q = randomF16(rand, T * H * D), k = randomF16(rand, T * H * D), v = randomF16(rand, T * H * D);
    expectBits(N.attentionF16(q, k, v, T, H, H, D, D, 0.3, 1, null), v, 'window 1');
  });
});

describe('elementwise', () => {
  it('swiglu_f16 over every f16 gate value (up = 1), no limit: SiLU through ld_expf', () => {
    const g = Uint16Array.from({ length: 65536 }, (_, i) => i);
    const u = new Uint16Array(65536).fill(0x3c00);
    const y = bothPaths(() => N.swigluF16(g, u, 0));
    expectBits(y, swigluModel(g, u, 0), 'vs model');
  });

  it('swiglu_f16(n=5000, limit=10) clamps gate above and up both ways; NaN passes through', () => {
    const rand = rng(10);
    const g = randomF16(rand, 5000, 20), u = randomF16(rand, 5000, 20);
    g[0] = 0x7e00;
    u[1] = 0xfe00;
    const y = bothPaths(() => N.swigluF16(g, u, 10));
    expect(countNonFinite16(y)).toBe(2);
    expectBits(y, swigluModel(g, u, 10), 'vs model');
  });

  it('add_f16 and mul_scalar_f16 round once, overflow to Inf', () => {
    const rand = rng(11);
    const a = randomF16(rand, 4001, 60000), b = randomF16(rand, 4001, 60000);
    const ga = guarded(a), gb = guarded(b);
    const s = N.addF16(ga.view, gb.view);
    expect(ga.intact() && gb.intact()).toBe(true);
    const wantS = Uint16Array.from(a, (h, i) => toF16(fr(fromF16(h) + fromF16(b[i]))));
    expectBits(s, wantS, 'add');
    expect(countNonFinite16(s)).toBeGreaterThan(0);
    for (const k of [0.3, 1e5]) {
      const p = N.mulScalarF16(a, k);
      expectBits(p, Uint16Array.from(a, (h) => toF16(fr(fromF16(h) * fr(k)))), `mul ${k}`);
    }
  });
});

describe('dequant mxfp4 at every kernel level', () => {
  it('AVX-512BW, AVX2 and scalar rows give the same bits: one block, odd block counts, every fault code', () => {
    const rand = rng(4242);
    for (const inD of [32, 96, 4128]) {
      const out = 5;
      const w = Uint8Array.from({ length: (out * inD) / 2 }, () => Math.floor(rand() * 256));
      const s = Uint8Array.from({ length: (out * inD) / 32 }, () => 110 + Math.floor(rand() * 30));
      for (let f = 0; f <= 11; f++) bothPaths(() => N.dequantToF16(0, w, s, false, out, inD, 1, 32, f));
    }
  });
});

describe('argument validation', () => {
  it('the TypeScript surface names shapes in RangeError/TypeError', () => {
    const x = new Uint16Array(16 * 4096);
    expect(() => N.gemmF16(x, new Uint16Array(10), 16, 4096, 64, 1)).toThrow(/w has 10 elements, expected n×k \[64×4096\]/);
    expect(() => N.gemmF16(new Float32Array(4) as unknown as Uint16Array, x, 1, 4, 1, 1)).toThrow(TypeError);
    expect(() => N.gemmF16(x, x, 16, 4096.5, 1, 1)).toThrow(RangeError);
    expect(() => N.dequantToF16(0, new Uint8Array(8), new Uint8Array(1), false, 1, 16, 1, 32, 0)).toThrow(/multiple of 32/);
    expect(() => N.dequantToF16(0, new Uint8Array(16), new Uint8Array(1), false, 1, 32, 1, 32, 99)).toThrow(RangeError); // past the last fault code
    expect(() => N.attentionF16(new Uint16Array(24), new Uint16Array(16), new Uint16Array(16), 1, 3, 2, 8, 8, 1, 0, null)).toThrow(/Hq 3 is not a multiple of Hkv 2/);
  });

  it('the raw addon throws the same errors itself (never aborts)', () => {
    const raw = loadAddon('ld_device') as DeviceNative;
    expect(() => raw.gemmF16(new Uint16Array(3), new Uint16Array(4), 1, 4, 1, 1)).toThrow(/x has 3 elements/);
    expect(() => raw.rmsnormF16(new Uint16Array(4), new Uint16Array(3), 1, 4, 1e-6)).toThrow(RangeError);
    expect(() => raw.dequantToF16(1, new Uint8Array(4), null, false, 2, 2, 1, 1, 0)).toThrow(TypeError);
    expect(() => raw.ropeF16(new Uint16Array(8), new Float32Array(4), new Float32Array(4), 1, 1, 8, 2, 8, false)).toThrow(/must fit in headDim/);
    expect(() => (raw.f32ToF16 as (x: unknown) => Uint16Array)('nope')).toThrow(TypeError);
  });
});
