/**
 * Whole-diff timings:
 *   - the bundled llama-tiny fixture's full diff (both modes), and deepseek-v4-tiny's;
 *   - with --wide: a real-width DeepSeek-V4 checkpoint (`layerdiff fixture deepseek-v4-wide`, generated on
 *     first use into $LAYERDIFF_BENCH_DIR or /tmp) with 16 tokens: per-layer time of each path and peak RSS,
 *     for 2 and 4 layers side by side (the streaming target: < 4 GB, and 4 layers within 10% of 2).
 * Peak RSS is measured in a child process per run (getrusage maxrss), so runs do not inherit each other's peak.
 *
 *   node dist/scripts/bench/diff.js [--wide]
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { packageRoot } from '../../harness/version.js';

export interface ChildResult {
  wallS: number;
  maxRssMiB: number;
  layers: Array<{ name: string; reference_ms: number; device_ms: number }>;
  verdict: string;
}

/** Run one diff in a fresh process and report its stage times and peak RSS. */
export function childDiff(model: string, extra: string[], cacheDir?: string): ChildResult {
  const self = fileURLToPath(import.meta.url);
  // a fresh cache folder unless one is given: the timed run does the whole weights check (no reused check)
  const cache = cacheDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'ld-bench-cache-'));
  const r = spawnSync(process.execPath, [self, '--child', model, ...extra], { encoding: 'utf8', maxBuffer: 1 << 26, env: { ...process.env, LAYERDIFF_CACHE_DIR: cache } });
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
    maxRssMiB: process.resourceUsage().maxRSS / 1024,
    layers: report.stages.map((s) => ({ name: s.name, reference_ms: s.time_ms.reference, device_ms: s.time_ms.device })),
    verdict: report.verdict,
  };
  process.stdout.write(JSON.stringify(out) + '\n');
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
  const base = process.env.LAYERDIFF_BENCH_DIR ?? path.join(os.tmpdir(), 'layerdiff-bench');
  const tokens = Array.from({ length: 16 }, (_, i) => (i * 7919 + 11) % 128000).join(',');
  const results: Record<number, ChildResult> = {};
  for (const layers of [2, 4]) {
    const dir = path.join(base, `deepseek-v4-wide-${layers}`);
    if (!fs.existsSync(path.join(dir, 'config.json'))) {
      const { writeDeepseekV4Wide } = await import('../../fixtures/deepseek_v4_wide.js');
      console.log(`generating ${dir} (${layers} layers, real widths)…`);
      writeDeepseekV4Wide(dir, { layers });
    }
    results[layers] = childDiff(dir, ['--tokens', tokens]);
    const r = results[layers];
    const ls = r.layers.filter((l) => l.name.startsWith('layer.'));
    for (const l of ls) console.log(`  wide(${layers}) ${l.name}: reference ${(l.reference_ms / 1000).toFixed(2)} s, device (both modes) ${(l.device_ms / 1000).toFixed(2)} s`);
    console.log(`deepseek-v4-wide ${layers} layers, 16 tokens: ${r.wallS.toFixed(1)} s, peak RSS ${(r.maxRssMiB / 1024).toFixed(2)} GiB, ${r.verdict}`);
    out[`wide${layers}_peak_rss_gib`] = r.maxRssMiB / 1024;
    out[`wide${layers}_wall_s`] = r.wallS;
  }
  const ratio = results[4].maxRssMiB / results[2].maxRssMiB;
  out.wide_rss_ratio_4_vs_2 = ratio;
  console.log(`peak RSS 4 layers / 2 layers: ${ratio.toFixed(3)} (target ≤ 1.10; absolute target < 4 GiB)`);
  return out;
}

const argv = process.argv.slice(2);
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  if (argv[0] === '--child') await child(argv[1], argv.slice(2));
  else await benchDiff(argv.includes('--wide'));
}
