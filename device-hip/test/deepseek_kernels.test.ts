/**
 * DeepSeek-V4 device kernels (device-hip/src/deepseek_*.cc) against the plain-TypeScript model of their
 * numerics (./deepseek_model.ts), bit for bit, over seeded random inputs and several shapes; each case is
 * named like `hc_pre(tokens=5,hc=4,dim=128)` so a failure is its own repro id. Per case: NaN/Inf first, then
 * bits; every SIMD level must give the same bits; inputs are passed as subarray views inside guard elements
 * that must stay untouched. A few cases also hold the kernels against the FP32 reference's functions
 * (reference-cpu/deepseek_v4/*) at FP16-level tolerance, so the model and the kernels cannot share a
 * misreading of the spec unnoticed.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { attendWithSink } from '../../reference-cpu/deepseek_v4/attention.js';
import { compressBlocks } from '../../reference-cpu/deepseek_v4/compressor.js';
import { hcPre as refHcPre, sinkhorn as refSinkhorn } from '../../reference-cpu/deepseek_v4/hc.js';
import { indexerScores } from '../../reference-cpu/deepseek_v4/indexer.js';
import { sqrtSoftplus } from '../../reference-cpu/deepseek_v4/moe.js';
import { type DeepseekNative, type DeviceNative, loadDeepseekNative, loadDeviceNative } from '../binding.js';
import {
  compressPoolModel, hcHeadModel, hcPostModel, hcPreModel, indexerModel, ldLogf, ldSqrtSoftplusf, moeCombineModel, routerModel,
  sinkhornModel, sparseAttentionModel, swigluRowsModel, topkModel,
} from './deepseek_model.js';
import { countNonFinite16, firstF16Mismatch, firstF32Mismatch, fr, fromF16, randomF16, rng, swigluModel } from './model.js';
import { guarded } from './guard.js';

let N: DeviceNative;
let K: DeepseekNative;
beforeAll(() => {
  N = loadDeviceNative();
  K = loadDeepseekNative();
});
afterEach(() => {
  N.setSimd('auto');
});

type Out = Uint16Array | Float32Array | Int32Array;

function sameBits(got: Out, want: Out, what: string): void {
  let i: number;
  if (got instanceof Uint16Array) i = firstF16Mismatch(got, want as Uint16Array);
  else if (got instanceof Float32Array) i = firstF32Mismatch(got, want);
  else i = got.length !== want.length ? 0 : got.findIndex((v, j) => v !== want[j]);
  const msg = i < 0 ? what : `${what}: first mismatch at ${i}: got ${got[i]}, want ${want[i]}`;
  expect(i, msg).toBe(-1);
}

/** f at the best SIMD level, then at avx2 and scalar: every output array must have the same bits. */
function allLevels<T extends object>(f: () => T): T {
  N.setSimd('auto');
  const a = f();
  const parts = (r: T): Array<[string, Out]> => (ArrayBuffer.isView(r) ? [['out', r as unknown as Out]] : (Object.entries(r) as Array<[string, Out]>));
  for (const mode of ['avx2', 'scalar'] as const) {
    const level = N.setSimd(mode);
    const b = parts(f());
    parts(a).forEach(([k, v], i) => sameBits(b[i][1], v, `${k}: ${level} vs best`));
  }
  N.setSimd('auto');
  return a;
}

const randomF32 = (rand: () => number, n: number, amp: number) => Float32Array.from({ length: n }, () => (rand() * 2 - 1) * amp);
const finite32 = (a: Float32Array) => a.every(Number.isFinite);

