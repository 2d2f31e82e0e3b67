/**
 * The three questions of the verdict (DESIGN §5), answered from a run's stages — shared by diff, gate and
 * `layerdiff compare` so every command judges the same way:
 *   - own_error (isolated: reference inputs, reference choices): does any stage have a bug of its own?
 *   - drift (accumulated-forced: the device on its own output, the reference's choices): does FP16 drift
 *     through depth stay within what correct FP16 storage carries?
 *   - behaviour (free accumulated: what the user's model does): do the logits agree (top-1, KL per token),
 *     and is every top-k flip a near-tie rather than a scoring bug?
 * The run passes when every question that ran passes.
 */
import type { StageResult } from '../runner/run.js';
import { judgedKlMean, judgedKlP99, judgedTop1, type LogitMetrics } from './metrics.js';
import type { Policy } from './policy.js';

export type Answer = 'pass' | 'fail' | 'not-run';

export interface StageWorst {
  stage: string;
  metric: string;
  error: number;
  /** the FP16 floor there (null: none measured) */
  floor: number | null;
  /** error / floor (null: no floor) */
  ratio: number | null;
}

export interface NumericAnswer {
  status: Answer;
  mode: 'isolated' | 'accumulated-forced';
  first_failure: string | null;
  /** the stage with the largest error / floor (or error, without floors) */
  worst: StageWorst | null;
}

export interface BehaviourAnswer {
  status: Answer;
  mode: 'accumulated';
  logits: LogitMetrics | null;
  thresholds: { top1_min: number; kl_mean_max: number; kl_p99_max: number; flip_factor: number };
  flips: { count: number; benign: number; scoring_bug: number; unjudged: number };
  /** the first stage where a top-k choice flipped (free accumulated) */
  first_flip: string | null;
  /** the first stage with a scoring-bug flip */
  first_scoring_bug: string | null;
  /** why it failed, one line each */
  reasons: string[];
}

export interface Questions {
  own_error: NumericAnswer;
  drift: NumericAnswer;
  behaviour: BehaviourAnswer;
}

type ModeKey = 'isolated' | 'accumulated_forced';

function numeric(stages: StageResult[], key: ModeKey, mode: NumericAnswer['mode'], policy: Policy): NumericAnswer {
  const ran = stages.filter((s) => s[key] !== null && s[key] !== undefined);
  if (ran.length === 0) return { status: 'not-run', mode, first_failure: null, worst: null };
  // own error also fails on a scoring-bug flip of isolated --free-selection
  const fails = (s: StageResult) => s.statuses?.[key] === 'fail' || (key === 'isolated' && (s.flips?.isolated?.scoring_bug ?? 0) > 0);
  const first = ran.find(fails);
  let worst: StageWorst | null = null;
  for (const s of ran) {
    // with a floor, the figures are the ratio's (ratio_metric); without, the judged metric's
    const metric = s.floor_ratio?.[key] != null ? (s.ratio_metric ?? policy.ratio_metric) : (s.judged_by ?? policy.metric);
    const error = s[key]![metric];
    const floor = s.floor?.[key]?.[metric] ?? null;
    const ratio = s.floor_ratio?.[key] ?? null;
    const score = ratio ?? error;
    const best = worst === null ? -Infinity : (worst.ratio ?? worst.error);
    if (!Number.isNaN(score) && score > best) worst = { stage: s.name, metric, error, floor, ratio };
  }
  return { status: first !== undefined ? 'fail' : 'pass', mode, first_failure: first?.name ?? null, worst };
}

export function answerQuestions(stages: StageResult[], policy: Policy): Questions {
  const b = policy.behaviour;
  const thresholds = { top1_min: b.top1_min, kl_mean_max: b.kl_mean_max, kl_p99_max: b.kl_p99_max, flip_factor: b.flip_factor };
  const accRan = stages.some((s) => s.accumulated !== null);
  const flips = { count: 0, benign: 0, scoring_bug: 0, unjudged: 0 };
  let firstFlip: string | null = null;
  let firstBug: string | null = null;
  for (const s of stages) {
    const f = s.flips?.accumulated;
    if (f === undefined || f === null) continue;
    flips.count += f.count;
    flips.benign += f.benign;
    flips.scoring_bug += f.scoring_bug;
    flips.unjudged += f.unjudged;
    firstFlip ??= s.name;
    if (f.scoring_bug > 0) firstBug ??= s.name;
  }
  const logits = stages.find((s) => s.name === 'logits')?.logits?.accumulated ?? null;
  const reasons: string[] = [];
  if (logits !== null) {
    reasons.push(...logitReasons(logits, b));
  }
  const nonFinite = stages.find((s) => s.statuses?.accumulated === 'fail' && s.accumulated !== null && (s.accumulated.nan.device > s.accumulated.nan.reference || s.accumulated.inf.device > s.accumulated.inf.reference));
  if (nonFinite !== undefined) reasons.push(`new NaN/Inf at ${nonFinite.name}`);
  if (firstBug !== null) reasons.push(`${flips.scoring_bug} scoring-bug flip${flips.scoring_bug === 1 ? '' : 's'}, first at ${firstBug}`);
  const status: Answer = !accRan ? 'not-run' : reasons.length > 0 ? 'fail' : 'pass';
  return {
    own_error: numeric(stages, 'isolated', 'isolated', policy),
    drift: numeric(stages, 'accumulated_forced', 'accumulated-forced', policy),
    behaviour: { status, mode: 'accumulated', logits, thresholds, flips, first_flip: firstFlip, first_scoring_bug: firstBug, reasons },
  };
}

/**
 * Why accumulated-mode logits fail the behaviour thresholds (none: they pass): top-1 agreement, mean and p99 KL,
 * each over the tokens without a benign flip where that was measured (compare/metrics.ts). The one rule both
 * the logits stage's status and the behaviour question apply.
 */
export function logitReasons(logits: LogitMetrics, b: Questions['behaviour']['thresholds']): string[] {
  const reasons: string[] = [];
  const over = logits.kl_p99_unflipped !== undefined ? ' (tokens without a benign flip)' : '';
  const top1 = judgedTop1(logits);
  const ties = (logits.top1_near_ties ?? 0) > 0 ? ` (${logits.top1_near_ties} near-tie${logits.top1_near_ties === 1 ? '' : 's'} left out)` : '';
  if (top1 < b.top1_min) reasons.push(`top-1 agreement ${(top1 * 100).toFixed(1)}%${over}${ties} < ${(b.top1_min * 100).toFixed(1)}%`);
  const mean = judgedKlMean(logits);
  if (!(mean <= b.kl_mean_max)) reasons.push(`mean KL ${mean.toExponential(2)}${over} > ${b.kl_mean_max}`);
  const p99 = judgedKlP99(logits);
  if (!(p99 <= b.kl_p99_max)) reasons.push(`p99 KL ${p99.toExponential(2)}${over} > ${b.kl_p99_max}`);
  return reasons;
}

/** The run's verdict: every question that ran passes (and at least one ran). */
export function questionsPass(q: Questions): boolean {
  const all = [q.own_error.status, q.drift.status, q.behaviour.status];
  return all.every((s) => s !== 'fail') && all.some((s) => s === 'pass');
}
