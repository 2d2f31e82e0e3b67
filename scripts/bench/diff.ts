/**
 * Whole-diff timings:
 *   - the bundled llama-tiny fixture's full diff (both modes), and deepseek-v4-tiny's;
 *   - with --wide: a real-width DeepSeek-V4 checkpoint (`layerdiff fixture deepseek-v4-wide`, generated on
 *     first use into $LAYERDIFF_BENCH_DIR or /tmp) with 16 tokens: per-layer time of each path and peak RSS,
 *     for 2 and 4 layers side by side (the streaming target: < 4 GB, and 4 layers within 10% of 2).
 * Peak RSS is measured in a child process per run (its VmHWM: peak_rss.ts), so runs do not inherit each other's peak;
 * the bench and each child run with the environment `layerdiff diff` gives its own (as_cli.ts).
 *
 *   node dist/scripts/bench/diff.js [--wide]
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { openCheckpointContentDigest } from '../../harness/gate/fingerprint.js';
import { Checkpoint } from '../../harness/io/checkpoint.js';
import { packageRoot } from '../../harness/version.js';
import { asTheCliRuns, rerunAsTheCli } from './as_cli.js';
import { peakRssMiB } from './peak_rss.js';
import { benchDir } from './bench_dir.js';

export interface ChildResult {
  wallS: number;
  maxRssMiB: number;
  layers: Array<{ name: string; reference_ms: number; device_ms: number; floor_ms: number }>;
  /** the weights-first check (all layers) */
  weightsMs: number;
  verdict: string;
}