describe('element functions (ld_deepseek.h)', () => {
  it('ld_logf through routerF32 scores: sqrt(softplus(l)) for 20000 logits in [-60, 60] follows the model bit for bit, ≤ 2 ulp from float64 where e^l is a normal f32', () => {
    const rand = rng(301);
    const T = 100, E = 200;
    const logits = randomF32(rand, T * E, 60);
    logits.set([0, -0, 20, fr(20.000002), 19.999998, 1e-30, -1e-30, 88, -88, -104, 1e-8], 0);
    const { scores } = K.routerF32(logits, null, T, E, 1, 1, null);
    expect(finite32(scores)).toBe(true);
    sameBits(scores, Float32Array.from(logits, ldSqrtSoftplusf), 'vs model');
    let worst = 0;
    logits.forEach((l, i) => {
      // below about −87, e^l leaves the f32 normals (at −104 it underflows to 0): no ulp bound there
      if (l < -87) return;
      const exact = sqrtSoftplus(l);
      worst = Math.max(worst, Math.abs(scores[i] - exact) / (Math.abs(exact) * 2 ** -23 || Number.MIN_VALUE));
    });
    expect(worst).toBeLessThanOrEqual(2);
  });

  it('ld_logf model: 1 ulp of Math.log over f32 normals and subnormals', () => {
    const rand = rng(302);
    for (let i = 0; i < 20000; i++) {
      const x = fr(2 ** (rand() * 250 - 140) * (1 + rand()));
      const got = ldLogf(x), want = Math.log(x);
      expect(Math.abs(got - want), `log(${x})`).toBeLessThanOrEqual(Math.max(Math.abs(want), 2 ** -30) * 2 ** -23 * 1.01);
    }
    expect([ldLogf(0), ldLogf(-1), ldLogf(Infinity), ldLogf(1)]).toEqual([-Infinity, NaN, Infinity, 0]);
  });

  it('sinkhorn model against the reference (float64): a doubly stochastic matrix within FP32 rounding', () => {
    const rand = rng(303);
    const A = Array.from({ length: 16 }, () => fr((rand() - 0.5) * 6));
    const got = sinkhornModel(A, 4, 20, 1e-6), want = refSinkhorn(A, 4, 20, 1e-6);
    got.forEach((v, i) => expect(Math.abs(v - want[i])).toBeLessThan(2e-6));
  });
});

describe('hyper-connections', () => {
  const CASES: Array<[number, number, number, number]> = [[5, 4, 128, 20], [1, 4, 4096, 20], [3, 2, 37, 1], [9, 3, 24, 5]];
  for (const [T, hc, D, iters] of CASES) {
    const nmix = (2 + hc) * hc;
    const gen = (seed: number) => {
      const rand = rng(seed);
      return {
        x: randomF16(rand, T * hc * D, 4),
        fn: randomF32(rand, nmix * hc * D, 0.05),
        base: randomF32(rand, nmix, 1),
        scale: Float32Array.from([0.7, 1.3, 2.1]),
      };
    };
    it(`hc_pre(tokens=${T},hc=${hc},dim=${D},iters=${iters})`, () => {
      const { x, fn, base, scale } = gen(T * 7 + D);
      const gx = guarded(x), gf = guarded(fn);
      const r = allLevels(() => K.hcPreF16(gx.view, gf.view, base, scale, T, hc, D, 1e-6, 1e-6, iters));
      expect(gx.intact() && gf.intact()).toBe(true);
      expect(countNonFinite16(r.u)).toBe(0);
      expect(finite32(r.post) && finite32(r.comb)).toBe(true);
      const m = hcPreModel(x, fn, base, scale, T, hc, D, 1e-6, 1e-6, iters);
      sameBits(r.post, m.post, 'post');
      sameBits(r.comb, m.comb, 'comb');
      sameBits(r.u, m.u, 'u');
      if (hc === 4 && iters === 20) {
        // against the FP32 reference on the same (f16-valued) streams: FP16 output, FP32 mixing
        const ref = refHcPre(Float32Array.from(x, fromF16), T, { fn, base, scale }, { hc, D, normEps: 1e-6, hcEps: 1e-6, iters });
        ref.comb.forEach((v, i) => expect(Math.abs(v - r.comb[i])).toBeLessThan(1e-4));
        ref.post.forEach((v, i) => expect(Math.abs(v - r.post[i])).toBeLessThan(1e-5));
        ref.u.forEach((v, i) => expect(Math.abs(v - fromF16(r.u[i]))).toBeLessThan(Math.abs(v) * 2 ** -10 + 1e-6));
      }
    });
    it(`hc_post(tokens=${T},hc=${hc},dim=${D})`, () => {
      const rand = rng(T * 11 + D);
      const x = randomF16(rand, T * hc * D, 30), f = randomF16(rand, T * D, 8);
      const post = randomF32(rand, T * hc, 2), comb = randomF32(rand, T * hc * hc, 1);
      const gx = guarded(x), gc = guarded(comb);
      const y = allLevels(() => K.hcPostF16(f, gx.view, post, gc.view, T, hc, D));
      expect(gx.intact() && gc.intact()).toBe(true);
      expect(countNonFinite16(y)).toBe(0);
      sameBits(y, hcPostModel(f, x, post, comb, T, hc, D), 'vs model');
    });
    it(`hc_head(tokens=${T},hc=${hc},dim=${D})`, () => {
      const { x, fn, base } = gen(T * 13 + D);
      const headFn = fn.subarray(0, hc * hc * D), headBase = base.subarray(0, hc), headScale = Float32Array.of(0.9);
      const v = allLevels(() => K.hcHeadF16(x, headFn, headBase, headScale, T, hc, D, 1e-6, 1e-6));
      expect(countNonFinite16(v)).toBe(0);
      sameBits(v, hcHeadModel(x, headFn, headBase, headScale, T, hc, D, 1e-6, 1e-6), 'vs model');
    });
  }

  it('hc_pre(tokens=2,hc=4,dim=16): an Inf stream element turns the token into NaN, the other token stays finite', () => {
    const rand = rng(310);
    const T = 2, hc = 4, D = 16;
    const x = randomF16(rand, T * hc * D, 2);
    x[3] = 0x7c00;
    const fn = randomF32(rand, 24 * hc * D, 0.1), base = randomF32(rand, 24, 1), scale = Float32Array.of(1, 1, 1);
    const r = K.hcPreF16(x, fn, base, scale, T, hc, D, 1e-6, 1e-6, 20);
    expect(countNonFinite16(r.u.subarray(0, D))).toBe(D);
    expect(countNonFinite16(r.u.subarray(D))).toBe(0);
    sameBits(r.u, hcPreModel(x, fn, base, scale, T, hc, D, 1e-6, 1e-6, 20).u, 'vs model');
  });
});

