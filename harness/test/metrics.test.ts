import { describe, expect, it } from 'vitest';
import { create, all } from 'mathjs';
import { compareActs, compareLogits, countFlips, unravel } from '../compare/metrics.js';
import { DEFAULT_POLICY, makePolicy, verdict } from '../compare/policy.js';
import { logitReasons } from '../compare/questions.js';
import { act } from '../formats/tensor.js';

const math = create(all, { number: 'BigNumber', precision: 64 });

/** Independent computation of the metrics with mathjs BigNumbers (64 significant digits). */
function bigMetrics(d: number[], r: number[]) {
  const B = (x: number) => math.bignumber(x);
  let maxAbs = B(0), sumAbs = B(0), sumSq = B(0), refSq = B(0), devSq = B(0), dot = B(0);
  for (let i = 0; i < d.length; i++) {
    const e = B(d[i]).minus(B(r[i])).abs();
    if (e.gt(maxAbs)) maxAbs = e;
    sumAbs = sumAbs.plus(e);
    sumSq = sumSq.plus(e.times(e));
    refSq = refSq.plus(B(r[i]).times(B(r[i])));
    devSq = devSq.plus(B(d[i]).times(B(d[i])));
    dot = dot.plus(B(d[i]).times(B(r[i])));
  }
  const n = B(d.length);
  return {
    max_abs: maxAbs.toNumber(),
    mean_abs: sumAbs.div(n).toNumber(),
    rms: sumSq.div(n).sqrt().toNumber(),
    rel_l2: sumSq.sqrt().div(refSq.sqrt()).toNumber(),
    cosine: dot.div(refSq.sqrt().times(devSq.sqrt())).toNumber(),
  };
}

function seeded(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32 - 0.5) * 4;
  });
}

