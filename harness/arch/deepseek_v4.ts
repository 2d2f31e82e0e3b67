/**
 * DeepSeek-V4 (DeepseekV4ForCausalLM): harness/models/deepseek_v4*.ts bind it, reference-cpu/deepseek_v4*.ts and
 * device-hip/deepseek_v4*.ts run it. The reference generates by full recompute; the device path decodes with
 * a window ring and compressed entries.
 */
import { staleCacheNote } from '../generate/fp16cache.js';
import { type DeepseekV4Fp16Weights, loadDeepseekV4Fp16Cache, writeDeepseekV4Fp16Cache } from '../generate/fp16cache_deepseek_v4.js';
import { RecomputeDecoder } from '../generate/recompute.js';
import { DeepseekV4Checkpoint, type DeepseekV4Weights } from '../models/deepseek_v4.js';
import { loadDeepseekV4Config } from '../models/deepseek_v4_config.js';
import type { ModelDef } from '../models/path.js';
import { DeepseekV4Reference, deepseekV4Reference } from '../../reference-cpu/deepseek_v4.js';
import { DeepseekV4Device } from '../../device-hip/deepseek_v4.js';
import { DeepseekV4DeviceDecoder } from '../../device-hip/deepseek_v4_decode.js';
import type { Architecture, LengthRegime } from './types.js';

/** Layers are kept between decode steps unless the checkpoint is large (then re-read each step: slow, bounded). */
const keep = (bytes: number) => bytes < 2 ** 31;

export const DEEPSEEK_V4: Architecture = {
  name: 'deepseek_v4',
  matches: ['DeepseekV4ForCausalLM', 'deepseek_v4'],
  substages: ['attn', 'moe.router', 'moe'],
  fixtures: ['deepseek-v4-tiny', 'deepseek-v4-wide'],

  open(ck, backend, faults) {
    const m = new DeepseekV4Checkpoint(ck);
    return { ...deepseekV4Reference(m), device: new DeepseekV4Device(m, backend.native, faults, backend.deepseek) } as ModelDef<unknown>;
  },

  lengthRegimes(ck) {
    const c = loadDeepseekV4Config(ck.dir, ck.config, ck.configFile, (n) => ck.readMeta(n));
    const layersOf = (r: number) => c.compressRatios.flatMap((x, L) => (x === r ? [L] : []));
    // raw candidates of token t: max(0, t − window + 1) … t; compressed entries visible to t: ⌊(t + 1) / r⌋; a ratio-4
    // entry b pools block b − 1 on its first channel half too (none before block 0: the overlap's weights first count
    // in entry 1); the indexer keeps the top index_topk of those (reference-cpu/deepseek_v4/attention.ts,
    // compressor.ts, indexer.ts)
    const out: LengthRegime[] = [{ tokens: c.window + 1, what: `the sliding window (${c.window}) drops its oldest entries` }];
    for (const r of [...new Set(c.compressRatios)].filter((x) => x > 0)) {
      const at = layersOf(r);
      out.push({ tokens: r, what: `the ratio-${r} attention of layer${at.length > 1 ? 's' : ''} ${at.join(', ')} sees its first compressed entry` });
      if (r === 4) {
        out.push({ tokens: 2 * r, what: 'the ratio-4 compressors (attention\'s and indexer\'s) first pool the previous block too (overlap)' });
        out.push({ tokens: r * (c.indexTopk + 1), what: `the indexer of the ratio-4 layers keeps ${c.indexTopk} of its compressed entries (index_topk)` });
      }
    }
    return out.sort((a, b) => a.tokens - b.tokens);
  },

  async decoder(r) {
    const m = new DeepseekV4Checkpoint(r.ck);
    if (r.backend === null) {
      const decoder = new RecomputeDecoder({ numLayers: m.cfg.layers, vocab: m.cfg.vocab, loadLayer: (L) => m.loadLayer(L) }, new DeepseekV4Reference(m), keep(r.ck.totalBytes()));
      return { decoder, weights: 'fp32-reference', how: 'full recompute', close: () => {} };
    }
    let src: DeepseekV4Weights = m;
    let cache: DeepseekV4Fp16Weights | null = null;
    let bytes = r.ck.totalBytes();
    if (r.fp16Cache !== undefined) {
      const c = await loadDeepseekV4Fp16Cache(r.fp16Cache, m, r.fingerprint!, { useCache: r.verifyFull === true ? 'write' : true }, r.fp16CacheDigest);
      if (c.ok) {
        src = cache = c.weights;
        bytes = c.weights.totalBytes();
        c.weights.keepExperts = keep(bytes);
      } else r.note(staleCacheNote(r.fp16Cache, r.model, c.why));
    }
    return {
      decoder: new DeepseekV4DeviceDecoder(src, r.backend.native, r.backend.deepseek, keep(bytes)),
      weights: cache !== null ? 'fp16-cache' : 'dequant-at-load',
      how: 'KV cache (window ring + compressed entries)',
      close: () => cache?.close(),
      unchanged: cache !== null ? () => cache!.unchanged() : undefined,
    };
  },

  async writeFp16Cache(ck, N, dir, fingerprint, progress, verify) {
    const m = new DeepseekV4Checkpoint(ck);
    // embed, head, and per layer its file and its routed experts' file
    return writeDeepseekV4Fp16Cache(m, N, dir, fingerprint, progress(2 * m.cfg.layers + 2), verify);
  },
};
