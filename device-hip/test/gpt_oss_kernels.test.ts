/**
 * gpt-oss device kernels (device-hip/src/gpt_oss.cc, numerics in include/ld_gpt_oss.h) against a
 * plain-TypeScript model of their numerics written from the header's comments, bit for bit, over seeded
 * random inputs; and against the FP32 reference's functions (reference-cpu/gpt_oss.ts) at FP16 / FP32-level
 * tolerance, so the model and the kernels cannot share a misreading of the spec unnoticed.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { gptOssSwiglu, topkIndices } from '../../reference-cpu/gpt_oss.js';
import { GPT_OSS_ALPHA } from '../../harness/models/gpt_oss.js';
import { type GptOssNative, loadGptOssNative } from '../binding.js';
import { topkModel } from './deepseek_model.js';
import { firstF16Mismatch, firstF32Mismatch, fr, fromF16, ldExpf, randomF16, rng, toF16 } from './model.js';

let G: GptOssNative;
beforeAll(() => {
  G = loadGptOssNative();
});

/** ld_oss_swiglu_f32, one f32 operation at a time. */
function ossSwigluModel(h: Uint16Array, rows: number, I: number, limit: number, alpha: number): Uint16Array {
  const y = new Uint16Array(rows * I);
  const L = fr(limit), a = fr(alpha);
  for (let r = 0; r < rows; r++) {
    for (let i = 0; i < I; i++) {
      let g = fromF16(h[r * 2 * I + 2 * i]);
      let u = fromF16(h[r * 2 * I + 2 * i + 1]);
      if (g > L) g = L;
      if (u > L) u = L;
      if (u < -L) u = -L;
      const ag = fr(a * g);
      y[r * I + i] = toF16(fr(fr(g / fr(1 + ldExpf(-ag))) * fr(u + 1)));
    }
  }
  return y;
}

/** ossRouterF32: z = f32(logit + bias), top-k (ld_topk_before), ids ascending, softmax over the chosen z in that order. */
function ossRouterModel(logits: Float32Array, bias: Float32Array | null, T: number, E: number, k: number, given: Int32Array | null) {
  const ids = new Int32Array(T * k), weights = new Float32Array(T * k);
  for (let t = 0; t < T; t++) {
    const z = Array.from({ length: E }, (_, e) => (bias !== null ? fr(logits[t * E + e] + bias[e]) : logits[t * E + e]));
    const chosen = given !== null ? Array.from(given.subarray(t * k, (t + 1) * k)).sort((a, b) => a - b) : topkModel(z, k);
    ids.set(chosen, t * k);
    let m = -Infinity;
    for (const e of chosen) if (z[e] > m) m = z[e];
    const p = chosen.map((e) => ldExpf(fr(z[e] - m)));
    let l = 0;
    for (const pi of p) l = fr(l + pi);
    p.forEach((pi, j) => (weights[t * k + j] = fr(pi / l)));
  }
  return { ids, weights };
}

const shapes = [
  { rows: 1, I: 1 },
  { rows: 7, I: 33 },
  { rows: 48, I: 64 },
  { rows: 300, I: 129 },
];

