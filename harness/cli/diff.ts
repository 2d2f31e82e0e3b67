/**
 * `layerdiff diff [model-dir]`: weights first, then the per-stage diff; table on stdout, reports on request,
 * exit 0/1. Every output (reports, dumps, golden runs, repro bundles) is written only once the run has
 * completed — each file atomically, each folder by a rename — so a failed or interrupted run leaves none.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { diagnose } from '../compare/diagnose.js';
import { resolvePolicy } from '../compare/policy.js';
import { ExitCode, InputError } from '../errors.js';
import { Checkpoint } from '../io/checkpoint.js';
import { quickFingerprint } from '../io/fingerprint.js';
import { assertDistinctPaths, assertFileTarget, assertOutsideModel, checkOutputs, type NamedPath } from '../io/writer.js';
import { writeReproBundle } from '../repro/bundle.js';
import { assertNewOrEmptyDir } from '../repro/files.js';
import { GoldenWriter, openGolden } from '../repro/golden.js';
import { type DeviceBackend, selectBackend } from '../runner/backend.js';
import { architectureOf, openModel } from '../runner/model.js';
import { buildReport, type Report } from '../runner/report.js';
import { type Mode, MODES, runDiff, type RunResult, stageNames } from '../runner/run.js';
import { assertNoNanCodes, checkWeights, type WeightsReport } from '../weights/check.js';
import { assertInjectApplies } from '../weights/inject_applies.js';
export { assertInjectApplies };
import { numericsKey, recordCheck, reusedCheck, weightsCacheInside, type WeightsCheckKey } from '../weights/reuse.js';
import { backendBuild } from '../runner/build.js';
import { openCheckpointContentDigest } from '../gate/fingerprint.js';
import { type FaultPlan, parseInject } from '../faults/plan.js';
import { renderTable, renderVerdict } from '../../reports/table.js';
import { stdoutTaken, writeReports } from '../../reports/writers.js';
import { checkReportTargets } from './outputs.js';
import { terminal, useColour } from './terminal.js';
import { type ResolvedInput, resolveInput } from './input.js';
import { assertDumpTarget, DUMP_MANIFEST, DUMP_SCHEMA, type DumpManifest, removeStaleStages } from '../repro/dump.js';
import { toolVersion } from '../version.js';
import { ProgressLine } from './progress.js';
import { prefixesBefore } from '../compare/forced_rows.js';

export interface DiffArgs {
  model: string;
  prompt?: string;
  tokens?: string;
  layers: string;
  maxTokens?: number;
  device: string;
  mode: string;
  /** a fixed rule (any of the three given): the metric against fail/warn thresholds, no FP16 floor */
  metric?: string;
  failAbove?: number;
  warnAbove?: number;
  /** --policy FILE (JSON, compare/policy.ts); without it and without the flags, the default floor policy */
  policy?: string;
  json?: string;
  dump?: string;
  inject?: string;
  freeSelection: boolean;
  /** JUnit XML, one testcase per stage */
  junit?: string;
  /** self-contained HTML report */
  html?: string;
  /** Markdown summary for CI job pages */
  summary?: string;
  /** export the first failing layer as a repro bundle */
  repro?: string;
  /** device runs per stage (determinism probe); default 1 */
  repeat?: number;
  /** save the reference stage outputs as a golden run */
  saveGolden?: string;
  /** take the reference from a golden run */
  golden?: string;
  /** drill into failing layers' sub-stages (default true) */
  drill?: boolean;
  /** weights-first check (default true) */
  weights?: boolean;
  /** run the weights-first check even when this checkpoint and numerics build already passed it */
  recheckWeights?: boolean;
  /** stop at the first failing stage */
  failFast?: boolean;
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

const sameRange = (a: { from: number; to: number } | null, b: { from: number; to: number } | null) => (a === null ? b === null : b !== null && a.from === b.from && a.to === b.to);

