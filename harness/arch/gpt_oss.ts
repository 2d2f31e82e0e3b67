/**
 * gpt-oss (GptOssForCausalLM): harness/models/gpt_oss.ts binds it, reference-cpu/gpt_oss.ts runs the FP32
 * reference. The device path, its KV-cache decoder and its FP16 cache are not written yet (issue #13 steps
 * 5–6): until they are, the commands that need them refuse with exit 2 saying so, rather than run anything
 * that is not gpt-oss's forward pass. `inspect` (binding and conformance) works.
 */
import { InputError } from '../errors.js';
import type { Act } from '../formats/tensor.js';
import { GptOssCheckpoint, type GptOssLayerWeights } from '../models/gpt_oss.js';
import type { LayerResult, ModelDef, StagePath } from '../models/path.js';
import { gptOssReference } from '../../reference-cpu/gpt_oss.js';
import type { Architecture } from './types.js';

const notYet = (what: string) => new InputError(`gpt_oss: ${what} is not implemented yet (the FP32 reference and the checkpoint binding are); see issue #13`);

/** Stands in for the device path until it exists: every stage refuses (exit 2) before computing anything. */
class GptOssDeviceMissing implements StagePath<GptOssLayerWeights> {
  embed(): Act {
    throw notYet('the device path (device-hip)');
  }
  layer(): LayerResult {
    throw notYet('the device path (device-hip)');
  }
  finalNorm(): Act {
    throw notYet('the device path (device-hip)');
  }
  logits(): Act {
    throw notYet('the device path (device-hip)');
  }
}

export const GPT_OSS: Architecture = {
  name: 'gpt_oss',
  matches: ['GptOssForCausalLM', 'gpt_oss'],
  substages: ['attn', 'moe.router', 'moe'],
  fixtures: ['gpt-oss-tiny'],

  open(ck) {
    const m = new GptOssCheckpoint(ck);
    return { ...gptOssReference(m), device: new GptOssDeviceMissing() } as ModelDef<unknown>;
  },

  async decoder() {
    throw notYet('generation (the KV-cache decoder)');
  },

  async writeFp16Cache() {
    throw notYet('convert --fp16-cache');
  },
};