describe('ossSwigluF16', () => {
  for (const { rows, I } of shapes) {
    it(`oss_swiglu(rows=${rows},I=${I}) equals the model bit for bit`, () => {
      const rand = rng(rows * 1000 + I);
      // amplitude 12 so both clamps (±7) and the unclamped range all occur
      const h = randomF16(rand, rows * 2 * I, 12);
      const got = G.ossSwigluF16(h, rows, I, 7, GPT_OSS_ALPHA);
      expect(firstF16Mismatch(got, ossSwigluModel(h, rows, I, 7, GPT_OSS_ALPHA))).toBe(-1);
    });
  }

  it('is the reference formula to FP16 rounding, clamps included (gate above only, up both ways, +1, α)', () => {
    const rand = rng(7);
    const rows = 64, I = 64;
    const h = randomF16(rand, rows * 2 * I, 12);
    const got = G.ossSwigluF16(h, rows, I, 7, GPT_OSS_ALPHA);
    let hits = 0;
    for (let r = 0; r < rows; r++) {
      for (let i = 0; i < I; i++) {
        const g = fromF16(h[r * 2 * I + 2 * i]), u = fromF16(h[r * 2 * I + 2 * i + 1]);
        if (g > 7 || Math.abs(u) > 7 || g < -7) hits++;
        const want = gptOssSwiglu(g, u, 7);
        const v = fromF16(got[r * I + i]);
        expect(Math.abs(v - want), `g=${g} u=${u}`).toBeLessThanOrEqual(Math.abs(want) * 2 ** -10 + 2 ** -24);
      }
    }
    expect(hits).toBeGreaterThan(100);
  });

  it('passes NaN through the clamps; rejects a wrong length', () => {
    const h = new Uint16Array([0x7e00, toF16(1), toF16(1), 0x7e00]);
    const y = G.ossSwigluF16(h, 1, 2, 7, GPT_OSS_ALPHA);
    expect(Number.isNaN(fromF16(y[0]))).toBe(true);
    expect(Number.isNaN(fromF16(y[1]))).toBe(true);
    expect(() => G.ossSwigluF16(new Uint16Array(5), 1, 2, 7, GPT_OSS_ALPHA)).toThrow(/rows×2I/);
  });
});

describe('ossRouterF32', () => {
  for (const [T, E, k] of [[1, 4, 1], [5, 8, 2], [40, 32, 4], [9, 128, 4]] as const) {
    it(`oss_router(T=${T},E=${E},topk=${k}) equals the model bit for bit, with and without bias and given ids`, () => {
      const rand = rng(T * 100 + E + k);
      const logits = Float32Array.from({ length: T * E }, () => fr((rand() * 2 - 1) * 4));
      const bias = Float32Array.from({ length: E }, () => fr((rand() * 2 - 1) * 0.5));
      // distinct ids per token: (t + j) mod E for j < k ≤ E
      const given = Int32Array.from({ length: T * k }, (_, i) => (Math.floor(i / k) + (i % k)) % E);
      for (const [b, g] of [[null, null], [bias, null], [bias, given]] as const) {
        const got = G.ossRouterF32(logits, b, T, E, k, g);
        const want = ossRouterModel(logits, b, T, E, k, g);
        expect(Array.from(got.ids)).toEqual(Array.from(want.ids));
        expect(firstF32Mismatch(got.weights, want.weights)).toBe(-1);
      }
    });
  }

  it('chooses what the reference chooses and weighs to FP32 rounding; ties go to the lower id', () => {
    const rand = rng(3);
    const T = 50, E = 16, k = 4;
    const logits = Float32Array.from({ length: T * E }, () => fr((rand() * 2 - 1) * 4));
    logits[3 * E + 5] = logits[3 * E + 9] = 10; // a tie at the top
    const got = G.ossRouterF32(logits, null, T, E, k, null);
    for (let t = 0; t < T; t++) {
      const row = logits.subarray(t * E, (t + 1) * E);
      const ids = topkIndices(row, k).sort((a, b) => a - b);
      expect(Array.from(got.ids.subarray(t * k, (t + 1) * k))).toEqual(ids);
      const m = Math.max(...ids.map((e) => row[e]));
      const p = ids.map((e) => Math.exp(row[e] - m));
      const s = p.reduce((a, b) => a + b, 0);
      ids.forEach((_, j) => expect(Math.abs(got.weights[t * k + j] - p[j] / s)).toBeLessThan(1e-6));
    }
    const tie = G.ossRouterF32(Float32Array.from([1, 3, 3, 2]), null, 1, 4, 1, null);
    expect(Array.from(tie.ids)).toEqual([1]);
    expect(tie.weights[0]).toBe(1);
  });
});
