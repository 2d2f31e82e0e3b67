/**
 * Map what the comparison saw to a likely cause (DESIGN §9 ids). Isolated mode decides: a stage that fails
 * on the reference's own input has a bug of its own; one that fails only accumulated is drift.
 */
import type { RunResult, StageResult } from '../runner/run.js';
import { newNonFinite, type Policy } from './policy.js';
import type { StageMetrics } from './metrics.js';

export interface Diagnosis {
  stage: string;
  cause: string;
  evidence: string;
}

const fmt = (x: number) => (Number.isFinite(x) ? x.toPrecision(3) : String(x));

export function diagnose(run: RunResult, policy: Policy): Diagnosis[] {
  const out: Diagnosis[] = [];
  const first = run.stages.find((s) => s.name === run.first_failure);
  if (first === undefined) return out;
  const m: StageMetrics = (first.isolated ?? first.accumulated)!;
  const mode = first.isolated ? 'isolated' : 'accumulated';
  if (newNonFinite(m)) {
    out.push({
      stage: first.name,
      cause: 'fp16-overflow',
      evidence: `${m.inf.device} Inf and ${m.nan.device} NaN in the device output (reference: ${m.inf.reference} Inf, ${m.nan.reference} NaN); reference max |r| = ${fmt(m.max_ref)} against the FP16 limit 65504`,
    });
    return out;
  }
  const isoFails = first.isolated !== null && first.isolated[policy.metric] > policy.fail_above;
  if (!isoFails && first.accumulated !== null) {
    out.push({ stage: first.name, cause: 'unknown', evidence: `fails only in accumulated mode (isolated ${policy.metric} ${fmt(first.isolated?.[policy.metric] ?? NaN)}): error carried in from earlier stages, drift rather than a bug in this stage` });
    return out;
  }
  out.push({
    stage: first.name,
    cause: 'unknown',
    evidence: `${mode} ${policy.metric} ${fmt(m[policy.metric])} (max_abs ${fmt(m.max_abs)} at ${JSON.stringify(m.max_at)}, max |r| ${fmt(m.max_ref)}, cosine ${fmt(m.cosine)}); no recognised signature`,
  });
  return out;
}

export function stageCounts(stages: StageResult[]): Record<'pass' | 'warn' | 'fail', number> {
  const c = { pass: 0, warn: 0, fail: 0 };
  for (const s of stages) c[s.status]++;
  return c;
}
