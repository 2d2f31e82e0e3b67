/**
 * Verdicts (DESIGN §5). Thresholds are data, carried into every report. A device NaN/Inf where the reference
 * has none fails the stage whatever the metric says.
 */
import { InputError } from '../errors.js';
import type { StageMetrics } from './metrics.js';

export const METRICS = ['max_abs', 'mean_abs', 'rms', 'rel_l2'] as const;
export type MetricName = (typeof METRICS)[number];

export interface Policy {
  metric: MetricName;
  /** fail when the metric exceeds this (default 0.1: a 0.1 shift in a hidden state moves tokens) */
  fail_above: number;
  /** warn above this (default 1e-2: an order of magnitude above what FP16 storage costs on O(1) activations) */
  warn_above: number;
}

export const DEFAULT_POLICY: Policy = { metric: 'max_abs', fail_above: 0.1, warn_above: 0.01 };

export function makePolicy(metric: string, failAbove: number, warnAbove: number): Policy {
  if (!(METRICS as readonly string[]).includes(metric)) throw new InputError(`--metric ${metric}: expected one of ${METRICS.join(', ')}`);
  if (!(failAbove > 0) || !Number.isFinite(failAbove)) throw new InputError(`--fail-above ${failAbove}: expected a positive number`);
  if (!(warnAbove >= 0) || !Number.isFinite(warnAbove)) throw new InputError(`--warn-above ${warnAbove}: expected a non-negative number`);
  if (warnAbove > failAbove) throw new InputError(`--warn-above ${warnAbove} is above --fail-above ${failAbove}`);
  return { metric: metric as MetricName, fail_above: failAbove, warn_above: warnAbove };
}

export type Status = 'pass' | 'warn' | 'fail';

export function newNonFinite(m: StageMetrics): boolean {
  return m.nan.device > m.nan.reference || m.inf.device > m.inf.reference;
}

export function verdict(m: StageMetrics | null, p: Policy): Status {
  if (m === null) return 'pass';
  if (newNonFinite(m)) return 'fail';
  const v = m[p.metric];
  // NaN: the paths disagree on a non-finite element (also one the reference has and the device not)
  if (Number.isNaN(v) || v > p.fail_above) return 'fail';
  if (v > p.warn_above) return 'warn';
  return 'pass';
}

export function worst(a: Status, b: Status): Status {
  const rank = { pass: 0, warn: 1, fail: 2 } as const;
  return rank[a] >= rank[b] ? a : b;
}
