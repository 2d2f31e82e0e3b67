/**
 * Splitting the acceptance prompts over N shards (`layerdiff gate --shard I/N`), so a CI matrix, Kubernetes
 * Indexed Job or Slurm array can run them on N machines and `gate --merge` can put the verdict back together.
 *
 * The assignment is a function of the prompt set and N only — every shard computes the same one, and so
 * does the merge, which checks that each partial holds exactly its shard's prompts. It balances by token
 * count (a prompt's cost grows with its length): the longest-processing-time-first greedy rule — prompts in
 * descending token count, ties broken by the prompt's digest (name and token ids; not its position, so
 * reordering the file does not move it), each given to the shard with the fewest tokens so far, ties to the
 * lowest shard. Its largest shard is within 4/3 of the best possible split (Graham 1969).
 */
import { createHash } from 'node:crypto';
import { InputError } from '../errors.js';
import { canonicalJson } from './record.js';

export const ASSIGNMENT = 'lpt-by-tokens/1';
export const MAX_SHARDS = 10_000;

export interface ShardSpec {
  /** 1-based */
  index: number;
  count: number;
}

/** A prompt as the partials list it: name, token count, 'sha256:' digest of its name and token ids. */
export interface PromptEntry {
  name: string;
  tokens: number;
  digest: string;
}

/** One prompt of the set as it ran: its name and resolved token ids. */
export interface ResolvedPrompt {
  name: string;
  tokens: number[];
}

/** `I/N` with 1 ≤ I ≤ N (1-based, as a CI matrix counts; Kubernetes' 0-based index is I-1). */
export function parseShard(spec: string): ShardSpec {
  const m = /^(\d+)\/(\d+)$/.exec(spec.trim());
  if (m === null) throw new InputError(`--shard ${spec}: expected I/N, e.g. 2/3 (shards are counted from 1)`);
  const index = Number(m[1]);
  const count = Number(m[2]);
  if (count < 1 || count > MAX_SHARDS) throw new InputError(`--shard ${spec}: N must be from 1 to ${MAX_SHARDS}`);
  if (index < 1 || index > count) throw new InputError(`--shard ${spec}: I must be from 1 to ${count} (shards are counted from 1)`);
  return { index, count };
}

const promptDigest = (p: ResolvedPrompt) => createHash('sha256').update(canonicalJson({ name: p.name, tokens: p.tokens })).digest('hex');

/**
 * What the shards of one gate must agree on: every prompt's name, token count and digest (of its name and
 * token ids), in order — computable from what a partial carries, so the merge checks it.
 */
export function promptSetDigest(entries: readonly PromptEntry[]): string {
  return `sha256:${createHash('sha256').update(canonicalJson(entries)).digest('hex')}`;
}

/**
 * The shard (1-based) of every prompt, by position in the set. Needs only names and token counts plus the
 * digests, so the merge can recompute it from what the partials carry.
 */
export function assignShards(prompts: readonly PromptEntry[], count: number): number[] {
  const order = prompts.map((p, i) => ({ ...p, i })).sort((a, b) => b.tokens - a.tokens || (a.digest < b.digest ? -1 : a.digest > b.digest ? 1 : a.i - b.i));
  const load = new Array<number>(count).fill(0);
  const shard = new Array<number>(prompts.length);
  for (const p of order) {
    let best = 0;
    for (let s = 1; s < count; s++) if (load[s] < load[best]) best = s;
    load[best] += p.tokens;
    shard[p.i] = best + 1;
  }
  return shard;
}

/** The per-prompt entries the partials carry, from which the merge recomputes the assignment. */
export function promptSetEntries(prompts: readonly ResolvedPrompt[]): PromptEntry[] {
  return prompts.map((p) => ({ name: p.name, tokens: p.tokens.length, digest: `sha256:${promptDigest(p)}` }));
}
