/**
 * gpt-oss at gpt-oss-20b's widths (`layerdiff fixture gpt-oss-wide`, generated on first use into
 * $LAYERDIFF_BENCH_DIR or /tmp: ~3.3 GB for 2 layers, ~4.2 GB for 4), measured side by side in one run:
 *   - a 16-token diff (both modes, default policy) of 2 and 4 layers, each in a fresh process: per-layer time of
 *     each path and peak RSS (the child's VmHWM, peak_rss.ts), so the streaming claim (flat in depth) is checked;
 *   - decode on the 2-layer checkpoint: tok/s with the K/V cache (sliding layers in their ring) against full
 *     recompute of the same device stage path, at 64 tokens of context.
 *
 *   npm run build:ts && node dist/scripts/bench/gpt_oss_wide.js
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { loadDecodeNative, loadDeepseekNative, loadDeviceNative, loadGptOssNative } from '../../device-hip/binding.js';
import { GptOssDevice } from '../../device-hip/gpt_oss.js';
import { GptOssDeviceDecoder } from '../../device-hip/gpt_oss_decode.js';
import { RecomputeDecoder } from '../../harness/generate/recompute.js';
import { Checkpoint } from '../../harness/io/checkpoint.js';
import { GptOssCheckpoint } from '../../harness/models/gpt_oss.js';
import { type ChildResult, childDiff } from './diff.js';
import { cachedStepMs, context, CONTEXT, timeMs } from './generate.js';
import { rerunAsTheCli } from './as_cli.js';
import { benchDir } from './bench_dir.js';

async function fixture(base: string, layers: number): Promise<string> {
  const dir = path.join(base, `gpt-oss-wide-${layers}`);
  if (!fs.existsSync(path.join(dir, 'config.json'))) {
    console.log(`generating ${dir} (${layers} layers, gpt-oss-20b widths)…`);
    const { writeGptOssWide } = await import('../../fixtures/gpt_oss_wide.js');
    writeGptOssWide(dir, { layers });
  }
  return dir;
}

export async function benchGptOssWide(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  const base = benchDir();
  const tokens = Array.from({ length: 16 }, (_, i) => (i * 7919 + 11) % 200000).join(',');
  const runs: Record<number, ChildResult> = {};
  for (const layers of [2, 4]) {
    const dir = await fixture(base, layers);
    const r = (runs[layers] = childDiff(dir, ['--tokens', tokens]));
    for (const l of r.layers.filter((x) => x.name.startsWith('layer.'))) {
      console.log(`  gpt-oss-wide(${layers}) ${l.name}: reference ${(l.reference_ms / 1000).toFixed(2)} s, device (both modes) ${(l.device_ms / 1000).toFixed(2)} s`);
      out[`gpt_oss_wide${layers}.${l.name}.reference_s`] = l.reference_ms / 1000;
      out[`gpt_oss_wide${layers}.${l.name}.device_s`] = l.device_ms / 1000;
    }
    const head = r.layers.find((x) => x.name === 'logits');
    if (head !== undefined) console.log(`  gpt-oss-wide(${layers}) head: reference ${(head.reference_ms / 1000).toFixed(2)} s, device ${(head.device_ms / 1000).toFixed(2)} s`);
    console.log(`gpt-oss-wide ${layers} layers, 16 tokens: ${r.wallS.toFixed(1)} s, peak RSS ${(r.maxRssMiB / 1024).toFixed(2)} GiB, ${r.verdict}`);
    out[`gpt_oss_wide${layers}.peak_rss_gib`] = r.maxRssMiB / 1024;
    out[`gpt_oss_wide${layers}.wall_s`] = r.wallS;
  }
  // the same 2-layer diff twice over one cache folder: the second reuses the passed weights check
  const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-bench-reuse-'));
  try {
    const dir2 = await fixture(base, 2);
    const cold = childDiff(dir2, ['--tokens', tokens], cache);
    const warm = childDiff(dir2, ['--tokens', tokens], cache);
    out['gpt_oss_wide2.diff_fresh_check_s'] = cold.wallS;
    out['gpt_oss_wide2.diff_reused_check_s'] = warm.wallS;
    console.log(`gpt-oss-wide 2 layers, weights check run then reused: ${cold.wallS.toFixed(1)} s, then ${warm.wallS.toFixed(1)} s`);
  } finally {
    fs.rmSync(cache, { recursive: true, force: true });
  }
  out['gpt_oss_wide.rss_ratio_4_vs_2'] = runs[4].maxRssMiB / runs[2].maxRssMiB;
  console.log(`peak RSS 4 layers / 2 layers: ${out['gpt_oss_wide.rss_ratio_4_vs_2'].toFixed(3)}`);

  // decode at 64 tokens of context on the 2-layer checkpoint (2 timed runs of 8 steps: each step is seconds here)
  const ck = Checkpoint.open(await fixture(base, 2));
  try {
    const m = new GptOssCheckpoint(ck);
    const N = loadDeviceNative();
    const device = new GptOssDevice(m, N, loadGptOssNative(), loadDeepseekNative(), null);
    const kv = new GptOssDeviceDecoder(m, N, loadDecodeNative(), device);
    const full = new RecomputeDecoder({ numLayers: m.cfg.layers, vocab: m.cfg.vocab, loadLayer: (L) => m.loadLayer(L) }, device);
    const stepMs = cachedStepMs(kv, m.cfg.vocab, 2, 8);
    const seq = [...context(m.cfg.vocab), 5];
    const recomputeMs = await timeMs(() => full.prefill([seq], seq.length), 2, 1);
    out['gpt_oss_wide2.decode_kv_cache.tok_s'] = 1000 / stepMs;
    out['gpt_oss_wide2.decode_full_recompute.tok_s'] = 1000 / recomputeMs;
    out['gpt_oss_wide2.kv_cache_speedup'] = recomputeMs / stepMs;
    console.log(`gpt-oss-wide 2 layers decode at ${CONTEXT} tokens of context: KV cache ${(1000 / stepMs).toFixed(2)} tok/s, full recompute ${(1000 / recomputeMs).toFixed(2)} tok/s, ${(recomputeMs / stepMs).toFixed(1)}×`);
  } finally {
    ck.close();
  }
  return out;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href && !rerunAsTheCli()) await benchGptOssWide();
