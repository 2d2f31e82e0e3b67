/** Llama (LlamaForCausalLM): harness/models/llama.ts binds it, reference-cpu/llama*.ts and device-hip/llama*.ts run it. */
import { staleCacheNote } from '../generate/fp16cache.js';
import { loadLlamaFp16Cache, writeLlamaFp16Cache } from '../generate/fp16cache_llama.js';
import { LLAMA_LINEARS, LlamaCheckpoint, type LlamaLayerWeights } from '../models/llama.js';
import type { ModelDef } from '../models/path.js';
import { LlamaReference } from '../../reference-cpu/llama.js';
import { LlamaReferenceDecoder } from '../../reference-cpu/llama_decode.js';
import { LlamaDevice } from '../../device-hip/llama.js';
import { buildLlamaF16, LlamaDeviceDecoder } from '../../device-hip/llama_decode.js';
import type { Architecture } from './types.js';

export const LLAMA: Architecture = {
  name: 'llama',
  matches: ['LlamaForCausalLM', 'llama'],
  substages: ['attn', 'mlp'],
  fixtures: ['llama-tiny', 'llama-tiny-overflow', 'llama-tiny-bias'],

  open(ck, backend, faults) {
    const m = new LlamaCheckpoint(ck);
    const def: ModelDef<LlamaLayerWeights> = {
      architecture: 'llama',
      numLayers: m.cfg.layers,
      vocab: m.cfg.vocab,
      loadLayer: (L) => m.loadLayer(L),
      quantizedLayers: () => {
        const out: number[] = [];
        for (let L = 0; L < m.cfg.layers; L++) {
          const w = m.loadLayer(L, false);
          if (LLAMA_LINEARS.some((k) => w[k].format !== 'plain')) out.push(L);
        }
        return out;
      },
      conformance: () => m.conformance(),
      reference: new LlamaReference(m),
      device: new LlamaDevice(m, backend.native, faults),
    };
    return def as ModelDef<unknown>;
  },

  async decoder(r) {
    const m = new LlamaCheckpoint(r.ck);
    const done = { close: () => {} };
    if (r.backend === null) return { decoder: new LlamaReferenceDecoder(m), weights: 'fp32-reference', how: 'KV cache', ...done };
    if (r.fp16Cache !== undefined) {
      const c = await loadLlamaFp16Cache(r.fp16Cache, m, r.fingerprint!, { useCache: r.verifyFull === true ? 'write' : true }, r.fp16CacheDigest);
      if (c.ok) return { decoder: new LlamaDeviceDecoder(m, r.backend.native, r.backend.decode, c.weights), weights: 'fp16-cache', how: 'KV cache', close: c.close, unchanged: c.unchanged };
      r.note(staleCacheNote(r.fp16Cache, r.model, c.why));
    }
    const decoder = new LlamaDeviceDecoder(m, r.backend.native, r.backend.decode, buildLlamaF16(m, r.backend.native));
    return { decoder, weights: 'dequant-at-load', how: 'KV cache', ...done };
  },

  async writeFp16Cache(ck, N, dir, fingerprint, progress, verify) {
    const m = new LlamaCheckpoint(ck);
    // embed, head, one file per layer
    return writeLlamaFp16Cache(m, N, dir, fingerprint, progress(m.cfg.layers + 2), verify);
  },
};
