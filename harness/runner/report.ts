/**
 * The JSON report (schema layerdiff.report/1, DESIGN §7): one record that every printer renders.
 */
import * as os from 'node:os';
import type { Diagnosis } from '../compare/diagnose.js';
import type { Policy } from '../compare/policy.js';
import type { Questions } from '../compare/questions.js';
import { toolVersion } from '../version.js';
import type { WeightsReport } from '../weights/check.js';
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
  /** the three questions, each with its status and figures (null: a run built without them) */
  questions: Questions | null;
  diagnosis: Diagnosis[];
  /** weights-first check of every quantized tensor in the range (null with --no-weights) */
  weights: WeightsReport | null;
  /** --repeat N: the determinism probe's summary (per-stage spreads are in stages[].spread) */
  determinism: Determinism | null;
  /** --save-golden / --golden */
  golden: { dir: string; action: 'saved' | 'compared' } | null;
  /** --repro: where the first failing layer's bundle went */
  repro: { dir: string; stage: string } | null;
  environment: Record<string, string | number>;
}

export interface Determinism {
  runs: number;
  /** largest run-to-run |Δ| over every stage and mode (0: the device path is deterministic) */
  max_spread: number;
  /** stages where any repeat differed in any bit */
  stages_with_spread: string[];
  /** OpenMP threads of the emulated backend: its reductions must not change results run to run */
  threads: number | null;
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
  weights?: WeightsReport | null;
  repeat?: number;
  golden?: Report['golden'];
  repro?: Report['repro'];
  elapsedMs: number;
}

export function determinismOf(run: RunResult, runs: number, threads: number | null): Determinism | null {
  if (runs < 2) return null;
  let max = 0;
  const differ: string[] = [];
  for (const s of run.stages) {
    const sp = [s.spread?.accumulated, s.spread?.isolated].filter((x) => x != null);
    for (const x of sp) max = Math.max(max, x.max_abs);
    if (sp.some((x) => x.differing > 0)) differ.push(s.name);
  }
  return { runs, max_spread: max, stages_with_spread: differ, threads };
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
    questions: r.run.questions ?? null,
    diagnosis: r.diagnosis,
    weights: r.weights ?? null,
    determinism: determinismOf(r.run, r.repeat ?? 1, r.device.threads ?? null),
    golden: r.golden ?? null,
    repro: r.repro ?? null,
    environment: {
      node: process.version,
      platform: `${os.platform()} ${os.release()} ${os.arch()}`,
      cpu: os.cpus()[0]?.model ?? 'unknown',
      cores: os.cpus().length,
      memory_gib: Math.round(os.totalmem() / 2 ** 30),
      started: new Date(Date.now() - r.elapsedMs).toISOString(),
      elapsed_s: Math.round(r.elapsedMs) / 1000,
      ...(process.env.OMP_NUM_THREADS !== undefined ? { omp_num_threads: process.env.OMP_NUM_THREADS } : {}),
    },
  };
}