export async function runDiffCommand(a: DiffArgs): Promise<{ code: ExitCode; report: Report }> {
  const started = Date.now();
  if (!(MODES as readonly string[]).includes(a.mode)) throw new InputError(`--mode ${a.mode}: expected ${MODES.join(', ')}`);
  const policy = resolvePolicy(a);
  const repeat = a.repeat ?? 1;
  if (!Number.isInteger(repeat) || repeat < 1 || repeat > 100) throw new InputError(`--repeat ${a.repeat}: expected an integer from 1 to 100`);
  if (a.golden !== undefined && a.saveGolden !== undefined) throw new InputError('give --golden or --save-golden, not both');
  const ck = Checkpoint.open(a.model);
  try {
    const backend = selectBackend(a.device);
    const faults = a.inject !== undefined ? parseInject(a.inject, Number.MAX_SAFE_INTEGER) : null;
    const model = openModel(ck, backend, faults);
    checkInjectFor(a.inject, faults, model);
    let layers = parseLayers(a.layers, model.numLayers);
    const fingerprint = quickFingerprint(ck);

    const golden = a.golden !== undefined ? openGolden(a.golden) : null;
    let input: ResolvedInput;
    if (golden !== null) {
      golden.checkModel(fingerprint, model.architecture, ck.dir);
      // the golden fixes the input and the range: a device run is only comparable on the same ones
      const g = golden.manifest;
      if (a.layers !== 'all' && !sameRange(layers, g.layers)) throw new InputError(`--layers ${a.layers}: the golden run holds ${golden.rangeText()}`);
      layers = g.layers;
      if (a.tokens !== undefined || a.prompt !== undefined || a.maxTokens !== undefined) {
        const given = await resolveInput(ck.dir, model.vocab, a, (n) => ck.readMeta(n));
        if (given.tokens.join(',') !== g.tokens.join(',')) throw new InputError(`--golden: the input differs from the golden run's ${g.tokens.length} tokens (omit --tokens/--prompt to use them)`);
      }
      input = g.prompt !== undefined ? { tokens: g.tokens, prompt: g.prompt } : { tokens: g.tokens };
    } else {
      input = await resolveInput(ck.dir, model.vocab, a, (n) => ck.readMeta(n));
    }

    const targets = { json: a.json, junit: a.junit, html: a.html, summary: a.summary };
    checkReportTargets(targets, (p) => assertOutsideModel(p, ck.dir));
    const outputs: NamedPath[] = [
      { option: '--json', path: a.json, kind: 'file' }, { option: '--junit', path: a.junit, kind: 'file' },
      { option: '--html', path: a.html, kind: 'file' }, { option: '--summary', path: a.summary, kind: 'file' },
      { option: '--dump', path: a.dump, kind: 'dir' }, { option: '--repro', path: a.repro, kind: 'dir' },
      { option: '--save-golden', path: a.saveGolden, kind: 'dir' },
    ];
    assertDistinctPaths(outputs, [{ option: '--policy', path: a.policy, kind: 'file' }, { option: '--golden', path: a.golden, kind: 'dir' }]);
    checkOutputs(ck.dir, outputs);
    const previousDump = a.dump !== undefined ? assertDumpTarget(a.dump) : [];
    if (a.repro !== undefined) assertNewOrEmptyDir(a.repro, '--repro');
    if (a.saveGolden !== undefined) assertNewOrEmptyDir(a.saveGolden, '--save-golden');

    const names = stageNames(model.numLayers, layers);
    const progress = new ProgressLine(ck, names.length);
    // Weights first: a decode bug is named from the weights before any activation can blur it.
    let weights: WeightsReport | null = null;
    if (a.weights !== false) {
      // shapes against the config first, so a wrong weight shape is named as such, not as a scale it then contradicts
      model.conformance();
      let wp: ProgressLine | null = null;
      // a check this checkpoint (same bytes) already passed with this numerics build is reused, unless a fault is
      // injected or --recheck-weights asks to run it (whose result then replaces what the key stored)
      const reuseKey = faults === null && !weightsCacheInside(ck.dir) ? weightsReuseKey(ck, backend, layers, model.numLayers) : null;
      weights = reuseKey === null || a.recheckWeights === true ? null : reusedCheck(reuseKey, ck.dir);
      try {
        weights ??= checkWeights(ck, backend.native, {
          layers,
          faults,
          numLayers: model.numLayers,
          fused: model.fusedLinears,
          onTensor: (name, done, total) => {
            wp ??= new ProgressLine(ck, total);
            wp.update({ stage: `weights ${name}`, done, total, elapsedMs: Date.now() - started });
          },
        });
      } finally {
        (wp as ProgressLine | null)?.done(); // set inside the callback, which TS cannot see: it would narrow wp to null
      }
      if (reuseKey !== null) recordCheck(reuseKey, weights, false, ck.dir);
      assertNoNanCodes(ck, weights);
      assertInjectApplies(a.inject, faults, weights);
    }

    const staging = a.dump !== undefined ? path.join(a.dump, `.layerdiff-partial-${process.pid}`) : null;
    const saver = a.saveGolden !== undefined ? new GoldenWriter(a.saveGolden) : null;
    let run: RunResult;
    try {
      run = runDiff(model, {
        tokens: input.tokens,
        mode: a.mode as Mode,
        layers,
        policy,
        freeSelection: a.freeSelection,
        dumpDir: staging,
        onStage: (p) => progress.update(p),
        drill: a.drill !== false,
        repeat,
        golden,
        saveGolden: saver,
        captureRepro: a.repro !== undefined,
        failFast: a.failFast === true,
      });
    } catch (e) {
      if (staging !== null) fs.rmSync(staging, { recursive: true, force: true });
      saver?.abort();
      throw e;
    } finally {
      progress.done();
    }
    if (staging !== null) {
      // what `layerdiff compare` needs to tell whose run a dump is: model, input, device, policy, mode
      const manifest: DumpManifest = {
        schema: DUMP_SCHEMA,
        tool: { name: 'layerdiff', version: toolVersion() },
        model: { path: path.resolve(ck.dir), architecture: model.architecture, fingerprint, num_layers: model.numLayers },
        input: input.prompt !== undefined ? { tokens: input.tokens, prompt: input.prompt } : { tokens: input.tokens },
        device: backend.identity,
        policy,
        mode: a.mode,
        injected: faults,
        stages: run.stages.map((s) => s.name),
        // what `compare` needs to judge these outputs as this run did: its floors, and where its free run flipped
        ...(run.stages.some((s) => s.floor !== undefined) ? { floors: Object.fromEntries(run.stages.filter((s) => s.floor !== undefined).map((s) => [s.name, { isolated: s.floor!.isolated ?? null, accumulated_forced: s.floor!.accumulated_forced ?? null }])) } : {}),
        ...(run.stages.some((s) => s.accumulated !== null)
          ? { free_flips: Object.fromEntries(run.stages.filter((s) => s.flips?.accumulated != null).map((s) => { const f = s.flips!.accumulated!; return [s.name, { tokens: f.tokens, benign: f.benign_tokens, scoring_bug: f.scoring_bug }]; })) }
          : {}),
      };
      fs.writeFileSync(path.join(staging, DUMP_MANIFEST), JSON.stringify(manifest, null, 2) + '\n');
      const written = new Set(fs.readdirSync(staging));
      for (const f of written) {
        assertFileTarget(path.join(a.dump!, f), '--dump'); // a previous dump's file may be replaced, a link or device not
        fs.renameSync(path.join(staging, f), path.join(a.dump!, f));
      }
      fs.rmSync(staging, { recursive: true, force: true });
      removeStaleStages(a.dump!, previousDump, written);
    }
    saver?.commit({
      model: { path: path.resolve(ck.dir), architecture: model.architecture, fingerprint, num_layers: model.numLayers },
      tokens: input.tokens,
      ...(input.prompt !== undefined ? { prompt: input.prompt } : {}),
      layers,
    });

    const cap = run.repro ?? null;
    if (a.repro !== undefined && cap === null) {
      process.stderr.write(`layerdiff: note: --repro ${a.repro}: ${run.verdict === 'pass' ? 'the run passed' : `no layer failed (first failure: ${run.first_failure})`}; no bundle written\n`);
    }
    const report = buildReport({
      modelPath: path.resolve(ck.dir),
      architecture: model.architecture,
      fingerprint: { value: fingerprint, kind: 'config+index+shard headers' },
      numLayers: model.numLayers,
      tokens: input.tokens,
      prompt: input.prompt,
      device: backend.identity,
      policy,
      mode: a.mode,
      layers: golden === null ? a.layers : layers === null ? 'all' : `${layers.from}-${layers.to}`,
      injected: faults,
      run,
      diagnosis: diagnose(run, policy, weights),
      weights,
      repeat,
      golden: a.golden !== undefined ? { dir: path.resolve(a.golden), action: 'compared' } : a.saveGolden !== undefined ? { dir: path.resolve(a.saveGolden), action: 'saved' } : null,
      repro: cap !== null && a.repro !== undefined ? { dir: path.resolve(a.repro), stage: cap.stage } : null,
      elapsedMs: Date.now() - started,
    });
    if (cap !== null && a.repro !== undefined) {
      const st = report.stages.find((s) => s.name === cap.stage)!;
      writeReproBundle(a.repro, ck, cap, {
        architecture: model.architecture,
        source: { path: report.model.path, fingerprint },
        tokens: input.tokens,
        ...(input.prompt !== undefined ? { prompt: input.prompt } : {}),
        injected: faults,
        policy,
        mode: a.mode as Mode,
        freeSelection: a.freeSelection,
        device: backend.identity.name,
        recorded: {
          status: st.status, accumulated: st.accumulated, isolated: st.isolated, drill: st.drill ?? null,
          floor: st.floor ?? null,
          free_prefix: ((p) => (Number.isFinite(p) ? p : null))(prefixesBefore(report.stages.map((s) => s.name), (n) => report.stages.find((s) => s.name === n)?.flips?.accumulated?.tokens ?? []).get(st.name)!),
        },
      });
    }
    writeReports(report, targets);
    // with a report on stdout (`--json -`), the table goes to stderr; -q keeps the verdict line only
    const human = stdoutTaken(targets) ? process.stderr : process.stdout;
    const colour = useColour(human);
    human.write((terminal().quiet ? renderVerdict(report, colour) : renderTable(report, colour, terminal().verbose)) + '\n');
    return { code: run.verdict === 'pass' ? ExitCode.pass : ExitCode.stageFailed, report };
  } finally {
    ck.close();
  }
}

