/**
 * The error metrics' per-element passes in native code (reference-cpu/native/metrics_f64.cc: float64, every sum in
 * the TypeScript loops' order, exp as V8's Math.exp computes it), or null without the addon: metrics.ts then runs
 * its own loops, which stay the oracle the native passes are tested against bit for bit.
 */
import { loadAddon } from '../io/addon.js';

export interface MetricsNative {
  /** [nanDevice, infDevice, nanReference, infReference, maxRef, maxAbs, maxIdx, sumAbs, sumSq, refSq, devSq, dot, n, mismatched, mismatchNaN, firstMismatch] */
  compareSums(d: Float32Array, r: Float32Array): Float64Array;
  /** [counts per bin..., zero, under, over, nonfinite] for the bins between `edges` */
  errorBins(d: Float32Array, r: Float32Array, edges: Float64Array): Float64Array;
  /** [max, Σ exp(x − max)] over x[offset, offset + length) */
  logSumExp(x: Float32Array, offset: number, length: number): Float64Array;
  /** [Σ p·(lr − ld) over p = exp(lr) > 0, argmax lr, argmax ld], lr = r − lseR and ld = d − lseD over [offset, offset + length) */
  klRow(r: Float32Array, lseR: number, d: Float32Array, lseD: number, offset: number, length: number): Float64Array;
  /** exp of each element (tests hold it to Math.exp) */
  expF64(x: Float64Array): Float64Array;
}

let loaded: MetricsNative | null | undefined;

export function metricsNative(): MetricsNative | null {
  if (loaded === undefined) {
    try {
      const a = loadAddon('ld_reference') as Partial<MetricsNative>;
      loaded = typeof a.compareSums === 'function' && typeof a.errorBins === 'function' && typeof a.logSumExp === 'function' && typeof a.klRow === 'function' ? (a as MetricsNative) : null;
    } catch {
      loaded = null;
    }
  }
  return loaded;
}
