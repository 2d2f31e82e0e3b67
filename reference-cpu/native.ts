/**
 * The reference path's one native op: y[m, n] = x[m, k]·W[n, k]ᵀ in FP32 (addon `ld_reference`, C++ in
 * reference-cpu/native/gemm_f32.cc, built by `npm run build:native`). The accumulation order is documented
 * there; everything else on the reference path is plain TypeScript.
 */
import { loadAddon } from '../harness/io/addon.js';

export interface ReferenceNativeInfo {
  /** kernel level; all give the same bits (same accumulation order) */
  simd: 'avx512' | 'avx2' | 'scalar';
  openmpThreads: number;
}

interface ReferenceAddon {
  gemmF32(x: Float32Array, w: Float32Array, m: number, k: number, n: number): Float32Array;
  info(): ReferenceNativeInfo;
  setSimd(mode: 'auto' | 'avx2' | 'scalar'): ReferenceNativeInfo['simd'];
}

let addon: ReferenceAddon | undefined;
function native(): ReferenceAddon {
  addon ??= loadAddon('ld_reference') as ReferenceAddon;
  return addon;
}

function dim(name: string, v: number): void {
  if (typeof v !== 'number') throw new TypeError(`gemmF32: ${name} must be a number, got ${typeof v}`);
  if (!Number.isInteger(v) || v < 1 || v > 0x7fffffff) throw new RangeError(`gemmF32: ${name} must be a positive integer, got ${v}`);
}

/** y = x·Wᵀ: x [m, k], W [n, k] (row-major, PyTorch Linear layout) → y [m, n], FP32 FMA accumulation. */
export function gemmF32(x: Float32Array, w: Float32Array, m: number, k: number, n: number): Float32Array {
  dim('m', m);
  dim('k', k);
  dim('n', n);
  if (!(x instanceof Float32Array)) throw new TypeError('gemmF32: x must be a Float32Array');
  if (!(w instanceof Float32Array)) throw new TypeError('gemmF32: w must be a Float32Array');
  if (x.length !== m * k) throw new RangeError(`gemmF32: x has ${x.length} elements, expected m×k [${m}×${k}] = ${m * k}`);
  if (w.length !== n * k) throw new RangeError(`gemmF32: w has ${w.length} elements, expected n×k [${n}×${k}] = ${n * k}`);
  return native().gemmF32(x, w, m, k, n);
}

/** Which kernel runs and on how many threads (for reports and benchmarks). */
export function referenceNativeInfo(): ReferenceNativeInfo {
  return native().info();
}

/** Test hook: force a kernel level ('avx2', 'scalar': same bits as the best), 'auto' restores the best. */
export function setReferenceSimd(mode: 'auto' | 'avx2' | 'scalar'): ReferenceNativeInfo['simd'] {
  return native().setSimd(mode);
}
