/**
 * The weights-first check's throughput (issue 15), in GB/s of packed input, side by side with a memcpy of the same
 * packed bytes timed in the same run:
 *   - per tensor, a routed expert's MXFP4 [2048×4096] and an FP8-block [2048×4096] attention weight, sixteen of
 *     them (64 MiB of MXFP4: past the last-level cache, as a layer's experts are): the fused pass (the device
 *     emulation's rows pulled into the reference's compare, checkExactVsF16Rows) against the pass it replaced
 *     (the device's whole FP16 tensor, then checkExactVsF16); FP8 blocks twice, at DeepSeek-V4's E8M0 scales and at
 *     float32 ones (DeepSeek-V4-Flash-Base's FP8 experts, V3/R1), where every block has a table of its own;
 *   - NVFP4 (ModelOpt) and bitsandbytes NF4 [2048×4096], sixteen each, the same two ways (their own row sources,
 *     nvfp4RowSource and bnb4RowSource: a bitsandbytes row of 4096 holds 64 whole blocks), each weight's scales
 *     formed again on every run, as a check that meets each weight once forms them;
 *   - with --wide, NVFP4 (ModelOpt) and bitsandbytes NF4 checkpoints of FORMAT_LAYERS layers of Llama-3-8B linears
 *     (fixtures/llama_fp4_wide.ts: quantized by the producers' recipes, generated on first use beside the others):
 *     the whole check as a diff runs it, against a read of the same bytes, in alternating pairs as below;
 *   - with --wide, per layer of `deepseek-v4-wide` (2 layers, real widths, generated on first use into
 *     $LAYERDIFF_BENCH_DIR or /tmp/layerdiff-bench like the diff benchmark's): the whole check of the layer as a
 *     diff runs it (reading its 3.55 GB of packed bytes from the page cache, every tensor), against a memcpy pass
 *     over the same bytes from the page cache (reading them into the same warm buffers), in three alternating pairs
 *     (the median ratio, and the lowest), and the 43-layer extrapolation (stated as such: layers of the released
 *     model are these widths).
 *
 *   npm run build:ts && node dist/scripts/bench/weights_check.js [--wide] [--only mxfp4,fp8-block,fp8-f32,nvfp4,bnb4]
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { loadDeviceNative } from '../../device-hip/binding.js';
import { LinearCache } from '../../device-hip/linear.js';
import { NF4_VALUES } from '../../harness/formats/dtypes.js';
import type { LinearWeight } from '../../harness/formats/linear.js';
import { Checkpoint } from '../../harness/io/checkpoint.js';
import { ReadPool, withReadPool } from '../../harness/io/read_pool.js';
import { Rng } from '../../harness/rng.js';
import { checkWeights, quantizedWeights } from '../../harness/weights/check.js';
import { exactOperands } from '../../reference-cpu/dequant.js';
import { checkExactVsF16, checkExactVsF16Rows } from '../../reference-cpu/native.js';
import { timeBlocks } from './gemm.js';
import { rerunAsTheCli } from './as_cli.js';
import { benchDir, dropBenchFromPageCache } from './bench_dir.js';

const O = 2048;
const I = 4096;
const COUNT = 16;

function bytes(r: Rng, n: number, lo = 0, hi = 255): Uint8Array {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = lo + r.int(hi - lo + 1);
  return b;
}

function experts(format: 'mxfp4' | 'fp8-block' | 'fp8-f32'): LinearWeight[] {
  const r = new Rng(format === 'mxfp4' ? 15 : format === 'fp8-block' ? 16 : 19);
  const n = O * I;
  return Array.from({ length: COUNT }, (_, e): LinearWeight => {
    const name = `layers.0.ffn.experts.${e}.w1.weight`;
    if (format === 'mxfp4') {
      return { name, out: O, in: I, format, encoding: 'deepseek-mxfp4', block: [1, 32],
        weight: { name, dtype: 'I8', shape: [O, I / 2], bytes: bytes(r, n / 2) },
        // E8M0 scales as training leaves them (2^-9 … 2^6): no FP16 range loss, every block on the fast path
        scale: { name: name.replace('weight', 'scale'), dtype: 'F8_E8M0', shape: [O, I / 32], bytes: bytes(r, n / 32, 118, 133) } };
    }
    const codes = bytes(r, n);
    for (let i = 0; i < n; i++) if ((codes[i] & 0x7f) === 0x7f) codes[i]--;
    const blocks = (n / 128) / 128;
    // DeepSeek-V4's E8M0 scales (2^-9 … 2^-1), or float32 ones as Flash-Base's FP8 experts and V3 store them (a
    // block's amax / 448: (1 … 2)·2^-13 … 2^-2), each block its own
    const scale = format === 'fp8-block'
      ? { name: name.replace('weight', 'scale'), dtype: 'F8_E8M0' as const, shape: [O / 128, I / 128], bytes: bytes(r, blocks, 118, 126) }
      : { name: `${name}_scale_inv`, dtype: 'F32' as const, shape: [O / 128, I / 128], bytes: new Uint8Array(Float32Array.from({ length: blocks }, () => (1 + r.uniform()) * 2 ** -(2 + r.int(12))).buffer) };
    return { name, out: O, in: I, format: 'fp8-block', encoding: 'fp8-block', block: [128, 128], weight: { name, dtype: 'F8_E4M3', shape: [O, I], bytes: codes }, scale };
  });
}

/** NVFP4 (ModelOpt) and bitsandbytes NF4 weights [O, I], as their producers store them. */
function otherFormats(format: 'nvfp4' | 'bnb4'): LinearWeight[] {
  const r = new Rng(format === 'nvfp4' ? 17 : 18);
  const n = O * I;
  return Array.from({ length: COUNT }, (_, e): LinearWeight => {
    const name = `model.layers.0.mlp.experts.${e}.up_proj.weight`;
    if (format === 'nvfp4') {
      const g = Math.fround(1.5e-4);
      return { name, out: O, in: I, format, encoding: 'modelopt-nvfp4', block: [1, 16],
        weight: { name, dtype: 'U8', shape: [O, I / 2], bytes: bytes(r, n / 2) },
        scale: { name: `${name}_scale`, dtype: 'F8_E4M3', shape: [O, I / 16], bytes: bytes(r, n / 16, 0x20, 0x5f) },
        global: { tensor: { name: `${name}_scale_2`, dtype: 'F32', shape: [], bytes: new Uint8Array(new Float32Array([g]).buffer) }, value: g, op: 'mul' } };
    }
    const nb = n / 64;
    return { name, out: O, in: I, format, encoding: 'bnb-nf4', block: [1, 64], global: null,
      weight: { name, dtype: 'U8', shape: [n / 2, 1], bytes: bytes(r, n / 2) },
      scale: { name: `${name}.absmax`, dtype: 'F32', shape: [nb], bytes: new Uint8Array(Float32Array.from({ length: nb }, () => 0.01 + r.uniform() * 0.05).buffer) },
      bnb: { quantType: 'nf4', blocksize: 64, quantMap: Float32Array.from(NF4_VALUES), namedTable: true, dtype: 'bfloat16', nested: null } };
  });
}