describe('compressor pooling', () => {
  const CASES: Array<[number, number, number, boolean]> = [[17, 4, 32, true], [40, 16, 24, false], [96, 4, 128, true], [3, 4, 8, true], [130, 128, 16, false]];
  for (const [T, r, dc, overlap] of CASES) {
    it(`compress_pool(tokens=${T},ratio=${r},dc=${dc},overlap=${overlap})`, () => {
      const rand = rng(T * 17 + r + dc);
      const w = (overlap ? 2 : 1) * dc;
      const Kx = randomF32(rand, T * w, 3), Z = randomF32(rand, T * w, 6), ape = randomF32(rand, r * w, 2);
      const gk = guarded(Kx), gz = guarded(Z);
      const y = allLevels(() => K.compressPoolF16(gk.view, gz.view, ape, T, r, dc, overlap));
      expect(gk.intact() && gz.intact()).toBe(true);
      expect(y.length).toBe(Math.floor(T / r) * dc);
      expect(countNonFinite16(y)).toBe(0);
      sameBits(y, compressPoolModel(Kx, Z, ape, T, r, dc, overlap), 'vs model');
      const ref = compressBlocks(Kx, Z, ape, T, r, dc, overlap);
      ref.forEach((v, i) => expect(Math.abs(v - fromF16(y[i])), `entry ${i}`).toBeLessThan(Math.abs(v) * 2 ** -10 + 1e-5));
    });
  }
});

