/**
 * The reference path's native ops (addon `ld_reference`, built by `npm run build:native`): y[m, n] =
 * x[m, k]·W[n, k]ᵀ in FP32 (reference-cpu/native/gemm_f32.cc, accumulation order documented there) and the
 * exact dequantization of stored weights (reference-cpu/native/dequant_exact.cc). Everything else on the
 * reference path is plain TypeScript.
 */
import { loadAddon, type SimdLevel } from '../harness/io/addon.js';

export interface ReferenceNativeInfo {
  /** kernel level; all give the same bits (same accumulation order) */
  simd: 'avx512' | 'avx2' | 'scalar';
  /** whether the AVX-512 VBMI kernels run: the CPU has them, the level is avx512, and the last setSimd (LAYERDIFF_SIMD at load) was not 'avx512' */
  vbmi: boolean;
  openmpThreads: number;
}

/**
 * Stored encodings the exact decoder knows: FP8 blocks carry their scale's dtype in the kind; 'e2m1-lut' is
 * NVFP4 with the 256 scales an E4M3 byte can give already formed as float32, followed by each block's stored byte,
 * 'table4-flat-f32' bitsandbytes with its code table and absmax values as float32 (reference-cpu/dequant.ts
 * `exactOperands` forms both by the format's rule).
 */
export type ExactKind = 'mxfp4' | 'fp8-e8m0' | 'fp8-f32' | 'bf16' | 'f16' | 'f32' | 'e2m1-lut' | 'table4-flat-f32';

/** The exact weight against FP16 device weights, by scale block (see reference-cpu/native/check_f16.cc). */
export interface ExactVsF16 {
  /** flat index of the first differing weight, −1 when none */
  firstBad: number;
  /** max |f16(device) − round_f16(exact)| over differing weights (Infinity for Inf/NaN) */
  maxAbs: number;
  /** Inf/NaN device values where the two are not value-equal */
  nonFinite: number;
  /** flat index of the first exact value outside float32 (Inf/NaN: bad input), −1 when none */
  firstReferenceNonFinite: number;
  /**
   * per scale block (row-major grid): 1 where a weight differs / overflows FP16 / underflows to ±0; null when it
   * flags no block (the native pass allocates a flag array only when it sets its first flag)
   */
  bad: Uint8Array | null;
  over: Uint8Array | null;
  under: Uint8Array | null;
  /** how many blocks each of the three flags */
  badBlocks: number;
  overBlocks: number;
  underBlocks: number;
}

/** checkExactVsF16RowsReading's result: with the E4M3 NaN codes among an FP8 weight's bytes, counted as they were read (0 for MXFP4) */
export interface ExactVsF16Read extends ExactVsF16 {
  weightNanCodes: number;
  /** of the weight's bytes, those compared where they lay in the page cache (a mapping) rather than read (pread) */
  mappedBytes: number;
}

/** Where a weight's bytes are in its file, for checkExactVsF16Rows to read them itself (the fused read). */
export interface WeightFill {
  fd: number;
  /** the tensor's first byte in the file */
  offset: number;
}

