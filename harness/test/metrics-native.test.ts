/**
 * The error metrics' native passes (reference-cpu/native/metrics_f64.cc) against the TypeScript loops they replace,
 * bit for bit: compareSums against compareSumsTs, errorBins against errorBinsTs, the per-token KL and argmax against
 * tokenKlTs, and the native exp against Math.exp itself, at every level of the reference addon. The data hold what
 * makes an order of summation or an exp's last bit show: magnitudes across many decades, cancellation, NaN and Inf
 * in either path, ties, −0, and exp arguments in every branch of fdlibm's algorithm.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { compareLogits, compareSumsTs, errorBinsTs, HIST_EDGES, tokenKlNative, tokenKlTs } from '../compare/metrics.js';
import { act } from '../formats/tensor.js';
import { metricsNative } from '../compare/metrics_native.js';
import { Rng } from '../rng.js';
import { setReferenceSimd } from '../../reference-cpu/native.js';

const N = metricsNative();
const LEVELS = ['auto', 'avx2', 'scalar'] as const;

afterEach(() => {
  setReferenceSimd('auto');
});

/** same bits element by element (NaN payloads aside: both paths make them from the same operations) */
function sameBits(got: Float64Array, want: Float64Array, what: string): void {
  expect(got.length, what).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    if (!(Object.is(got[i], want[i]) || (Number.isNaN(got[i]) && Number.isNaN(want[i])))) {
      expect.fail(`${what}: element ${i} is ${got[i]}, the TypeScript gives ${want[i]}`);
    }
  }
}

/** a stage's values: normals scaled over 12 decades, some exact zeros and −0, and a large constant that cancels */
function stage(r: Rng, n: number): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => {
    if (i % 97 === 0) return i % 2 ? -0 : 0;
    const mag = 10 ** (r.uniform() * 12 - 6);
    return (i % 13 === 0 ? 3e4 : 0) + r.normal() * mag;
  });
}

/**
 * the device's values: the reference's plus errors of every size, some moved by one f32 step, and some unrelated to
 * the reference (a wild element: |d − r| then carries more bits than a square can keep exactly, so a fused or
 * reordered sum of squares shows)
 */
function perturbed(r: Rng, ref: Float32Array): Float32Array {
  return Float32Array.from(ref, (x, i) => {
    if (i % 5 === 0) return x;
    if (i % 7 === 0) return Math.fround(x * (1 + 2 ** -23));
    if (i % 11 === 0) return r.normal() * 10 ** (r.uniform() * 12 - 6);
    return x + r.normal() * 10 ** (r.uniform() * 14 - 10);
  });
}