describe('indexer', () => {
  const CASES: Array<[number, number, number, number, number]> = [[40, 4, 64, 4, 3], [96, 16, 128, 4, 4], [9, 2, 16, 4, 8], [23, 3, 40, 16, 2]];
  for (const [T, nh, hd, r, topk] of CASES) {
    it(`indexer_topk(tokens=${T},heads=${nh},dim=${hd},ratio=${r},topk=${topk})`, () => {
      const rand = rng(T * 19 + nh + hd);
      const B = Math.floor(T / r);
      const q = randomF16(rand, T * nh * hd, 1), w = randomF16(rand, T * nh, 3), e = randomF16(rand, B * hd, 1);
      const scale = hd ** -0.5 * nh ** -0.5;
      const gq = guarded(q), ge = guarded(e);
      const res = allLevels(() => K.indexerTopkF16(gq.view, w, ge.view, T, nh, hd, B, r, 0, topk, scale));
      expect(gq.intact() && ge.intact()).toBe(true);
      expect(res.scores.every((v) => !Number.isNaN(v) && v !== Infinity)).toBe(true);
      const m = indexerModel(q, w, e, T, nh, hd, B, r, topk, scale);
      sameBits(res.scores, m.scores, 'scores');
      sameBits(res.picks, m.picks, 'picks');
      // against the reference's float64 scores (weights pre-scaled as the reference does)
      const ref = indexerScores(Float32Array.from(q, fromF16), Float64Array.from(w, (h) => fromF16(h) * scale), Float32Array.from(e, fromF16), T, { heads: nh, headDim: hd, ratio: r });
      ref.forEach((sc, t) => sc.forEach((v, b) => expect(Math.abs(v - res.scores[t * B + b])).toBeLessThan(1e-5 * (1 + Math.abs(v)))));
    });
  }

  it('indexer_topk(tokens=12,heads=2,dim=8,ratio=4,topk=2): equal scores pick the lowest blocks; a NaN score is picked', () => {
    const T = 12, nh = 2, hd = 8, r = 4, B = 3, topk = 2;
    // every q·e ≤ 0 → every score is exactly 0: a full tie
    const q = new Uint16Array(T * nh * hd).fill(0x3c00), e = new Uint16Array(B * hd).fill(0xbc00), w = new Uint16Array(T * nh).fill(0x3c00);
    const res = K.indexerTopkF16(q, w, e, T, nh, hd, B, r, 0, topk, 1);
    expect(Array.from(res.picks.subarray(11 * topk, 12 * topk))).toEqual([0, 1]);
    expect(Array.from(res.picks.subarray(3 * topk, 4 * topk))).toEqual([0, -1]); // token 3 sees block 0 only
    expect(Array.from(res.picks.subarray(0, topk))).toEqual([-1, -1]);
    e[2 * hd] = 0x7e00; // NaN in block 2
    const nan = K.indexerTopkF16(q, w, e, T, nh, hd, B, r, 0, topk, 1);
    expect(Array.from(nan.picks.subarray(11 * topk, 12 * topk))).toEqual([0, 2]);
    sameBits(nan.picks, indexerModel(q, w, e, T, nh, hd, B, r, topk, 1).picks, 'vs model');
  });

  // [rows of the full call, heads, dim, blocks, ratio, topk, t0 values, ties]: the last row alone (T = 1: a
  // decode step), chunks straddling block completions; B below the rows' reach (rows from 32 on see all 8: the
  // min(B, ·) cap), B = the last row's reach (the decoder's case), B beyond it (block 4 of ratio 16 unseen)
  const T0_CASES: Array<[number, number, number, number, number, number, number[], boolean]> = [
    [41, 4, 64, 8, 4, 3, [40, 39, 36, 17, 1], false],
    [70, 3, 40, 5, 16, 2, [69, 47, 16, 15], false],
    [37, 2, 16, 37, 1, 5, [36, 30, 4], true],
    [52, 3, 24, 13, 4, 4, [51, 23], true],
  ];
  for (const [Tall, nh, hd, B, r, topk, t0s, ties] of T0_CASES) {
    it(`indexer_topk(tokens=${Tall},heads=${nh},dim=${hd},blocks=${B},ratio=${r},topk=${topk}${ties ? ',ties' : ''}): t0 = ${t0s.join('/')} gives rows t0.. of the t0 = 0 call`, () => {
      const rand = rng(Tall * 23 + nh + hd + r);
      const q = randomF16(rand, Tall * nh * hd, 1), w = randomF16(rand, Tall * nh, 3), e = randomF16(rand, B * hd, 1);
      if (ties) for (let b = 1; b < B; b += 2) e.copyWithin(b * hd, (b - 1) * hd, b * hd);
      const scale = hd ** -0.5 * nh ** -0.5;
      const full = K.indexerTopkF16(q, w, e, Tall, nh, hd, B, r, 0, topk, scale);
      // the whole-call result is the model's (so the rows compared below are the right ones, not merely equal)
      const m = indexerModel(q, w, e, Tall, nh, hd, B, r, topk, scale);
      sameBits(full.scores, m.scores, 'full scores vs model');
      sameBits(full.picks, m.picks, 'full picks vs model');
      for (const t0 of t0s) {
        const T = Tall - t0;
        const gq = guarded(q.subarray(t0 * nh * hd)), gw = guarded(w.subarray(t0 * nh));
        const res = allLevels(() => K.indexerTopkF16(gq.view, gw.view, e, T, nh, hd, B, r, t0, topk, scale));
        expect(gq.intact() && gw.intact()).toBe(true);
        sameBits(res.scores, full.scores.subarray(t0 * B), `t0 ${t0} scores`);
        sameBits(res.picks, full.picks.subarray(t0 * topk), `t0 ${t0} picks`);
      }
    });
  }

  it('indexer_topk with t0: the visibility moves with the position (row t sees ⌊(t0+t+1)/ratio⌋ blocks)', () => {
    // every score 0 (q·e ≤ 0): the picks are the lowest visible blocks, so they show what each row sees
    const nh = 1, hd = 8, r = 4, B = 5, topk = 8;
    const q = new Uint16Array(3 * nh * hd).fill(0x3c00), e = new Uint16Array(B * hd).fill(0xbc00), w = new Uint16Array(3 * nh).fill(0x3c00);
    const seen = (t0: number) => {
      const { picks } = K.indexerTopkF16(q, w, e, 3, nh, hd, B, r, t0, topk, 1);
      return [0, 1, 2].map((t) => picks.subarray(t * topk, (t + 1) * topk).filter((b) => b >= 0).length);
    };
    expect(seen(0)).toEqual([0, 0, 0]);
    expect(seen(2)).toEqual([0, 1, 1]); // positions 2, 3, 4
    expect(seen(14)).toEqual([3, 4, 4]); // positions 14, 15, 16
    expect(seen(40)).toEqual([5, 5, 5]); // past the last block: all B
    expect(seen(0x7fffffff - 2)).toEqual([5, 5, 5]); // t0 + t + 1 reaches 2^31: no overflow
  });
});