interface ReferenceAddon {
  gemmF32(x: Float32Array, w: Float32Array, m: number, k: number, n: number): Float32Array;
  linearExact(x: Float32Array, m: number, kind: ExactKind, weight: Uint8Array, scale: Uint8Array, out: number, inn: number, bo: number, bi: number, r0: number, n: number): { y: Float32Array; firstNonFinite: number };
  dequantExact(kind: ExactKind, weight: Uint8Array, scale: Uint8Array, out: number, inn: number, bo: number, bi: number, r0: number, n: number): Float32Array;
  firstNonFinite(w: Float32Array): number;
  bnbAbsmax(dst: Float32Array, nestedQuantMap: Float32Array, codes: Uint8Array, nestedAbsmax: Float32Array, nestedBlocksize: number, offset: number): void;
  checkF16(kind: ExactKind, weight: Uint8Array, scale: Uint8Array, out: number, inn: number, bo: number, bi: number, device: Uint16Array): ExactVsF16;
  checkF16Rows(kind: ExactKind, weight: Uint8Array, scale: Uint8Array, out: number, inn: number, bo: number, bi: number, source: unknown, fast: boolean, fill?: WeightFill): ExactVsF16 | ExactVsF16Read | { readError: string };
  checkF16RowsStart(jobs: unknown[][]): unknown;
  checkF16RowsWait(handle: unknown): Array<ExactVsF16Read | { readError: string }>;
  roundF16(x: Float32Array): Uint16Array;
  fp8PlanarGroups(kind: 'fp8-e8m0' | 'fp8-f32', scales: Uint8Array): Int32Array;
  roundF16Values(x: Float32Array): Float32Array;
  attentionScores(q: Float32Array, t: number, H: number, d: number, kv: Float32Array, first: number, last: number, comp: Float32Array, picks: Int32Array, scale: number): Float64Array;
  attentionOutput(p: Float64Array, kv: Float32Array, first: number, last: number, comp: Float32Array, picks: Int32Array, t: number, H: number, d: number, o: Float32Array): void;
  hcPostMix(F: Float32Array, X: Float32Array, S: number, hc: number, D: number, post: Float64Array, comb: Float64Array): Float32Array;
  hcCollapse(X: Float32Array, S: number, hc: number, D: number, pre: Float64Array): Float32Array;
  nanCodes(bytes: Uint8Array, kind: 'e8m0' | 'e4m3' | 'f32'): number;
  nonFiniteAt(bytes: Uint8Array, kind: 'bf16' | 'f16' | 'f32'): number;
  info(): ReferenceNativeInfo;
  setSimd(mode: SimdLevel): ReferenceNativeInfo['simd'];
}

let addon: ReferenceAddon | undefined;
function native(): ReferenceAddon {
  addon ??= loadAddon('ld_reference') as ReferenceAddon;
  return addon;
}