describe.runIf(N !== null)('native error metrics', () => {
  it('compareSums is compareSumsTs bit for bit: finite data, NaN and Inf agreeing and disagreeing in either path, empty and one-element stages', () => {
    const r = new Rng(501);
    const ref = stage(r, 200_003);
    const dev = perturbed(r, ref);
    sameBits(N!.compareSums(dev, ref), compareSumsTs(dev, ref), 'finite');
    // non-finite: the same NaN / same Inf (agreement), device-only and reference-only (mismatches), opposite Infs
    const rn = ref.slice(), dn = dev.slice();
    for (const [i, a, b] of [[10, NaN, NaN], [20, Infinity, Infinity], [30, -Infinity, -Infinity], [40, NaN, 1], [50, 2, NaN], [60, Infinity, -Infinity], [70, 5, Infinity], [80, -Infinity, 5]] as const) {
      dn[i] = a;
      rn[i] = b;
    }
    sameBits(N!.compareSums(dn, rn), compareSumsTs(dn, rn), 'non-finite');
    // only agreeing non-finite values, and only Inf mismatches (no NaN)
    const ra = ref.slice(), da = dev.slice();
    da[7] = ra[7] = NaN;
    da[9] = ra[9] = -Infinity;
    sameBits(N!.compareSums(da, ra), compareSumsTs(da, ra), 'agreeing non-finite');
    da[11] = Infinity;
    sameBits(N!.compareSums(da, ra), compareSumsTs(da, ra), 'an Inf mismatch');
    // terms whose squares are inexact in float64 (|d − r| carries ~45 bits): a fused multiply-add in the native
    // pass changes the last bits of sumSq here (mutation-checked)
    // each square near the sum so far (terms growing by 2^(1/4)), where its rounding decides the sum's last bit
    const dw = Float32Array.from({ length: 400 }, (_, i) => 2 ** (i / 4) * (1 + r.uniform()));
    const rw = Float32Array.from(dw, (x) => x * r.uniform() * 2 ** -21);
    sameBits(N!.compareSums(dw, rw), compareSumsTs(dw, rw), 'inexact squares');
    for (const len of [0, 1]) sameBits(N!.compareSums(dev.subarray(0, len), ref.subarray(0, len)), compareSumsTs(dev.subarray(0, len), ref.subarray(0, len)), `${len} elements`);
    // ties for max |d − r|: the first index holds it in both
    const tie = Float32Array.from([0, 1, 0, 1]);
    sameBits(N!.compareSums(tie, new Float32Array(4)), compareSumsTs(tie, new Float32Array(4)), 'tie');
    expect(N!.compareSums(tie, new Float32Array(4))[6]).toBe(1);
  });

  it('the order of the sums shows in these data, so a native pass that reordered them would fail above', () => {
    const r = new Rng(502);
    const ref = stage(r, 200_003);
    const dev = perturbed(r, ref);
    const forward = compareSumsTs(dev, ref);
    const backward = compareSumsTs(dev.slice().reverse(), ref.slice().reverse());
    // sumAbs, sumSq, refSq, devSq, dot: at least one of them differs when the same terms are added in reverse
    expect([7, 8, 9, 10, 11].some((k) => forward[k] !== backward[k])).toBe(true);
  });

  it('errorBins is errorBinsTs: errors at every bin edge and one f32 step either side, below, above and non-finite', () => {
    const r = new Rng(503);
    const edges = HIST_EDGES;
    const errs: number[] = [0, -0, 1e-12, 1e9, Infinity, NaN];
    for (const e of edges) errs.push(e, Math.fround(e), Math.fround(e) * (1 + 2 ** -23), Math.fround(e) * (1 - 2 ** -24), -e);
    for (let i = 0; i < 100_000; i++) errs.push(1e-10 * 10 ** (r.uniform() * 16) * (r.uniform() < 0.5 ? -1 : 1));
    const d = Float32Array.from(errs);
    const ref = stage(r, d.length).map((x, i) => (i % 3 === 0 ? 0 : x));
    const dev = Float32Array.from(d, (e, i) => (i % 3 === 0 ? e : ref[i] + e));
    sameBits(N!.errorBins(dev, ref, edges), errorBinsTs(dev, ref), 'bins');
    expect(() => N!.errorBins(dev, ref, Float64Array.of(1, 1.5, 100))).toThrow(/edges/);
    expect(() => N!.errorBins(dev.subarray(1), ref, edges)).toThrow(/differ in length/);
  });

  it('exp is Math.exp bit for bit at every level, over every branch of fdlibm\'s algorithm', () => {
    const r = new Rng(504);
    const xs: number[] = [0, -0, 1, -1, Infinity, -Infinity, NaN, 709.78, 709.79, -745.13, -745.14, -708.4, -708.39, 2 ** -29, -(2 ** -29), 2 ** -28, 0.3465, 0.3466, 1.0397, 1.0398];
    const bits = new Uint32Array(2);
    const f64 = new Float64Array(bits.buffer);
    // a last-place slip in the polynomial (a fused multiply-add at one of its steps) shows in about one result per
    // million; these arguments are ones where it does (found by a search against fdlibm's statement written with a
    // fused step), and millions more follow
    xs.push(-0.23682313982249381, -0.35348467684978846, -14.207449468880636, -16.925046584068355, -18.373905577870971, -213.97555922808849, -26.02708299924949,
      -277.56115541679839, -37.897700442884911, -39.837930109276407, -401.63266092242333, -441.92260095939162, -475.36035290703194, -500.6386851983325,
      -626.9591408907246, -662.2444008901922);
    for (let i = 0; i < 3_000_000; i++) {
      const m = i % 6;
      if (m === 0) xs.push((r.uniform() - 0.5) * 1500);
      else if (m === 1) xs.push(-r.uniform() * (i % 12 === 1 ? 50 : 700)); // softmax arguments
      else if (m === 2) xs.push((r.uniform() - 0.5) * 3); // the bands around 0.5 ln2 and 1.5 ln2
      else if (m === 3) xs.push((r.uniform() - 0.5) * 2 ** -20);
      else if (m === 4) xs.push(-700 - r.uniform() * 50); // subnormal results and underflow
      else {
        bits[0] = r.int(2 ** 32);
        bits[1] = r.int(2 ** 32);
        xs.push(f64[0]); // any bits: NaN payloads, huge, tiny
      }
    }
    const x = Float64Array.from(xs);
    const want = x.map((v) => Math.exp(v));
    for (const level of LEVELS) {
      setReferenceSimd(level);
      sameBits(N!.expF64(x), want, `exp at ${level}`);
    }
  });

  it('a token\'s KL and argmax are tokenKlTs\'s at every level: wide rows, ties, −Inf and NaN logits, rows whose exp underflows', () => {
    const r = new Rng(505);
    const V = 5003;
    const rows = 6;
    const ref = new Float32Array(rows * V), dev = new Float32Array(rows * V);
    for (let t = 0; t < rows; t++) {
      const spread = [4, 20, 900, 3, 10, 10][t]; // row 2: most of exp(x − max) underflows, the scalar branches
      for (let v = 0; v < V; v++) {
        ref[t * V + v] = r.normal() * spread;
        dev[t * V + v] = ref[t * V + v] + r.normal() * 1e-3;
      }
    }
    // row 3: ties at the max (the first index wins); row 4: −Inf logits in both; row 5: a NaN in the device's row
    ref[3 * V + 17] = ref[3 * V + 400] = dev[3 * V + 17] = dev[3 * V + 400] = 50;
    for (const v of [1, 2, 3]) ref[4 * V + v] = dev[4 * V + v] = -Infinity;
    dev[5 * V + 9] = NaN;
    for (const level of LEVELS) {
      setReferenceSimd(level);
      for (let t = 0; t < rows; t++) {
        // the row's max and Σ exp(x − max) in index order, as logSoftmax forms them
        const row = ref.subarray(t * V, (t + 1) * V);
        let m = -Infinity;
        for (const x of row) if (x > m) m = x;
        let sum = 0;
        for (const x of row) sum += Math.exp(x - m);
        sameBits(N!.logSumExp(ref, t * V, V), Float64Array.of(m, sum), `${level} row ${t}: max and sum`);
        sameBits(Float64Array.from(tokenKlNative(N!, dev, ref, t * V, V)), Float64Array.from(tokenKlTs(dev, ref, t * V, V)), `${level} row ${t}`);
      }
    }
    expect(tokenKlNative(N!, dev, ref, 3 * V, V)[1]).toBe(17);
    expect(() => N!.klRow(ref, 0, dev, 0, rows * V - 3, 4)).toThrow(/inside the row array/);
    // logits of different shapes are one error naming both shapes, before any row is read
    expect(() => compareLogits(act([rows - 1, V], dev.subarray(V)), act([rows, V], ref))).toThrow(/shape mismatch/);
    expect(() => N!.logSumExp(ref, -1, 4)).toThrow(/inside the row array/);
  });
});
