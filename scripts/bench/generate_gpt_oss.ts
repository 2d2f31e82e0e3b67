/**
 * gpt-oss generation on the device path (gpt-oss-tiny, emulated), side by side in one process: decode tok/s
 * with the K/V cache against full recompute (the same GptOssDevice stage path), with weights dequantized on
 * use against read from the FP16 cache, and the cache's start-up (open → first logits of a one-token prompt).
 *
 *   npm run build:ts && node dist/scripts/bench/generate_gpt_oss.js
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { loadDecodeNative, loadDeepseekNative, loadDeviceNative, loadGptOssNative } from '../../device-hip/binding.js';
import { GptOssDevice } from '../../device-hip/gpt_oss.js';
import { GptOssDeviceDecoder } from '../../device-hip/gpt_oss_decode.js';
import { openCheckpointFingerprint } from '../../harness/gate/fingerprint.js';
import { loadGptOssFp16Cache, writeGptOssFp16Cache } from '../../harness/generate/fp16cache_gpt_oss.js';
import { RecomputeDecoder } from '../../harness/generate/recompute.js';
import { Checkpoint } from '../../harness/io/checkpoint.js';
import { GptOssCheckpoint } from '../../harness/models/gpt_oss.js';
import { packageRoot } from '../../harness/version.js';
import { CONTEXT, decodeRates, timeMs } from './generate.js';
import { rerunAsTheCli } from './as_cli.js';

export async function benchGenerateGptOss(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  const N = loadDeviceNative();
  const K = loadDecodeNative();
  const ck = Checkpoint.open(path.join(packageRoot(), 'fixtures', 'gpt-oss-tiny'));
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-bench-oss-'));
  try {
    const m = new GptOssCheckpoint(ck);
    const device = new GptOssDevice(m, N, loadGptOssNative(), loadDeepseekNative(), null);
    const full = new RecomputeDecoder({ numLayers: m.cfg.layers, vocab: m.cfg.vocab, loadLayer: (L) => m.loadLayer(L) }, device);
    const plain = await decodeRates(new GptOssDeviceDecoder(m, N, K, device), m.cfg.vocab, full);
    const fp = (await openCheckpointFingerprint(ck, { useCache: false })).value;
    await writeGptOssFp16Cache(m, N, path.join(tmp, 'fp16'), fp);
    const c = await loadGptOssFp16Cache(path.join(tmp, 'fp16'), m, fp, { useCache: false });
    if (!c.ok) throw new Error(c.why);
    const cached = await decodeRates(new GptOssDeviceDecoder(m, N, K, device, c.layer), m.cfg.vocab, full);
    const startup = async (layer?: typeof c.layer) => timeMs(() => new GptOssDeviceDecoder(m, N, K, device, layer).prefill([[5]], 2));
    out['gpt_oss_tiny.device.decode_kv_cache.tok_s'] = plain.cached;
    out['gpt_oss_tiny.device.decode_full_recompute.tok_s'] = plain.recompute;
    out['gpt_oss_tiny.device.fp16_cache.decode_kv_cache.tok_s'] = cached.cached;
    out['gpt_oss_tiny.startup.dequant.ms'] = await startup();
    out['gpt_oss_tiny.startup.fp16_cache.ms'] = await startup(c.layer);
    c.close();
  } finally {
    ck.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  const v = (k: string, d = 1) => out[k].toFixed(d).padStart(10);
  console.log(`gpt-oss generation (${CONTEXT} tokens of context; emulated device; start-up = decoder built → first logits of a one-token prompt)`);
  console.log(`  decode tok/s                        ${'KV cache'.padStart(10)} ${'recompute'.padStart(10)}  ratio`);
  console.log(`  gpt-oss-tiny device, dequantized     ${v('gpt_oss_tiny.device.decode_kv_cache.tok_s')} ${v('gpt_oss_tiny.device.decode_full_recompute.tok_s')}  ${(out['gpt_oss_tiny.device.decode_kv_cache.tok_s'] / out['gpt_oss_tiny.device.decode_full_recompute.tok_s']).toFixed(1)}×`);
  console.log(`  gpt-oss-tiny device, FP16 cache      ${v('gpt_oss_tiny.device.fp16_cache.decode_kv_cache.tok_s')} ${v('gpt_oss_tiny.device.decode_full_recompute.tok_s')}  ${(out['gpt_oss_tiny.device.fp16_cache.decode_kv_cache.tok_s'] / out['gpt_oss_tiny.device.decode_full_recompute.tok_s']).toFixed(1)}×`);
  console.log(`  start-up ms                         ${'FP16 cache'.padStart(10)} ${'dequant'.padStart(10)}  ratio`);
  console.log(`  gpt-oss-tiny device                  ${v('gpt_oss_tiny.startup.fp16_cache.ms', 2)} ${v('gpt_oss_tiny.startup.dequant.ms', 2)}  ${(out['gpt_oss_tiny.startup.dequant.ms'] / out['gpt_oss_tiny.startup.fp16_cache.ms']).toFixed(1)}×`);
  return out;
}

if (import.meta.url === pathToFileURL(process.argv[1]).href && !rerunAsTheCli()) await benchGenerateGptOss();
