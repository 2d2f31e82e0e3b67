/**
 * Next-token choice with Hugging Face transformers' semantics, in its processor order:
 *   1. repetition penalty θ (RepetitionPenaltyLogitsProcessor): for every distinct token already in the
 *      sequence (prompt included), a positive logit is divided by θ and a negative one multiplied by θ;
 *   2. temperature T (TemperatureLogitsWarper): logits / T; T = 0 means greedy (argmax, lowest id on ties;
 *      transformers' do_sample false);
 *   3. top-k (TopKLogitsWarper): the tokens whose logit is at least the k-th largest stay (ties at the k-th
 *      stay too, as `scores < topk(scores, k)[-1]` removes only the smaller); k = 0 keeps every token;
 *   4. top-p (TopPLogitsWarper) over what top-k kept: a token is kept iff the probability mass of the tokens
 *      ranked strictly above it is < p (the smallest set whose mass reaches p; the most likely token stays);
 *   5. one draw from the renormalised distribution (inverse CDF over the kept tokens in id order).
 * Arithmetic is float64 (transformers works in the logits' dtype; the rules, not the bits, are the
 * contract). Randomness: one seeded xoshiro128** stream per sequence (harness/rng.ts), keyed by the seed and
 * the sequence's index, one uniform per sampled token — so a seed reproduces a run exactly.
 */
import { InputError } from '../errors.js';
import { Rng } from '../rng.js';

export interface SamplingOptions {
  temperature: number;
  topP: number;
  /** 0: no top-k */
  topK: number;
  repetitionPenalty: number;
}

export function checkSampling(s: SamplingOptions): SamplingOptions {
  if (!Number.isFinite(s.temperature) || s.temperature < 0) throw new InputError(`--temperature ${s.temperature}: expected a number >= 0 (0 = greedy)`);
  if (!Number.isFinite(s.topP) || s.topP <= 0 || s.topP > 1) throw new InputError(`--top-p ${s.topP}: expected a number in (0, 1]`);
  if (!Number.isSafeInteger(s.topK) || s.topK < 0) throw new InputError(`--top-k ${s.topK}: expected an integer >= 0 (0 = off)`);
  if (!Number.isFinite(s.repetitionPenalty) || s.repetitionPenalty <= 0) throw new InputError(`--repetition-penalty ${s.repetitionPenalty}: expected a positive number (1 = off)`);
  return s;
}

/** Step 1, on a float64 copy. */
export function penalize(logits: Float32Array, seen: Iterable<number>, penalty: number): Float64Array {
  const z = Float64Array.from(logits);
  if (penalty === 1) return z;
  for (const t of new Set(seen)) {
    const v = z[t];
    z[t] = v < 0 ? v * penalty : v / penalty;
  }
  return z;
}

export function argmax(z: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < z.length; i++) if (z[i] > z[best]) best = i;
  return best;
}

/** Steps 2–4: the kept tokens (ascending id) and their renormalised probabilities. */
export function topPDistribution(z: Float64Array, temperature: number, topP: number, topK = 0): { ids: number[]; probs: number[] } {
  // scaled from the largest logit down: (z − zmax) / T ≤ 0, never Inf − Inf at a tiny temperature
  let zmax = -Infinity;
  for (const v of z) if (v > zmax) zmax = v;
  const s = Float64Array.from(z, (v) => (v - zmax) / temperature);
  // top-k: the k-th largest scaled logit; smaller ones get no probability (transformers sets them to −inf)
  const kth = topK > 0 && topK < z.length ? Float64Array.from(s).sort().reverse()[topK - 1] : -Infinity;
  const p = new Float64Array(z.length);
  let sum = 0;
  for (let i = 0; i < z.length; i++) {
    p[i] = s[i] < kth ? 0 : Math.exp(s[i]);
    sum += p[i];
  }
  // Most likely first; equal probabilities by lower id (deterministic).
  const order = Array.from(p.keys()).sort((a, b) => p[b] - p[a] || a - b);
  const ids: number[] = [];
  let mass = 0;
  for (const i of order) {
    // the rest have no probability (below the top-k, or beyond float64's exp): none can be drawn
    if (ids.length > 0 && (mass >= topP || p[i] === 0)) break;
    ids.push(i);
    mass += p[i] / sum;
  }
  // The draw walks the kept tokens in id order, not probability order: then a tiny change in the logits
  // (FP16 against FP32) moves a sample only when the draw lands within that change of a boundary, instead
  // of whenever two near-equal tokens swap ranks.
  ids.sort((a, b) => a - b);
  const kept = ids.reduce((s, i) => s + p[i], 0);
  return { ids, probs: ids.map((i) => p[i] / kept) };
}

export class Sampler {
  private readonly rngs: Rng[];

  constructor(
    private readonly opts: SamplingOptions,
    seed: number,
    sequences: number,
  ) {
    checkSampling(opts);
    this.rngs = Array.from({ length: sequences }, (_, i) => Rng.forKey(seed, `layerdiff.generate/sequence:${i}`));
  }

  /** The next token of sequence `seq` given its logits and its tokens so far (prompt + generated). */
  next(seq: number, logits: Float32Array, history: readonly number[]): number {
    for (let i = 0; i < logits.length; i++) {
      if (!Number.isFinite(logits[i])) throw new Error(`the logits of sequence ${seq} hold ${logits[i]} (at token id ${i}) after ${history.length} tokens: the path produced non-finite values on an input the acceptance prompts did not cover; run layerdiff diff on it`);
    }
    const z = penalize(logits, history, this.opts.repetitionPenalty);
    if (this.opts.temperature === 0) return argmax(z);
    const { ids, probs } = topPDistribution(z, this.opts.temperature, this.opts.topP, this.opts.topK);
    const u = this.rngs[seq].uniform();
    let acc = 0;
    for (let j = 0; j < ids.length; j++) {
      acc += probs[j];
      if (u < acc) return ids[j];
    }
    return ids[ids.length - 1]; // u within rounding of 1
  }
}
