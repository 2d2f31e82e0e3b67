/**
 * Open a checkpoint as a ModelDef: pick the architecture from config.json, bind weights, build both paths.
 */
import { InputError } from '../errors.js';
import type { Checkpoint } from '../io/checkpoint.js';
import { ConfigReader } from '../io/config.js';
import { LLAMA_LINEARS, LlamaCheckpoint, type LlamaLayerWeights } from '../models/llama.js';
import type { ModelDef } from '../models/path.js';
import { LlamaReference } from '../../reference-cpu/llama.js';
import { LlamaDevice } from '../../device-hip/llama.js';
import type { FaultPlan } from '../../device-hip/faults.js';
import type { DeviceBackend } from './backend.js';

export const ARCHITECTURES = ['LlamaForCausalLM'] as const;

export function architectureOf(ck: Checkpoint): string {
  return new ConfigReader(ck.config, ck.configFile).architecture();
}

export function openModel(ck: Checkpoint, backend: DeviceBackend, faults: FaultPlan | null): ModelDef<unknown> {
  const arch = architectureOf(ck);
  if (arch === 'LlamaForCausalLM' || arch === 'llama') return llamaModel(ck, backend, faults) as ModelDef<unknown>;
  throw new InputError(`architecture ${JSON.stringify(arch)} is not supported (supported: ${ARCHITECTURES.join(', ')})`, { file: ck.configFile });
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
