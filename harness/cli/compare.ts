/**
 * `layerdiff compare RUN_A RUN_B`: two saved runs compared without recomputing either — e.g. the device side
 * dumped on the GPU host (`diff --dump DIR`) against a reference computed elsewhere (a golden run, or another
 * dump's reference tensors). RUN_A gives the reference side, RUN_B the device side; the metrics, verdict,
 * carried markers, diagnosis and reports are those of `diff`, over the stages both runs hold.
 */
import * as path from 'node:path';
import { carriedFrom } from '../compare/carried.js';
import { diagnose } from '../compare/diagnose.js';
import { compareActs, compareLogits, countFlips, errorHistogram, type StageMetrics, tieBoundOf } from '../compare/metrics.js';
import { freeRunVerdict, prefixesBefore } from '../compare/forced_rows.js';
import { newNonFinite, resolvePolicy, type Status, thresholdsFor, verdict, worst } from '../compare/policy.js';
import { logitReasons } from '../compare/questions.js';
import { ExitCode, InputError } from '../errors.js';
import type { Act } from '../formats/tensor.js';
import type { Selections } from '../models/path.js';
import { openSavedRun, type SavedRun } from '../repro/dump.js';
import { buildReport, type Report } from '../runner/report.js';
import type { RunResult, StageResult } from '../runner/run.js';
import { renderTable, renderVerdict } from '../../reports/table.js';
import { stdoutTaken, writeReports } from '../../reports/writers.js';
import { assertDistinctPaths } from '../io/writer.js';
import { checkReportTargets } from './outputs.js';
import { terminal, useColour } from './terminal.js';

export interface CompareArgs {
  runA: string;
  runB: string;
  /** the policy (compare/policy.ts resolvePolicy): a file, or the fixed-rule flags, or the default */
  policy?: string;
  metric?: string;
  failAbove?: number;
  warnAbove?: number;
  failFast?: boolean;
  json?: string;
  junit?: string;
  html?: string;
  summary?: string;
}

function flips(ref: Selections | null, dev: Selections | null): number {
  if (ref === null || dev === null) return 0;
  return Math.max(0, ...Object.keys(ref).map((k) => countFlips(ref[k], dev[k])));
}

