/**
 * gpt-oss (GptOssForCausalLM): harness/models/gpt_oss.ts binds it, reference-cpu/gpt_oss.ts runs the FP32
 * reference, device-hip/gpt_oss.ts the device path (on the emulated and hip backends; a hip addon built before
 * the gpt-oss kernels existed refuses). The KV-cache decoder and the FP16 cache are not written yet
 * (issue #13 step 6): `generate` and `convert` refuse with exit 2 saying so.
 */
import { InputError } from '../errors.js';
import type { Act } from '../formats/tensor.js';
import { GptOssCheckpoint, type GptOssLayerWeights } from '../models/gpt_oss.js';
import type { LayerResult, ModelDef, StagePath } from '../models/path.js';
import { gptOssReference } from '../../reference-cpu/gpt_oss.js';
import { GptOssDevice } from '../../device-hip/gpt_oss.js';
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
  fixtures: ['gpt-oss-tiny'],

  open(ck, backend, faults) {
    const m = new GptOssCheckpoint(ck);
    const device = backend.gptOss !== null ? new GptOssDevice(m, backend.native, backend.gptOss, backend.deepseek, faults) : new NoGptOssKernels(backend.identity.name);
    return { ...gptOssReference(m), device } as ModelDef<unknown>;
  },

  async decoder() {
    throw notYet('generation (the KV-cache decoder)');
  },

  async writeFp16Cache() {
    throw notYet('convert --fp16-cache');
  },
};
