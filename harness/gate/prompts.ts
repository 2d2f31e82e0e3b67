/**
 * The acceptance prompt set of `layerdiff gate`: built-in, or a JSONL file (--prompts) with one
 * {"prompt": "..."} or {"tokens": [...]} object per line (an optional "name" labels the row).
 *
 * The built-in set covers what breaks FP16 paths in practice: a very short input (attention over one or
 * two keys), a long one (long softmax sums, late positions' RoPE), Chinese (multi-byte tokens, other
 * embedding rows), English prose, code (whitespace and symbol tokens) and numbers.
 */
import { InputError } from '../errors.js';
import { readRegularText, utf8Text } from '../io/regular.js';

/** The prompt of a run given neither --prompt nor --tokens (also the first prompt of the fixtures' golden runs). */
export const DEFAULT_PROMPT = 'The quick brown fox checks every layer: 3.14 × 2 = 6.28, and FP4 weights stay exact.';

export interface AcceptancePrompt {
  name: string;
  prompt?: string;
  tokens?: number[];
}

const LONG = [
  'A language model reads a sequence of tokens and predicts the next one, layer by layer. Each layer has attention,',
  'which mixes information between positions, and a feed-forward network, which transforms each position on its own.',
  'Quantization stores the weights in fewer bits: FP8 E4M3 with one scale per 128×128 block, or MXFP4 with one E8M0',
  'scale per 32 values. On an MI250 the weights are dequantized to FP16 before every matrix product.\n',
  'def dequantize(codes, scales):\n    return [E2M1[c & 15] * 2.0 ** (scales[i // 32] - 127) for i, c in enumerate(codes)]\n',
  '模型的每一层都有注意力和前馈网络。量化可以减少模型的大小，但是也会带来误差。',
  'In 2024 the model had 4096 hidden units, 32 layers and 128000 tokens; 65504 is the largest FP16 value.',
].join(' ');

export const BUILTIN_PROMPTS: readonly AcceptancePrompt[] = [
  { name: 'short', prompt: 'Hi' },
  { name: 'english', prompt: 'The quick brown fox jumps over the lazy dog, and the model predicts what comes next.' },
  { name: 'chinese', prompt: '解释一下 CDNA2 架构的特点' },
  { name: 'code', prompt: 'for (int i = 0; i < n; i++) {\n    float sum = 0.0f;\n    for (int j = 0; j < k; j++) sum += a[i * k + j] * b[j];\n    y[i] = sum;\n}' },
  { name: 'numbers', prompt: '3.14159 × 2 = 6.28318; 2^-24 ≈ 5.96e-8; 448, 65504, 1024 and -42.' },
  { name: 'long', prompt: LONG },
];

/** For checkpoints without tokenizer.json: a short and a long spread of ids (reduced modulo the vocabulary). */
export function builtinTokenPrompts(vocab: number): AcceptancePrompt[] {
  const long: number[] = [];
  let s = 12345;
  for (let i = 0; i < 200; i++) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    long.push((s >>> 8) % vocab);
  }
  return [
    { name: 'short-ids', tokens: [1, 17, 4].map((t) => t % vocab) },
    { name: 'long-ids', tokens: long },
  ];
}

/** Parse a JSONL prompt file; every problem names the file and the line. */
/** `bytes`: the file as the caller read it (and digested it), so the prompts parsed are the prompts vouched for */
export function readPromptsFile(file: string, bytes?: Uint8Array): AcceptancePrompt[] {
  // a FIFO or a device is refused, not read until it ends
  const text = bytes !== undefined ? utf8Text(bytes, { file }) : readRegularText(file);
  const out: AcceptancePrompt[] = [];
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    const where = { file: `${file}:${i + 1}` };
    let v: unknown;
    try {
      v = JSON.parse(line);
    } catch {
      throw new InputError('not valid JSON', where);
    }
    if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new InputError('expected an object {"prompt": "..."} or {"tokens": [...]}', where);
    const o = v as Record<string, unknown>;
    const name = o.name === undefined ? `line ${i + 1}` : o.name;
    if (typeof name !== 'string') throw new InputError('"name" must be a string', where);
    const hasPrompt = o.prompt !== undefined;
    const hasTokens = o.tokens !== undefined;
    if (hasPrompt === hasTokens) throw new InputError('give exactly one of "prompt" (a string) and "tokens" (a list of ids)', where);
    if (hasPrompt) {
      if (typeof o.prompt !== 'string') throw new InputError('"prompt" must be a string', where);
      out.push({ name, prompt: o.prompt });
    } else {
      if (!Array.isArray(o.tokens) || o.tokens.length === 0 || !o.tokens.every((t) => Number.isSafeInteger(t) && (t as number) >= 0)) {
        throw new InputError('"tokens" must be a non-empty list of non-negative integer ids', where);
      }
      out.push({ name, tokens: o.tokens as number[] });
    }
  });
  if (out.length === 0) throw new InputError('holds no prompts', { file });
  return out;
}
