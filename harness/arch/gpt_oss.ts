/**
 * gpt-oss (GptOssForCausalLM): harness/models/gpt_oss.ts binds it, reference-cpu/gpt_oss.ts runs the FP32
 * reference, device-hip/gpt_oss.ts the device path (on the emulated and hip backends; a hip addon built before
 * the gpt-oss kernels existed refuses). `generate`: the KV-cache decoder on the device path
 * (device-hip/gpt_oss_decode.ts; weights dequantized on use, or read from the FP16 cache that `convert` writes,
 * harness/generate/fp16cache_gpt_oss.ts), full recompute on the FP32 reference.
 */
import { InputError } from '../errors.js';
import type { Act } from '../formats/tensor.js';
import { GptOssCheckpoint, type GptOssLayerWeights, parseGptOssConfig } from '../models/gpt_oss.js';
import type { LayerResult, ModelDef, StagePath } from '../models/path.js';
import { GptOssReference, gptOssReference } from '../../reference-cpu/gpt_oss.js';
import { GptOssDevice } from '../../device-hip/gpt_oss.js';
import { GptOssDeviceDecoder } from '../../device-hip/gpt_oss_decode.js';
import { staleCacheNote } from '../generate/fp16cache.js';
import { loadGptOssFp16Cache, writeGptOssFp16Cache } from '../generate/fp16cache_gpt_oss.js';
import { RecomputeDecoder } from '../generate/recompute.js';
import type { Architecture } from './types.js';

const notYet = (what: string) => new InputError(`gpt_oss: ${what} is not implemented yet (binding, FP32 reference and emulated device path are); see issue #13`);

/** The device path on a backend without gpt-oss's ops (an older hip addon): every stage refuses (exit 2) before computing anything. */
class NoGptOssKernels implements StagePath<GptOssLayerWeights> {
  constructor(private readonly backend: string) {}
  private refuse(): never {
    throw notYet(`the device path on the ${this.backend} backend (its addon lacks ossRouterF32, ossSwigluF16: rebuild with npm run build:native, or use --device emulated)`);
  }
  embed(): Act {
    return this.refuse();
  }
  layer(): LayerResult {
    return this.refuse();
  }
  finalNorm(): Act {
    return this.refuse();
  }
  logits(): Act {
    return this.refuse();
  }
}

export const GPT_OSS: Architecture = {
  name: 'gpt_oss',
  matches: ['GptOssForCausalLM', 'gpt_oss'],
  substages: ['attn', 'moe.router', 'moe'],
  fixtures: ['gpt-oss-tiny', 'gpt-oss-wide'],

  open(ck, backend, faults) {
    const m = new GptOssCheckpoint(ck);
    const device = backend.gptOss !== null ? new GptOssDevice(m, backend.native, backend.gptOss, backend.deepseek, faults) : new NoGptOssKernels(backend.identity.name);
    return { ...gptOssReference(m), device } as ModelDef<unknown>;
  },

  lengthRegimes(ck) {
    // keys of token t on a sliding layer: max(0, t − sliding_window + 1) … t (reference-cpu/ops.ts causalAttention)
    const c = parseGptOssConfig(ck);
    const sliding = c.sliding.flatMap((x, L) => (x ? [L] : []));
    return sliding.length === 0 ? [] : [{ tokens: c.slidingWindow + 1, what: `the sliding-window layers (${sliding.length} of ${c.layers}, sliding_window ${c.slidingWindow}) drop their oldest keys` }];
  },

  async decoder(r) {
    const m = new GptOssCheckpoint(r.ck);
    const done = { close: () => {} };
    if (r.backend === null) {
      const decoder = new RecomputeDecoder({ numLayers: m.cfg.layers, vocab: m.cfg.vocab, loadLayer: (L) => m.loadLayer(L) }, new GptOssReference(m));
      return { decoder, weights: 'fp32-reference', how: 'full recompute', ...done };
    }
    if (r.backend.gptOss === null) new NoGptOssKernels(r.backend.identity.name).layer();
    const device = new GptOssDevice(m, r.backend.native, r.backend.gptOss!, r.backend.deepseek, null);
    if (r.fp16Cache !== undefined) {
      const c = await loadGptOssFp16Cache(r.fp16Cache, m, r.fingerprint!, { useCache: r.verifyFull === true ? 'write' : true }, r.fp16CacheDigest);
      if (c.ok) return { decoder: new GptOssDeviceDecoder(m, r.backend.native, r.backend.decode, device, c.layer), weights: 'fp16-cache', how: 'KV cache', close: c.close, unchanged: c.unchanged };
      r.note(staleCacheNote(r.fp16Cache, r.model, c.why));
    }
    return { decoder: new GptOssDeviceDecoder(m, r.backend.native, r.backend.decode, device), weights: 'dequant-at-load', how: 'KV cache', ...done };
  },

  async writeFp16Cache(ck, N, dir, fingerprint, progress, verify) {
    const m = new GptOssCheckpoint(ck);
    // one file per layer (linears and experts in FP16, small tensors as stored)
    return writeGptOssFp16Cache(m, N, dir, fingerprint, progress(m.cfg.layers), verify);
  },
};
