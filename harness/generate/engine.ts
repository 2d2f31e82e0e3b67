/**
 * The generation loop: prefill every prompt, then decode all unfinished sequences in lockstep, one token
 * each per step, until each has produced an end-of-sequence token or maxNewTokens tokens. Finished
 * sequences leave the batch (no padding tokens are fed for them).
 */
import type { Decoder } from '../contracts/decoder.js';
import { Sampler, type SamplingOptions } from './sampler.js';

export interface GenerateOptions {
  maxNewTokens: number;
  sampling: SamplingOptions;
  seed: number;
  /** ids that end a sequence (the token itself is part of the output, as in transformers) */
  eos: ReadonlySet<number>;
  /** called for every token as it is chosen */
  onToken?: (seq: number, token: number) => void;
  /** called after each forward pass, before its logits are used: throws to stop before a token is chosen from them */
  afterForward?: () => void;
}

export interface GenerateResult {
  /** generated tokens per prompt (prompt not included) */
  tokens: number[][];
  finish: Array<'eos' | 'length'>;
  prefillMs: number;
  decodeMs: number;
  /** decoder steps after the prefill */
  steps: number;
}

export function generate(decoder: Decoder, prompts: readonly (readonly number[])[], o: GenerateOptions): GenerateResult {
  if (!Number.isInteger(o.maxNewTokens) || o.maxNewTokens < 0) throw new Error(`maxNewTokens must be a non-negative integer, got ${o.maxNewTokens}`);
  const sampler = new Sampler(o.sampling, o.seed, prompts.length);
  const history = prompts.map((p) => [...p]);
  const out: number[][] = prompts.map(() => []);
  const finish: Array<'eos' | 'length'> = prompts.map(() => 'length');
  const res: GenerateResult = { tokens: out, finish, prefillMs: 0, decodeMs: 0, steps: 0 };
  if (o.maxNewTokens === 0) return res;

  let t = performance.now();
  let logits = decoder.prefill(prompts, Math.max(...prompts.map((p) => p.length)) + o.maxNewTokens);
  o.afterForward?.();
  res.prefillMs = performance.now() - t;
  t = performance.now();
  let active = prompts.map((_, i) => i);
  for (;;) {
    const fed: number[] = [];
    const next: number[] = [];
    active.forEach((seq, j) => {
      const tok = sampler.next(seq, logits[j], history[seq]);
      history[seq].push(tok);
      out[seq].push(tok);
      o.onToken?.(seq, tok);
      if (o.eos.has(tok)) finish[seq] = 'eos';
      else if (out[seq].length < o.maxNewTokens) {
        fed.push(seq);
        next.push(tok);
      }
    });
    if (fed.length === 0) break;
    logits = decoder.step(fed, next);
    o.afterForward?.();
    res.steps++;
    active = fed;
  }
  res.decodeMs = performance.now() - t;
  return res;
}

/**
 * Incremental detokenization for streaming: decode all of a sequence's tokens and emit what is new, but
 * hold back text ending in U+FFFD (a multi-byte character whose remaining bytes are still to come),
 * as transformers' TextStreamer does.
 */
export class TextStream {
  private readonly ids: number[] = [];
  private printed = 0;

  constructor(private readonly decode: (ids: number[]) => string) {}

  push(token: number): string {
    this.ids.push(token);
    const text = this.decode(this.ids);
    if (text.endsWith('\uFFFD')) return '';
    const delta = text.slice(this.printed);
    this.printed = text.length;
    return delta;
  }

  /** Whatever is still held back (at the end of generation). */
  flush(): string {
    const text = this.decode(this.ids);
    const delta = text.slice(this.printed);
    this.printed = text.length;
    return delta;
  }
}
