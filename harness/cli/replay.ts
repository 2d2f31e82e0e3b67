/**
 * `layerdiff replay DIR`: rerun the one layer a repro bundle holds (harness/repro/bundle.ts) on both paths,
 * from the bundle's own activations and mini checkpoint, and print the numbers — which must equal what the
 * original run recorded, bit for bit, on the same backend (both paths are deterministic). The verdict and
 * exit code are the layer's, as in `diff`: 0 pass, 1 fail.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import Table from 'cli-table3';
import { compareActs, type StageMetrics } from '../compare/metrics.js';
import { floorOf, isStageFloor, roundActF16 } from '../compare/floor.js';
import { newNonFinite, parsePolicy, type Policy, type Status, verdict, worst } from '../compare/policy.js';
import { ExitCode, InputError } from '../errors.js';
import { Checkpoint } from '../io/checkpoint.js';
import { checkOutputs, writeFileAtomic } from '../io/writer.js';
import type { LayerContext } from '../models/path.js';
import { ACTIVATIONS, MODEL_DIR, REPRO_MANIFEST, REPRO_SCHEMA, type ReproManifest } from '../repro/bundle.js';
import { readActs, verifyDigest } from '../repro/files.js';
import { selectBackend } from '../runner/backend.js';
import { openModel } from '../runner/model.js';
import { FAULT_IDS, isFaultPlan } from '../faults/plan.js';
import { type Drill, drillDown, MODES, rowsFromReference, scoreErrors, selectionFlips, substageFloors, substageMetrics } from '../runner/run.js';
import { judgeFlips } from '../compare/flips.js';
import { freeRunVerdict } from '../compare/forced_rows.js';
import { cos, describeDrill, faultText, sci } from '../../reports/format.js';
import { readRegularText } from '../io/regular.js';
import { printable } from '../io/printable.js';

export interface ReplayArgs {
  dir: string;
  device: string;
  json?: string;
}

export interface ReplayResult {
  schema: 'layerdiff.replay/1';
  stage: string;
  status: Status;
  accumulated: StageMetrics | null;
  isolated: StageMetrics | null;
  drill: Drill | null;
  reproduced: {
    /** the reference layer, rerun, gives the stored reference output bit for bit */
    reference_output: boolean;
    /** accumulated and isolated metrics equal the recorded ones exactly */
    metrics: boolean;
    differences: string[];
  };
}

/** Metrics as JSON (non-finite numbers as strings, as the report writes them), for exact comparison. */
const canon = (v: unknown, indent?: number) => JSON.stringify(v, (_k, x: unknown) => (typeof x === 'number' && !Number.isFinite(x) ? String(x) : x), indent);

export function readManifest(dir: string): ReproManifest {
  const file = path.join(dir, REPRO_MANIFEST);
  if (!fs.existsSync(file)) throw new InputError(`not a repro bundle: no ${REPRO_MANIFEST} (write one with layerdiff diff --repro DIR)`, { file: dir });
  const text = readRegularText(file);
  let m: ReproManifest;
  try {
    m = JSON.parse(text) as ReproManifest;
  } catch {
    throw new InputError('not valid JSON', { file });
  }
  if (m?.schema !== REPRO_SCHEMA) throw new InputError(`schema ${JSON.stringify(m?.schema)} is not ${REPRO_SCHEMA}`, { file });
  if (!Number.isInteger(m.layer) || !Array.isArray(m.tokens) || typeof m.files !== 'object') throw new InputError('manifest is missing layer, tokens or files', { file });
  checkManifestFields(m, file);
  return m;
}

/**
 * What replay acts on, checked before it runs: a hand-edited repro.json is bad input naming its field, never a
 * crash or a replay of something else (an unknown fault replayed as none, a policy string read as thresholds).
 */
