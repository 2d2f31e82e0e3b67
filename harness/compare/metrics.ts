/**
 * Error metrics of a device output d against a reference output r (same shape, flattened), in float64.
 * Non-finite values are counted per path. An element where the paths disagree on a non-finite value (the
 * device NaN or Inf where the reference is finite, or the other way round) makes the error unbounded: the
 * metrics say so (NaN when a NaN is involved, else Infinity; cosine NaN) instead of a clean-looking 0 or 1
 * computed over what is left. The finite part's metrics are kept beside them, under `finite`, for whoever
 * wants the size of the error where both paths still have numbers. A non-finite stage fails on its own
 * (policy.ts).
 */
import type { Act } from '../formats/tensor.js';
import { type MetricsNative, metricsNative } from './metrics_native.js';

export interface PathCounts {
  reference: number;
  device: number;
}

/** The metrics over the elements where both paths are finite (`count` of them). */
export interface FiniteMetrics {
  count: number;
  max_abs: number;
  mean_abs: number;
  rms: number;
  rel_l2: number;
  cosine: number;
}

export interface StageMetrics {
  /** NaN/Infinity when the paths disagree on a non-finite element (see `finite` for the finite part) */
  max_abs: number;
  /** coordinates of max_abs in the stage's shape: [token, ...rest] */
  max_at: number[];
  mean_abs: number;
  rms: number;
  rel_l2: number;
  cosine: number;
  max_ref: number;
  nan: PathCounts;
  inf: PathCounts;
  /** tokens whose discrete choice (expert set, indexer picks) differs from the reference's */
  selection_flips: number;
  /** present when some element is non-finite in either path: the metrics over the finite elements only */
  finite?: FiniteMetrics;
}

export interface LogitMetrics {
  top1_agreement: number;
  kl_mean: number;
  /** 99th percentile of KL per token (nearest rank), as llama.cpp's KL-divergence report gives it */
  kl_p99: number;
  kl_max: number;
  /**
   * Free accumulated mode: the same three over the tokens without a benign top-k flip (the judged ones), and
   * how many tokens were left out. A benign flip is an explained near-tie (compare/flips.ts) whose token takes
   * another expert set, so its distribution moves by what that choice moves, not by numeric error: on
   * gpt-oss-20b's widths a 16-token prompt flips 7 tokens benignly and their top-1 with them. The all-token
   * values above are still reported; when every token flipped, the judged values are the all-token ones.
   */
  kl_p99_unflipped?: number;
  top1_agreement_unflipped?: number;
  kl_mean_unflipped?: number;
  flipped_tokens?: number;
  /**
   * Tokens whose top-1 differs where the reference's own two candidates are within `tie_bound` of each other (what a
   * correct FP16 path may move them by: a near-tie of the vocabulary, as a top-k flip is one of the experts), and
   * the top-1 agreement over the other judged tokens: one such token is half of a two-token prompt.
   */
  top1_near_ties?: number;
  top1_agreement_decided?: number;
  tie_bound?: number;
}

/** What the behaviour question judges: over the tokens without a benign flip where that was measured. */
export const judgedKlP99 = (m: LogitMetrics): number => m.kl_p99_unflipped ?? m.kl_p99;
export const judgedTop1 = (m: LogitMetrics): number => m.top1_agreement_decided ?? m.top1_agreement_unflipped ?? m.top1_agreement;
export const judgedKlMean = (m: LogitMetrics): number => m.kl_mean_unflipped ?? m.kl_mean;

/** The near-tie bound of the logits (compareLogits' tieBound): twice floor_excuse × the head's own FP16 floor in max_abs. */
export function tieBoundOf(floorExcuse: number, headFloor: { max_abs: number }): number {
  return 2 * floorExcuse * headFloor.max_abs;
}

export function unravel(index: number, shape: number[]): number[] {
  const at = new Array<number>(shape.length).fill(0);
  let rest = index;
  for (let k = shape.length - 1; k >= 0; k--) {
    at[k] = rest % shape[k];
    rest = Math.floor(rest / shape[k]);
  }
  return at;
}

/**
 * compareActs' pass over the elements, as metrics_native.ts lays it out: [nanDevice, infDevice, nanReference,
 * infReference, maxRef, maxAbs, maxIdx, sumAbs, sumSq, refSq, devSq, dot, n, mismatched, mismatchNaN, firstMismatch].
 * The oracle of the native pass (compareSums), and what runs without the addon.
 */
