/** `layerdiff diff [model-dir]`: per-stage diff, table on stdout, reports on request, exit 0/1. */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { diagnose } from '../compare/diagnose.js';
import { makePolicy } from '../compare/policy.js';
import { ExitCode, InputError } from '../errors.js';
import { Checkpoint } from '../io/checkpoint.js';
import { quickFingerprint } from '../io/fingerprint.js';
import { selectBackend } from '../runner/backend.js';
import { architectureOf, openModel } from '../runner/model.js';
import { buildReport, type Report } from '../runner/report.js';
import { type Mode, runDiff, stageNames } from '../runner/run.js';
import { parseInject } from '../../device-hip/faults.js';
import { renderTable } from '../../reports/table.js';
import { writeJsonReport } from '../../reports/json.js';
import { resolveInput } from './input.js';
import { ProgressLine } from './progress.js';

export interface DiffArgs {
  model: string;
  prompt?: string;
  tokens?: string;
  layers: string;
  maxTokens?: number;
  device: string;
  mode: string;
  metric: string;
  failAbove: number;
  warnAbove: number;
  json?: string;
  dump?: string;
  inject?: string;
  freeSelection: boolean;
}

export function parseLayers(spec: string, n: number): { from: number; to: number } | null {
  if (spec === 'all') return null;
  const m = /^(\d+)(?:-(\d+))?$/.exec(spec);
  if (m === null) throw new InputError(`--layers ${spec}: expected all, N or A-B`);
  const from = Number(m[1]);
  const to = m[2] === undefined ? from : Number(m[2]);
  if (from > to || to >= n) throw new InputError(`--layers ${spec}: the model has layers 0-${n - 1}`);
  return { from, to };
}

export async function runDiffCommand(a: DiffArgs): Promise<{ code: ExitCode; report: Report }> {
  const started = Date.now();
  if (!['both', 'accumulated', 'isolated'].includes(a.mode)) throw new InputError(`--mode ${a.mode}: expected both, accumulated or isolated`);
  const policy = makePolicy(a.metric, a.failAbove, a.warnAbove);
  const ck = Checkpoint.open(a.model);
  try {
    const backend = selectBackend(a.device);
    const faults = a.inject !== undefined ? parseInject(a.inject, Number.MAX_SAFE_INTEGER) : null;
    const model = openModel(ck, backend, faults);
    if (faults?.layer != null && faults.layer >= model.numLayers) throw new InputError(`--inject ${a.inject}: the model has layers 0-${model.numLayers - 1}`);
    const layers = parseLayers(a.layers, model.numLayers);
    const input = await resolveInput(ck.dir, model.vocab, a);
    const outputs = [a.json, a.dump].filter((p): p is string => p !== undefined);
    for (const p of outputs) assertOutside(p, ck.dir);

    const staging = a.dump !== undefined ? path.join(a.dump, `.layerdiff-partial-${process.pid}`) : null;
    const progress = new ProgressLine(ck, stageNames(model.numLayers, layers).length);
    let run;
    try {
      run = runDiff(model, { tokens: input.tokens, mode: a.mode as Mode, layers, policy, freeSelection: a.freeSelection, dumpDir: staging, onStage: (p) => progress.update(p) });
    } catch (e) {
      if (staging !== null) fs.rmSync(staging, { recursive: true, force: true });
      throw e;
    } finally {
      progress.done();
    }
    if (staging !== null) {
      for (const f of fs.readdirSync(staging)) fs.renameSync(path.join(staging, f), path.join(a.dump!, f));
      fs.rmSync(staging, { recursive: true, force: true });
    }
    const report = buildReport({
      modelPath: path.resolve(ck.dir),
      architecture: model.architecture,
      fingerprint: { value: quickFingerprint(ck), kind: 'config+index+shard headers' },
      numLayers: model.numLayers,
      tokens: input.tokens,
      prompt: input.prompt,
      device: backend.identity,
      policy,
      mode: a.mode,
      layers: a.layers,
      injected: faults,
      run,
      diagnosis: diagnose(run, policy),
      elapsedMs: Date.now() - started,
    });
    if (a.json !== undefined) writeJsonReport(a.json, report);
    process.stdout.write(renderTable(report, process.stdout.isTTY === true) + '\n');
    return { code: run.verdict === 'pass' ? ExitCode.pass : ExitCode.stageFailed, report };
  } finally {
    ck.close();
  }
}

/** No command ever writes inside the model directory. */
export function assertOutside(target: string, modelDir: string): void {
  const rel = path.relative(path.resolve(modelDir), path.resolve(target));
  if (rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel))) {
    throw new InputError(`refusing to write ${target}: it is inside the model directory ${modelDir}, which layerdiff never modifies`);
  }
}

export { architectureOf };