describe('sparse attention', () => {
  const CASES: Array<{ T: number; H: number; D: number; window: number; r: number; K: number; csa: boolean }> = [
    { T: 30, H: 4, D: 64, window: 8, r: 4, K: 3, csa: true },
    { T: 40, H: 2, D: 128, window: 20, r: 16, K: 2, csa: false },
    { T: 17, H: 3, D: 40, window: 0, r: 4, K: 0, csa: false },
    { T: 1, H: 2, D: 16, window: 5, r: 4, K: 0, csa: false },
    { T: 9, H: 2, D: 512, window: 128, r: 4, K: 2, csa: true },
  ];
  for (const c of CASES) {
    it(`sparse_attention(tokens=${c.T},heads=${c.H},dim=${c.D},window=${c.window},ratio=${c.r},K=${c.K})`, () => {
      const rand = rng(c.T * 23 + c.D + c.K);
      const B = c.K > 0 ? Math.floor(c.T / c.r) : 0;
      const q = randomF16(rand, c.T * c.H * c.D, 3), kv = randomF16(rand, c.T * c.D, 3), comp = randomF16(rand, B * c.D, 3);
      const sinks = randomF32(rand, c.H, 4);
      const cand = new Int32Array(c.T * c.K).fill(-1);
      const picks: number[][] = [];
      for (let t = 0; t < c.T; t++) {
        const vis = Math.min(B, Math.floor((t + 1) / c.r));
        // CSA-like: a random subset of the visible blocks, ascending; HCA-like: all of them
        const all = Array.from({ length: vis }, (_, b) => b);
        const p = c.csa ? all.filter(() => rand() < 0.6).slice(0, c.K) : all.slice(0, c.K);
        picks.push(p);
        cand.set(p, t * c.K);
      }
      const scale = 1 / Math.sqrt(c.D);
      const gq = guarded(q), gc = guarded(cand), gs = guarded(sinks);
      const y = allLevels(() => K.sparseAttentionF16(gq.view, kv, comp, c.T, c.H, c.D, B, c.window, gc.view, c.K, gs.view, scale));
      expect(gq.intact() && gc.intact() && gs.intact()).toBe(true);
      expect(countNonFinite16(y)).toBe(0);
      sameBits(y, sparseAttentionModel(q, kv, comp, c.T, c.H, c.D, c.window, cand, c.K, sinks, scale), 'vs model');
      const ref = attendWithSink(
        Float32Array.from(q, fromF16), Float32Array.from(kv, fromF16), Float32Array.from(comp, fromF16), c.T, c.H, c.D,
        (t) => [c.window > 0 ? Math.max(0, t - c.window + 1) : 0, t], (t) => picks[t], sinks,
      );
      ref.forEach((v, i) => expect(Math.abs(v - fromF16(y[i])), `out ${i}`).toBeLessThan(4e-3));
    });
  }

  it('sparse_attention: window 1 with no candidates and a sink of −∞ returns the token\'s own row for every head', () => {
    const rand = rng(320);
    const T = 5, H = 3, D = 8;
    const q = randomF16(rand, T * H * D), kv = randomF16(rand, T * D);
    const y = K.sparseAttentionF16(q, kv, new Uint16Array(0), T, H, D, 0, 1, new Int32Array(0), 0, new Float32Array(H).fill(-Infinity), 0.3);
    for (let t = 0; t < T; t++) for (let h = 0; h < H; h++) sameBits(y.subarray((t * H + h) * D, (t * H + h + 1) * D), kv.subarray(t * D, (t + 1) * D), `t=${t} h=${h}`);
  });
});

