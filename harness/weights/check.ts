/**
 * Weights first (issue 6): before any activation runs, compare every quantized weight as the device path
 * dequantizes it (native dequantToF16, with the run's fault plan — exactly what the device GEMMs read)
 * against the reference's exact dequantization rounded once to FP16. For a correct device the two are
 * bit-identical (E2M1/E4M3 × E8M0 is exact in FP32, so the one rounding is the FP16 one), so any difference
 * at all is a decode bug, found before a single activation could blur it.
 *
 * When they differ, each catalog reading of the stored bytes (weights/decode.ts) is tried; the one that
 * reproduces the device's FP16 weights exactly names the bug. Also counted per tensor: NaN codes (E8M0
 * 0xFF, E4M3 0x7F/0xFF — bad input), and blocks whose exact values overflow FP16 (|w| ≥ 65520 → Inf) or
 * underflow it (a non-zero weight that becomes ±0): those are properties of the checkpoint that an FP16
 * device path cannot represent, bug or not.
 *
 * Memory: one tensor at a time, in layer order — its stored bytes, then dropped. With the emulation the
 * compare is one fused native pass: the device's rows come from its row source into a small buffer per thread
 * and the reference decodes row by row beside them, so neither an FP16 nor an FP32 copy of the tensor exists
 * (the device's FP16 tensor is made only to show a mismatch's evidence, or for the hip backend). Routed experts are checked one by one like any other tensor.
 */
import { InputError } from '../errors.js';
import { f16ToF32, f32ToF16Bits } from '../formats/dtypes.js';
import { type LinearWeight, loadLinear, moduleOf, parseQuantConfig, recognise, storedLogicalShape } from '../formats/linear.js';
import { type FormatId, FORMATS, type LinearFormat } from '../formats/registry.js';
import type { Checkpoint } from '../io/checkpoint.js';
import type { DeferredRead } from '../io/safetensors.js';
import { readAheadWait } from '../io/prefetch.js';
import { drawFromReadPool, sharedReadPool, withReadPool } from '../io/read_pool.js';
import { batchPool, FusedBatches } from './batches.js';
import { dequantRowsExact, exactOperands } from '../../reference-cpu/dequant.js';
import { checkExactVsF16, checkExactVsF16Rows, checkExactVsF16RowsReading, type ExactVsF16, type ExactVsF16Read, nanCodeCount, type RowsReadingJob } from '../../reference-cpu/native.js';
import type { DeviceNative, DeviceRowSource } from '../../device-hip/binding.js';
import { faultAt, type FaultPlan } from '../faults/plan.js';
import { LinearCache } from '../../device-hip/linear.js';
import { applies, READINGS, reproduces, scaleGrid, WEIGHT_CAUSES, type WeightCause } from './decode.js';

export interface TensorCheck {
  /** checkpoint name of the weight */
  name: string;
  layer: number;
  format: Exclude<LinearFormat, 'plain'>;
  /** the registry entry (producer's stored form) it was recognised as */
  encoding: FormatId;
  /** logical [out, in] */
  shape: [number, number];
  scale: { name: string; dtype: string; grid: [number, number] };
  /** scale blocks (grid rows × columns) */
  blocks: number;
  /** every FP16 device weight equals the reference's */
  exact: boolean;
  /** blocks with at least one differing weight */
  bad_blocks: number;
  /** the first of them, [row, column] in the scale grid */
  first_bad_block: [number, number] | null;
  /** max |w_device − w_reference| over the FP16 values (Infinity when the device has Inf/NaN there) */
  max_abs: number;
  /** NaN encodings in the stored bytes, and which tensor holds them */
  nan_codes: number;
  nan_in: 'weight' | 'scale' | null;
  /** blocks holding an exact value that rounds to ±Inf in FP16 */
  overflow_blocks: number;
  /** blocks holding a non-zero exact value that rounds to ±0 in FP16 */
  underflow_blocks: number;
  /** Inf/NaN among the device's FP16 weights */
  device_nonfinite: number;
  /** catalog readings that reproduce the device's FP16 weights bit for bit (only tried when not exact) */
  matches: WeightCause[];
  /** the first differing weight, for the evidence line */
  example: WeightExample | null;
}