/** Run one diff in a fresh process, as `layerdiff diff` runs it, and report its stage times and peak RSS. */
export function childDiff(model: string, extra: string[], cacheDir?: string): ChildResult {
  const self = fileURLToPath(import.meta.url);
  // a fresh cache folder unless one is given: the timed run does the whole weights check (no reused check)
  const cache = cacheDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'ld-bench-cache-'));
  const env = { ...process.env, ...asTheCliRuns('diff'), LAYERDIFF_CACHE_DIR: cache };
  const r = spawnSync(process.execPath, [self, '--child', model, ...extra], { encoding: 'utf8', maxBuffer: 1 << 26, env });
  if (cacheDir === undefined) fs.rmSync(cache, { recursive: true, force: true });
  if (r.status !== 0) throw new Error(`diff of ${model} failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as ChildResult;
}

async function child(model: string, extra: string[]): Promise<void> {
  const { runDiffCommand } = await import('../../harness/cli/diff.js');
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = (() => true) as typeof process.stdout.write;
  const t0 = performance.now();
  const tokens = extra.includes('--tokens') ? extra[extra.indexOf('--tokens') + 1] : undefined;
  const { report } = await runDiffCommand({
    // the default policy, as a user runs it (the FP16 floor rule: deepseek-v4-tiny's streams pass 0.1 on a correct path)
    model, tokens, layers: 'all', device: 'auto', mode: 'both', freeSelection: false,
  });
  const wallS = (performance.now() - t0) / 1000;
  process.stdout.write = write;
  const out: ChildResult = {
    wallS,
    maxRssMiB: peakRssMiB(),
    layers: report.stages.map((s) => ({ name: s.name, reference_ms: s.time_ms.reference, device_ms: s.time_ms.device, floor_ms: s.time_ms.floor ?? 0 })),
    weightsMs: report.weights?.time_ms ?? 0,
    verdict: report.verdict,
  };
  process.stdout.write(JSON.stringify(out) + '\n');
}

/** The released model: 43 layers, ~160 GB of safetensors (spec/deepseek-v4-flash.md). */
const RELEASED_LAYERS = 43;
const RELEASED_BYTES = 160e9;

/**
 * A 16-token diff of the released model, extrapolated (not measured) from the 4-layer run: its wall time, plus
 * 39 more layers at the mean of layers 1–3 (layer 0 also pays the process's first touch of its read buffers,
 * a one-time cost kept in the wall time) each with its share of the weights check, plus the content digest
 * (BLAKE3, the weights check's reuse key) of the other ~150 GB at the rate measured here on this checkpoint (a
 * second diff of the same files reuses the recorded digests and skips it). Assumes the page cache or a disk at
 * least as fast as the check (~2 GB/s); a slower disk bounds the check and the digest by its speed instead.
 */
async function extrapolate(dir: string, r: ChildResult): Promise<Record<string, number>> {
  const ls = r.layers.filter((l) => l.name.startsWith('layer.'));
  const steady = ls.slice(1);
  const checkPerLayer = r.weightsMs / ls.length;
  const perLayerMs = steady.reduce((n, l) => n + l.reference_ms + l.device_ms + l.floor_ms, 0) / steady.length + checkPerLayer;
  // the tool's own hashing (openCheckpointContentDigest: BLAKE3, every core on each file), the digest cache bypassed
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.safetensors'));
  const bytes = files.reduce((n, f) => n + fs.statSync(path.join(dir, f)).size, 0);
  const h0 = performance.now();
  const ck = Checkpoint.open(dir);
  try {
    openCheckpointContentDigest(ck, { useCache: false, progress: false });
  } finally {
    ck.close();
  }
  const hashGbps = bytes / ((performance.now() - h0) * 1e6);
  const moreHashS = (RELEASED_BYTES - bytes) / (hashGbps * 1e9);
  const firstS = r.wallS + ((RELEASED_LAYERS - ls.length) * perLayerMs) / 1000 + moreHashS;
  const againS = firstS - RELEASED_BYTES / (hashGbps * 1e9);
  console.log(`  steady layer (layers 1–${ls.length - 1}): ${(perLayerMs / 1000).toFixed(2)} s with its share of the weights check; content digest (BLAKE3) ${hashGbps.toFixed(2)} GB/s`);
  console.log(`  extrapolated to the released 43-layer model (not measured): ${(firstS / 60).toFixed(1)} min for a first 16-token diff, ${(againS / 60).toFixed(1)} min once its digests are recorded (target ≤ 10)`);
  return { wide_steady_layer_s: perLayerMs / 1000, wide_content_digest_gbps: hashGbps, wide_43_layers_first_min: firstS / 60, wide_43_layers_again_min: againS / 60 };
}

/** Read every safetensors file of dir once, so the page cache holds it (as far as memory allows). */
function warmPageCache(dir: string): void {
  const buf = Buffer.allocUnsafe(16 << 20);
  for (const f of fs.readdirSync(dir).filter((n) => n.endsWith('.safetensors'))) {
    const fd = fs.openSync(path.join(dir, f), 'r');
    try {
      while (fs.readSync(fd, buf, 0, buf.length, null) > 0);
    } finally {
      fs.closeSync(fd);
    }
  }
}

export async function benchDiff(wide: boolean): Promise<Record<string, number>> {
  const root = packageRoot();
  const out: Record<string, number> = {};
  for (const name of ['llama-tiny', 'deepseek-v4-tiny']) {
    const r = childDiff(path.join(root, 'fixtures', name), []);
    out[`${name}_diff_s`] = r.wallS;
    out[`${name}_peak_rss_mib`] = r.maxRssMiB;
    console.log(`${name.padEnd(18)} whole diff (both modes): ${r.wallS.toFixed(2)} s, peak RSS ${r.maxRssMiB.toFixed(0)} MiB, ${r.verdict}`);
  }
  if (!wide) return out;
  const base = benchDir();
  const tokens = Array.from({ length: 16 }, (_, i) => (i * 7919 + 11) % 128000).join(',');
  const results: Record<number, ChildResult> = {};
  for (const layers of [2, 4]) {
    const dir = path.join(base, `deepseek-v4-wide-${layers}`);
    if (!fs.existsSync(path.join(dir, 'config.json'))) {
      const { writeDeepseekV4Wide } = await import('../../fixtures/deepseek_v4_wide.js');
      console.log(`generating ${dir} (${layers} layers, real widths)…`);
      writeDeepseekV4Wide(dir, { layers });
    }
    // the 2- and 4-layer checkpoints (~9 + ~17 GB) do not both fit this machine's page cache: read the one about
    // to be timed once, so its run (the weights check and the fingerprint above all) reads from memory as stated
    warmPageCache(dir);
    results[layers] = childDiff(dir, ['--tokens', tokens]);
    const r = results[layers];
    const ls = r.layers.filter((l) => l.name.startsWith('layer.'));
    for (const l of ls) {
      console.log(`  wide(${layers}) ${l.name}: reference ${(l.reference_ms / 1000).toFixed(2)} s, device (every mode) ${(l.device_ms / 1000).toFixed(2)} s = ${(l.reference_ms / l.device_ms).toFixed(2)}× reference/device, floor pass ${(l.floor_ms / 1000).toFixed(2)} s`);
    }
    // the head (129,280 × 4096): the logits stage, every mode of a path in one pass (target ≤ 2 s per path)
    const head = r.layers.find((l) => l.name === 'logits');
    if (head !== undefined) {
      console.log(`  wide(${layers}) head: reference ${(head.reference_ms / 1000).toFixed(2)} s (the floor pass's rows in the same pass), device (every mode) ${(head.device_ms / 1000).toFixed(2)} s (target ≤ 2 s per path)`);
      out[`wide${layers}_head_reference_s`] = head.reference_ms / 1000;
      out[`wide${layers}_head_device_s`] = head.device_ms / 1000;
    }
    console.log(`deepseek-v4-wide ${layers} layers, 16 tokens: ${r.wallS.toFixed(1)} s (weights check ${(r.weightsMs / 1000).toFixed(1)} s), peak RSS ${(r.maxRssMiB / 1024).toFixed(2)} GiB, ${r.verdict}`);
    out[`wide${layers}_peak_rss_gib`] = r.maxRssMiB / 1024;
    out[`wide${layers}_wall_s`] = r.wallS;
    if (layers === 4) Object.assign(out, await extrapolate(dir, r));
  }
  const ratio = results[4].maxRssMiB / results[2].maxRssMiB;
  out.wide_rss_ratio_4_vs_2 = ratio;
  console.log(`peak RSS 4 layers / 2 layers: ${ratio.toFixed(3)} (target ≤ 1.10; absolute target < 4 GiB)`);
  return out;
}

const argv = process.argv.slice(2);
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href && !rerunAsTheCli()) {
  if (argv[0] === '--child') await child(argv[1], argv.slice(2));
  else await benchDiff(argv.includes('--wide'));
}
