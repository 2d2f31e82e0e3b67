/**
 * What a gate concludes from its prompts, in one place for the single-machine gate and for `gate --merge`:
 * each prompt's summary row, the verdict rule (the record is written only when no prompt failed), and the
 * record built from the prompts' summaries. A merged record goes through exactly these functions, so it
 * carries the same fields and obeys the same rule as one written by a single gate.
 */
import { judgedKlP99 } from '../compare/metrics.js';
import type { Policy } from '../compare/policy.js';
import type { Questions } from '../compare/questions.js';
import type { DeviceIdentity } from '../runner/backend.js';
import type { Report } from '../runner/report.js';
import { type AcceptanceRecord, type PromptSummary, RECORD_SCHEMA, reportDigest, sign } from './record.js';

export function summarize(name: string, r: Report, policy: Policy, sha: string): PromptSummary {
  // A non-finite metric (device NaN/Inf) outranks every number; it is recorded as null (JSON has no Inf).
  let worst = { stage: r.stages[0]?.name ?? '-', rank: -Infinity, value: null as number | null };
  let warnings = 0;
  for (const s of r.stages) {
    if (s.status === 'warn') warnings++;
    // the judged modes: drift (forced) and own error; the free accumulated run answers behaviour
    for (const m of [s.accumulated_forced ?? s.accumulated, s.isolated]) {
      if (m === null) continue;
      const v = m[policy.metric];
      const rank = m.nan.device + m.inf.device > 0 || !Number.isFinite(v) ? Infinity : v;
      if (rank > worst.rank) worst = { stage: s.name, rank, value: Number.isFinite(rank) ? v : null };
    }
  }
  return {
    name,
    tokens: r.input.tokens.length,
    verdict: r.verdict,
    warnings,
    worst: { stage: worst.stage, value: worst.value },
    ...(r.questions !== null ? { questions: questionSummary(r.questions) } : {}),
    report_sha256: sha,
  };
}

const finite = (x: number | null | undefined): number | null => (x !== null && x !== undefined && Number.isFinite(x) ? x : null);

/** The three answers with their figures, JSON-safe (a non-finite figure is null: the record is canonical JSON). */
export function questionSummary(q: Questions): NonNullable<PromptSummary['questions']> {
  const num = (a: Questions['own_error']) => ({
    status: a.status,
    first_failure: a.first_failure,
    worst: a.worst === null ? null : { stage: a.worst.stage, metric: a.worst.metric, error: finite(a.worst.error), floor: finite(a.worst.floor), ratio: finite(a.worst.ratio) },
  });
  const b = q.behaviour;
  return {
    own_error: num(q.own_error),
    drift: num(q.drift),
    behaviour: {
      status: b.status,
      top1_agreement: finite(b.logits?.top1_agreement),
      kl_mean: finite(b.logits?.kl_mean),
      kl_p99: finite(b.logits ? judgedKlP99(b.logits) : null),
      flips: b.flips.count,
      benign: b.flips.benign,
      scoring_bug: b.flips.scoring_bug,
      unjudged: b.flips.unjudged,
      first_flip: b.first_flip,
    },
  };
}

/** The verdict rule: the prompts that keep the record from being written (none: the gate passes). */
export function failedPrompts(summaries: readonly PromptSummary[]): PromptSummary[] {
  return summaries.filter((s) => s.verdict !== 'pass');
}

/** SHA-256 over the per-prompt report digests, in prompt order (record.ts checks it with the same function). */
export { reportDigest };

export interface RecordInput {
  toolVersion: string;
  /** the gate's build (backendBuild) */
  build: string;
  model: AcceptanceRecord['model'];
  device: DeviceIdentity;
  policy: Policy;
  promptSource: string;
  /** every prompt of the set, in order */
  summaries: PromptSummary[];
  weights: AcceptanceRecord['acceptance']['weights'];
  /** when the gate started (the earliest shard's start for a merged one) */
  started: Date;
  key: string | null;
  /** the FP16 cache the gate compared with the checkpoint (gate --fp16-cache) */
  fp16Cache?: AcceptanceRecord['fp16_cache'];
}

/** The passing record over these prompts; calling it while a prompt failed is a bug of the caller. */
export function buildRecord(r: RecordInput): AcceptanceRecord {
  const failed = failedPrompts(r.summaries);
  if (failed.length > 0) throw new Error(`buildRecord: ${failed.map((s) => s.name).join(', ')} failed; a record is only built for a passing gate`);
  return sign(
    {
      schema: RECORD_SCHEMA,
      verdict: 'pass',
      tool: { name: 'layerdiff', version: r.toolVersion, build: r.build },
      model: r.model,
      device: r.device,
      policy: r.policy,
      acceptance: { mode: 'both', layers: 'all', prompt_source: r.promptSource, prompts: r.summaries, weights: r.weights },
      report_digest: reportDigest(r.summaries),
      ...(r.fp16Cache !== undefined ? { fp16_cache: r.fp16Cache } : {}),
      created: r.started.toISOString(),
    },
    r.key,
  );
}
