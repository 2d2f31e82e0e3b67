/**
 * The JSON report (schema layerdiff.report/1, DESIGN §7): one record that every printer renders.
 */
import * as os from 'node:os';
import type { Diagnosis } from '../compare/diagnose.js';
import type { Policy } from '../compare/policy.js';
import { toolVersion } from '../version.js';
import type { DeviceIdentity } from './backend.js';
import type { RunResult, StageResult } from './run.js';

export const REPORT_SCHEMA = 'layerdiff.report/1';

export interface Report {
  schema: typeof REPORT_SCHEMA;
  tool: { name: 'layerdiff'; version: string };
  model: { path: string; architecture: string; fingerprint: string; fingerprint_kind: string; num_layers: number };
  input: { tokens: number[]; prompt?: string };
  backends: { reference: { name: 'reference-cpu'; dtype: 'fp32' }; device: DeviceIdentity };
  policy: Policy;
  mode: string;
  layers: string;
  injected: { fault: string; layer: number | null } | null;
  stages: StageResult[];
  first_failure: string | null;
  verdict: 'pass' | 'fail';
  diagnosis: Diagnosis[];
  environment: Record<string, string | number>;
}

export interface ReportInput {
  modelPath: string;
  architecture: string;
  fingerprint: { value: string; kind: string };
  numLayers: number;
  tokens: number[];
  prompt?: string;
  device: DeviceIdentity;
  policy: Policy;
  mode: string;
  layers: string;
  injected: Report['injected'];
  run: RunResult;
  diagnosis: Diagnosis[];
  elapsedMs: number;
}

export function buildReport(r: ReportInput): Report {
  return {
    schema: REPORT_SCHEMA,
    tool: { name: 'layerdiff', version: toolVersion() },
    model: { path: r.modelPath, architecture: r.architecture, fingerprint: r.fingerprint.value, fingerprint_kind: r.fingerprint.kind, num_layers: r.numLayers },
    input: r.prompt !== undefined ? { tokens: r.tokens, prompt: r.prompt } : { tokens: r.tokens },
    backends: { reference: { name: 'reference-cpu', dtype: 'fp32' }, device: r.device },
    policy: r.policy,
    mode: r.mode,
    layers: r.layers,
    injected: r.injected,
    stages: r.run.stages,
    first_failure: r.run.first_failure,
    verdict: r.run.verdict,
    diagnosis: r.diagnosis,
    environment: {
      node: process.version,
      platform: `${os.platform()} ${os.release()} ${os.arch()}`,
      cpu: os.cpus()[0]?.model ?? 'unknown',
      cores: os.cpus().length,
      memory_gib: Math.round(os.totalmem() / 2 ** 30),
      started: new Date(Date.now() - r.elapsedMs).toISOString(),
      elapsed_s: Math.round(r.elapsedMs) / 1000,
    },
  };
}