/** No command ever writes inside the model directory (realpath of both: a symlinked alias is the same folder). */
export { assertOutsideModel as assertOutside } from '../io/writer.js';

export { architectureOf };

/**
 * An injected fault must be one this model's device path simulates at a layer it has (diff and gate): the
 * verdict's faults (issue 10) exist in some device paths only, and elsewhere the injection would be a
 * silent no-op.
 */
export function checkInjectFor(text: string | undefined, faults: FaultPlan | null, model: { numLayers: number; architecture: string }): void {
  if (faults === null) return;
  if (faults.layer != null && faults.layer >= model.numLayers) throw new InputError(`--inject ${text}: the model has layers 0-${model.numLayers - 1}`);
  const simulatedIn: Record<string, string[]> = { 'fp16-accumulate': ['llama', 'deepseek_v4'], 'rope-angle-fp16': ['llama', 'deepseek_v4'], 'router-bias-dropped': ['deepseek_v4'] };
  const where = simulatedIn[faults.fault];
  if (where !== undefined && !where.includes(model.architecture)) {
    throw new InputError(`--inject ${text}: not simulated on ${model.architecture} (only ${where.join(', ')})${faults.fault === 'router-bias-dropped' ? ': the fault needs an expert router with a selection-only bias, as DeepSeek-V4\'s' : ''}`);
  }
}

/**
 * The reuse key of a weights check: the checkpoint's content digest (every byte its acceptance fingerprint covers,
 * BLAKE3 on every core: harness/gate/fingerprint.ts), the numerics build, the layers checked.
 */
function weightsReuseKey(ck: Checkpoint, backend: DeviceBackend, layers: { from: number; to: number } | null, numLayers: number): WeightsCheckKey {
  const fp = openCheckpointContentDigest(ck, { progress: process.stderr.isTTY === true });
  return { fingerprint: fp.value, numerics: numericsKey(backendBuild(backend), backend.identity.simd), layers: layers === null ? null : [layers.from, layers.to], num_layers: numLayers };
}


