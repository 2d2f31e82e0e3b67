/**
 * Root cause first: which failing stages fail only because their input carried an earlier failure.
 *
 * A stage is *carried* when it fails in accumulated mode (on the device's own previous output) while its
 * isolated run (the device stage on the reference's input) does not fail: the stage's own computation is
 * fine, the error came in with its input. It is carried from the nearest earlier failing stage that is not
 * itself carried — the root. A stage failing in isolated mode, or with a scoring-bug flip, is a root of its own, and without an isolated
 * run (--mode accumulated) nothing can be told apart, so nothing is marked.
 *
 * Kept a small function of the stage list and the policy, so any verdict logic can call it.
 */
import { type Policy, verdict } from './policy.js';
import type { StageMetrics } from './metrics.js';

export interface CarriedInput {
  name: string;
  status: 'pass' | 'warn' | 'fail';
  isolated: StageMetrics | null;
  /** each mode's own verdict, when the runner judged it (floor rule, per stage kind): preferred to re-judging */
  statuses?: { isolated: 'pass' | 'warn' | 'fail' | null };
  /** a scoring-bug flip is the stage's own failure (its choices against margins its scores cannot explain) */
  flips?: { accumulated?: { scoring_bug: number } | null; isolated?: { scoring_bug: number } | null };
}

/** stage name → the root stage it is carried from, for every carried stage (in stage order). */
export function carriedFrom(stages: readonly CarriedInput[], policy: Policy): Map<string, string> {
  const out = new Map<string, string>();
  let root: string | null = null;
  for (const s of stages) {
    if (s.status !== 'fail') continue;
    const iso = s.statuses !== undefined ? s.statuses.isolated : s.isolated === null ? null : verdict(s.isolated, policy, { stage: s.name, mode: 'isolated' });
    const scoringBug = (s.flips?.accumulated?.scoring_bug ?? 0) > 0 || (s.flips?.isolated?.scoring_bug ?? 0) > 0;
    const ownFailure = iso === null || iso === 'fail' || scoringBug;
    if (!ownFailure && root !== null) out.set(s.name, root);
    else root = s.name;
  }
  return out;
}

/** The stages that fail on their own: every failing stage that is not carried. */
export function rootFailures<S extends CarriedInput & { carried_from?: string }>(stages: readonly S[]): S[] {
  return stages.filter((s) => s.status === 'fail' && s.carried_from === undefined);
}
