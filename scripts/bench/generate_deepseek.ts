/**
 * DeepSeek-V4 generation benchmarks on the device path (emulated backend), measured side by side in one run:
 *   - decode tokens/s with the KV cache (DeepseekV4DeviceDecoder: window ring, compressor and indexer states)
 *     against full recompute (DeepseekV4Device over the whole sequence, the path the gate validated) at 64
 *     tokens of context: a step appends one token to a 64-token sequence, recompute runs all 65 again. Both
 *     hold the same FP16 weights (layers kept, head held in F16), so the cache is the only difference. The
 *     same decode with the weights read from the FP16 cache is reported beside it;
 *   - start-up: opening the checkpoint → the first logits of a one-token prompt, weights from the FP16 cache
 *     (digests verified: stat-only once recorded; "first load" hashes the files the manifest vouches for as a
 *     whole, the wide run's in children with an empty digest cache each, in the same alternating rounds) against
 *     dequantizing the checkpoint. DeepSeek-V4 binds routed experts lazily, so start-up reads every layer's
 *     other weights and the head but only the experts that token is routed to (6 of 256 per layer at real
 *     width): start-up means "ready to emit the first token", not "every expert in memory";
 *     and, --wide only, on a new host (an empty digest cache, nothing hashed before), each side with the trust chain
 *     generate runs in the measured time: dequantizing after the checkpoint's SHA-256 fingerprint, against the FP16
 *     cache with the checkpoint checked by its shards' headers and data samples against the record (harness/gate/deferred.ts) and the
 *     cache's BLAKE3 of what the first token reads;
 *   - deepseek-v4-tiny also: the FP32 reference's full recompute (it has no cached decoder), and the cached
 *     decode at LONG_CONTEXT tokens, where the ratio-4 layers' indexer ranks LONG_CONTEXT/4 entries per step;
 * tiny: deepseek-v4-tiny in process, medians of several runs after a warm-up.
 * --wide: `layerdiff fixture deepseek-v4-wide` with 4 layers (compress ratios 0, 0, 4, 128: sliding window
 *   only, CSA with the indexer, HCA) and 32 of the 256 routed experts per layer, every matrix at real width
 *   (hidden 4096, 64 × 512 heads, vocab 129,280). All 256 experts would make the FP16 cache ~12.3 GB per layer
 *   and a 64-token decode touch ~200 of them per layer, beyond a 2-core 24 GB machine with ~70 GB of disk.
 *   With 32, the 65-token recompute touches all 32 per layer (at 256 it would dequantize ~6× more experts), so
 *   the KV cache's ratio here understates the real one. Layers are kept in memory (as generate does below
 *   2 GiB; for this 4.2 GB checkpoint generate would re-read them every step).
 *   Written under $LAYERDIFF_BENCH_DIR (or /tmp/layerdiff-bench): checkpoint ~4.2 GB, FP16 cache ~9.1 GB.
 *   Each measurement runs in a fresh child process (peak RSS reported) with the page cache warm: start-up runs
 *   STARTUP_ROUNDS rounds alternating the sides, the first round a warm-up; each ratio is the median of the other
 *   rounds' ratios, each taken within its round (their range and the ratio of the sides' medians beside it), and each
 *   side's median time counts (with its range). Before it, the bench's files are dropped from the page cache
 *   (bench_dir.ts: the host a standalone run finds, not one the earlier sections filled). On this VM a process's fresh memory costs 0.3–8 GB/s on first touch depending on how long
 *   ago the memory was freed, so the dequantizing side (which writes ~3 GB of FP16) varies 0.85–1.9 s, round 18.
 *
 *   npm run build:ts && node dist/scripts/bench/generate_deepseek.js [--wide]
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { type DeepseekNative, type DeviceNative, loadDeepseekNative, loadDeviceNative } from '../../device-hip/binding.js';
import { DeepseekV4Device } from '../../device-hip/deepseek_v4.js';
import { DeepseekV4DeviceDecoder, withHeldHead } from '../../device-hip/deepseek_v4_decode.js';
import { deferredFingerprint, type RecordedModel } from '../../harness/gate/deferred.js';
import { checkpointFingerprint, openCheckpointFingerprint } from '../../harness/gate/fingerprint.js';
import type { Decoder } from '../../harness/contracts/decoder.js';
import { loadDeepseekV4Fp16Cache, writeDeepseekV4Fp16Cache } from '../../harness/generate/fp16cache_deepseek_v4.js';
import { RecomputeDecoder } from '../../harness/generate/recompute.js';
import { Checkpoint } from '../../harness/io/checkpoint.js';
import { DeepseekV4Checkpoint, type DeepseekV4Weights } from '../../harness/models/deepseek_v4.js';
import { packageRoot } from '../../harness/version.js';
import { DeepseekV4Reference } from '../../reference-cpu/deepseek_v4.js';
import { asTheCliRuns, rerunAsTheCli } from './as_cli.js';
import { peakRssMiB } from './peak_rss.js';
import { cachedStepMs, context, CONTEXT, decodeRates, timeMs } from './generate.js';
import { benchDir, dropBenchFromPageCache } from './bench_dir.js';
import { median } from './median.js';

type Source = 'dequant' | 'cache';

/** Full recompute over the device path, holding the same weights as the cached decoder. */
function recomputeDecoder(w: DeepseekV4Weights, N: DeviceNative, K: DeepseekNative): Decoder {
  const held = withHeldHead(w, N);
  return new RecomputeDecoder({ numLayers: w.cfg.layers, vocab: w.cfg.vocab, loadLayer: (L) => held.loadLayer(L) }, new DeepseekV4Device(held, N, null, K));
}