function checkManifestFields(m: ReproManifest, file: string): void {
  const bad = (field: string, want: string, v: unknown) => {
    throw new InputError(`${field} must be ${want}, got ${JSON.stringify(v)?.slice(0, 80)}`, { file });
  };
  if (m.layer < 0) bad('layer', 'a layer index ≥ 0', m.layer);
  if (m.tokens.length === 0 || !m.tokens.every((t) => Number.isSafeInteger(t) && t >= 0)) bad('tokens', 'a non-empty list of token ids', m.tokens);
  if (typeof m.stage !== 'string' || m.stage !== `layer.${m.layer}`) bad('stage', `"layer.${m.layer}" (the bundle's layer)`, m.stage);
  if (!(MODES as readonly unknown[]).includes(m.mode)) bad('mode', `one of ${MODES.join(', ')}`, m.mode);
  if (typeof m.free_selection !== 'boolean') bad('free_selection', 'true or false', m.free_selection);
  const inj = m.injected as unknown;
  if (inj !== null && !isFaultPlan(inj)) bad('injected', `null or { fault: one of ${FAULT_IDS.join(', ')}, layer: an index or null }`, inj);
  // the policy as the run resolved it: the same checks as a --policy file (its `source` is where it came from)
  const pol = m.policy as unknown;
  if (pol === null || typeof pol !== 'object' || Array.isArray(pol)) bad('policy', 'an object', pol);
  const { source, ...rest } = pol as Policy;
  if (typeof source !== 'string') bad('policy.source', 'a string', source);
  m.policy = { ...parsePolicy(rest, `${file}: policy`), source };
  const rec = m.recorded as unknown as Record<string, unknown> | null;
  if (rec === null || typeof rec !== 'object' || typeof rec.status !== 'string') bad('recorded', 'an object with the recorded status and metrics', rec);
  // the drift budget replay judges the accumulated run by, and whether it judges it at all: a looser edit is refused
  if (rec!.floor !== undefined && rec!.floor !== null && !isStageFloor(rec!.floor)) bad('recorded.floor', 'null or { isolated, accumulated_forced } each null or { max_abs, mean_abs, rms, rel_l2 } ≥ 0', rec!.floor);
  const fp = rec!.free_prefix;
  if (fp !== undefined && fp !== null && !(Number.isSafeInteger(fp) && (fp as number) >= 0 && (fp as number) < m.tokens.length)) bad('recorded.free_prefix', 'null or a token index of the input', fp);
  for (const [rel, digest] of Object.entries(m.files)) {
    if (typeof digest !== 'string') bad(`files.${rel}`, 'a SHA-256 digest', digest);
    // relative paths inside the bundle only
    if (path.isAbsolute(rel) || rel.split(/[\\/]/).includes('..')) bad(`files key ${JSON.stringify(rel)}`, 'a path inside the bundle', rel);
  }
}

export function runReplay(a: ReplayArgs): { result: ReplayResult; manifest: ReproManifest; device: string } {
  const m = readManifest(a.dir);
  for (const [rel, digest] of Object.entries(m.files)) verifyDigest(path.join(a.dir, rel), digest, `bundle file ${rel}`);
  const acts = readActs(path.join(a.dir, ACTIVATIONS), ['reference_input', 'device_input', 'reference_output']);
  const refIn = acts.get('reference_input');
  const stored = acts.get('reference_output');
  if (refIn === undefined || stored === undefined) throw new InputError('needs reference_input and reference_output', { file: path.join(a.dir, ACTIVATIONS) });
  const devIn = acts.get('device_input') ?? null;

  const ck = Checkpoint.open(path.join(a.dir, MODEL_DIR));
  try {
    const backend = selectBackend(a.device);
    const model = openModel(ck, backend, m.injected);
    const L = m.layer;
    const w = model.loadLayer(L);
    const ctx: LayerContext = { tokens: m.tokens, positions: m.tokens.map((_, i) => i), forcedSelections: null };
    const ref = model.reference.layer(L, refIn, w, ctx);
    const doIso = m.mode !== 'accumulated';
    const doAcc = m.mode !== 'isolated';
    const isoRaw = doIso ? model.device.layer(L, refIn, w, { ...ctx, forcedSelections: m.free_selection ? null : ref.selections }) : null;
    const acc = doAcc && devIn !== null ? model.device.layer(L, devIn, w, ctx) : null;
    // the flips, judged as diff judges them (against the isolated run's score error at this layer); with
    // --free-selection a benign flip's rows are judged as the reference's, its choice and not the kernels moved them
    const layerScoreError = scoreErrors(ref, isoRaw);
    const flipFactor = m.policy.behaviour.flip_factor;
    const flipsIso = isoRaw !== null && m.free_selection ? judgeFlips(L, ref, isoRaw, 'isolated', flipFactor, layerScoreError) : null;
    const iso = isoRaw !== null && flipsIso !== null && flipsIso.benign_tokens.length > 0 ? rowsFromReference(isoRaw, ref, flipsIso.benign_tokens) : isoRaw;
    const flipsAcc = acc !== null ? judgeFlips(L, ref, acc, 'accumulated', flipFactor, layerScoreError) : null;
    const accumulated = acc ? compareActs(acc.out, ref.out, selectionFlips(ref, acc)) : null;
    const isolated = iso ? compareActs(iso.out, ref.out, selectionFlips(ref, iso)) : null;
    // judged as `diff` judged the layer: own error against the FP16 floor, recomputed here as diff computes it (the
    // reference on its input as FP16 holds it, with its own choices and FP16 storage), the layer output and each
    // sub-stage against its own; the accumulated run against the drift budget the run recorded (the sum of the earlier
    // layers' floors, not recomputable from one layer) on the rows where its free run is the forced run diff judged
    // as drift (compare/forced_rows.ts); a scoring-bug flip fails the layer, as in diff
    const floorRun = m.policy.rule === 'floor' ? model.reference.layer(L, roundActF16(refIn), w, { ...ctx, forcedSelections: ref.selections, fp16Storage: true }) : null;
    const isoFloor = floorRun !== null ? floorOf(compareActs(roundActF16(floorRun.out), ref.out)) : null;
    const subFloors = floorRun !== null ? substageFloors(ref, floorRun) : null;
    const own = isolated === null ? 'pass' : Object.entries(substageMetrics(ref, iso) ?? {}).reduce<Status>(
      (s, [k, sm]) => worst(s, verdict(sm, m.policy, { stage: `${m.stage}.${k}`, mode: 'isolated', floor: subFloors?.[k] ?? null })),
      verdict(isolated, m.policy, { stage: m.stage, mode: 'isolated', floor: isoFloor }),
    );
    const freeRun = acc === null || accumulated === null ? null : freeRunVerdict(m.stage, acc.out, ref.out, accumulated, m.policy, m.recorded.floor?.accumulated_forced ?? null, m.recorded.free_prefix ?? Infinity, flipsAcc?.tokens ?? [], m.mode === 'accumulated' ? 'accumulated' : 'accumulated-forced');
    const free = accumulated !== null && newNonFinite(accumulated) ? 'fail' : (freeRun?.status ?? 'pass');
    const scoringBug = ((flipsAcc?.scoring_bug ?? 0) > 0 && m.mode !== 'accumulated-forced' && m.mode !== 'isolated') || (flipsIso?.scoring_bug ?? 0) > 0;
    const status = worst(worst(own, free), scoringBug ? 'fail' : 'pass');
    const drill = status === 'fail' ? drillDown(m.stage, ref, iso ?? model.device.layer(L, refIn, w, { ...ctx, forcedSelections: m.free_selection ? null : ref.selections }), m.policy, floorRun) : null;

    const differences: string[] = [];
    const refSame = stored.data.length === ref.out.data.length && stored.data.every((x, i) => Object.is(x, ref.out.data[i]));
    if (!refSame) differences.push('reference output');
    for (const [mode, now] of [
      ['accumulated', accumulated],
      ['isolated', isolated],
    ] as const) {
      if (canon(now) !== canon(m.recorded[mode])) differences.push(`${mode} metrics`);
    }
    const result: ReplayResult = {
      schema: 'layerdiff.replay/1',
      stage: m.stage,
      status,
      accumulated,
      isolated,
      drill,
      reproduced: { reference_output: refSame, metrics: differences.every((d) => d === 'reference output'), differences },
    };
    return { result, manifest: m, device: backend.identity.name };
  } finally {
    ck.close();
  }
}

