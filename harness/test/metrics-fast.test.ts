/**
 * The per-element loops of the stage compare (harness/compare/metrics.ts) against second implementations: the
 * error histogram's bin search against a linear scan over the bin edges (exact edges and their neighbours
 * included), and compareLogits' KL and top-1 against a float64 computation written out here.
 */
import { describe, expect, it } from 'vitest';
import { compareLogits, errorHistogram, HIST_BINS, HIST_LO, histEdge } from '../compare/metrics.js';
import { act } from '../formats/tensor.js';
import { Rng } from '../rng.js';

describe('stage compare loops', () => {
  it('errorHistogram bins every |d − r| in the last bin edge at or below it', () => {
    const r = new Rng(91);
    const errs: number[] = [0, HIST_LO / 2, histEdge(HIST_BINS), histEdge(HIST_BINS) * 3];
    for (let k = 0; k <= HIST_BINS; k++) {
      const e = histEdge(k);
      errs.push(e, e * (1 + 2 ** -40), e * (1 - 2 ** -40));
    }
    for (let i = 0; i < 2000; i++) errs.push(HIST_LO * 10 ** (r.uniform() * 15));
    // r = 0 and d = e: |d − r| is e as an f32; the oracle bins that f32 value
    const d = Float32Array.from(errs);
    const got = errorHistogram(act([d.length], d), act([d.length], new Float32Array(d.length)));
    const want = new Array<number>(HIST_BINS).fill(0);
    let zero = 0, under = 0, over = 0;
    for (const e of d) {
      if (e === 0) zero++;
      else if (e < HIST_LO) under++;
      else if (e >= histEdge(HIST_BINS)) over++;
      else {
        let k = 0;
        for (let j = 0; j < HIST_BINS; j++) if (e >= histEdge(j)) k = j;
        want[k]++;
      }
    }
    expect(got.counts).toEqual(want);
    expect([got.zero, got.under, got.over, got.nonfinite]).toEqual([zero, under, over, 0]);
  });

  it('compareLogits: KL(p_ref ‖ p_dev) and top-1 per token as a direct float64 computation gives them', () => {
    const r = new Rng(92);
    const T = 5, V = 3001;
    const ref = Float32Array.from({ length: T * V }, () => (r.uniform() - 0.5) * 20);
    const dev = Float32Array.from(ref, (x, i) => x + (i % 7 === 0 ? (r.uniform() - 0.5) * 1e-4 : 0));
    dev[2 * V + 17] = 40; // token 2: the device's top-1 moves
    const m = compareLogits(act([T, V], dev), act([T, V], ref));
    let klSum = 0, agree = 0;
    for (let t = 0; t < T; t++) {
      const lse = (x: Float32Array) => {
        const mx = Math.max(...x);
        return mx + Math.log(x.reduce((s, v) => s + Math.exp(v - mx), 0));
      };
      const a = ref.subarray(t * V, (t + 1) * V), b = dev.subarray(t * V, (t + 1) * V);
      const la = lse(a), lb = lse(b);
      let kl = 0;
      for (let v = 0; v < V; v++) kl += Math.exp(a[v] - la) * ((a[v] - la) - (b[v] - lb));
      klSum += kl;
      if (a.indexOf(Math.max(...a)) === b.indexOf(Math.max(...b))) agree++;
    }
    expect(m.top1_agreement).toBe(agree / T);
    expect(agree, "token 2 disagrees").toBeLessThanOrEqual(T - 1);
    expect(m.kl_mean).toBeCloseTo(klSum / T, 12);
  });
});
