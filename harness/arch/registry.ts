/**
 * The architecture registry: one entry per architecture (harness/arch/types.ts), looked up from config.json.
 * This is the only place that knows which architectures exist.
 */
import { InputError } from '../errors.js';
import type { Checkpoint } from '../io/checkpoint.js';
import { ConfigReader } from '../io/config.js';
import { DEEPSEEK_V4 } from './deepseek_v4.js';
import { GPT_OSS } from './gpt_oss.js';
import { LLAMA } from './llama.js';
import type { Architecture } from './types.js';

export type { Architecture, DecoderRequest, OpenedDecoder } from './types.js';

export const ARCHITECTURE_ENTRIES: readonly Architecture[] = [LLAMA, DEEPSEEK_V4, GPT_OSS];

/** Every config.json architecture name the tool accepts (the first of each entry's matches). */
export const ARCHITECTURES: readonly string[] = ARCHITECTURE_ENTRIES.map((a) => a.matches[0]);

/** config.json's architectures[0] (or model_type). */
export function architectureOf(ck: Checkpoint): string {
  return new ConfigReader(ck.config, ck.configFile).architecture();
}

/** The entry of the checkpoint's architecture; an unknown one is bad input naming config.json. */
export function architectureFor(ck: Checkpoint): Architecture {
  const arch = architectureOf(ck);
  const entry = ARCHITECTURE_ENTRIES.find((a) => a.matches.includes(arch));
  if (entry === undefined) throw new InputError(`architecture ${JSON.stringify(arch)} is not supported (supported: ${ARCHITECTURES.join(', ')})`, { file: ck.configFile });
  // transformers' AutoModel picks the class by model_type: one naming another model (mistral, qwen2: sliding
  // windows, biases) beside architectures ["LlamaForCausalLM"] describes that other model, not this one
  const mt = ck.config.model_type;
  if (mt !== undefined && mt !== null && !entry.matches.includes(mt as string)) {
    throw new InputError(`model_type ${JSON.stringify(mt)} disagrees with architectures[0] ${JSON.stringify(arch)} (${entry.matches.join(' / ')}): which model the config describes is not knowable`, { file: ck.configFile });
  }
  return entry;
}