export function renderReplay(m: ReproManifest, r: ReplayResult, device: string): string {
  const t = new Table({
    head: ['mode', 'max_abs', 'mean_abs', 'rel_l2', 'cosine', 'max |r|', 'nan/inf', 'flips', 'recorded max_abs'],
    style: { head: [], border: [], compact: true },
    colAligns: ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
  });
  for (const mode of ['accumulated', 'isolated'] as const) {
    const x = r[mode];
    if (x === null) continue;
    t.push([mode, sci(x.max_abs), sci(x.mean_abs), sci(x.rel_l2), cos(x.cosine), sci(x.max_ref), String(x.nan.device + x.inf.device), String(x.selection_flips), sci(m.recorded[mode]?.max_abs)]);
  }
  const lines = [
    // the bundle's own strings are shown, never obeyed: a shared bundle's escape sequences could forge lines
    `layerdiff replay — ${r.stage} of ${printable(m.architecture)} (${printable(m.source.path)}), ${m.tokens.length} tokens, device ${printable(device)}`,
    `policy: ${m.policy.metric} fail > ${m.policy.fail_above}, warn > ${m.policy.warn_above} · mode ${m.mode}${m.injected ? ` · ${faultText(m.injected)}` : ''}`,
    t.toString(),
  ];
  if (r.drill) lines.push(`drill-down ${r.stage}: ${describeDrill(r.drill)}`);
  lines.push(`reference output: ${r.reproduced.reference_output ? 'reproduced bit for bit' : 'DIFFERS from the bundle'}`);
  lines.push(r.reproduced.metrics && r.reproduced.reference_output ? 'recorded metrics: reproduced exactly' : `recorded metrics: NOT reproduced (${r.reproduced.differences.join(', ')} differ${m.device !== device ? `; the run used device ${m.device}` : ''})`);
  lines.push(r.status === 'fail' ? `FAIL — ${r.stage}` : `${r.status.toUpperCase()} — ${r.stage}`);
  return lines.join('\n');
}

export function runReplayCommand(a: ReplayArgs): { code: ExitCode; result: ReplayResult } {
  // The bundle's model/ is a checkpoint like any other: nothing is written inside it (nor the bundle).
  checkOutputs(a.dir, [{ option: '--json', path: a.json, kind: 'file' }]);
  const { result, manifest, device } = runReplay(a);
  if (a.json !== undefined) writeFileAtomic(a.json, canon(result, 2) + '\n', '--json');
  process.stdout.write(renderReplay(manifest, result, device) + '\n');
  return { code: result.status === 'fail' ? ExitCode.stageFailed : ExitCode.pass, result };
}