export interface WeightExample {
  at: [number, number];
  block: [number, number];
  /** the E8M0 byte of that block (row-major), null for F32 scales */
  scale_byte: number | null;
  reference: number;
  device: number;
}

export interface WeightsReport {
  /** layers covered, inclusive */
  layers: [number, number];
  checked: number;
  exact: number;
  mismatched: number;
  nan_codes: number;
  overflow_blocks: number;
  underflow_blocks: number;
  /** per stored format (registry id): tensors, scale blocks, and the blocks whose FP16 dequantization over- or underflows */
  by_format: Partial<Record<FormatId, { tensors: number; blocks: number; overflow_blocks: number; underflow_blocks: number }>>;
  /** present when this is a stored passed check reused (harness/weights/reuse.ts): when it ran, by which tool, for which fingerprint */
  reused?: { at: string; tool: string; fingerprint: string; file: string };
  /** quantized tensors outside the decoder layers (e.g. DeepSeek's mtp.*), which the forward pass never reads */
  skipped: number;
  time_ms: number;
  tensors: TensorCheck[];
}

const LAYER_OF = /(?:^|\.)layers\.(\d+)\./;

export function layerOf(name: string): number | null {
  const m = LAYER_OF.exec(name);
  return m === null ? null : Number(m[1]);
}

/**
 * Quantized weights of the checkpoint, recognised through the format registry by what is stored (DESIGN §3):
 * a weight tensor under a quantized entry's suffix and dtype with one of its scale tensors beside it. In
 * layer order, then by name. Names are the stored weight tensors (`.weight`, or `.weight_packed`).
 */
export function quantizedWeights(ck: Checkpoint): Array<{ name: string; layer: number | null }> {
  // once per open checkpoint (its tensors do not change while open; a diff checks layer by layer)
  let known = quantized.get(ck);
  if (known === undefined) quantized.set(ck, (known = findQuantized(ck)));
  return known.map((t) => ({ ...t }));
}

const quantized = new WeakMap<Checkpoint, Array<{ name: string; layer: number | null }>>();