export function compareSumsTs(dd: Float32Array, rd: Float32Array): Float64Array {
  let nanD = 0;
  let infD = 0;
  let nanR = 0;
  let infR = 0;
  let maxAbs = 0;
  let maxIdx = 0;
  let sumAbs = 0;
  let sumSq = 0;
  let refSq = 0;
  let devSq = 0;
  let dot = 0;
  let maxRef = 0;
  let n = 0;
  // elements where the paths disagree on a non-finite value; the first one is where max_at points
  let mismatched = 0;
  let mismatchNaN = false;
  let firstMismatch = -1;
  for (let i = 0; i < rd.length; i++) {
    const a = dd[i];
    const b = rd[i];
    if (Number.isNaN(a)) nanD++;
    else if (!Number.isFinite(a)) infD++;
    if (Number.isNaN(b)) nanR++;
    else if (!Number.isFinite(b)) infR++;
    // max |r| over every finite reference value, also where the device went non-finite: the reference's
    // magnitude there is what tells an FP16 range problem from a kernel bug
    else if (Math.abs(b) > maxRef) maxRef = Math.abs(b);
    if (!Number.isFinite(a) || !Number.isFinite(b)) {
      // the same NaN or the same signed Inf in both paths is agreement, not error
      if (!(Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b)))) {
        if (firstMismatch < 0) firstMismatch = i;
        mismatched++;
        if (Number.isNaN(a) || Number.isNaN(b)) mismatchNaN = true;
      }
      continue;
    }
    const e = Math.abs(a - b);
    if (e > maxAbs) {
      maxAbs = e;
      maxIdx = i;
    }
    sumAbs += e;
    sumSq += e * e;
    refSq += b * b;
    devSq += a * a;
    dot += a * b;
    n++;
  }
  return Float64Array.of(nanD, infD, nanR, infR, maxRef, maxAbs, maxIdx, sumAbs, sumSq, refSq, devSq, dot, n, mismatched, mismatchNaN ? 1 : 0, firstMismatch);
}

/** The device's and the reference's outputs hold the same number of values, or one error naming both shapes. */
function sameShape(d: Act, r: Act): void {
  if (d.data.length !== r.data.length) throw new Error(`shape mismatch: device ${JSON.stringify(d.shape)} vs reference ${JSON.stringify(r.shape)}`);
}

export function compareActs(d: Act, r: Act, selectionFlips = 0): StageMetrics {
  sameShape(d, r);
  const s = metricsNative()?.compareSums(d.data, r.data) ?? compareSumsTs(d.data, r.data);
  const [nanD, infD, nanR, infR, maxRef, maxAbs, maxIdx, sumAbs, sumSq, refSq, devSq, dot, n, mismatched, mismatchNaN, firstMismatch] = s;
  const nan = { reference: nanR, device: nanD };
  const inf = { reference: infR, device: infD };
  const denom = Math.sqrt(refSq) * Math.sqrt(devSq);
  const finite: FiniteMetrics = {
    count: n,
    max_abs: maxAbs,
    mean_abs: n > 0 ? sumAbs / n : 0,
    rms: n > 0 ? Math.sqrt(sumSq / n) : 0,
    rel_l2: refSq > 0 ? Math.sqrt(sumSq) / Math.sqrt(refSq) : Math.sqrt(sumSq),
    cosine: denom > 0 ? dot / denom : refSq === devSq ? 1 : 0,
  };
  const base = (m: Omit<FiniteMetrics, 'count'>, at: number): StageMetrics => ({
    max_abs: m.max_abs,
    max_at: unravel(at, r.shape),
    mean_abs: m.mean_abs,
    rms: m.rms,
    rel_l2: m.rel_l2,
    cosine: m.cosine,
    max_ref: maxRef,
    nan,
    inf,
    selection_flips: selectionFlips,
  });
  if (n === r.data.length) return base(finite, maxIdx);
  // non-finite only where both paths agree on it: the finite part is the whole comparison (and says so)
  if (mismatched === 0) return { ...base(finite, maxIdx), finite };
  const unbounded = mismatchNaN === 1 ? NaN : Infinity;
  return { ...base({ max_abs: unbounded, mean_abs: unbounded, rms: unbounded, rel_l2: unbounded, cosine: NaN }, firstMismatch), finite };
}

/**
 * A log-binned histogram of |d − r| over one stage's elements: bounded (a fixed number of bins whatever the
 * stage's size), one pass, and enough to tell a few wild elements (a spike at the top) from a shifted
 * distribution (a broad hump) — which a single max_abs cannot. Bin k covers
 * [HIST_LO · 10^(k/HIST_PER_DECADE), HIST_LO · 10^((k+1)/HIST_PER_DECADE)).
 */