describe('stage metrics', () => {
  for (const [T, D] of [[3, 8], [16, 192], [5, 1000]]) {
    it(`compareActs(tokens=${T},dim=${D}) matches a 64-digit computation`, () => {
      const r = seeded(T * D, T * 7 + D);
      const d = Float32Array.from(r, (x, i) => x + (i % 13 === 0 ? 1e-3 * (i % 5) : 0) - (i % 29 === 0 ? 0.02 : 0));
      const m = compareActs(act([T, D], d), act([T, D], r));
      const want = bigMetrics([...d], [...r]);
      for (const k of ['max_abs', 'mean_abs', 'rms', 'rel_l2', 'cosine'] as const) expect(m[k]).toBeCloseTo(want[k], 12);
      expect(m.max_ref).toBe(Math.max(...[...r].map(Math.abs)));
      const [t, c] = m.max_at;
      expect(Math.abs(d[t * D + c] - r[t * D + c])).toBe(m.max_abs);
    });
  }

  it('counts NaN/Inf per path: the metrics say NaN, the finite part is kept beside them', () => {
    const r = act([1, 4], Float32Array.from([1, 2, 3, 4]));
    const d = act([1, 4], Float32Array.from([1, NaN, Infinity, 4.5]));
    const m = compareActs(d, r);
    expect(m.nan).toEqual({ reference: 0, device: 1 });
    expect(m.inf).toEqual({ reference: 0, device: 1 });
    for (const k of ['max_abs', 'mean_abs', 'rms', 'rel_l2', 'cosine'] as const) expect(m[k], k).toBeNaN();
    expect(m.max_at).toEqual([0, 1]); // the first element the paths disagree on
    // finite part: elements 0 and 3, |Δ| = 0 and 0.5; ‖r‖ = √17, cosine of (1, 4.5) and (1, 4)
    expect(m.finite).toEqual({ count: 2, max_abs: 0.5, mean_abs: 0.25, rms: Math.sqrt(0.125), rel_l2: 0.5 / Math.sqrt(17), cosine: (1 + 18) / (Math.sqrt(1 + 20.25) * Math.sqrt(17)) });
    expect(verdict(m, DEFAULT_POLICY)).toBe('fail');
  });

  it('Inf without NaN gives Infinity (cosine NaN); a non-finite value both paths share is agreement', () => {
    const r = act([1, 3], Float32Array.from([1, 2, -Infinity]));
    const inf = compareActs(act([1, 3], Float32Array.from([1, Infinity, -Infinity])), r);
    expect([inf.max_abs, inf.rel_l2, inf.mean_abs]).toEqual([Infinity, Infinity, Infinity]);
    expect(inf.cosine).toBeNaN();
    const same = compareActs(act([1, 3], Float32Array.from([1, 2.5, -Infinity])), r);
    expect(same.max_abs).toBe(0.5);
    expect(same.finite?.count).toBe(2);
    // a NaN only the reference has is a disagreement too, and fails whatever the device's counts say
    const refNaN = compareActs(act([1, 2], Float32Array.from([1, 2])), act([1, 2], Float32Array.from([1, NaN])));
    expect(refNaN.max_abs).toBeNaN();
    expect(verdict(refNaN, DEFAULT_POLICY)).toBe('fail');
  });

  it('unravel gives row-major coordinates', () => {
    expect(unravel(0, [2, 3, 4])).toEqual([0, 0, 0]);
    expect(unravel(23, [2, 3, 4])).toEqual([1, 2, 3]);
    expect(unravel(13, [2, 3, 4])).toEqual([1, 0, 1]);
  });

  it('logit metrics: top-1 agreement and KL against a direct computation', () => {
    const r = act([2, 3], Float32Array.from([1, 2, 3, 0, 0, 5]));
    const d = act([2, 3], Float32Array.from([1, 2, 2.5, 0, 6, 5]));
    const lm = compareLogits(d, r);
    expect(lm.top1_agreement).toBe(0.5);
    const kl = (p: number[], q: number[]) => {
      const sp = p.map(Math.exp), sq = q.map(Math.exp);
      const zp = sp.reduce((a, b) => a + b), zq = sq.reduce((a, b) => a + b);
      return sp.reduce((a, v, i) => a + (v / zp) * Math.log((v / zp) / (sq[i] / zq)), 0);
    };
    const k0 = kl([1, 2, 3], [1, 2, 2.5]);
    const k1 = kl([0, 0, 5], [0, 6, 5]);
    expect(lm.kl_mean).toBeCloseTo((k0 + k1) / 2, 12);
    expect(lm.kl_max).toBeCloseTo(Math.max(k0, k1), 12);
  });

  it('behaviour over the tokens without a benign flip: a flipped token\'s top-1 and KL are reported, not judged; every token flipped judges all', () => {
    // token 1 disagrees at top-1 with a large KL; token 0 and 2 agree closely
    const r = act([3, 3], Float32Array.from([1, 2, 3, 0, 0, 5, 3, 1, 0]));
    const d = act([3, 3], Float32Array.from([1, 2, 3.01, 0, 6, 5, 3.01, 1, 0]));
    const t = { top1_min: 0.9, kl_mean_max: 0.02, kl_p99_max: 0.2 };
    const all = compareLogits(d, r);
    expect(logitReasons(all, { ...t, flip_factor: 4 }).join('; ')).toMatch(/top-1 agreement 66\.7% < 90\.0%.*mean KL/);
    const benign = compareLogits(d, r, new Set([1]));
    expect([benign.top1_agreement, benign.top1_agreement_unflipped, benign.flipped_tokens]).toEqual([2 / 3, 1, 1]);
    expect(benign.kl_mean_unflipped).toBeLessThan(1e-4);
    expect(benign.kl_mean).toBe(all.kl_mean);
    expect(logitReasons(benign, { ...t, flip_factor: 4 })).toEqual([]);
    // the disagreeing token is not the flipped one: judged, and fails
    expect(logitReasons(compareLogits(d, r, new Set([0])), { ...t, flip_factor: 4 })[0]).toMatch(/top-1 agreement 50\.0% \(tokens without a benign flip\) < 90\.0%/);
    // every token flipped: nothing left apart, so every token is judged
    const everyone = compareLogits(d, r, new Set([0, 1, 2]));
    expect(everyone.top1_agreement_unflipped).toBeUndefined();
    expect(logitReasons(everyone, { ...t, flip_factor: 4 }).length).toBeGreaterThan(0);
  });

  it('selection flips count tokens whose chosen set differs', () => {
    expect(countFlips([[0, 3], [1, 2], [4, 5]], [[0, 3], [1, 4], [4, 5]])).toBe(1);
  });
});

describe('policy', () => {
  const base = compareActs(act([1, 2], Float32Array.from([0, 0])), act([1, 2], Float32Array.from([0, 0])));
  const withMax = (x: number) => ({ ...base, max_abs: x });
  it.each([
    [0, 'pass'], [0.01, 'pass'], [0.010001, 'warn'], [0.1, 'warn'], [0.100001, 'fail'], [5, 'fail'],
  ])('max_abs %f → %s with the default thresholds', (x, want) => {
    expect(verdict(withMax(x as number), DEFAULT_POLICY)).toBe(want);
  });
  it('a custom metric and thresholds', () => {
    const p = makePolicy('rel_l2', 0.05, 0.001);
    expect(verdict({ ...base, rel_l2: 0.01, max_abs: 9 }, p)).toBe('warn');
  });
  it('rejects bad policies', () => {
    expect(() => makePolicy('bogus', 0.1, 0.01)).toThrow(/--metric/);
    expect(() => makePolicy('max_abs', 0.01, 0.1)).toThrow(/warn-above/);
  });
});