/** The weights of `source` for an open checkpoint (the cache must be current: the bench wrote it). */
async function weightsOf(source: Source, m: DeepseekV4Checkpoint, cacheDir: string, fingerprint: string, racyMs?: number): Promise<{ w: DeepseekV4Weights; close(): void }> {
  if (source === 'dequant') return { w: m, close: () => undefined };
  const c = await loadDeepseekV4Fp16Cache(cacheDir, m, fingerprint, racyMs === undefined ? {} : { racyMs });
  if (!c.ok) throw new Error(`the FP16 cache ${cacheDir} is not usable: ${c.why}`);
  return { w: c.weights, close: () => c.weights.close() };
}

/** Open → first logits of a one-token prompt (the fingerprint is computed before, as generate does for its record check). */
async function startupMs(model: string, source: Source, cacheDir: string, fingerprint: string, N: DeviceNative, K: DeepseekNative, racyMs?: number): Promise<number> {
  const t0 = performance.now();
  const ck = Checkpoint.open(model);
  try {
    const m = new DeepseekV4Checkpoint(ck);
    const src = await weightsOf(source, m, cacheDir, fingerprint, racyMs);
    new DeepseekV4DeviceDecoder(src.w, N, K).prefill([[11]], 2);
    src.close();
    return performance.now() - t0;
  } finally {
    ck.close();
  }
}

/**
 * Open → first logits on a host that has hashed nothing before (an empty digest cache), the trust chain included as
 * `generate` runs it on each side: dequantizing, the checkpoint's SHA-256 fingerprint (every shard, on every core),
 * which the record check needs; from the FP16 cache, the fingerprint made from the record's digests and the shards'
 * headers (harness/gate/deferred.ts: the cache path reads no shard data) and the cache's BLAKE3 of what it reads.
 * `recorded` is the record's model section (its files' digests, headers and data samples, as `gate` writes them).
 */
async function newHostStartupMs(model: string, source: Source, cacheDir: string, recorded: RecordedModel, N: DeviceNative, K: DeepseekNative): Promise<number> {
  const t0 = performance.now();
  const ck = Checkpoint.open(model);
  try {
    const fp = source === 'dequant' ? await openCheckpointFingerprint(ck) : deferredFingerprint(ck, recorded);
    if (fp === null || fp.value !== recorded.fingerprint) throw new Error('the fingerprint made from the record is not the record\'s');
    const src = await weightsOf(source, new DeepseekV4Checkpoint(ck), cacheDir, fp.value);
    new DeepseekV4DeviceDecoder(src.w, N, K).prefill([[11]], 2);
    src.close();
    return performance.now() - t0;
  } finally {
    ck.close();
  }
}

const rate = (ms: number) => 1000 / ms;
const STARTUP_ROUNDS = 10; // 9 counted: an odd count, whose median is its middle round's
const LONG_CONTEXT = 400;