export interface ErrorHistogram {
  /** lower edge of bin 0 */
  lo: number;
  per_decade: number;
  counts: number[];
  /** elements with d == r exactly */
  zero: number;
  /** 0 < |d − r| < lo */
  under: number;
  /** |d − r| at or past the top edge */
  over: number;
  /** elements where either path is NaN/Inf (no difference to bin) */
  nonfinite: number;
}

/** 1e-9 to 1e5 at two bins per decade: below FP32 noise on O(1) values up to far past any sane activation. */
export const HIST_LO = 1e-9;
export const HIST_PER_DECADE = 2;
export const HIST_BINS = 28;

export function histEdge(k: number): number {
  return HIST_LO * 10 ** (k / HIST_PER_DECADE);
}

/** the bin edges, lower edge of bin 0 up to the top edge (errorHistogram bins by comparisons with these values) */
export const HIST_EDGES = Float64Array.from({ length: HIST_BINS + 1 }, (_, k) => histEdge(k));

export function errorHistogram(d: Act, r: Act): ErrorHistogram {
  const b = metricsNative()?.errorBins(d.data, r.data, HIST_EDGES) ?? errorBinsTs(d.data, r.data);
  return { lo: HIST_LO, per_decade: HIST_PER_DECADE, counts: Array.from(b.subarray(0, HIST_BINS)), zero: b[HIST_BINS], under: b[HIST_BINS + 1], over: b[HIST_BINS + 2], nonfinite: b[HIST_BINS + 3] };
}

/** errorHistogram's pass, laid out as the native errorBins: [counts..., zero, under, over, nonfinite] (its oracle, and the fallback) */
export function errorBinsTs(dd: Float32Array, rd: Float32Array): Float64Array {
  const out = new Float64Array(HIST_BINS + 4);
  const top = histEdge(HIST_BINS);
  for (let i = 0; i < rd.length; i++) {
    const a = dd[i];
    const b = rd[i];
    if (!Number.isFinite(a) || !Number.isFinite(b)) {
      out[HIST_BINS + 3]++;
      continue;
    }
    const e = Math.abs(a - b);
    if (e === 0) out[HIST_BINS]++;
    else if (e < HIST_LO) out[HIST_BINS + 1]++;
    else if (e >= top) out[HIST_BINS + 2]++;
    else {
      // the bin is the last edge at or below e, found among the edges themselves (no log per element, and no
      // bin one off at an exact edge, where 10^x is not exact in binary)
      let lo = 0;
      let hi = HIST_BINS - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (e >= HIST_EDGES[mid]) lo = mid;
        else hi = mid - 1;
      }
      out[lo]++;
    }
  }
  return out;
}

/** Run-to-run spread of one path: how far repeated device runs on the same input land from the first. */
export interface Spread {
  /** max |a − b| over elements (NaN and Inf compared by identity: NaN vs NaN is no spread) */
  max_abs: number;
  /** elements whose bits differ */
  differing: number;
}

export function spreadOf(a: Act, b: Act): Spread {
  let maxAbs = 0;
  let differing = 0;
  for (let i = 0; i < a.data.length; i++) {
    const x = a.data[i];
    const y = b.data[i];
    if (Object.is(x, y) || (Number.isNaN(x) && Number.isNaN(y))) continue;
    differing++;
    const e = Math.abs(x - y);
    maxAbs = Math.max(maxAbs, Number.isNaN(e) ? Infinity : e);
  }
  return { max_abs: maxAbs, differing };
}

/**
 * Per token: does argmax agree, and KL(p_ref ‖ p_dev) of the softmaxed logits. Logits are [tokens, vocab].
 * `flipped`: the tokens with a benign top-k flip (free accumulated mode), left out of kl_p99_unflipped.
 * `tieBound`: a top-1 that differs where the reference's logit of its own top-1 exceeds its logit of the device's
 * by no more than this is a near-tie, left out of top1_agreement_decided (with the flipped tokens).
 */