const packedBytes = (lw: LinearWeight) => lw.weight.bytes.length + lw.scale!.bytes.length;

/**
 * The check of every weight of a set: the fused pass (the device's rows from its row source), or the device's whole
 * FP16 tensor, then checkF16. Each must pass: the weights are the device's own.
 */
function checkAll(cache: LinearCache, set: LinearWeight[], fused: boolean): () => void {
  const pool = new ReadPool();
  return () => {
    for (const lw of set) {
      // a copy, so its scales are formed again (exactOperands keeps them per weight object): a check meets each weight
      // once; formed into recycled buffers, as the check forms them (check.ts)
      const mark = pool.mark();
      const e = exactOperands({ ...lw }, (n) => pool.take(n));
      const r = fused
        ? checkExactVsF16Rows(e.kind, e.weight, e.scale, lw.out, lw.in, e.bo, e.bi, cache.rowSource(lw, null))
        : checkExactVsF16(e.kind, e.weight, e.scale, lw.out, lw.in, e.bo, e.bi, cache.dequant(lw, null));
      if (r.firstBad >= 0) throw new Error(`bench: ${lw.name} mismatched`);
      pool.release(mark);
    }
  };
}

/** The memcpy yardstick of a set: its packed bytes (weights and scales) copied in turn into one buffer. */
function copyOf(set: LinearWeight[]): { total: number; copy: () => void } {
  const total = set.reduce((n, lw) => n + packedBytes(lw), 0);
  const dst = new Uint8Array(Math.max(...set.map(packedBytes)));
  const copy = () => {
    for (const lw of set) {
      dst.set(lw.weight.bytes);
      dst.set(lw.scale!.bytes);
    }
  };
  return { total, copy };
}

/** the in-memory formats measured: all, or those `--only a,b` names (a developer's profile of one) */
const FORMATS = ['mxfp4', 'fp8-block', 'fp8-f32', 'nvfp4', 'bnb4'] as const;
const only = process.argv.indexOf('--only');
const IN_MEMORY = only < 0 ? FORMATS : FORMATS.filter((f) => (process.argv[only + 1] ?? '').split(',').includes(f));

