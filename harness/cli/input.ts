/** The token input of a run: --tokens, or --prompt through the checkpoint's tokenizer, or the built-in prompt. */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { InputError } from '../errors.js';
import { readJsonObject } from '../io/checkpoint.js';
import { loadTokenizer, type MetaReader } from '../io/tokenizer.js';

import { DEFAULT_PROMPT } from '../gate/prompts.js';

export { DEFAULT_PROMPT };
/** used when a checkpoint has no tokenizer.json: a fixed spread of ids, reduced modulo the vocabulary */
const DEFAULT_IDS = [1, 17, 4, 123, 42, 7, 300, 99, 256, 5, 64, 211, 3, 150, 88, 31];

/** Longest prompt text accepted before tokenizing (documented in the README): tokenizing is not free. */
export const MAX_PROMPT_CHARS = 1 << 20;

/** config.json's max_position_embeddings (the positions the model was trained for), when it states one. */
export function maxPositions(modelDir: string): number | undefined {
  const file = path.join(modelDir, 'config.json');
  const v = readJsonObject(file).max_position_embeddings;
  if (v === undefined || v === null) return undefined;
  // stated but not a length (0, -1, "x"): refused, not read as "no limit stated"
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) throw new InputError(`max_position_embeddings ${JSON.stringify(v)} is not a positive integer`, { file });
  return v;
}

export interface ResolvedInput {
  tokens: number[];
  prompt?: string;
}

/**
 * `--tokens 1,2,3`: decimal token ids, each in [0, vocab). Only digits: Number() would also take 1e2, 0x10,
 * 0b1 or 1.0, which are not how anyone writes a token id, so a typo never silently becomes another id.
 */
export function parseTokenIds(spec: string, vocab: number): number[] {
  return spec.split(',').map((s) => {
    const d = s.trim();
    const t = Number(d);
    if (!/^[0-9]+$/.test(d) || !Number.isSafeInteger(t) || t >= vocab) throw new InputError(`--tokens ${spec}: ${JSON.stringify(s)} is not a token id in [0, ${vocab})`);
    return t;
  });
}

export async function resolveInput(modelDir: string, vocab: number, a: { prompt?: string; tokens?: string; maxTokens?: number }, read?: MetaReader): Promise<ResolvedInput> {
  if (a.prompt !== undefined && a.tokens !== undefined) throw new InputError('give --prompt or --tokens, not both');
  let tokens: number[];
  let prompt: string | undefined;
  if (a.tokens !== undefined) {
    tokens = parseTokenIds(a.tokens, vocab);
  } else {
    const hasTokenizer = fs.existsSync(path.join(modelDir, 'tokenizer.json'));
    if (a.prompt !== undefined && !hasTokenizer) throw new InputError('--prompt needs a tokenizer.json in the model directory; use --tokens', { file: modelDir });
    if (hasTokenizer) {
      prompt = a.prompt ?? DEFAULT_PROMPT;
      if (prompt.length > MAX_PROMPT_CHARS) throw new InputError(`--prompt has ${prompt.length} characters; the limit is ${MAX_PROMPT_CHARS} (and the tokens must fit max_position_embeddings)`);
      tokens = (await loadTokenizer(modelDir, read)).encode(prompt);
    } else {
      tokens = DEFAULT_IDS.map((t) => t % vocab);
    }
  }
  if (a.maxTokens !== undefined) {
    if (!Number.isInteger(a.maxTokens) || a.maxTokens < 1) throw new InputError(`--max-tokens ${a.maxTokens}: expected a positive integer`);
    tokens = tokens.slice(0, a.maxTokens);
  }
  if (tokens.length === 0) throw new InputError('the input has no tokens');
  const maxPos = maxPositions(modelDir);
  if (maxPos !== undefined && tokens.length > maxPos) {
    throw new InputError(`the input has ${tokens.length} tokens, more than max_position_embeddings ${maxPos} of the model (positions beyond it are not the model's; use --max-tokens)`);
  }
  for (const t of tokens) if (t < 0 || t >= vocab) throw new InputError(`token id ${t} is outside the vocabulary [0, ${vocab})`);
  return prompt !== undefined ? { tokens, prompt } : { tokens };
}