describe('router', () => {
  const CASES: Array<[number, number, number, boolean]> = [[9, 16, 4, true], [96, 8, 3, true], [5, 256, 6, false], [3, 6, 6, true]];
  for (const [T, E, k, withBias] of CASES) {
    it(`router(tokens=${T},experts=${E},topk=${k},bias=${withBias})`, () => {
      const rand = rng(T * 29 + E + k);
      const logits = randomF32(rand, T * E, 4), bias = withBias ? randomF32(rand, E, 0.5) : null;
      const gl = guarded(logits);
      const r = allLevels(() => K.routerF32(gl.view, bias, T, E, k, 1.5, null));
      expect(gl.intact()).toBe(true);
      expect(finite32(r.weights) && finite32(r.scores)).toBe(true);
      const m = routerModel(logits, bias, T, E, k, 1.5, null);
      sameBits(r.scores, m.scores, 'scores');
      sameBits(r.ids, m.ids, 'ids');
      sameBits(r.weights, m.weights, 'weights');
      for (let t = 0; t < T; t++) {
        let sum = 0;
        for (let j = 0; j < k; j++) sum += r.weights[t * k + j];
        expect(sum).toBeCloseTo(1.5, 5);
      }
      // given ids (hash rows / forced), in any order and with a duplicate: returned ascending, weights from the scores
      const given = new Int32Array(T * k);
      for (let t = 0; t < T; t++) {
        for (let j = 0; j < k; j++) given[t * k + j] = (((E - 1 - t - 3 * j) % E) + E) % E;
        given[t * k + k - 1] = given[t * k]; // a tid2eid row may repeat an expert
      }
      const g = K.routerF32(logits, bias, T, E, k, 1.5, given);
      const gm = routerModel(logits, bias, T, E, k, 1.5, given);
      sameBits(g.ids, gm.ids, 'given ids');
      sameBits(g.weights, gm.weights, 'given weights');
    });
  }

  it('router(tokens=2,experts=8,topk=3): tied biased scores pick the lowest ids; a NaN logit is picked', () => {
    const logits = new Float32Array(16).fill(0.5), bias = new Float32Array(8);
    logits[13] = NaN;
    const r = K.routerF32(logits, bias, 2, 8, 3, 1.5, null);
    expect(Array.from(r.ids)).toEqual([0, 1, 2, 0, 1, 5]);
    for (const v of r.weights.subarray(0, 3)) expect(v).toBeCloseTo(0.5, 6);
    expect(r.weights.subarray(3).every(Number.isNaN)).toBe(true);
    expect(topkModel([1, 3, 3, NaN, 2], 3)).toEqual([1, 2, 3]);
  });
});