function dim(name: string, v: number, fn = 'gemmF32'): void {
  if (typeof v !== 'number') throw new TypeError(`${fn}: ${name} must be a number, got ${typeof v}`);
  if (!Number.isInteger(v) || v < 1 || v > 0x7fffffff) throw new RangeError(`${fn}: ${name} must be a positive integer, got ${v}`);
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

/** Test hook: force a kernel level ('avx512' without VBMI, 'avx2', 'scalar': same bits as the best), 'auto' restores the best. */
export function setReferenceSimd(mode: SimdLevel): ReferenceNativeInfo['simd'] {
  return native().setSimd(mode);
}

/**
 * Rows [r0, r0+n) of a stored [out, in] weight decoded exactly to FP32 [n, in]. `weight` and `scale` are the
 * whole stored tensors (scale empty for plain kinds); (bo, bi) is the FP8 scale block.
 */
export function dequantExact(kind: ExactKind, weight: Uint8Array, scale: Uint8Array, out: number, inn: number, bo: number, bi: number, r0: number, n: number): Float32Array {
  for (const [name, v] of [['out', out], ['in', inn], ['bo', bo], ['bi', bi]] as const) dim(name, v, 'dequantExact');
  if (!Number.isInteger(r0) || !Number.isInteger(n) || r0 < 0 || n < 0 || r0 + n > out) throw new RangeError(`dequantExact: rows [${r0}, ${r0 + n}) outside [0, ${out})`);
  return native().dequantExact(kind, weight, scale, out, inn, bo, bi, r0, n);
}

/** The lowest index of a NaN or ±Inf in w, or −1. */
export function firstNonFinite(w: Float32Array): number {
  return native().firstNonFinite(w);
}

/**
 * bitsandbytes' double-quantized absmax of every block (reference-cpu/dequant.ts states the rule):
 * dst[b] = fround(fround(nestedQuantMap[codes[b]] · nestedAbsmax[⌊b/nestedBlocksize⌋]) + offset).
 */
export function bnbAbsmax(dst: Float32Array, nestedQuantMap: Float32Array, codes: Uint8Array, nestedAbsmax: Float32Array, nestedBlocksize: number, offset: number): void {
  native().bnbAbsmax(dst, nestedQuantMap, codes, nestedAbsmax, nestedBlocksize, offset);
}

/**
 * The weights check's compare, fused with the exact decode (no FP32 copy of the tensor): `device` is the
 * device's FP16 weights [out·in]; each exact value is rounded once to FP16 by the reference side's own rule.
 */
export function checkExactVsF16(kind: ExactKind, weight: Uint8Array, scale: Uint8Array, out: number, inn: number, bo: number, bi: number, device: Uint16Array): ExactVsF16 {
  for (const [name, v] of [['out', out], ['in', inn], ['bo', bo], ['bi', bi]] as const) dim(name, v, 'checkF16');
  return native().checkF16(kind, weight, scale, out, inn, bo, bi, device);
}

/**
 * The same compare in one fused pass: the device's FP16 rows come from `source`, the device emulation's row
 * producer (device-hip's dequantRowSource), pulled into a small buffer per thread, so no FP16 or FP32 copy of
 * the tensor exists. `fast` (the default) lets MXFP4 blocks that match bit for bit pass 32 values at a time
 * (check_f16.cc); false compares every element, for the tests that hold both equal.
 */
export function checkExactVsF16Rows(kind: ExactKind, weight: Uint8Array, scale: Uint8Array, out: number, inn: number, bo: number, bi: number, source: unknown, fast = true): ExactVsF16 {
  for (const [name, v] of [['out', out], ['in', inn], ['bo', bo], ['bi', bi]] as const) dim(name, v, 'checkF16Rows');
  return native().checkF16Rows(kind, weight, scale, out, inn, bo, bi, source, fast) as ExactVsF16;
}

/**
 * checkExactVsF16Rows reading the weight's bytes itself (MXFP4, NVFP4, FP8 blocks, and bitsandbytes whose rows hold
 * whole blocks of an even size: the formats whose rows are whole bytes of the file): `weight` is the buffer the tensor
 * would be read into, left unfilled; each thread reads the rows it compares next from `fill` into a chunk buffer
 * of its own, so the bytes come from the page cache once, on every core, and are compared while in cache
 * (check_f16.cc). `weight` is left as it was: a caller that needs the bytes (a tensor that differs) reads them.
 * A read that fails or ends early gives { readError } and no compare result.
 */
export function checkExactVsF16RowsReading(kind: ExactKind, weight: Uint8Array, scale: Uint8Array, out: number, inn: number, bo: number, bi: number, source: unknown, fill: WeightFill): ExactVsF16Read | { readError: string } {
  for (const [name, v] of [['out', out], ['in', inn], ['bo', bo], ['bi', bi]] as const) dim(name, v, 'checkF16Rows');
  return native().checkF16Rows(kind, weight, scale, out, inn, bo, bi, source, true, fill) as ExactVsF16Read | { readError: string };
}

/** One tensor of a background batch: checkExactVsF16RowsReading's arguments. */
export interface RowsReadingJob {
  kind: ExactKind;
  weight: Uint8Array;
  scale: Uint8Array;
  out: number;
  inn: number;
  bo: number;
  bi: number;
  source: unknown;
  fill: WeightFill;
}

/** A batch started by startRowsReading: its results, in order, from waitRowsReading. */
export interface RowsReadingBatch {
  readonly handle: unknown;
  readonly size: number;
}

/**
 * checkExactVsF16RowsReading over a batch of tensors on a background native thread: returns at once, so the
 * caller prepares the next batch while this one runs (check_f16.cc). One parallel pass over every chunk of every
 * tensor of the batch: the threads do not wait for each other at each tensor's end. Arguments are checked here,
 * as checkExactVsF16RowsReading checks them (a bad one throws before anything runs).
 */
export function startRowsReading(jobs: readonly RowsReadingJob[]): RowsReadingBatch {
  for (const j of jobs) for (const [name, v] of [['out', j.out], ['in', j.inn], ['bo', j.bo], ['bi', j.bi]] as const) dim(name, v, 'checkF16Rows');
  const handle = native().checkF16RowsStart(jobs.map((j) => [j.kind, j.weight, j.scale, j.out, j.inn, j.bo, j.bi, j.source, true, j.fill]));
  return { handle, size: jobs.length };
}

/** Block until the batch is done; its results in the order of its jobs (each as checkExactVsF16RowsReading's). */
export function waitRowsReading(batch: RowsReadingBatch): Array<ExactVsF16Read | { readError: string }> {
  return native().checkF16RowsWait(batch.handle);
}

/** NaN encodings among stored bytes: E8M0 0xFF, E4M3 0x7F/0xFF, or little-endian float32 NaNs. */
export function nanCodeCount(bytes: Uint8Array, kind: 'e8m0' | 'e4m3' | 'f32'): number {
  return native().nanCodes(bytes, kind);
}

/** The element index of the first NaN or Inf among little-endian BF16, F16 or F32 values, or -1. */
export function nonFiniteAt(bytes: Uint8Array, kind: 'bf16' | 'f16' | 'f32'): number {
  return native().nonFiniteAt(bytes, kind);
}

/** Per stored FP8 block scale, how many 16-code groups its table's AVX2 form looks up (−1: none, read a value at a time), for tests. */
export function fp8PlanarGroups(kind: 'fp8-e8m0' | 'fp8-f32', scales: Uint8Array): Int32Array {
  return native().fp8PlanarGroups(kind, scales);
}

/** float32 → binary16 bits by the reference side's native rounding (nearest-even), for tests. */
export function roundF16Native(x: Float32Array): Uint16Array {
  return native().roundF16(x);
}

/**
 * Each value rounded to the nearest binary16 and back (roundToF16 of harness/formats/dtypes.ts over the array, a NaN
 * as the canonical quiet NaN): FP16 storage of an activation, natively.
 */
export function roundF16Values(x: Float32Array): Float32Array {
  return native().roundF16Values(x);
}

/**
 * The DeepSeek-V4 reference attention's float64 sums for token t (reference-cpu/native/attention_f64.cc), each in
 * attendWithSinkTs's order: the scores z[h][c] = (q[t,h]·k_c)·scale [H, C] over the candidates (kv rows
 * first..last, then comp rows picks), and, from the softmaxed p [H, C], o[t,h,:] = Σ_c p[h][c]·k_c written into o.
 */
export function attentionScores(q: Float32Array, t: number, H: number, d: number, kv: Float32Array, first: number, last: number, comp: Float32Array, picks: Int32Array, scale: number): Float64Array {
  return native().attentionScores(q, t, H, d, kv, first, last, comp, picks, scale);
}
export function attentionOutput(p: Float64Array, kv: Float32Array, first: number, last: number, comp: Float32Array, picks: Int32Array, t: number, H: number, d: number, o: Float32Array): void {
  native().attentionOutput(p, kv, first, last, comp, picks, t, H, d, o);
}

/** DeepSeek-V4's hyper-connection post mix, hc.ts hcPostTs's float64 sums bit for bit (attention_f64.cc). */
export function hcPostMix(F: Float32Array, X: Float32Array, S: number, hc: number, D: number, post: Float64Array, comb: Float64Array): Float32Array {
  return native().hcPostMix(F, X, S, hc, D, post, comb);
}

/** u = Σ_j pre_j·X_j per token, hc.ts collapseTs's float64 sums bit for bit (attention_f64.cc). */
export function hcCollapse(X: Float32Array, S: number, hc: number, D: number, pre: Float64Array): Float32Array {
  return native().hcCollapse(X, S, hc, D, pre);
}

/**
 * y [m, n] = x [m, in] · W[r0:r0+n]ᵀ with W decoded exactly inside the GEMM, a few rows at a time (no FP32 copy
 * of W): the bits of gemmF32(x, dequantExact(W rows)). firstNonFinite ≥ 0 (flat index in the whole tensor)
 * means a weight decoded to NaN/Inf and y must not be used.
 */
export function linearExact(x: Float32Array, m: number, kind: ExactKind, weight: Uint8Array, scale: Uint8Array, out: number, inn: number, bo: number, bi: number, r0: number, n: number): { y: Float32Array; firstNonFinite: number } {
  for (const [name, v] of [['m', m], ['out', out], ['in', inn], ['bo', bo], ['bi', bi], ['n', n]] as const) dim(name, v, 'linearExact');
  if (!Number.isInteger(r0) || r0 < 0 || r0 + n > out) throw new RangeError(`linearExact: rows [${r0}, ${r0 + n}) outside [0, ${out})`);
  if (!(x instanceof Float32Array) || x.length !== m * inn) throw new RangeError(`linearExact: x must be a Float32Array of m×in = ${m * inn}`);
  return native().linearExact(x, m, kind, weight, scale, out, inn, bo, bi, r0, n);
}