export function runCompare(a: CompareArgs): { code: ExitCode; report: Report } {
  const started = Date.now();
  const asked = resolvePolicy(a);
  const targets = { json: a.json, junit: a.junit, html: a.html, summary: a.summary };
  checkReportTargets(targets, () => undefined);
  assertDistinctPaths(
    Object.entries(targets).map(([k, p]) => ({ option: `--${k}`, path: p, kind: 'file' as const })),
    [{ option: 'RUN_A', path: a.runA, kind: 'dir' }, { option: 'RUN_B', path: a.runB, kind: 'dir' }, { option: '--policy', path: a.policy, kind: 'file' }],
  );
  const A = openSavedRun(a.runA, 'RUN_A');
  const B = openSavedRun(a.runB, 'RUN_B');
  if (A.tokens.length > 0 && B.tokens.length > 0 && A.tokens.join(',') !== B.tokens.join(',')) {
    throw new InputError(`RUN_A and RUN_B were made on different inputs (${A.tokens.length} and ${B.tokens.length} tokens): their stage outputs cannot be compared`, { file: B.dir });
  }
  if (A.model !== null && B.model !== null && A.model.fingerprint !== B.model.fingerprint) {
    throw new InputError(`RUN_A is of checkpoint ${A.model.path} (${A.model.fingerprint.slice(0, 19)}…), RUN_B of ${B.model.path} (${B.model.fingerprint.slice(0, 19)}…)`, { file: B.dir });
  }
  const names = A.stages.filter((n) => B.stages.includes(n));
  if (names.length === 0) throw new InputError(`RUN_A (${A.stages.join(', ')}) and RUN_B (${B.stages.join(', ')}) have no stage in common`, { file: B.dir });

  // The FP16 floor as `diff` measured it (a dump records its run's; the reference side's first, the same reference
  // computation either way), and the device's free-run flips per stage as its diff judged them: drift is judged on
  // the forced run where the dump holds it, else on the free run's rows where it is the forced run
  // (compare/forced_rows.ts); a scoring-bug flip fails its stage, and the logits answer the behaviour question over
  // the tokens without a benign flip, as in `diff`. A dump without them (a golden run's outputs, an older dump)
  // has its whole free run judged as drift.
  const floors = (A.kind === 'dump' ? A.floors : null) ?? B.floors;
  const freeFlips = B.kind === 'dump' ? B.freeFlips : undefined;
  // a free run that is the forced run is drift, judged by the forced run's thresholds, as diff's full run judged it;
  // a dump of --mode accumulated alone was judged by that mode's
  const freeMode = B.mode === 'accumulated' ? 'accumulated' : 'accumulated-forced';
  // the first flipped token before each stage, over every stage of B's run (one A lacks still flipped its choices)
  const prefixBefore = prefixesBefore(B.stages, (n) => freeFlips?.[n]?.tokens ?? []);
  const benignTokens = new Set(Object.values(freeFlips ?? {}).flatMap((f) => f.benign));
  // without a floor the floor rule is the user's rule alone: the reports then state the rule that judged
  const policy = asked.rule === 'floor' && floors === null ? { ...asked, rule: 'fixed' as const } : asked;
  if (policy !== asked) {
    process.stderr.write(`layerdiff: note: neither run holds the FP16 floor its diff measured (a golden run, a fixed-rule dump or an older dump): each stage is judged by ${policy.metric} against ${policy.fail_above} alone\n`);
  }
  const stages: StageResult[] = [];
  let hasIso = false;
  for (const name of names) {
    const ra = A.stage(name);
    const rb = B.stage(name);
    const ref = ra.reference;
    if (ref === null) throw new InputError(`RUN_A's ${name} holds no reference tensor`, { file: A.dir });
    // a dump's device side; a golden run is a whole run of its own: its outputs are its accumulated side
    const dev: Act | null = B.kind === 'golden' ? rb.reference : rb.device;
    let iso: Act | null = rb.device_isolated;
    hasIso ||= iso !== null;
    // embed's input is the tokens in both modes: a dump stores its isolated output once, as `device`
    if (name === 'embed' && iso === null && hasIsoIn(B)) iso = dev;
    const cmp = (d: Act | null): StageMetrics | null => {
      if (d === null) return null;
      if (d.shape.length !== ref.shape.length || d.shape.some((x, i) => x !== ref.shape[i])) throw new InputError(`${name}: RUN_B's output has shape [${d.shape.join(', ')}], RUN_A's [${ref.shape.join(', ')}]`, { file: B.dir });
      return compareActs(d, ref, flips(ra.selections, rb.selections));
    };
    const acc = cmp(dev);
    const isoM = cmp(iso);
    // the forced run, where the dump holds it as a run of its own (top-k choices): drift is judged on it, as diff does
    const forcedM = B.kind === 'dump' ? cmp(rb.device_forced) : null;
    if (acc === null && isoM === null && forcedM === null) throw new InputError(`RUN_B's ${name} holds no device output (device, device_isolated or device_forced)`, { file: B.dir });
    const floor = floors?.[name] ?? null;
    const driftFloor = floor?.accumulated_forced ?? null;
    const fl = freeFlips?.[name];
    // drift: the forced run where the dump holds one (the free run is then information, as in diff's full run); else
    // the free run on the rows where it is the forced run
    const forcedStatus = forcedM === null ? null : verdict(forcedM, policy, { stage: name, mode: 'accumulated-forced', floor: driftFloor });
    const free = acc === null || dev === null || forcedM !== null ? null : freeFlips === undefined ? { status: verdict(acc, policy, { stage: name, mode: freeMode, floor: driftFloor }), tokens: ref.shape[0] } : freeRunVerdict(name, dev, ref, acc, policy, driftFloor, prefixBefore.get(name) ?? Infinity, fl?.tokens ?? [], freeMode);
    // a NaN/Inf the reference lacks fails in any mode; a scoring-bug flip fails its stage (its choices, not its numbers)
    let accStatus: Status = free?.status ?? 'pass';
    if ((acc !== null && newNonFinite(acc)) || (fl?.scoring_bug ?? 0) > 0) accStatus = 'fail';
    // the logits of the free run: the behaviour question, as diff answers it (benign flips' tokens and near-ties aside)
    const tieBound = floor?.isolated != null ? tieBoundOf(thresholdsFor(policy, 'logits', 'accumulated', 'logits').floor_excuse, floor.isolated) : undefined;
    const accLogits = name === 'logits' && dev !== null ? (freeFlips !== undefined ? compareLogits(dev, ref, benignTokens, tieBound) : compareLogits(dev, ref)) : null;
    if (accLogits !== null && freeFlips !== undefined && logitReasons(accLogits, policy.behaviour).length > 0) accStatus = 'fail';
    const isoStatus = isoM === null ? null : verdict(isoM, policy, { stage: name, mode: 'isolated', floor: floor?.isolated ?? null });
    const s: StageResult = {
      name,
      status: worst(worst(accStatus, isoStatus ?? 'pass'), forcedStatus ?? 'pass'),
      ...(free !== null && free.tokens < ref.shape[0] ? { accumulated_judged_tokens: free.tokens } : {}),
      // the judgements made here (against the floors), which the carried markers read rather than judging again
      statuses: { isolated: isoStatus, accumulated_forced: forcedStatus, accumulated: acc === null ? null : accStatus },
      accumulated_forced: forcedM,
      ...(floor !== null ? { floor } : {}),
      accumulated: acc,
      isolated: isoM,
      ...(name === 'logits' ? { logits: { accumulated: accLogits, isolated: iso && compareLogits(iso, ref) } } : {}),
      histogram: { accumulated: dev && errorHistogram(dev, ref), isolated: iso && errorHistogram(iso, ref) },
      time_ms: { reference: 0, device: 0 },
    };
    stages.push(s);
    if (a.failFast === true && s.status === 'fail') break;
  }
  for (const [name, root] of carriedFrom(stages, policy)) stages.find((s) => s.name === name)!.carried_from = root;
  const failed = stages.find((s) => s.status === 'fail');
  const run: RunResult = { stages, first_failure: failed?.name ?? null, verdict: failed ? 'fail' : 'pass' };
  const hasAcc = stages.some((s) => s.accumulated !== null && s.name !== 'embed');
  const mode = hasAcc && hasIso ? 'both' : hasIso ? 'isolated' : 'accumulated';
  const model = B.model ?? A.model;
  const layerIds = stages.filter((s) => s.name.startsWith('layer.')).map((s) => Number(s.name.slice(6)));
  const report = buildReport({
    modelPath: model?.path ?? path.resolve(B.dir),
    architecture: model?.architecture ?? 'unknown',
    fingerprint: { value: model?.fingerprint ?? 'unknown', kind: model !== null ? 'as the saved run recorded it' : 'not recorded' },
    numLayers: model?.num_layers ?? layerIds.length,
    tokens: B.tokens.length > 0 ? B.tokens : A.tokens,
    prompt: B.prompt ?? A.prompt,
    device: {
      name: 'saved',
      description: `saved run ${path.resolve(B.dir)}, not recomputed${B.device !== null ? `; computed on ${B.device.name}: ${B.device.description}` : ''}`,
    },
    policy,
    mode,
    layers: layerIds.length > 0 ? `${Math.min(...layerIds)}-${Math.max(...layerIds)}` : 'none',
    // a dump of `diff --inject` keeps its marker: a simulated bug must never read as a device failure
    injected: B.injected,
    run,
    diagnosis: diagnose(run, policy, null),
    golden: { dir: path.resolve(A.dir), action: 'compared' },
    elapsedMs: Date.now() - started,
  });
  writeReports(report, targets);
  const human = stdoutTaken(targets) ? process.stderr : process.stdout;
  const colour = useColour(human);
  human.write((terminal().quiet ? renderVerdict(report, colour) : renderTable(report, colour, terminal().verbose)) + '\n');
  return { code: run.verdict === 'pass' ? ExitCode.pass : ExitCode.stageFailed, report };
}

function hasIsoIn(run: SavedRun): boolean {
  const other = run.stages.find((n) => n !== 'embed');
  return other !== undefined && run.kind === 'dump' && run.stage(other).device_isolated !== null;
}
