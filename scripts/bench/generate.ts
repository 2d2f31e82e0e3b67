/**
 * Generation benchmarks, side by side in one process:
 *   - decode speed with the K/V cache against full recompute at 64 tokens of context (llama-tiny, device
 *     path: the same FP16 weights and kernels, the cache being the only difference; the FP32 reference too);
 *     a step appends one token to a 64-token sequence, recompute runs all 65 through the model again;
 *   - start-up of the device path: weights from the FP16 cache (digests already verified, i.e. stat-only,
 *     and on first load, hashing the cache files) against dequantizing the checkpoint at load;
 *   - DeepSeek-V4 (tiny, and deepseek-v4-wide with --wide): generate_deepseek.ts.
 * Each figure is the median of several runs after a warm-up. The emulated backend is a CPU, and OpenMP's
 * thread count (OMP_NUM_THREADS) matters for these tiny shapes: the result records it.
 *
 *   npm run build:ts && node dist/scripts/bench/generate.js
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { loadDecodeNative, loadDeviceNative } from '../../device-hip/binding.js';
import { buildLlamaF16, LlamaDeviceDecoder } from '../../device-hip/llama_decode.js';
import { checkpointFingerprint } from '../../harness/gate/fingerprint.js';
import type { Decoder } from '../../harness/contracts/decoder.js';
import { loadLlamaFp16Cache, writeLlamaFp16Cache } from '../../harness/generate/fp16cache_llama.js';
import { Checkpoint } from '../../harness/io/checkpoint.js';
import { LlamaCheckpoint } from '../../harness/models/llama.js';
import { packageRoot } from '../../harness/version.js';
import { LlamaReferenceDecoder } from '../../reference-cpu/llama_decode.js';
import { rerunAsTheCli } from './as_cli.js';
import { median } from './median.js';

export const CONTEXT = 64;
const STEPS = 16;
const RUNS = 7;

export async function timeMs(f: () => unknown, runs = RUNS, warmup = 2): Promise<number> {
  for (let i = 0; i < warmup; i++) await f();
  const t: number[] = [];
  for (let i = 0; i < runs; i++) {
    const a = performance.now();
    await f();
    t.push(performance.now() - a);
  }
  return median(t);
}

export const context = (vocab: number, n = CONTEXT) => Array.from({ length: n }, (_, i) => (i * 37 + 11) % vocab);

/** ms per cached step at ~n tokens of context (median over runs after a warm-up run). */
export function cachedStepMs(d: Decoder, vocab: number, runs = RUNS, steps = STEPS, n = CONTEXT): number {
  const ctx = context(vocab, n);
  const perStep: number[] = [];
  for (let r = 0; r < runs + 1; r++) {
    d.prefill([ctx], n + steps);
    const a = performance.now();
    for (let s = 0; s < steps; s++) d.step([0], [(s * 7) % vocab]);
    if (r > 0) perStep.push((performance.now() - a) / steps); // run 0 is the warm-up
  }
  return median(perStep);
}

/**
 * tokens/s of one cached step at ~CONTEXT tokens, and of recomputing CONTEXT+1 tokens from scratch with
 * `full` (by default the same decoder's prefill, which runs every position through the model).
 */
export async function decodeRates(d: Decoder, vocab: number, full: Decoder = d, runs = RUNS): Promise<{ cached: number; recompute: number }> {
  const cached = cachedStepMs(d, vocab, runs);
  const seq = [...context(vocab), 5];
  const recomputeMs = await timeMs(() => full.prefill([seq], seq.length), runs);
  return { cached: 1000 / cached, recompute: 1000 / recomputeMs };
}

