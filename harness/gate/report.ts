/**
 * The gate's report over every acceptance prompt (schema layerdiff.gate-report/1): the prompts' own reports
 * (layerdiff.report/1) in prompt order, and their causes merged — a bug in layer 1 shows in every prompt, and
 * reads as one cause that names the prompts it showed in, not six near-identical paragraphs.
 */
import type { Diagnosis } from '../compare/diagnose.js';
import type { Policy } from '../compare/policy.js';
import type { DeviceIdentity } from '../runner/backend.js';
import type { Report } from '../runner/report.js';
import { toolVersion } from '../version.js';

export const GATE_REPORT_SCHEMA = 'layerdiff.gate-report/1';

export interface GateCause {
  stage: string;
  cause: Diagnosis['cause'];
  source: Diagnosis['source'];
  substage?: string;
  /** the prompts whose diagnosis named this cause at this stage, in prompt order */
  prompts: string[];
  /** the first prompt's evidence; `same_evidence` says whether every other prompt's reads the same */
  evidence: string;
  same_evidence: boolean;
  hint?: string;
}

export interface GatePrompt {
  name: string;
  verdict: 'pass' | 'fail';
  report: Report;
}

export interface GateReport {
  schema: typeof GATE_REPORT_SCHEMA;
  tool: { name: 'layerdiff'; version: string };
  model: Report['model'];
  device: DeviceIdentity;
  policy: Policy;
  verdict: 'pass' | 'fail';
  /** the acceptance record (null: a shard or a reference-side run, which write none): written on pass only */
  record: { path: string | null; written: boolean };
  prompts: GatePrompt[];
  causes: GateCause[];
  elapsed_s: number;
}

/** Causes keyed by (stage, cause, sub-stage, source): each once, with the prompts it came from. */
export function mergeCauses(prompts: ReadonlyArray<{ name: string; report: Report }>): GateCause[] {
  const out = new Map<string, GateCause>();
  for (const p of prompts) {
    for (const d of p.report.diagnosis) {
      const key = [d.stage, d.cause, d.substage ?? '', d.source].join('\u0000');
      const c = out.get(key);
      if (c === undefined) {
        out.set(key, { stage: d.stage, cause: d.cause, source: d.source, ...(d.substage !== undefined ? { substage: d.substage } : {}), prompts: [p.name], evidence: d.evidence, same_evidence: true, ...(d.hint !== undefined ? { hint: d.hint } : {}) });
      } else {
        c.prompts.push(p.name);
        if (d.evidence !== c.evidence) c.same_evidence = false;
      }
    }
  }
  return [...out.values()];
}

export function buildGateReport(a: { prompts: GatePrompt[]; device: DeviceIdentity; policy: Policy; record: string | null; written: boolean; elapsedMs: number }): GateReport {
  const first = a.prompts[0]?.report;
  return {
    schema: GATE_REPORT_SCHEMA,
    tool: { name: 'layerdiff', version: toolVersion() },
    model: first.model,
    device: a.device,
    policy: a.policy,
    verdict: a.prompts.every((p) => p.verdict === 'pass') ? 'pass' : 'fail',
    record: { path: a.record, written: a.written },
    prompts: a.prompts,
    causes: mergeCauses(a.prompts),
    elapsed_s: Math.round(a.elapsedMs) / 1000,
  };
}