export function compareLogits(d: Act, r: Act, flipped?: ReadonlySet<number>, tieBound?: number): LogitMetrics {
  sameShape(d, r);
  const [T, V] = r.shape;
  let agree = 0;
  let klSum = 0;
  let klMax = 0;
  const kls = new Float64Array(T);
  const agrees = new Uint8Array(T);
  // where the top-1 differs: the reference's logit of its top-1 less its logit of the device's (≥ 0)
  const margins = new Float64Array(T);
  const native = metricsNative();
  for (let t = 0; t < T; t++) {
    const [rawKl, argR, argD] = native === null ? tokenKlTs(d.data, r.data, t * V, V) : tokenKlNative(native, d.data, r.data, t * V, V);
    if (argR === argD) {
      agree++;
      agrees[t] = 1;
    } else margins[t] = r.data[t * V + argR] - r.data[t * V + argD];
    const kl = Number.isFinite(rawKl) ? rawKl : Infinity;
    klSum += kl;
    klMax = Math.max(klMax, kl);
    kls[t] = kl;
  }
  const out: LogitMetrics = { top1_agreement: T > 0 ? agree / T : 1, kl_mean: T > 0 ? klSum / T : 0, kl_p99: percentile(kls, 0.99), kl_max: klMax };
  const all = Array.from({ length: T }, (_, t) => t);
  const keep = flipped === undefined ? all : all.filter((t) => !flipped.has(t));
  // nothing left to judge apart: judge every token
  const judged = keep.length === 0 ? all : keep;
  const res: LogitMetrics = flipped === undefined ? out : keep.length === 0 ? { ...out, flipped_tokens: T } : (() => {
    const kept = Float64Array.from(keep, (t) => kls[t]);
    return {
      ...out,
      kl_p99_unflipped: percentile(kept, 0.99),
      top1_agreement_unflipped: keep.reduce((n, t) => n + agrees[t], 0) / keep.length,
      kl_mean_unflipped: kept.reduce((a, x) => a + x, 0) / keep.length,
      flipped_tokens: T - keep.length,
    };
  })();
  if (tieBound === undefined) return res;
  // the reference's margin between its top-1 and the device's, in logits (a softmax shifts both alike)
  const nearTie = (t: number) => agrees[t] === 0 && margins[t] <= tieBound;
  const decided = judged.filter((t) => !nearTie(t));
  return {
    ...res,
    tie_bound: tieBound,
    top1_near_ties: judged.length - decided.length,
    top1_agreement_decided: decided.length === 0 ? 1 : decided.reduce((n, t) => n + agrees[t], 0) / decided.length,
  };
}


/** Nearest-rank percentile: the smallest value with at least q of the values at or below it. */
export function percentile(values: Float64Array, q: number): number {
  if (values.length === 0) return 0;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

/**
 * One token's KL(p_ref ‖ p_dev) over its logits row [offset, offset + V) and both rows' argmax (of the log-softmax,
 * as compareLogits judges them), in TypeScript: the oracle of tokenKlNative, and what runs without the addon.
 */
export function tokenKlTs(dd: Float32Array, rd: Float32Array, offset: number, V: number): [number, number, number] {
  const lr = logSoftmax(rd.subarray(offset, offset + V));
  const ld = logSoftmax(dd.subarray(offset, offset + V));
  let kl = 0;
  for (let v = 0; v < V; v++) {
    const p = Math.exp(lr[v]);
    if (p > 0) kl += p * (lr[v] - ld[v]);
  }
  return [kl, argmax(lr), argmax(ld)];
}

/** tokenKlTs with the per-element passes native; the one log a row stays Math.log, so the bits are the same. */
export function tokenKlNative(N: MetricsNative, dd: Float32Array, rd: Float32Array, offset: number, V: number): [number, number, number] {
  const lse = (x: Float32Array) => {
    const [m, s] = N.logSumExp(x, offset, V);
    return m + Math.log(s);
  };
  const [kl, argR, argD] = N.klRow(rd, lse(rd), dd, lse(dd), offset, V);
  return [kl, argR, argD];
}

function logSoftmax(x: ArrayLike<number>): Float64Array {
  let m = -Infinity;
  for (let i = 0; i < x.length; i++) if (x[i] > m) m = x[i];
  let s = 0;
  for (let i = 0; i < x.length; i++) s += Math.exp(x[i] - m);
  const lse = m + Math.log(s);
  // a plain loop: Float64Array.from with a map function takes V8's generic path, ~20× slower on a 129,280-wide row
  const out = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) out[i] = x[i] - lse;
  return out;
}

export function argmax(x: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < x.length; i++) if (x[i] > x[best]) best = i; // ties: lowest index, as in both paths
  return best;
}

/** Tokens whose chosen index set differs between the paths. */
export function countFlips(a: number[][] | undefined, b: number[][] | undefined): number {
  if (a === undefined || b === undefined) return 0;
  let flips = 0;
  for (let t = 0; t < a.length; t++) {
    const x = a[t];
    const y = b[t] ?? [];
    if (x.length !== y.length || x.some((v, i) => v !== y[i])) flips++;
  }
  return flips;
}