export async function benchGenerate(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  const root = packageRoot();
  const N = loadDeviceNative();
  const K = loadDecodeNative();
  out['omp_threads'] = N.info().openmpThreads;

  // 1. decode with the K/V cache against full recompute, llama-tiny
  const ck = Checkpoint.open(path.join(root, 'fixtures', 'llama-tiny'));
  const m = new LlamaCheckpoint(ck);
  const dev = await decodeRates(new LlamaDeviceDecoder(m, N, K, buildLlamaF16(m, N)), m.cfg.vocab);
  out['llama_tiny.device.decode_kv_cache.tok_s'] = dev.cached;
  out['llama_tiny.device.decode_full_recompute.tok_s'] = dev.recompute;
  out['llama_tiny.device.kv_cache_speedup'] = dev.cached / dev.recompute;
  const ref = await decodeRates(new LlamaReferenceDecoder(m), m.cfg.vocab);
  out['llama_tiny.reference.decode_kv_cache.tok_s'] = ref.cached;
  out['llama_tiny.reference.decode_full_recompute.tok_s'] = ref.recompute;
  out['llama_tiny.reference.kv_cache_speedup'] = ref.cached / ref.recompute;

  // 2. start-up: FP16 cache against dequant at load (a fresh checkpoint handle each time: bytes are read too)
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-bench-gen-'));
  const saved = process.env.LAYERDIFF_CACHE_DIR;
  process.env.LAYERDIFF_CACHE_DIR = path.join(tmp, 'fpcache');
  try {
    const fp = await checkpointFingerprint(ck.dir, ck.shardFiles);
    await writeLlamaFp16Cache(m, N, path.join(tmp, 'fp16'), fp.value);
    const dequantMs = await timeMs(() => {
      const c = Checkpoint.open(ck.dir);
      buildLlamaF16(new LlamaCheckpoint(c), N);
      c.close();
    });
    const load = async (racyMs: number | undefined) => {
      const c = Checkpoint.open(ck.dir);
      const r = await loadLlamaFp16Cache(path.join(tmp, 'fp16'), new LlamaCheckpoint(c), fp.value, racyMs === undefined ? {} : { racyMs });
      c.close();
      if (!r.ok) throw new Error(r.why);
    };
    // First load: the cache files are seconds old, so their digests are computed (and not cached).
    const firstMs = await timeMs(() => load(undefined));
    await load(0); // record the digests, then every load below is stat-only
    const warmMs = await timeMs(() => load(0));
    out['llama_tiny.startup.dequant_at_load.ms'] = dequantMs;
    out['llama_tiny.startup.fp16_cache.ms'] = warmMs;
    out['llama_tiny.startup.fp16_cache_first_load.ms'] = firstMs;
    out['llama_tiny.startup.fp16_cache_speedup'] = dequantMs / warmMs;
  } finally {
    process.env.LAYERDIFF_CACHE_DIR = saved;
    if (saved === undefined) delete process.env.LAYERDIFF_CACHE_DIR;
    fs.rmSync(tmp, { recursive: true, force: true });
    ck.close();
  }

  const f = (k: string) => (out[k] ?? NaN).toFixed(1).padStart(10);
  console.log(`generation benchmarks (${CONTEXT} tokens of context, median of ${RUNS}, OpenMP threads ${out.omp_threads})`);
  console.log(`  decode tok/s                 ${'KV cache'.padStart(10)} ${'recompute'.padStart(10)}    ratio`);
  for (const p of ['device', 'reference']) {
    console.log(`  llama-tiny ${p.padEnd(17)} ${f(`llama_tiny.${p}.decode_kv_cache.tok_s`)} ${f(`llama_tiny.${p}.decode_full_recompute.tok_s`)}  ${out[`llama_tiny.${p}.kv_cache_speedup`].toFixed(1)}×`);
  }
  console.log(`  start-up ms                  ${'FP16 cache'.padStart(10)} ${'dequant'.padStart(10)}    ratio`);
  console.log(`  llama-tiny device            ${out['llama_tiny.startup.fp16_cache.ms'].toFixed(2).padStart(10)} ${out['llama_tiny.startup.dequant_at_load.ms'].toFixed(2).padStart(10)}  ${out['llama_tiny.startup.fp16_cache_speedup'].toFixed(1)}×  (first load, hashing the cache: ${out['llama_tiny.startup.fp16_cache_first_load.ms'].toFixed(2)} ms)`);
  return out;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href && !rerunAsTheCli()) {
  benchGenerate().catch((e: unknown) => {
    console.error(e);
    process.exitCode = 1;
  });
}