export async function benchWeightsCheck(wide: boolean): Promise<Record<string, number>> {
  const cache = new LinearCache(loadDeviceNative());
  const out: Record<string, number> = {};
  console.log(`  ${COUNT} × [${O}×${I}]            packed MiB   fused GB/s  ×memcpy   before GB/s  ×memcpy   memcpy GB/s`);
  for (const format of IN_MEMORY) {
    const set = format === 'nvfp4' || format === 'bnb4' ? otherFormats(format) : experts(format);
    const { total, copy } = copyOf(set);
    const [fMs, bMs, cMs] = await timeBlocks([checkAll(cache, set, true), checkAll(cache, set, false), copy], 3);
    const gbps = (ms: number) => total / (ms * 1e6);
    out[`${format}.fused_gbps`] = gbps(fMs);
    out[`${format}.fused_vs_memcpy`] = cMs / fMs;
    out[`${format}.before_gbps`] = gbps(bMs);
    out[`${format}.before_vs_memcpy`] = cMs / bMs;
    out[`${format}.memcpy_gbps`] = gbps(cMs);
    console.log(`  ${format.padEnd(28)} ${(total / 2 ** 20).toFixed(1).padStart(8)}   ${gbps(fMs).toFixed(2).padStart(9)}   ${(cMs / fMs).toFixed(3).padStart(6)}   ${gbps(bMs).toFixed(2).padStart(10)}   ${(cMs / bMs).toFixed(3).padStart(6)}   ${gbps(cMs).toFixed(2).padStart(10)}`);
  }
  if (wide) {
    // The checks of whole checkpoints measure against a warm page cache, each warming its own files first (below).
    // The bench folder's other files are dropped from the page cache, as the generation section does
    // (bench_dir.ts): after a whole run, ~20 GB of the generation and gpt-oss fixtures sat on the active list of this
    // 24 GB host, the 1.7 GB inactive list could not hold a 3.55 GB layer between its reads, and the layer's check
    // (0.32–0.35 s) and the read it is measured against ran partly from a page cache in turnover (round 39).
    console.log(`  (the bench folder's files dropped from the page cache: ${(dropBenchFromPageCache() / 1e9).toFixed(1)} GB)`);
    Object.assign(out, await wideLayers(), await wideFormats());
  }
  return out;
}

const PAIRS = 3;

/** The tensors a check of these weights reads: each weight and every tensor of its module (scales, global scales, bitsandbytes' tables). */
function readSet(ck: Checkpoint, names: string[]): string[] {
  const all = ck.names();
  return [...names, ...names.flatMap((n) => all.filter((m) => m.startsWith(n.replace(/\.weight(_packed)?$/, '.')) && m !== n))];
}

/**
 * `check` (a whole check of `tensors`' weights, returning how many it checked) against a read of the same bytes from
 * the page cache (the kernel's memcpy) into the same warm buffers, in PAIRS alternating pairs, each ratio taken
 * within its pair: this VM's memory speed moves by 1.5× within minutes, so one check against one read measured the
 * day more than the check. → the median pair's check time and ratio, and the lowest ratio.
 */
function againstRead(ck: Checkpoint, tensors: string[], label: string, check: () => number): { checkMs: number; ratio: number; min: number; max: number } {
  const total = tensors.reduce((n, t) => n + ck.info(t).end - ck.info(t).begin, 0);
  // (a pread into one of the pool's warm buffers: a read in a pool's scope would map a large tensor instead, and a
  // reserved one would be a fresh anonymous mapping)
  const pool = new ReadPool();
  const fds = new Map<string, number>();
  const copy = () => {
    for (const t of tensors) {
      const info = ck.info(t);
      const fd = fds.get(info.file) ?? fds.set(info.file, fs.openSync(info.file, 'r')).get(info.file)!;
      withReadPool(pool, () => {
        const buf = pool.take(info.end - info.begin);
        if (fs.readSync(fd, buf, 0, buf.length, info.begin) !== buf.length) throw new Error(`bench: short read of ${t}`);
      });
    }
  };
  const checks: number[] = [], ratios: number[] = [];
  try {
    // warm the page cache once, so both passes read from memory (the diff's read-ahead does the same for the next layer)
    copy();
    for (let p = 0; p < PAIRS; p++) {
      const t0 = performance.now();
      const checked = check();
      const checkMs = performance.now() - t0;
      // the yardstick: the same bytes copied from the page cache into the same warm buffers (a read is the kernel's
      // memcpy; a copy between two of our buffers would run from the cache, each tensor having just been read)
      const r0 = performance.now();
      copy();
      const copyMs = performance.now() - r0;
      checks.push(checkMs);
      ratios.push(copyMs / checkMs);
      console.log(`  ${label}, pair ${p + 1}/${PAIRS}: ${checked} tensors, ${(total / 1e9).toFixed(2)} GB packed: check ${(checkMs / 1000).toFixed(2)} s = ${(total / (checkMs * 1e6)).toFixed(2)} GB/s, a read of the same bytes from the page cache (the kernel's memcpy) ${(total / (copyMs * 1e6)).toFixed(2)} GB/s → ${(copyMs / checkMs).toFixed(3)}× that memcpy`);
    }
  } finally {
    for (const fd of fds.values()) fs.closeSync(fd);
  }
  // the median pair: its ratio, and its check time beside it (both from one pair)
  const mid = ratios.map((r, i) => [r, i]).sort((a, b) => a[0] - b[0])[Math.floor(PAIRS / 2)][1];
  const r = { checkMs: checks[mid], ratio: ratios[mid], min: Math.min(...ratios), max: Math.max(...ratios) };
  console.log(`  ${label}: the median of ${PAIRS} pairs: check ${(r.checkMs / 1000).toFixed(2)} s, ${r.ratio.toFixed(3)}× memcpy (pairs ${r.min.toFixed(3)}–${r.max.toFixed(3)})`);
  return r;
}