async function benchTiny(out: Record<string, number>): Promise<void> {
  const model = path.join(packageRoot(), 'fixtures', 'deepseek-v4-tiny');
  const N = loadDeviceNative();
  const K = loadDeepseekNative();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-bench-ds-'));
  const saved = process.env.LAYERDIFF_CACHE_DIR;
  process.env.LAYERDIFF_CACHE_DIR = path.join(tmp, 'digests');
  const ck = Checkpoint.open(model);
  try {
    const m = new DeepseekV4Checkpoint(ck);
    const V = m.cfg.vocab;
    const fp = (await checkpointFingerprint(ck.dir, ck.shardFiles)).value;
    const cacheDir = path.join(tmp, 'fp16');
    await writeDeepseekV4Fp16Cache(m, N, cacheDir, fp);

    for (const source of ['dequant', 'cache'] as const) {
      const src = await weightsOf(source, m, cacheDir, fp, 0);
      const r = await decodeRates(new DeepseekV4DeviceDecoder(src.w, N, K), V, recomputeDecoder(src.w, N, K), 5);
      out[`deepseek_v4_tiny.device.${source}.decode_kv_cache.tok_s`] = r.cached;
      out[`deepseek_v4_tiny.device.${source}.decode_full_recompute.tok_s`] = r.recompute;
      out[`deepseek_v4_tiny.device.${source}.kv_cache_speedup`] = r.cached / r.recompute;
      src.close();
    }
    out[`deepseek_v4_tiny.device.dequant.decode_kv_cache_${LONG_CONTEXT}.tok_s`] = rate(cachedStepMs(new DeepseekV4DeviceDecoder(m, N, K), V, 5, 16, LONG_CONTEXT));
    const ref = new RecomputeDecoder({ numLayers: m.cfg.layers, vocab: V, loadLayer: (L) => m.loadLayer(L) }, new DeepseekV4Reference(m));
    const seq = [...context(V), 5];
    out['deepseek_v4_tiny.reference.decode_full_recompute.tok_s'] = rate(await timeMs(() => ref.prefill([seq], seq.length), 3, 1));

    const dequantMs = await timeMs(() => startupMs(model, 'dequant', cacheDir, fp, N, K));
    // First load: the cache files are seconds old, so their digests are computed (and not recorded).
    const firstMs = await timeMs(() => startupMs(model, 'cache', cacheDir, fp, N, K));
    await startupMs(model, 'cache', cacheDir, fp, N, K, 0); // record the digests: every load below is stat-only
    const warmMs = await timeMs(() => startupMs(model, 'cache', cacheDir, fp, N, K, 0));
    out['deepseek_v4_tiny.startup.dequant_at_load.ms'] = dequantMs;
    out['deepseek_v4_tiny.startup.fp16_cache.ms'] = warmMs;
    out['deepseek_v4_tiny.startup.fp16_cache_first_load.ms'] = firstMs;
    out['deepseek_v4_tiny.startup.fp16_cache_speedup'] = dequantMs / warmMs;
  } finally {
    ck.close();
    process.env.LAYERDIFF_CACHE_DIR = saved;
    if (saved === undefined) delete process.env.LAYERDIFF_CACHE_DIR;
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

// ---- deepseek-v4-wide: one child process per measurement ----

interface ChildOut {
  ms: number;
  maxRssMiB: number;
  extra?: Record<string, number>;
}

const WIDE = { layers: 4, experts: 32 };
const STEPS_WIDE = 4;

function runChild(task: string, args: string[], env: Record<string, string>): ChildOut {
  const self = fileURLToPath(import.meta.url);
  // as `layerdiff generate` runs (huge pages), both sides of every ratio alike
  const r = spawnSync(process.execPath, [self, '--child', task, ...args], { encoding: 'utf8', maxBuffer: 1 << 26, env: { ...process.env, ...asTheCliRuns('generate'), ...env } });
  if (r.status !== 0) throw new Error(`bench child ${task} ${args.join(' ')} failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as ChildOut;
}

async function child(task: string, source: Source, model: string, cacheDir: string): Promise<void> {
  const N = loadDeviceNative();
  const K = loadDeepseekNative();
  const done = (ms: number, extra?: Record<string, number>) => process.stdout.write(JSON.stringify({ ms, maxRssMiB: peakRssMiB(), extra } satisfies ChildOut) + '\n');
  if (task === 'new-host') {
    // nothing hashed before this child (its digest cache is empty): the fingerprint is in the measured time
    done(await newHostStartupMs(model, source, cacheDir, JSON.parse(fs.readFileSync(process.env.LAYERDIFF_BENCH_RECORDED!, 'utf8')) as RecordedModel, N, K));
    return;
  }
  const probe = Checkpoint.open(model);
  const fp = (await checkpointFingerprint(model, probe.shardFiles)).value;
  probe.close();
  if (task === 'convert') {
    const ck = Checkpoint.open(model);
    const t0 = performance.now();
    const man = await writeDeepseekV4Fp16Cache(new DeepseekV4Checkpoint(ck), N, cacheDir, fp);
    const bytes = [...man.files, ...man.experts].reduce((s, f) => s + f.size, 0);
    done(performance.now() - t0, { gib: bytes / 2 ** 30 });
    return;
  }
  if (task === 'startup') {
    done(await startupMs(model, source, cacheDir, fp, N, K));
    return;
  }
  const ck = Checkpoint.open(model);
  const m = new DeepseekV4Checkpoint(ck);
  const src = await weightsOf(source, m, cacheDir, fp);
  if (task === 'decode') {
    const d = new DeepseekV4DeviceDecoder(src.w, N, K);
    const t0 = performance.now();
    d.prefill([context(m.cfg.vocab)], CONTEXT + STEPS_WIDE);
    const prefillMs = performance.now() - t0;
    done(cachedStepMs(d, m.cfg.vocab, 1, STEPS_WIDE), { prefill_ms: prefillMs });
  } else {
    const seq = [...context(m.cfg.vocab), 5];
    const d = recomputeDecoder(src.w, N, K);
    done(await timeMs(() => d.prefill([seq], seq.length), 2, 1));
  }
}

/** the wide generation checkpoint benchWide writes (or reuses) under benchDir(); its FP16 cache is this folder + ".fp16" */
export function wideGenerationModel(): string {
  return path.join(benchDir(), `deepseek-v4-wide-${WIDE.layers}x${WIDE.experts}`);
}

/**
 * A fresh digest cache (a new folder) holding `from`'s entries but those of files under `dir`: the first load's child
 * then hashes the FP16 cache, not the checkpoint's fingerprint again (untimed, but 4 GB read before each run).
 */
function digestsWithout(from: string, dir: string): string {
  const fresh = fs.mkdtempSync(path.join(os.tmpdir(), 'layerdiff-digests-'));
  const file = path.join(from, 'fingerprints.json');
  if (fs.existsSync(file)) {
    const v = JSON.parse(fs.readFileSync(file, 'utf8')) as { entries?: Record<string, unknown> };
    const under = [path.resolve(dir), fs.realpathSync(dir)].map((d) => d + path.sep);
    for (const k of Object.keys(v.entries ?? {})) if (under.some((d) => k.startsWith(d))) delete v.entries![k];
    fs.writeFileSync(path.join(fresh, 'fingerprints.json'), JSON.stringify(v));
  }
  return fresh;
}

async function benchWide(out: Record<string, number>): Promise<void> {
  const base = benchDir();
  const model = wideGenerationModel();
  const cacheDir = `${model}.fp16`;
  // digests of the 4 GB checkpoint are computed once and shared by the children
  const env = { LAYERDIFF_CACHE_DIR: path.join(base, 'digests') };
  // the host a standalone run finds: none of the bench's files in the page cache (bench_dir.ts), this section's own
  // then read in by its convert and its warm-up round
  const dropped = dropBenchFromPageCache();
  console.log(`  (${(dropped / 1e9).toFixed(1)} GB of the bench's files dropped from the page cache first)`);
  if (!fs.existsSync(path.join(model, 'config.json'))) {
    const { writeDeepseekV4Wide } = await import('../../fixtures/deepseek_v4_wide.js');
    console.log(`generating ${model} (${WIDE.layers} layers, ${WIDE.experts} routed experts per layer, real widths)…`);
    writeDeepseekV4Wide(model, WIDE);
  }
  const conv = runChild('convert', ['cache', model, cacheDir], env);
  out['deepseek_v4_wide.convert.s'] = conv.ms / 1000;
  out['deepseek_v4_wide.convert.peak_rss_gib'] = conv.maxRssMiB / 1024;
  out['deepseek_v4_wide.fp16_cache.gib'] = conv.extra!.gib;
  // Three sides a round, alternating: dequantizing; the FP16 cache with its digests recorded (stat-only); and the
  // cache's first load, in a digest cache of its own made for each run, holding the checkpoint's digests but none of
  // the cache's (as after a convert: the files the manifest vouches for as a whole are hashed in the measured time;
  // routed experts are hashed when first routed to, as always). The page cache is warm for all three.
  // And two more, a new host's (nothing hashed before: an empty digest cache each run), each side with the trust
  // chain generate runs (newHostStartupMs), the record's model section written here as gate writes it.
  const recordedFile = path.join(base, 'recorded-model.json');
  {
    const ck = Checkpoint.open(model);
    try {
      const fp = await openCheckpointFingerprint(ck, { protect: model });
      fs.writeFileSync(recordedFile, JSON.stringify({ fingerprint: fp.value, files: fp.files, headers: Object.fromEntries(ck.headerDigests()), data_samples: Object.fromEntries(ck.dataSampleDigests()) }));
    } finally {
      ck.close();
    }
  }
  const sides = ['dequant', 'cache', 'first', 'new-dequant', 'new-cache'] as const;
  const start: Record<(typeof sides)[number], number[]> = { dequant: [], cache: [], first: [], 'new-dequant': [], 'new-cache': [] };
  for (let i = 0; i < STARTUP_ROUNDS; i++) {
    for (const s of sides) {
      if (s === 'dequant' || s === 'cache') {
        start[s].push(runChild('startup', [s, model, cacheDir], env).ms);
        continue;
      }
      const fresh = s === 'first' ? digestsWithout(env.LAYERDIFF_CACHE_DIR, cacheDir) : fs.mkdtempSync(path.join(os.tmpdir(), 'layerdiff-digests-'));
      try {
        if (s === 'first') start[s].push(runChild('startup', ['cache', model, cacheDir], { LAYERDIFF_CACHE_DIR: fresh }).ms);
        else start[s].push(runChild('new-host', [s === 'new-dequant' ? 'dequant' : 'cache', model, cacheDir], { LAYERDIFF_CACHE_DIR: fresh, LAYERDIFF_BENCH_RECORDED: recordedFile }).ms);
      } finally {
        fs.rmSync(fresh, { recursive: true, force: true });
      }
    }
  }
  // each ratio is taken within its round, as the weights check's within its pair: this VM's fresh memory moves by 2–5×
  // between processes a few seconds apart (the dequantizing side's 1 GB FP16 head: 0.6–5 s in round 37's probes)
  const ratios = (num: (typeof sides)[number], den: (typeof sides)[number]) => start[num].slice(1).map((n, i) => n / start[den][i + 1]);
  const perRound = { fp16_cache: ratios('dequant', 'cache'), fp16_cache_first_load: ratios('dequant', 'first'), 'new_host.fp16_cache': ratios('new-dequant', 'new-cache') };
  for (const [k, r] of Object.entries(perRound)) {
    out[`deepseek_v4_wide.startup.${k}_speedup`] = median(r);
    out[`deepseek_v4_wide.startup.${k}_speedup.min`] = Math.min(...r);
    out[`deepseek_v4_wide.startup.${k}_speedup.max`] = Math.max(...r);
  }
  for (const s of sides) {
    const counted = start[s].slice(1); // the first round warms up
    const key = { dequant: 'dequant_at_load', cache: 'fp16_cache', first: 'fp16_cache_first_load', 'new-dequant': 'new_host.dequant_at_load', 'new-cache': 'new_host.fp16_cache' }[s];
    out[`deepseek_v4_wide.startup.${key}.ms`] = median(counted);
    out[`deepseek_v4_wide.startup.${key}.min_ms`] = Math.min(...counted);
    out[`deepseek_v4_wide.startup.${key}.max_ms`] = Math.max(...counted);
  }
  // beside the per-round ratios: the ratio of the two sides' medians
  out['deepseek_v4_wide.startup.fp16_cache_speedup.of_medians'] = out['deepseek_v4_wide.startup.dequant_at_load.ms'] / out['deepseek_v4_wide.startup.fp16_cache.ms'];
  out['deepseek_v4_wide.startup.fp16_cache_first_load_speedup.of_medians'] = out['deepseek_v4_wide.startup.dequant_at_load.ms'] / out['deepseek_v4_wide.startup.fp16_cache_first_load.ms'];
  out['deepseek_v4_wide.startup.new_host.fp16_cache_speedup.of_medians'] = out['deepseek_v4_wide.startup.new_host.dequant_at_load.ms'] / out['deepseek_v4_wide.startup.new_host.fp16_cache.ms'];
  for (const s of ['dequant', 'cache'] as const) {
    const d = runChild('decode', [s, model, cacheDir], env);
    const r = runChild('recompute', [s, model, cacheDir], env);
    const k = `deepseek_v4_wide.device.${s}`;
    out[`${k}.decode_kv_cache.tok_s`] = rate(d.ms);
    out[`${k}.decode_full_recompute.tok_s`] = rate(r.ms);
    out[`${k}.kv_cache_speedup`] = r.ms / d.ms;
    out[`${k}.prefill_64.s`] = d.extra!.prefill_ms / 1000;
    out[`${k}.decode.peak_rss_gib`] = d.maxRssMiB / 1024;
    out[`${k}.recompute.peak_rss_gib`] = r.maxRssMiB / 1024;
  }
}

export async function benchGenerateDeepseek(wide: boolean): Promise<Record<string, number>> {
  const out: Record<string, number> = { omp_threads: loadDeviceNative().info().openmpThreads };
  await benchTiny(out);
  if (wide) await benchWide(out);
  const f = (k: string, d = 1) => (out[k] === undefined ? 'n/a' : out[k].toFixed(d)).padStart(10);
  const x = (k: string) => (out[k] === undefined ? '' : `${out[k].toFixed(1)}×`);
  const rows = (name: string, key: string) => {
    for (const s of ['dequant', 'cache'] as const) {
      const label = `${name} device, ${s === 'dequant' ? 'dequantized' : 'FP16 cache '}`;
      console.log(`  ${label.padEnd(40)} ${f(`${key}.device.${s}.decode_kv_cache.tok_s`, 2)} ${f(`${key}.device.${s}.decode_full_recompute.tok_s`, 2)}  ${x(`${key}.device.${s}.kv_cache_speedup`)}`);
    }
  };
  console.log(`DeepSeek-V4 generation (${CONTEXT} tokens of context; emulated device, OpenMP threads ${out.omp_threads}; start-up = open → first logits of a one-token prompt, routed experts read only when routed to)`);
  console.log(`  decode tok/s                             ${'KV cache'.padStart(10)} ${'recompute'.padStart(10)}  ratio`);
  rows('deepseek-v4-tiny', 'deepseek_v4_tiny');
  console.log(`  ${`deepseek-v4-tiny device, ${LONG_CONTEXT} tokens`.padEnd(40)} ${f(`deepseek_v4_tiny.device.dequant.decode_kv_cache_${LONG_CONTEXT}.tok_s`, 2)} ${'n/a'.padStart(10)}  (dequantized; ${LONG_CONTEXT / 4} entries per ratio-4 layer)`);
  console.log(`  ${'deepseek-v4-tiny reference FP32'.padEnd(40)} ${'n/a'.padStart(10)} ${f('deepseek_v4_tiny.reference.decode_full_recompute.tok_s', 2)}  (no cached reference decoder)`);
  if (wide) rows(`wide ${WIDE.layers}L×${WIDE.experts}E`, 'deepseek_v4_wide');
  console.log(`  start-up ms                              ${'FP16 cache'.padStart(10)} ${'dequant'.padStart(10)}  ratio`);
  console.log(`  ${'deepseek-v4-tiny device'.padEnd(40)} ${f('deepseek_v4_tiny.startup.fp16_cache.ms')} ${f('deepseek_v4_tiny.startup.dequant_at_load.ms')}  ${x('deepseek_v4_tiny.startup.fp16_cache_speedup')}  (first load, hashing the cache: ${out['deepseek_v4_tiny.startup.fp16_cache_first_load.ms'].toFixed(1)} ms)`);
  if (wide) {
    // a ratio: the median of the per-round ratios, their range, and the ratio of the two sides' medians
    const rr = (k: string) => `${x(k)}  (per round ${out[`${k}.min`].toFixed(1)}–${out[`${k}.max`].toFixed(1)}×, medians' ratio ${out[`${k}.of_medians`].toFixed(1)}×)`;
    console.log(`  ${`wide ${WIDE.layers}L×${WIDE.experts}E device`.padEnd(40)} ${f('deepseek_v4_wide.startup.fp16_cache.ms', 0)} ${f('deepseek_v4_wide.startup.dequant_at_load.ms', 0)}  ${rr('deepseek_v4_wide.startup.fp16_cache_speedup')}  (${STARTUP_ROUNDS - 1} alternating rounds after a warm-up, medians; FP16 cache ${f('deepseek_v4_wide.startup.fp16_cache.min_ms', 0).trim()}–${f('deepseek_v4_wide.startup.fp16_cache.max_ms', 0).trim()}, dequant ${f('deepseek_v4_wide.startup.dequant_at_load.min_ms', 0).trim()}–${f('deepseek_v4_wide.startup.dequant_at_load.max_ms', 0).trim()} ms)`);
    console.log(`  ${`wide ${WIDE.layers}L×${WIDE.experts}E device, first load`.padEnd(40)} ${f('deepseek_v4_wide.startup.fp16_cache_first_load.ms', 0)} ${f('deepseek_v4_wide.startup.dequant_at_load.ms', 0)}  ${rr('deepseek_v4_wide.startup.fp16_cache_first_load_speedup')}  (the cache's digests computed in the measured time; medians of the same rounds, ${f('deepseek_v4_wide.startup.fp16_cache_first_load.min_ms', 0).trim()}–${f('deepseek_v4_wide.startup.fp16_cache_first_load.max_ms', 0).trim()} ms)`);
    const nh = (k: string) => `${f(`deepseek_v4_wide.startup.new_host.${k}.min_ms`, 0).trim()}–${f(`deepseek_v4_wide.startup.new_host.${k}.max_ms`, 0).trim()}`;
    console.log(`  ${`wide ${WIDE.layers}L×${WIDE.experts}E device, new host`.padEnd(40)} ${f('deepseek_v4_wide.startup.new_host.fp16_cache.ms', 0)} ${f('deepseek_v4_wide.startup.new_host.dequant_at_load.ms', 0)}  ${rr('deepseek_v4_wide.startup.new_host.fp16_cache_speedup')}  (nothing hashed before; each side's trust chain as generate runs it: the checkpoint's SHA-256 fingerprint, against the shards' headers and data samples and the cache's BLAKE3 of what is read; ${nh('fp16_cache')} against ${nh('dequant_at_load')} ms)`);
    console.log(`  wide: convert ${out['deepseek_v4_wide.convert.s'].toFixed(0)} s for a ${out['deepseek_v4_wide.fp16_cache.gib'].toFixed(1)} GiB cache at peak RSS ${out['deepseek_v4_wide.convert.peak_rss_gib'].toFixed(2)} GiB; prefill of ${CONTEXT} tokens ${out['deepseek_v4_wide.device.dequant.prefill_64.s'].toFixed(1)} s (dequantized) / ${out['deepseek_v4_wide.device.cache.prefill_64.s'].toFixed(1)} s (FP16 cache); peak RSS of decode ${out['deepseek_v4_wide.device.dequant.decode.peak_rss_gib'].toFixed(1)} / ${out['deepseek_v4_wide.device.cache.decode.peak_rss_gib'].toFixed(1)} GiB, of recompute ${out['deepseek_v4_wide.device.dequant.recompute.peak_rss_gib'].toFixed(1)} / ${out['deepseek_v4_wide.device.cache.recompute.peak_rss_gib'].toFixed(1)} GiB`);
    console.log('  wide: routed experts from the FP16 cache are read once and used in place; dequantized ones are re-dequantized from FP4 at every use (never held in FP16: 12 GiB per layer at 256 experts)');
  }
  return out;
}

const argv = process.argv.slice(2);
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href && !rerunAsTheCli()) {
  if (argv[0] === '--child') await child(argv[1], argv[2] as Source, argv[3], argv[4]);
  else await benchGenerateDeepseek(argv.includes('--wide'));
}
