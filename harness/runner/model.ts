/**
 * Open a checkpoint as a ModelDef: pick the architecture from config.json, bind weights, build both paths.
 */
import { InputError } from '../errors.js';
import type { Checkpoint } from '../io/checkpoint.js';
import { ConfigReader } from '../io/config.js';
import { DeepseekV4Checkpoint, type DeepseekV4LayerWeights } from '../models/deepseek_v4.js';
import { LLAMA_LINEARS, LlamaCheckpoint, type LlamaLayerWeights } from '../models/llama.js';
import type { ModelDef } from '../models/path.js';
import { deepseekV4Reference } from '../../reference-cpu/deepseek_v4.js';
import { LlamaReference } from '../../reference-cpu/llama.js';
import { DeepseekV4Device } from '../../device-hip/deepseek_v4.js';
import { LlamaDevice } from '../../device-hip/llama.js';
import type { FaultPlan } from '../faults/plan.js';
import type { DeviceBackend } from './backend.js';

export const ARCHITECTURES = ['LlamaForCausalLM', 'DeepseekV4ForCausalLM'] as const;

export function architectureOf(ck: Checkpoint): string {
  return new ConfigReader(ck.config, ck.configFile).architecture();
}

export type ArchitectureKind = 'llama' | 'deepseek_v4';

/** The family of the checkpoint's architecture (config.json's architectures or model_type); unknown ones are bad input. */
export function architectureKind(ck: Checkpoint): ArchitectureKind {
  const arch = architectureOf(ck);
  if (arch === 'LlamaForCausalLM' || arch === 'llama') return 'llama';
  if (arch === 'DeepseekV4ForCausalLM' || arch === 'deepseek_v4') return 'deepseek_v4';
  throw new InputError(`architecture ${JSON.stringify(arch)} is not supported (supported: ${ARCHITECTURES.join(', ')})`, { file: ck.configFile });
}

export function openModel(ck: Checkpoint, backend: DeviceBackend, faults: FaultPlan | null): ModelDef<unknown> {
  return (architectureKind(ck) === 'llama' ? llamaModel(ck, backend, faults) : deepseekV4Model(ck, backend, faults)) as ModelDef<unknown>;
}

function llamaModel(ck: Checkpoint, backend: DeviceBackend, faults: FaultPlan | null): ModelDef<LlamaLayerWeights> {
  const m = new LlamaCheckpoint(ck);
  return {
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
    conformance: () => {
      for (let L = 0; L < m.cfg.layers; L++) m.loadLayer(L, false);
      m.finalNorm();
    },
    reference: new LlamaReference(m),
    device: new LlamaDevice(m, backend.native, faults),
  };
}

function deepseekV4Model(ck: Checkpoint, backend: DeviceBackend, faults: FaultPlan | null): ModelDef<DeepseekV4LayerWeights> {
  const m = new DeepseekV4Checkpoint(ck);
  return { ...deepseekV4Reference(m), device: new DeepseekV4Device(m, backend.native, faults, backend.deepseek) };
}