/** The check of each layer of deepseek-v4-wide as a diff runs it, against a memcpy pass over the same bytes. */
async function wideLayers(): Promise<Record<string, number>> {
  const base = benchDir();
  const dir = path.join(base, 'deepseek-v4-wide-2');
  if (!fs.existsSync(path.join(dir, 'config.json'))) {
    const { writeDeepseekV4Wide } = await import('../../fixtures/deepseek_v4_wide.js');
    console.log(`generating ${dir} (2 layers, real widths)…`);
    writeDeepseekV4Wide(dir, { layers: 2 });
  }
  const ck = Checkpoint.open(dir);
  const native = loadDeviceNative();
  const out: Record<string, number> = {};
  const numLayers = Number(ck.config.num_hidden_layers);
  const perLayer: number[] = [];
  for (let L = 0; L < numLayers; L++) {
    const names = quantizedWeights(ck).filter((t) => t.layer === L).map((t) => t.name);
    const layer = { layers: { from: L, to: L }, faults: null, numLayers };
    // one unmeasured check first on layer 0: the process's first touch of the check's own buffers is not the check's
    if (L === 0) checkWeights(ck, native, layer);
    const r = againstRead(ck, readSet(ck, names), `deepseek-v4-wide layer ${L}`, () => {
      const w = checkWeights(ck, native, layer);
      if (w.exact !== w.checked) throw new Error(`bench: layer ${L} has mismatched weights`);
      return w.checked;
    });
    perLayer.push(r.checkMs);
    out[`wide.layer${L}.check_s`] = r.checkMs / 1000;
    out[`wide.layer${L}.check_vs_memcpy`] = r.ratio;
    out[`wide.layer${L}.check_vs_memcpy_min`] = r.min;
  }
  const mean = perLayer.reduce((a, b) => a + b, 0) / perLayer.length;
  out['wide.check_43_layers_extrapolated_s'] = (43 * mean) / 1000;
  console.log(`  extrapolated to the released model's 43 layers (the mean layer × 43, not measured): ${((43 * mean) / 1000).toFixed(0)} s of weights check`);
  ck.close();
  return out;
}

/** NVFP4 (ModelOpt) and bitsandbytes NF4 checkpoints at Llama-3-8B widths: their whole check against a read of their bytes. */
const FORMAT_LAYERS = 6;
async function wideFormats(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  const native = loadDeviceNative();
  for (const format of ['modelopt-nvfp4', 'bnb-nf4'] as const) {
    const dir = path.join(benchDir(), `llama-8b-width-${format}-${FORMAT_LAYERS}`);
    if (!fs.existsSync(path.join(dir, 'config.json'))) {
      const { writeLlamaFp4Wide } = await import('../../fixtures/llama_fp4_wide.js');
      console.log(`generating ${dir} (${FORMAT_LAYERS} layers of Llama-3-8B linears, quantized by the producer's recipe)…`);
      writeLlamaFp4Wide(dir, format, FORMAT_LAYERS);
    }
    const ck = Checkpoint.open(dir);
    try {
      const all = { layers: null, faults: null };
      checkWeights(ck, native, all);  // unmeasured: the first touch of the check's own buffers
      const r = againstRead(ck, readSet(ck, quantizedWeights(ck).map((t) => t.name)), `${format} at Llama-3-8B widths, ${FORMAT_LAYERS} layers`, () => {
        const w = checkWeights(ck, native, all);
        if (w.exact !== w.checked) throw new Error(`bench: ${format} has mismatched weights`);
        return w.checked;
      });
      out[`${format}.checkpoint.check_s`] = r.checkMs / 1000;
      out[`${format}.checkpoint.check_vs_memcpy`] = r.ratio;
      out[`${format}.checkpoint.check_vs_memcpy_min`] = r.min;
    } finally {
      ck.close();
    }
  }
  return out;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href && !rerunAsTheCli()) {
  benchWeightsCheck(process.argv.includes('--wide')).catch((e: unknown) => {
    console.error(e);
    process.exitCode = 1;
  });
}
