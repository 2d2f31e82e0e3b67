/**
 * How `generate` decodes when no flag says: as transformers does for the checkpoint, from its
 * generation_config.json over GenerationConfig's own defaults (do_sample false, temperature 1.0, top_k 50,
 * top_p 1.0, repetition_penalty 1.0), each flag overriding both. do_sample false is greedy (temperature 0 here,
 * transformers ignoring temperature, top_k and top_p then); `--temperature T` > 0 samples, 0 is greedy.
 * End-of-sequence ids: generation_config.json's eos_token_id (a number or a list) when it names one, else
 * config.json's (transformers builds the generation config from the model config then); the tokenizer's EOS
 * only when neither names one (transformers would not stop at all).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { InputError } from '../errors.js';
import { type Checkpoint, readJsonObject } from '../io/checkpoint.js';
import { checkSampling, type SamplingOptions } from './sampler.js';

export const GENERATION_CONFIG = 'generation_config.json';

/** The sampling flags as given (undefined: not given). */
export interface SamplingFlags {
  temperature?: number;
  topP?: number;
  topK?: number;
  repetitionPenalty?: number;
}

/** GenerationConfig's defaults (transformers generation/configuration_utils.py). */
const HF_DEFAULTS = { do_sample: false, temperature: 1.0, top_k: 50, top_p: 1.0, repetition_penalty: 1.0 };

/**
 * The checkpoint's generation_config.json, read once per open checkpoint: the sampling, the EOS ids and the note on
 * fields not applied (three readers in one run) then see the same bytes, even if the file changes meanwhile.
 */
const readOnce = new WeakMap<Checkpoint, Record<string, unknown> | null>();
function generationConfig(ck: Checkpoint): Record<string, unknown> | null {
  if (readOnce.has(ck)) return readOnce.get(ck)!;
  const file = path.join(ck.dir, GENERATION_CONFIG);
  const gc = fs.existsSync(file) ? readJsonObject(file) : null;
  readOnce.set(ck, gc);
  return gc;
}

/** The sampling a run uses and, for the log line, whether generation_config.json or the flags set it. */
export function resolveSampling(flags: SamplingFlags, ck: Checkpoint): { sampling: SamplingOptions; source: string } {
  const gc = generationConfig(ck);
  const file = path.join(ck.dir, GENERATION_CONFIG);
  const field = (key: keyof typeof HF_DEFAULTS, ok: (v: unknown) => boolean, want: string) => {
    const v = gc?.[key];
    if (v === undefined || v === null) return undefined;
    if (!ok(v)) throw new InputError(`${key} must be ${want}, got ${JSON.stringify(v)}`, { file });
    return v;
  };
  const num = (v: unknown) => typeof v === 'number' && Number.isFinite(v);
  // each field is checked only where it is used (a greedy file's temperature 0 is not an error: transformers ignores it)
  const doSample = () => field('do_sample', (v) => typeof v === 'boolean', 'true or false') as boolean | undefined;
  const gcT = () => field('temperature', (v) => num(v) && (v as number) > 0, 'a positive number') as number | undefined;
  const gcP = () => field('top_p', (v) => num(v) && (v as number) > 0 && (v as number) <= 1, 'a number in (0, 1]') as number | undefined;
  const gcK = () => field('top_k', (v) => Number.isSafeInteger(v) && (v as number) >= 0, 'an integer >= 0') as number | undefined;
  const gcR = () => field('repetition_penalty', (v) => num(v) && (v as number) > 0, 'a positive number') as number | undefined;
  const sample = flags.temperature !== undefined ? flags.temperature > 0 : (doSample() ?? HF_DEFAULTS.do_sample);
  const sampling = checkSampling({
    temperature: flags.temperature ?? (sample ? (gcT() ?? HF_DEFAULTS.temperature) : 0),
    topP: flags.topP ?? (sample ? gcP() : undefined) ?? HF_DEFAULTS.top_p,
    topK: flags.topK ?? (sample ? gcK() : undefined) ?? HF_DEFAULTS.top_k,
    repetitionPenalty: flags.repetitionPenalty ?? gcR() ?? HF_DEFAULTS.repetition_penalty,
  });
  const given = Object.values(flags).some((v) => v !== undefined);
  const source = gc === null ? (given ? 'flags over transformers\' defaults' : 'transformers\' defaults (no generation_config.json)') : given ? `flags over ${GENERATION_CONFIG}` : GENERATION_CONFIG;
  return { sampling, source };
}

/**
 * generation_config.json's decoding fields that transformers would apply and `generate` does not (it draws one
 * sequence per prompt with temperature, top-k, top-p and the repetition penalty), each set to a value at which
 * transformers acts (not its default, nor an inert value such as guidance_scale 1), as "name value": the run says so,
 * since its text may then differ from transformers'.
 * The warpers that act only when sampling are named only when this run samples. Lengths (max_new_tokens,
 * max_length) are --max-new-tokens's, and beam-only fields (length_penalty, early_stopping) go with num_beams.
 */
export function unappliedDecoding(ck: Checkpoint, sampling: boolean): string[] {
  const gc = generationConfig(ck);
  if (gc === null) return [];
  const isSet = (v: unknown) => v !== undefined && v !== null && !(Array.isArray(v) && v.length === 0) && !(typeof v === 'object' && !Array.isArray(v) && Object.keys(v as object).length === 0);
  // [field, the values at which transformers does nothing with it (besides unset), whether it acts only when sampling]
  const fields: Array<[string, unknown[], boolean]> = [
    ['num_beams', [1], false], ['num_beam_groups', [1], false], ['diversity_penalty', [0], false], ['penalty_alpha', [0], false],
    ['no_repeat_ngram_size', [0], false], ['bad_words_ids', [], false], ['min_length', [0], false], ['min_new_tokens', [0], false],
    ['suppress_tokens', [], false], ['begin_suppress_tokens', [], false], ['forced_bos_token_id', [], false],
    ['forced_eos_token_id', [], false], ['sequence_bias', [], false], ['guidance_scale', [1], false],
    ['exponential_decay_length_penalty', [], false],
    ['min_p', [0], true], ['typical_p', [1], true], ['epsilon_cutoff', [0], true], ['eta_cutoff', [0], true],
  ];
  return fields.filter(([k, inert, onlySampling]) => isSet(gc[k]) && !inert.includes(gc[k]) && (sampling || !onlySampling)).map(([k]) => `${k} ${JSON.stringify(gc[k])}`);
}

/** The ids that end a sequence (see the file comment); a field that is not token ids is bad input naming it. */
export function eosIds(ck: Checkpoint, tokenizerEos: number | undefined): Set<number> {
  const ids = (v: unknown, file: string) => {
    if (v === undefined || v === null) return new Set<number>();
    const list = Array.isArray(v) ? v : [v];
    if (!list.every((x) => Number.isSafeInteger(x) && (x as number) >= 0)) throw new InputError(`eos_token_id must be a token id or a list of them, got ${JSON.stringify(v)}`, { file });
    return new Set(list as number[]);
  };
  const fromGc = ids(generationConfig(ck)?.eos_token_id, path.join(ck.dir, GENERATION_CONFIG));
  if (fromGc.size > 0) return fromGc;
  const fromConfig = ids(ck.config.eos_token_id, ck.configFile);
  if (fromConfig.size > 0) return fromConfig;
  return tokenizerEos !== undefined ? new Set([tokenizerEos]) : new Set();
}