describe('MoE elementwise', () => {
  for (const [rows, cols, limit] of [[7, 130, 10], [1, 8, 0], [33, 128, 10]] as const) {
    it(`swiglu_rows(rows=${rows},cols=${cols},limit=${limit})`, () => {
      const rand = rng(rows * 31 + cols);
      const g = randomF16(rand, rows * cols, 20), u = randomF16(rand, rows * cols, 20), w = randomF32(rand, rows, 1.5);
      g[0] = 0x7e00;
      const gg = guarded(g), gw = guarded(w);
      const y = allLevels(() => K.swigluRowsF16(gg.view, u, rows, cols, gw.view, limit));
      expect(gg.intact() && gw.intact()).toBe(true);
      expect(countNonFinite16(y)).toBe(1);
      sameBits(y, swigluRowsModel(g, u, rows, cols, w, limit), 'vs model');
      sameBits(K.swigluRowsF16(g, u, rows, cols, null, limit), N.swigluF16(g, u, limit), 'no weights = swigluF16');
      sameBits(K.swigluRowsF16(g, u, rows, cols, null, limit), swigluModel(g, u, limit), 'no weights vs model');
    });
  }

  for (const [T, R, D] of [[6, 18, 40], [96, 288, 128], [3, 0, 8]] as const) {
    it(`moe_combine(tokens=${T},rows=${R},dim=${D})`, () => {
      const rand = rng(T * 37 + R + D);
      const y = randomF16(rand, R * D, 300), shared = randomF16(rand, T * D, 300);
      const rowToken = Int32Array.from({ length: R }, () => Math.floor(rand() * T));
      const gy = guarded(y), gr = guarded(rowToken);
      const out = allLevels(() => K.moeCombineF16(gy.view, gr.view, shared, T, D));
      expect(gy.intact() && gr.intact()).toBe(true);
      expect(countNonFinite16(out)).toBe(0);
      sameBits(out, moeCombineModel(y, rowToken, shared, T, D), 'vs model');
    });
  }
});

describe('argument checks (TypeError/RangeError naming the shapes, before any native work)', () => {
  it('lengths, types and index ranges', () => {
    const f16 = (n: number) => new Uint16Array(n);
    const f32 = (n: number) => new Float32Array(n);
    expect(() => K.hcPreF16(f16(10), f32(24 * 8), f32(24), f32(3), 1, 4, 2, 1e-6, 1e-6, 20)).toThrow(/x has 10 elements, expected T×hc×D \[1×4×2\] = 8/);
    expect(() => K.hcPreF16(f16(8), f32(24 * 8), f32(24), f32(2), 1, 4, 2, 1e-6, 1e-6, 20)).toThrow(RangeError);
    expect(() => K.hcPostF16(f16(2), f16(8) as unknown as Uint16Array, f32(4), new Float64Array(16) as unknown as Float32Array, 1, 4, 2)).toThrow(TypeError);
    expect(() => K.compressPoolF16(f32(16), f32(16), f32(15), 4, 4, 2, true)).toThrow(/ape has 15 elements/);
    expect(() => K.sparseAttentionF16(f16(8), f16(8), f16(4), 1, 1, 8, 0, 2, Int32Array.of(0), 1, f32(1), 1)).toThrow(/comp has 4 elements/);
    expect(() => K.sparseAttentionF16(f16(8), f16(8), f16(8), 1, 1, 8, 1, 2, Int32Array.of(1), 1, f32(1), 1)).toThrow(/cand\[0\] = 1 is outside \[-1, 1\)/);
    expect(() => K.sparseAttentionF16(f16(8), f16(8), f16(8), 1, 1, 8, 1, 2, [0] as unknown as Int32Array, 1, f32(1), 1)).toThrow(TypeError);
    expect(() => K.routerF32(f32(8), null, 1, 8, 9, 1, null)).toThrow(/topk 9 exceeds E 8/);
    expect(() => K.routerF32(f32(8), null, 1, 8, 2, 1, Int32Array.of(0, 8))).toThrow(/given\[1\] = 8 is outside \[0, 8\)/);
    expect(() => K.moeCombineF16(f16(4), Int32Array.of(2), f16(8), 2, 4)).toThrow(/rowToken\[0\] = 2 is outside \[0, 2\)/);
    expect(() => K.indexerTopkF16(f16(8), f16(1), f16(8), 1, 1, 8, 1, 4, 0, 0, 1)).toThrow(/topk must be an integer >= 1/);
    expect(() => K.indexerTopkF16(f16(8), f16(1), f16(8), 1, 1, 8, 1, 4, -1, 1, 1)).toThrow(/t0 must be an integer >= 0, got -1/);
    expect(() => K.indexerTopkF16(f16(8), f16(1), f16(8), 1, 1, 8, 1, 4, 2.5, 1, 1)).toThrow(/t0 must be an integer >= 0, got 2.5/);
    expect(() => K.indexerTopkF16(f16(8), f16(1), f16(8), 1, 1, 8, 1, 4, 2 ** 31, 1, 1)).toThrow(/t0 must be an integer >= 0/);
    expect(() => K.indexerTopkF16(f16(8), f16(1), f16(8), 1, 1, 8, 1, 4, '3' as unknown as number, 1, 1)).toThrow(TypeError);
  });
});