function findQuantized(ck: Checkpoint): Array<{ name: string; layer: number | null }> {
  const out: Array<{ name: string; layer: number | null }> = [];
  for (const name of ck.names()) {
    const dtype = ck.info(name).dtype;
    const fits = FORMATS.some((f) => {
      if (f.scale === null || !name.endsWith('.' + f.weight.suffix) || !f.weight.dtypes.includes(dtype)) return false;
      const module = name.slice(0, -(f.weight.suffix.length + 1));
      return f.scale.suffixes.some((x) => ck.has(`${module}.${x}`)) && (f.marker === undefined || ck.has(`${module}.${f.marker}`));
    });
    if (fits) out.push({ name, layer: layerOf(name) });
  }
  return out.sort((a, b) => (a.layer ?? Infinity) - (b.layer ?? Infinity) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

export interface CheckOptions {
  /** inclusive layer range; null = every layer */
  layers: { from: number; to: number } | null;
  faults: FaultPlan | null;
  /** the model's decoder layers: tensors indexed past them (a V3-style MTP layer) are not in the forward pass */
  numLayers?: number;
  onTensor?: (name: string, done: number, total: number) => void;
  /** the model's fused linears per layer (ModelDef.fusedLinears: gpt-oss experts), checked after the layer's others */
  fused?: (L: number) => LinearWeight[];
}

export function checkWeights(ck: Checkpoint, native: DeviceNative, opt: CheckOptions): WeightsReport {
  const t0 = performance.now();
  const qc = parseQuantConfig(ck.config, ck.configFile);
  const all = quantizedWeights(ck);
  const inRange = (L: number) => (opt.layers === null || (L >= opt.layers.from && L <= opt.layers.to)) && L < (opt.numLayers ?? Infinity);
  const todo = all.filter((t) => t.layer !== null && inRange(t.layer));
  const cache = new LinearCache(native);
  const tensors: TensorCheck[] = [];
  // Read-ahead: entering layer L, queue the next layer this check enters (none past the range asked for), so reading
  // overlaps the compare, and wait for layer L's own (queued on entering the layer before, or now). Read-ahead reads
  // what the page cache lacks as 2 MiB folios (file_io.cc), which the fused pass compares where they lie
  // (check_f16.cc); reads of the layer's own before it finished (each expert's scale, pread, and the kernel's
  // read-ahead around it) would bring in 4 KiB folios in the extents the scales share with the weights, and those
  // rows are then copied. On a cold page cache the wait is the disk's time the check would spend reading anyway; on
  // a warm one the read-ahead only asks cachestat (well under 1 ms a wide layer) and has long finished.
  const byLayer = new Map<number, string[]>();
  for (const n of ck.names()) {
    const L = layerOf(n);
    if (L === null) continue;
    const names = byLayer.get(L);
    if (names === undefined) byLayer.set(L, [n]);
    else names.push(n);
  }
  let ahead = -1;
  let queued = { layer: -1, mark: 0 };  // the layer read ahead last, and its mark
  const enter = (L: number, next: number | null) => {
    if (L <= ahead) return;
    const own = queued.layer === L ? queued.mark : ck.prefetchTensors(byLayer.get(L) ?? []);
    queued = next === null ? { layer: -1, mark: 0 } : { layer: next, mark: ck.prefetchTensors(byLayer.get(next) ?? []) };
    readAheadWait(own);
    ahead = L;
  };
  // the layer the check enters after each one it enters (todo is in layer order)
  const nextLayer = new Map<number, number | null>();
  for (let k = todo.length - 1, after: number | null = null; k >= 0; k--) {
    const L = todo[k].layer!;
    if (!nextLayer.has(L)) nextLayer.set(L, after);
    after = L;
  }
  // Reads into buffers recycled from earlier tensors' (nothing read outlives its check): the process's pool, so the
  // diff's layers then read into the same warm buffers, and a second one for the batch in flight (batches.ts).
  const pool = sharedReadPool();
  const batches = new FusedBatches([pool, batchPool()], finishFused);
  try {
    for (const [k, t] of todo.entries()) {
      enter(t.layer!, nextLayer.get(t.layer!) ?? null);
      opt.onTensor?.(t.name, k, todo.length);
      batches.add((group) => {
        const { lw, pending } = drawFromReadPool(group, () => loadForCheck(ck, t.name, qc));
        // NVFP4's and bitsandbytes' formed scales from the batch's recycled buffers too: they live as its reads do
        return prepareTensor(lw, t.layer!, cache, faultAt(opt.faults, t.layer!), pending, (n) => group.take(n));
      });
    }
  } catch (e) {
    batches.drain();  // an earlier tensor's own failure comes first, as it would have one tensor at a time
    throw e;
  }
  tensors.push(...batches.drain());
  // the buffers kept for the next reservations (read_pool.ts): nothing after the check reserves any
  for (const p of [pool, batchPool()]) p.dropReserved();
  const layers = todo.map((t) => t.layer!);
  const fused = opt.fused;
  if (fused !== undefined) {
    const last = Math.min(opt.numLayers ?? 0, opt.layers === null ? Infinity : opt.layers.to + 1);
    ahead = -1;
    for (let L = opt.layers?.from ?? 0; L < last; L++) {
      enter(L, L + 1 < last ? L + 1 : null);
      withReadPool(pool, () => {
        for (const lw of fused(L)) {
          opt.onTensor?.(lw.name, tensors.length, tensors.length + 1);
          tensors.push(checkTensor(lw, L, cache, faultAt(opt.faults, L)));
          layers.push(L);
        }
      });
    }
  }
  const sum = (f: (x: TensorCheck) => number) => tensors.reduce((n, x) => n + f(x), 0);
  const byFormat: WeightsReport['by_format'] = {};
  for (const t of tensors) {
    const b = (byFormat[t.encoding] ??= { tensors: 0, blocks: 0, overflow_blocks: 0, underflow_blocks: 0 });
    b.tensors++;
    b.blocks += t.blocks;
    b.overflow_blocks += t.overflow_blocks;
    b.underflow_blocks += t.underflow_blocks;
  }
  return {
    by_format: byFormat,
    layers: layers.length > 0 ? [Math.min(...layers), Math.max(...layers)] : [opt.layers?.from ?? 0, opt.layers?.to ?? 0],
    checked: tensors.length,
    exact: tensors.filter((x) => x.exact).length,
    mismatched: tensors.filter((x) => !x.exact && x.nan_codes === 0).length,
    nan_codes: sum((x) => x.nan_codes),
    overflow_blocks: sum((x) => x.overflow_blocks),
    underflow_blocks: sum((x) => x.underflow_blocks),
    skipped: all.filter((t) => t.layer === null || t.layer >= (opt.numLayers ?? Infinity)).length,
    time_ms: performance.now() - t0,
    tensors,
  };
}

/** The formats whose stored rows are whole bytes of the file, row after row: the fused pass reads them itself. */
const READ_BY_THE_PASS = new Set(['mxfp4', 'fp8-block', 'nvfp4', 'bnb4']);

/**
 * One quantized weight for the check. An MXFP4, NVFP4, FP8-block or bitsandbytes weight's bytes are left unread
 * (pending), for the fused pass to read as it compares them (checkTensor); its scales are read here. Any other
 * weight is read whole, and so is a bitsandbytes one whose blocks straddle rows (its rows do not start on a byte
 * boundary, and it has no row source: checkF16 counts it over the flattened weight).
 */
function loadForCheck(ck: Checkpoint, stored: string, qc: ReturnType<typeof parseQuantConfig>): { lw: LinearWeight; pending: DeferredRead | null } {
  const name = `${moduleOf(stored)}.weight`;
  const shape = storedLogicalShape(ck, stored);
  const family = recognise(ck, moduleOf(stored)).entry.family;
  if (!READ_BY_THE_PASS.has(family)) return { lw: loadLinear(ck, name, shape, qc), pending: null };
  const plan = loadLinear(ck, name, shape, qc, false);
  // NVFP4's global scale is read by the plan (a scalar); a global scale in any other family is not a layout the pass knows
  const rowsOfBytes = family !== 'bnb4' || (plan.in % plan.block[1] === 0 && plan.block[1] % 2 === 0);
  if (plan.scale === null || (plan.global !== null && family !== 'nvfp4') || !rowsOfBytes) return { lw: loadLinear(ck, name, shape, qc), pending: null };
  const pending = ck.reserve(plan.weight.name);
  const scale = { ...plan.scale, bytes: ck.read(plan.scale.name), file: ck.info(plan.scale.name).file };
  return { lw: { ...plan, weight: { ...plan.weight, bytes: pending.bytes, file: ck.info(plan.weight.name).file }, scale }, pending };
}

/** NaN encodings: E8M0 0xFF, E4M3 0x7F/0xFF (NVFP4) and NaN F32 scales in the scale, E4M3 0x7F/0xFF in an FP8 weight. */
function nanCodes(lw: LinearWeight, inWeightToo = true): { n: number; where: 'weight' | 'scale' | null } {
  const s = lw.scale!;
  // bitsandbytes' U8 absmax codes have no NaN code (the loader has refused non-finite quant_map and nested values)
  if (lw.format === 'bnb4' && s.dtype === 'U8') return { n: 0, where: null };
  // counted natively (reference-cpu/native/check_f16.cc): a per-byte loop here cost more than the compare
  const inScale = nanCodeCount(s.bytes, s.dtype === 'F32' ? 'f32' : s.dtype === 'F8_E4M3' ? 'e4m3' : 'e8m0');
  const inWeight = lw.format === 'fp8-block' && inWeightToo ? nanCodeCount(lw.weight.bytes, 'e4m3') : 0;
  return { n: inScale + inWeight, where: inScale > 0 ? 'scale' : inWeight > 0 ? 'weight' : null };
}

/** The device's dequantization of one weight (LinearCache in the real run; a stand-in in tests). */
export interface DeviceDequant {
  get(lw: LinearWeight, fault: FaultPlan['fault'] | null): Uint16Array;
  /** the same rows as a row source for the fused pass (the emulation's LinearCache), or null: then get() */
  rowSource?(lw: LinearWeight, fault: FaultPlan['fault'] | null): DeviceRowSource | null;
}

/**
 * `pending`: lw's weight bytes are not read yet (loadForCheck); the fused pass reads them, or they are read here
 * first where it does not run. Either way they are read before anything else looks at them.
 */
export function checkTensor(lw: LinearWeight, layer: number, cache: DeviceDequant, fault: FaultPlan['fault'] | null, pending: DeferredRead | null = null): TensorCheck {
  const p = prepareTensor(lw, layer, cache, fault, pending);
  if (!('job' in p)) return p;
  const j = p.job;
  return finishFused(p, checkExactVsF16RowsReading(j.kind, j.weight, j.scale, j.out, j.inn, j.bo, j.bi, j.source, j.fill));
}

/** A tensor whose compare is left to the fused pass (which reads its weight's bytes as it compares them). */
export interface FusedTensor {
  lw: LinearWeight;
  base: TensorCheck;
  pending: DeferredRead;
  job: RowsReadingJob;
  /** the device's whole FP16 tensor, for a mismatch's evidence (made on demand) */
  device(): Uint16Array;
}

/**
 * A tensor's check up to the fused pass: its report when it needs none (NaN scale codes, a format or device the
 * fused pass does not serve: then compared here), else the fused pass's job, run by checkTensor or by a batch
 * (batches.ts) and completed by finishFused.
 */
export function prepareTensor(lw: LinearWeight, layer: number, cache: DeviceDequant, fault: FaultPlan['fault'] | null, pending: DeferredRead | null = null, alloc?: (bytes: number) => Uint8Array): TensorCheck | FusedTensor {
  const [R, C] = scaleGrid(lw);
  const base: TensorCheck = {
    name: lw.name,
    layer,
    format: lw.format as TensorCheck['format'],
    encoding: lw.encoding ?? (lw.format === 'mxfp4' ? 'deepseek-mxfp4' : lw.format === 'nvfp4' ? 'modelopt-nvfp4' : lw.format === 'bnb4' ? `bnb-${lw.bnb!.quantType}` : 'fp8-block'),
    shape: [lw.out, lw.in],
    scale: { name: lw.scale!.name, dtype: lw.scale!.dtype, grid: [R, C] },
    blocks: R * C,
    exact: true,
    bad_blocks: 0,
    first_bad_block: null,
    max_abs: 0,
    nan_codes: 0,
    nan_in: null,
    overflow_blocks: 0,
    underflow_blocks: 0,
    device_nonfinite: 0,
    matches: [],
    example: null,
  };
  // The device's FP16 tensor is materialised only where it is needed: a device without a row source (or
  // bitsandbytes blocks that straddle rows), and the evidence of a mismatch (the example and the catalog readings).
  let devTensor: Uint16Array | null = null;
  const device = (): Uint16Array => (devTensor ??= cache.get(lw, fault));
  // A pending weight is read by the fused pass, which counts an FP8 weight's NaN codes as it reads; the scale's
  // are counted first, so a NaN scale still stops the check before any compare. Without the fused pass (no row
  // source, a NaN scale, whose report counts the weight's NaN codes too), it is read here first.
  const source = cache.rowSource?.(lw, fault) ?? null;
  const inScale = pending !== null ? nanCodes(lw, false) : null;
  const fused = pending !== null && source !== null && inScale!.n === 0 ? pending : null;
  if (pending !== null && fused === null) pending.fill();
  const nan = fused !== null ? inScale! : nanCodes(lw);
  if (nan.n > 0) return { ...base, exact: false, nan_codes: nan.n, nan_in: nan.where };

  // One native pass (reference-cpu/native/check_f16.cc), row by row: the exact value, its one FP16 rounding
  // by the reference side's rule, and per element:
  //   f16(device) == exact                → fine: an exact E2M1/E4M3 × 2^k value FP16 holds is its own
  //                                         rounding (±0 equal too);
  //   rounding is ±Inf / a non-zero → ±0  → the block overflows / underflows FP16 (a checkpoint property);
  //   device Inf/NaN                      → counted;
  //   same FP16 (bits, ±0, both NaN)      → fine; otherwise the block is bad and |Δ| enters max_abs.
  // With a row source the device's rows are pulled into the pass (fused: no FP16 tensor), otherwise compared
  // from the device's whole FP16 tensor. bitsandbytes' flat blocks are the fused pass's [row, column] grid when
  // each row holds whole blocks; where they straddle rows (no row source), checkF16 counts them over the
  // flattened weight.
  const e = exactOperands(lw, alloc);
  if (fused !== null) {
    const job: RowsReadingJob = { kind: e.kind, weight: e.weight, scale: e.scale, out: lw.out, inn: lw.in, bo: e.bo, bi: e.bi, source, fill: fused };
    return { lw, base, pending: fused, job, device };
  }
  const cmp = source !== null
    ? checkExactVsF16Rows(e.kind, e.weight, e.scale, lw.out, lw.in, e.bo, e.bi, source)
    : checkExactVsF16(e.kind, e.weight, e.scale, lw.out, lw.in, e.bo, e.bi, device());
  return finishCompare(lw, base, cmp, device);
}

/** The fused pass's result made a tensor's report. A tensor that differs has its weight read now, for the evidence. */
export function finishFused(t: FusedTensor, r: ExactVsF16Read | { readError: string }): TensorCheck {
  if ('readError' in r) throw new InputError(`read failed: ${r.readError}`, { file: t.pending.file, tensor: t.lw.weight.name });
  // before anything else in the result: the compare ran over the NaN codes it counted (check_f16.cc)
  if (r.weightNanCodes > 0) return { ...t.base, exact: false, nan_codes: r.weightNanCodes, nan_in: 'weight' };
  // the pass read the bytes into its own chunks, not into the tensor's buffer: the evidence needs them there
  if (r.firstBad >= 0 || r.firstReferenceNonFinite >= 0) t.pending.fill();
  return finishCompare(t.lw, t.base, r, t.device);
}

function finishCompare(lw: LinearWeight, base: TensorCheck, cmp: ExactVsF16, device: () => Uint16Array): TensorCheck {
  const C = base.scale.grid[1];
  // An exact value outside float32 is bad input, named as the reference's decoder names it (InputError).
  if (cmp.firstReferenceNonFinite >= 0) dequantRowsExact(lw, Math.floor(cmp.firstReferenceNonFinite / lw.in), 1);
  const firstBad = cmp.firstBad;
  const out: TensorCheck = {
    ...base,
    exact: firstBad < 0,
    bad_blocks: cmp.badBlocks,
    max_abs: cmp.maxAbs,
    overflow_blocks: cmp.overBlocks,
    underflow_blocks: cmp.underBlocks,
    device_nonfinite: cmp.nonFinite,
  };
  if (firstBad >= 0) {
    const o = Math.floor(firstBad / lw.in);
    const i = firstBad % lw.in;
    const block = blockOf(lw, firstBad);
    out.first_bad_block = block;
    out.example = {
      at: [o, i],
      block,
      scale_byte: lw.scale!.dtype === 'F32' ? null : lw.scale!.bytes[block[0] * C + block[1]],
      reference: f16ToF32(f32ToF16Bits(dequantRowsExact(lw, o, 1)[i])),
      device: f16ToF32(device()[firstBad]),
    };
    out.matches = WEIGHT_CAUSES.filter((c) => applies(c, lw) && reproduces(lw, READINGS[c], device()));
  }
  return out;
}

/** The scale block [row, column] of the grid that flat element k of W belongs to. */
function blockOf(lw: LinearWeight, k: number): [number, number] {
  if (lw.format === 'bnb4') return [0, Math.floor(k / lw.bnb!.blocksize)];
  const o = Math.floor(k / lw.in);
  return [Math.floor(o / lw.block[0]), Math.floor((k - o * lw.in) / lw.block[1])];
}

/** NaN codes in the checkpoint are bad input (DESIGN §6 exit 2): name the tensor that holds them and its file. */
export function assertNoNanCodes(ck: Checkpoint, w: WeightsReport): void {
  const t = w.tensors.find((x) => x.nan_codes > 0);
  if (t === undefined) return;
  const holder = t.nan_in === 'scale' ? t.scale.name : t.name;
  const what =
    t.nan_in === 'scale' ? (t.scale.dtype === 'F32' ? 'NaN F32 scale(s)' : t.scale.dtype === 'F8_E4M3' ? 'E4M3 NaN scale code(s) 0x7F/0xFF' : 'E8M0 NaN code(s) 0xFF') : 'E4M3 NaN code(s) 0x7F/0xFF';
  throw new InputError(`${t.nan_codes} ${what}: ${t.name} cannot be dequantized (a NaN weight is bad input, not something to diff)`, {
    file: `${ck.dir}/${ck.weightMap.get(holder)}`,
    tensor: holder,
  });
}
