/**
 * Where the free accumulated run is the forced run. The forced run takes the reference's top-k choices at every
 * layer; the free run its own. A token t whose choices equal the reference's at every layer so far, and every
 * token before it too, has computed exactly what the forced run computes: its own rows and everything its
 * attention reads (tokens ≤ t: attention, DeepSeek's compressed entries and indexer are causal; MoE and the
 * hyper-connections are per token) went through the same choices. So the free run's error on those rows is FP16
 * drift, judged against the drift budget as the forced run's is. From the first token with a flip on, its rows
 * (at that layer) and every later token's (from the next layer, through attention) compute other experts or
 * blocks: there its error measures the choice, and the flips and the logits judge it (the behaviour question).
 *
 * `diff --mode accumulated`, `compare` over a dump and `replay` over a bundle judge the free run this one way.
 */
import { type Act, act } from '../formats/tensor.js';
import type { FloorMetrics } from './floor.js';
import { compareActs, type StageMetrics } from './metrics.js';
import { type Policy, type Status, verdict } from './policy.js';

/**
 * The tokens of a stage whose free-run rows are the forced run's: before `prefixEnd` (the first token flipped at
 * an earlier layer; Infinity for none) and not flipped at this stage (`flippedHere`).
 */
export function forcedRows(tokens: number, prefixEnd: number, flippedHere: readonly number[]): number[] {
  const here = new Set(flippedHere);
  const out: number[] = [];
  for (let t = 0; t < Math.min(tokens, prefixEnd); t++) if (!here.has(t)) out.push(t);
  return out;
}

/** The first token flipped at this stage or before (`prefixEnd` carried past a stage). */
export function nextPrefixEnd(prefixEnd: number, flippedHere: readonly number[]): number {
  return flippedHere.reduce((m, t) => Math.min(m, t), prefixEnd);
}

/**
 * For each stage of a run in forward order, the first token flipped at an earlier stage (Infinity: none), from each
 * stage's flipped tokens: what diff carries through its layers, what compare and a repro bundle read back.
 */
export function prefixesBefore(stages: readonly string[], flippedAt: (stage: string) => readonly number[]): Map<string, number> {
  const out = new Map<string, number>();
  let prefix = Infinity;
  for (const s of stages) {
    out.set(s, prefix);
    prefix = nextPrefixEnd(prefix, flippedAt(s));
  }
  return out;
}

/** `a` (tokens on its first axis) restricted to the rows of `rows`, in their order. */
export function pickRows(a: Act, rows: readonly number[]): Act {
  const T = a.shape[0];
  const per = T === 0 ? 0 : a.data.length / T;
  const data = new Float32Array(rows.length * per);
  rows.forEach((t, k) => data.set(a.data.subarray(t * per, (t + 1) * per), k * per));
  return act([rows.length, ...a.shape.slice(1)], data);
}

/**
 * The free run's verdict at one stage: on the rows where it is the forced run, against the drift budget. When no
 * row is (every token flipped here or before) it is judged on every row, flips and all, as before any flip: a
 * flip's judgement without an isolated run rests on the device's own score error, which cannot excuse a stage
 * with nothing left to measure (a router bug flipping every token would pass on nothing). `whole`: every row's metrics.
 */
export function freeRunVerdict(
  stage: string, dev: Act, ref: Act, whole: StageMetrics, policy: Policy, floor: FloorMetrics | null, prefixEnd: number, flippedHere: readonly number[],
  /** the policy's thresholds of the mode the run judged it in: 'accumulated' alone, or as the forced run (drift) */
  mode: 'accumulated' | 'accumulated-forced' = 'accumulated',
): { status: Status; tokens: number } {
  const rows = forcedRows(ref.shape[0], prefixEnd, flippedHere);
  const m = rows.length === ref.shape[0] || rows.length === 0 ? whole : compareActs(pickRows(dev, rows), pickRows(ref, rows));
  return { status: verdict(m, policy, { stage, mode, floor }), tokens: rows.length === 0 ? ref.shape[0] : rows.length };
}
