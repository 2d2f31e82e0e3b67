/**
 * The lockstep runner: embed → layer.0 … layer.{N−1} → final_norm → logits, both paths stage by stage.
 * Each layer's tensors are read once and handed to both paths, then dropped. Two modes (DESIGN §5):
 * accumulated (the device runs on its own previous output) and isolated (the device layer is fed the
 * reference's input, and the reference's discrete choices unless --free-selection).
 *
 * Per stage it also keeps what the printers and the diagnosis need beyond the metrics, all bounded in size:
 * a log-binned histogram of |d − r|, the drill-down of a failing layer into its sub-stages, and with
 * --repeat the run-to-run spread of the device path. The reference side can come from a golden run on disk
 * instead of being computed (one stage read at a time), and can be saved as one.
 */
import * as path from 'node:path';
import {
  compareActs,
  compareLogits,
  countFlips,
  type ErrorHistogram,
  errorHistogram,
  type LogitMetrics,
  type Spread,
  spreadOf,
  type StageMetrics,
  tieBoundOf,
} from '../compare/metrics.js';
import { addFloors, floorOf, type FloorMetrics, roundActF16, scaleFloor, ZERO_FLOOR } from '../compare/floor.js';
import { type FlipSummary, judgeFlips, SCORE_SUBSTAGE } from '../compare/flips.js';
import { floorRatio, type MetricName, newNonFinite, type Policy, type StageKind, stageKind, type Status, thresholdsFor, verdict, worst } from '../compare/policy.js';
import { answerQuestions, logitReasons, type Questions, questionsPass } from '../compare/questions.js';
import { carriedFrom } from '../compare/carried.js';
import { freeRunVerdict, nextPrefixEnd } from '../compare/forced_rows.js';
import { type Act, act } from '../formats/tensor.js';
import { firstNonFinite } from '../../reference-cpu/native.js';
import { enterReadPool, outsideReadPool, sharedReadPool } from '../io/read_pool.js';
import { writeSafetensors } from '../io/safetensors.js';
import type { LayerContext, LayerResult, ModelDef, StagePath } from '../models/path.js';

/** both: isolated, accumulated-forced and accumulated (the three questions); or one of them alone */
export type Mode = 'both' | 'accumulated' | 'accumulated-forced' | 'isolated';
export const MODES: readonly Mode[] = ['both', 'accumulated', 'accumulated-forced', 'isolated'];

/** Reference stage outputs read from a golden run (harness/repro/golden.ts), one stage at a time. */
export interface GoldenSource {
  /** the reference input of the first layer of the range, when the range does not start at embed */
  input(): Act;
  stage(name: string): LayerResult;
}

/** Where a run's reference stage outputs are saved as a golden run. */
export interface GoldenSink {
  input(x: Act): void;
  stage(name: string, r: LayerResult): void;
}

export interface RunOptions {
  tokens: number[];
  mode: Mode;
  /** inclusive layer range; null = all */
  layers: { from: number; to: number } | null;
  policy: Policy;
  freeSelection: boolean;
  dumpDir: string | null;
  onStage?: (p: Progress) => void;
  /** drill into the sub-stages of every failing layer (default true) */
  drill?: boolean;
  /** device runs per stage, for the determinism probe (default 1: no probe) */
  repeat?: number;
  /** take the reference from a golden run instead of computing it */
  golden?: GoldenSource | null;
  /** save the reference stage outputs as a golden run */
  saveGolden?: GoldenSink | null;
  /** keep the first failing layer's inputs and reference output (for --repro) */
  captureRepro?: boolean;
  /** run the accumulated-forced pass (default: in modes both and accumulated-forced); false measures the plain diff */
  forced?: boolean;
  /** --fail-fast: stop after the first failing stage (its drill-down included) */
  failFast?: boolean;
}

export interface Progress {
  stage: string;
  done: number;
  total: number;
  elapsedMs: number;
}

export interface SubstageResult {
  /** full name, e.g. layer.2.mlp */
  name: string;
  status: Status;
  metrics: StageMetrics;
  floor?: FloorMetrics;
  /** max |d − r| (and the floor's) per eighth of the token positions, first to last: a bug that grows with position shows here */
  position_profile?: { error: number[]; floor: number[] | null };
}

/**
 * A failing layer, sub-stage by sub-stage. The device layer is run on the reference's input (the isolated
 * run, or a rerun of it when only accumulated mode ran), and each sub-stage output it records is compared
 * with the reference's. Sub-stages are listed in forward order; the first that fails is where the layer
 * goes wrong (those before it pass, so the error is not carried in from them).
 */
export interface Drill {
  mode: 'isolated';
  substages: SubstageResult[];
  first_failing: string | null;
}

export interface StageResult {
  name: string;
  /** what decides the stage: own error (isolated) and drift (accumulated-forced), plus a scoring-bug flip or failing logits behaviour */
  status: Status;
  /** free accumulated: the user's model (information per stage; its logits answer the behaviour question) */
  accumulated: StageMetrics | null;
  /** the device on its own previous output with the reference's top-k choices (numeric drift) */
  accumulated_forced?: StageMetrics | null;
  isolated: StageMetrics | null;
  /** the stage kind its thresholds come from (policy.ts stageKind) and the metric it is judged by */
  kind?: StageKind;
  judged_by?: MetricName;
  /** each mode's own verdict */
  statuses?: { isolated: Status | null; accumulated_forced: Status | null; accumulated: Status | null };
  /** --mode accumulated alone: the tokens whose free-run rows were the forced run's, judged (absent: every token) */
  accumulated_judged_tokens?: number;
  /** the measured FP16 floor (compare/floor.ts): isolated from the floor pass, accumulated_forced the drift budget */
  floor?: { isolated: FloorMetrics | null; accumulated_forced: FloorMetrics | null };
  /** the metric error / floor is taken in (policy ratio_metric) */
  ratio_metric?: MetricName;
  /** error / floor in ratio_metric */
  floor_ratio?: { isolated: number | null; accumulated_forced: number | null };
  /** top-k flips, judged (compare/flips.ts): free accumulated, and isolated with --free-selection */
  flips?: { accumulated: FlipSummary | null; isolated: FlipSummary | null };
  logits?: { accumulated: LogitMetrics | null; accumulated_forced?: LogitMetrics | null; isolated: LogitMetrics | null };
  /** sub-stage metrics (isolated mode when run, else accumulated) for drill-down: attn, mlp, moe, … */
  substages?: Record<string, StageMetrics>;
  /** each sub-stage's FP16 floor (floor rule) and its isolated verdict, which counts toward the stage's own error */
  substage_floor?: Record<string, FloorMetrics>;
  substage_status?: Record<string, Status>;
  /** log-binned |d − r| per mode */
  histogram?: { accumulated: ErrorHistogram | null; isolated: ErrorHistogram | null };
  /** failing layers only (unless --no-drill) */
  drill?: Drill;
  /** --repeat N: how far repeated device runs of this stage land from the first (0 for a deterministic path) */
  spread?: { runs: number; accumulated: Spread | null; isolated: Spread | null };
  time_ms: { reference: number; device: number; floor?: number };
  /** fails only on the device's own (accumulated) input, passes isolated: the root stage the error came from */
  carried_from?: string;
}

/** What --repro needs of the first failing layer (held in memory: one layer's activations). */
export interface ReproCapture {
  layer: number;
  stage: string;
  referenceInput: Act;
  /** the accumulated run's device input (its own previous output); null when accumulated mode did not run */
  deviceInput: Act | null;
  referenceOutput: Act;
}

export interface RunResult {
  stages: StageResult[];
  first_failure: string | null;
  verdict: 'pass' | 'fail';
  /** the three questions (compare/questions.ts); absent in results built by hand */
  questions?: Questions;
  repro?: ReproCapture | null;
}

export function stageNames(numLayers: number, layers: RunOptions['layers']): string[] {
  const from = layers?.from ?? 0;
  const to = layers?.to ?? numLayers - 1;
  const names: string[] = [];
  if (from === 0) names.push('embed');
  for (let L = from; L <= to; L++) names.push(`layer.${L}`);
  if (to === numLayers - 1) names.push('final_norm', 'logits');
  return names;
}

/** Forward order of sub-stage names: insertion order, a nested one (moe.router) before its parent (moe), which consumes it. */
export function substageOrder(names: string[]): string[] {
  const top = (n: string) => n.split('.')[0];
  const tops = [...new Set(names.map(top))];
  return [...names].sort((a, b) => tops.indexOf(top(a)) - tops.indexOf(top(b)) || b.split('.').length - a.split('.').length || names.indexOf(a) - names.indexOf(b));
}

export function runDiff<LW>(model: ModelDef<LW>, opt: RunOptions): RunResult {
  const { tokens, policy } = opt;
  const positions = tokens.map((_, i) => i);
  const from = opt.layers?.from ?? 0;
  const to = opt.layers?.to ?? model.numLayers - 1;
  const doAcc = opt.mode === 'both' || opt.mode === 'accumulated';
  const doForced = opt.forced ?? (opt.mode === 'both' || opt.mode === 'accumulated-forced');
  const doIso = opt.mode === 'both' || opt.mode === 'isolated';
  const doFloor = policy.rule === 'floor';
  const repeat = opt.repeat ?? 1;
  const golden = opt.golden ?? null;
  const save = opt.saveGolden ?? null;
  const total = stageNames(model.numLayers, opt.layers).length;
  const stages: StageResult[] = [];
  let repro: ReproCapture | null = null;
  const t0 = Date.now();
  // drift budget so far (compare/floor.ts): the sum of the stages' floors, and the last layer's own floor
  let driftSum: FloorMetrics = ZERO_FLOOR;
  let lastLayerFloor: FloorMetrics | null = null;
  // free accumulated mode: the tokens with a benign top-k flip at some layer (left out of the judged p99 KL),
  // and whether any layer makes top-k choices at all
  const benignFlipped = new Set<number>();
  let choosesTopk = false;
  // where the free accumulated run is the forced run (compare/forced_rows.ts): the first token flipped at an
  // earlier layer, and the tokens flipped at the stage being recorded
  let prefixEnd = Infinity;
  let flippedHere: number[] = [];
  const stop = () => opt.failFast === true && stages.some((s) => s.status === 'fail');

  type Acts = { reference: Act; device: Act | null; device_isolated: Act | null; device_forced?: Act | null };
  const record = (s: Omit<StageResult, 'status'>, acts: Acts, extra: Status = 'pass') => {
    const kind = stageKind(s.name);
    const { metric, ratio_metric: ratioMetric } = thresholdsFor(policy, kind, 'isolated', s.name);
    const isoFloor = s.floor?.isolated ?? null;
    const driftFloor = s.floor?.accumulated_forced ?? null;
    const statuses = {
      // own error: the stage output and each of its sub-stages
      isolated: s.isolated ? Object.values(s.substage_status ?? {}).reduce(worst, verdict(s.isolated, policy, { stage: s.name, mode: 'isolated', floor: isoFloor })) : null,
      accumulated_forced: s.accumulated_forced ? verdict(s.accumulated_forced, policy, { stage: s.name, mode: 'accumulated-forced', floor: driftFloor }) : null,
      accumulated: s.accumulated ? verdict(s.accumulated, policy, { stage: s.name, mode: 'accumulated', floor: driftFloor }) : null,
    };
    // what decides the stage: own error and drift; the free accumulated run only in a run of that mode alone, and
    // there on the rows where it is the forced run: a flipped token's rows compute other experts or blocks (one
    // benign flip moves a layer at 1e-2, DESIGN §5), and through attention every later token's from the next layer
    // on; those errors are information, as in the full run, and the flips and the logits judge them (behaviour)
    const free = opt.mode === 'accumulated' && s.accumulated && acts.device ? freeRunVerdict(s.name, acts.device, acts.reference, s.accumulated, policy, driftFloor, prefixEnd, flippedHere) : null;
    const judged = opt.mode === 'accumulated' ? [free?.status ?? null] : [statuses.isolated, statuses.accumulated_forced];
    let status = judged.reduce<Status>((a, b) => worst(a, b ?? 'pass'), extra);
    // a NaN/Inf the reference does not have fails the stage in any mode: the user's model would produce it
    if (s.accumulated && newNonFinite(s.accumulated)) status = 'fail';
    // and a reference that is itself NaN/Inf validates nothing: a device computing the same NaN would "agree" with
    // it everywhere and pass (DeepSeek-V4 with rope_theta 0 did, every logit NaN); the diagnosis says so
    if (firstNonFinite(acts.reference.data) >= 0) status = 'fail';
    const ratio = (m: StageMetrics | null | undefined, f: FloorMetrics | null) => (m != null && f !== null ? floorRatio(m[ratioMetric], f[ratioMetric]) : null);
    const histogram = {
      accumulated: acts.device && s.accumulated ? errorHistogram(acts.device, acts.reference) : null,
      isolated: s.isolated ? errorHistogram(acts.device_isolated ?? acts.device!, acts.reference) : null,
    };
    const r: StageResult = {
      ...s,
      status,
      kind,
      judged_by: metric,
      ...(doFloor ? { ratio_metric: ratioMetric } : {}),
      statuses,
      ...(free !== null && free.tokens < acts.reference.shape[0] ? { accumulated_judged_tokens: free.tokens } : {}),
      ...(doFloor ? { floor_ratio: { isolated: ratio(s.isolated, isoFloor), accumulated_forced: ratio(s.accumulated_forced, driftFloor) } } : {}),
      histogram,
    };
    stages.push(r);
    if (opt.dumpDir !== null) dumpStage(opt.dumpDir, s.name, acts);
    opt.onStage?.({ stage: s.name, done: stages.length, total, elapsedMs: Date.now() - t0 });
    return r;
  };
  const timed = <T>(f: () => T): [T, number] => {
    const a = performance.now();
    const v = f();
    return [v, performance.now() - a];
  };
  /** Rerun a device computation repeat−1 times; the spread is the largest distance from the first result. */
  const spread = (first: Act | null, again: () => Act): Spread | null => {
    if (first === null || repeat < 2) return null;
    const out: Spread = { max_abs: 0, differing: 0 };
    for (let k = 1; k < repeat; k++) {
      const s = spreadOf(first, again());
      out.max_abs = Math.max(out.max_abs, s.max_abs);
      out.differing = Math.max(out.differing, s.differing);
    }
    return out;
  };
  const spreads = (acc: Spread | null, iso: Spread | null) => (repeat >= 2 ? { spread: { runs: repeat, accumulated: acc, isolated: iso } } : {});
  /** error of FP16-rounded `floorOut` (the floor pass's stage output) against the reference's, or null without a floor pass */
  const floorFrom = (floorOut: Act | null, refOut: Act, roundOut = true): FloorMetrics | null =>
    floorOut === null ? null : floorOf(compareActs(roundOut ? roundActF16(floorOut) : floorOut, refOut));

  // Embed: its input is the tokens in all modes, so isolated = accumulated = forced; its floor is FP16 storage of the table.
  let ref: Act;
  let tRef = 0;
  let dev: Act | null = null;
  let devF: Act | null = null;
  if (from === 0) {
    [ref, tRef] = golden ? timed(() => golden.stage('embed').out) : timed(() => model.reference.embed(tokens));
    save?.stage('embed', { out: ref, selections: null });
    const [d, tDev] = timed(() => model.device.embed(tokens));
    dev = d;
    devF = d;
    const m = compareActs(d, ref);
    const sp = spread(d, () => model.device.embed(tokens));
    const f = floorFrom(doFloor ? ref : null, ref);
    if (f !== null) driftSum = f;
    record(
      {
        name: 'embed',
        accumulated: doAcc ? m : null,
        accumulated_forced: doForced ? m : null,
        isolated: doIso ? m : null,
        ...(f !== null ? { floor: { isolated: f, accumulated_forced: f } } : {}),
        ...spreads(doAcc ? sp : null, doIso ? sp : null),
        time_ms: { reference: tRef, device: tDev },
      },
      { reference: ref, device: d, device_isolated: null },
    );
  } else if (golden) {
    ref = golden.input();
  } else {
    ref = model.reference.embed(tokens);
  }

  // Each layer's reads (its weights, its routed experts) go into the process's pool and are handed back when the
  // layer is done: the next layer reads into the same warm buffers (harness/io/read_pool.ts). Nothing read in a
  // layer outlives it: its outputs are computed arrays, and a golden run's stages are read outside the pool.
  const pool = sharedReadPool();
  for (let L = golden ? from : 0; L <= to && !stop(); L++) {
    const scope = enterReadPool(pool);
    try {
      if (L < from) {
        // stages before the range: reference only, to produce the range's input
        ref = model.reference.layer(L, ref, model.loadLayer(L), { tokens, positions, forcedSelections: null }).out;
        continue;
      }
      if (L === from && from > 0) save?.input(ref);
      const w = model.loadLayer(L);
      const ctx: LayerContext = { tokens, positions, forcedSelections: null };
      let refOut: LayerResult;
      [refOut, tRef] = golden ? timed(() => outsideReadPool(() => golden.stage(`layer.${L}`))) : timed(() => model.reference.layer(L, ref, w, ctx));
      save?.stage(`layer.${L}`, refOut);
      const forcedCtx: LayerContext = { ...ctx, forcedSelections: refOut.selections };
      const isoCtx: LayerContext = opt.freeSelection ? ctx : forcedCtx;
      const hasChoices = refOut.selections !== null && Object.keys(refOut.selections).length > 0;
      const devIn = dev ?? ref;
      const devFIn = devF ?? ref;
      let tDev = 0;
      let acc: LayerResult | null = null;
      let iso: LayerResult | null = null;
      let forced: LayerResult | null = null;
      let t: number;
      if (doAcc) [acc, tDev] = timed(() => model.device.layer(L, devIn, w, ctx));
      if (doForced) {
        // without top-k choices, or on the same input with the same choices, the forced run is the free one
        if (acc !== null && devFIn === devIn && !hasChoices) forced = acc;
        else {
          [forced, t] = timed(() => model.device.layer(L, devFIn, w, forcedCtx));
          tDev += t;
        }
      }
      if (doIso) {
        [iso, t] = timed(() => model.device.layer(L, ref, w, isoCtx));
        tDev += t;
      }
      // the floor pass: the reference on its input as FP16 holds it, with its own choices, storing its sublayer
      // outputs and the residual stream between them in FP16 as the device does, output rounded to FP16
      let floorRun: LayerResult | null = null;
      let tFloor = 0;
      if (doFloor) [floorRun, tFloor] = timed(() => model.reference.layer(L, roundActF16(ref), w, { ...forcedCtx, fp16Storage: true }));
      const isoFloor = floorFrom(floorRun?.out ?? null, refOut.out);
      let floor: StageResult['floor'] | undefined;
      if (isoFloor !== null) {
        driftSum = addFloors(driftSum, isoFloor);
        lastLayerFloor = isoFloor;
        floor = { isolated: isoFloor, accumulated_forced: driftSum };
      }
      const flips = (r: LayerResult | null) => selectionFlips(refOut, r);
      const stage = `layer.${L}`;
      // own error is judged per sub-stage too: a sublayer's error (attention, FFN) is small next to the residual
      // stream it is added to, so a layer-output floor would hide a sublayer bug that its own floor shows
      const subFloors = iso !== null && floorRun !== null ? substageFloors(refOut, floorRun) : null;
      const layerScoreError = scoreErrors(refOut, iso);
      const flipsIso = iso !== null && opt.freeSelection ? judgeFlips(L, refOut, iso, 'isolated', policy.behaviour.flip_factor, layerScoreError) : null;
      // --free-selection: a token whose own choice flipped benignly (a near-tie) computes another expert or block
      // set, so its rows measure that choice, not the kernels; own error is judged on the other tokens (the
      // flip itself is judged above). isoRaw keeps what the device computed, for dumps and the repeat spread.
      const isoRaw = iso;
      if (iso !== null && flipsIso !== null && flipsIso.benign_tokens.length > 0) iso = rowsFromReference(iso, refOut, flipsIso.benign_tokens);
      const subMetrics = substageMetrics(refOut, iso ?? acc);
      const subStatus: Record<string, Status> = {};
      if (iso !== null && subMetrics !== undefined) {
        for (const [k, m] of Object.entries(subMetrics)) subStatus[k] = verdict(m, policy, { stage: `${stage}.${k}`, mode: 'isolated', floor: subFloors?.[k] ?? null });
      }
      const flipsAcc = acc !== null ? judgeFlips(L, refOut, acc, 'accumulated', policy.behaviour.flip_factor, layerScoreError) : null;
      if (refOut.selections !== null) choosesTopk = true;
      for (const t of flipsAcc?.benign_tokens ?? []) benignFlipped.add(t);
      flippedHere = flipsAcc?.tokens ?? [];
      // a scoring-bug flip fails the layer where the device chose against the reference's margins: in the free
      // accumulated run (behaviour) when that run decides, and always on the reference's own input (--free-selection)
      const bugAcc = (flipsAcc?.scoring_bug ?? 0) > 0 && opt.mode !== 'accumulated-forced' && opt.mode !== 'isolated';
      const bugIso = (flipsIso?.scoring_bug ?? 0) > 0;
      const s = record(
        {
          name: stage,
          accumulated: acc ? compareActs(acc.out, refOut.out, flips(acc)) : null,
          accumulated_forced: forced ? compareActs(forced.out, refOut.out, flips(forced)) : null,
          isolated: iso ? compareActs(iso.out, refOut.out, flips(iso)) : null,
          substages: subMetrics,
          ...(subFloors !== null ? { substage_floor: subFloors } : {}),
          ...(iso !== null && subMetrics !== undefined ? { substage_status: subStatus } : {}),
          ...(floor !== undefined ? { floor } : {}),
          ...(flipsAcc !== null || flipsIso !== null ? { flips: { accumulated: flipsAcc, isolated: flipsIso } } : {}),
          ...spreads(
            spread(acc?.out ?? null, () => model.device.layer(L, devIn, w, ctx).out),
            spread(isoRaw?.out ?? null, () => model.device.layer(L, ref, w, isoCtx).out),
          ),
          time_ms: { reference: tRef, device: tDev, ...(doFloor ? { floor: tFloor } : {}) },
        },
        // the forced run when it is a run of its own (top-k choices): what compare judges drift by
        { reference: refOut.out, device: acc?.out ?? null, device_isolated: isoRaw?.out ?? null, device_forced: forced !== null && forced !== acc ? forced.out : null },
        bugAcc || bugIso ? 'fail' : 'pass',
      );
      // from here on the tokens from the first flipped one read other choices' outputs through attention
      prefixEnd = nextPrefixEnd(prefixEnd, flippedHere);
      flippedHere = [];
      if (s.status === 'fail' && opt.drill !== false) {
        s.drill = drillDown(stage, refOut, iso ?? model.device.layer(L, ref, w, isoCtx), policy, floorRun);
      }
      if (s.status === 'fail' && opt.captureRepro === true && repro === null) {
        repro = { layer: L, stage, referenceInput: ref, deviceInput: doAcc ? devIn : null, referenceOutput: refOut.out };
      }
      ref = refOut.out;
      dev = acc?.out ?? null;
      devF = forced?.out ?? null;
    } finally {
      scope.exit();
    }
  }

  if (to === model.numLayers - 1 && !stop()) {
    // the head's stages: their own floor, and for drift that floor grown as the residual stream's budget grew
    const headFloor = (own: FloorMetrics | null): StageResult['floor'] | undefined =>
      own === null ? undefined : { isolated: own, accumulated_forced: lastLayerFloor !== null ? scaleFloor(own, driftSum, lastLayerFloor) : own };
    const [refN, tR] = golden ? timed(() => golden.stage('final_norm').out) : timed(() => model.reference.finalNorm(ref));
    save?.stage('final_norm', { out: refN, selections: null });
    const devN = dev;
    const devFN = devF;
    const [accN, tA] = timed(() => (doAcc ? model.device.finalNorm(devN ?? ref) : null));
    const [forN, tF] = timed(() => (doForced ? (devFN === devN && accN !== null ? accN : model.device.finalNorm(devFN ?? ref)) : null));
    const [isoN, tI] = timed(() => (doIso ? model.device.finalNorm(ref) : null));
    const [floorN, tFl] = timed(() => (doFloor ? model.reference.finalNorm(roundActF16(ref)) : null));
    record(
      {
        name: 'final_norm',
        accumulated: accN && compareActs(accN, refN),
        accumulated_forced: forN && compareActs(forN, refN),
        isolated: isoN && compareActs(isoN, refN),
        ...(doFloor ? { floor: headFloor(floorFrom(floorN, refN)) } : {}),
        ...spreads(spread(accN, () => model.device.finalNorm(devN ?? ref)), spread(isoN, () => model.device.finalNorm(ref))),
        time_ms: { reference: tR, device: tA + tF + tI, ...(doFloor ? { floor: tFl } : {}) },
      },
      { reference: refN, device: accN, device_isolated: isoN, device_forced: forN !== accN ? forN : null },
    );
    if (stop()) return finish(stages, policy, repro);
    // The head (vocab × hidden, the largest matrix) is read and decoded once per path: every mode's rows go
    // through one call (rows are independent: the same bits as one call each, harness/test/verdict.test.ts).
    // The device keeps the head's FP32 output: the floor is the head on its input as FP16 holds it, unrounded.
    const [refHead, tR2] = timed(() => headRows(model.reference, [golden ? null : refN, doFloor ? roundActF16(refN) : null]));
    const refL = golden ? golden.stage('logits').out : refHead[0]!;
    const floorL = refHead[1];
    save?.stage('logits', { out: refL, selections: null });
    const [devHead, tA2] = timed(() => headRows(model.device, [accN, forN !== null && forN !== accN ? forN : null, isoN !== null ? refN : null]));
    const accL = devHead[0];
    const forL = forN === null ? null : forN === accN ? accL : devHead[1];
    const isoL = devHead[2];
    const logitsFloor = doFloor ? headFloor(floorFrom(floorL, refL, false)) : undefined;
    // the head's own FP16 floor (its input as FP16 holds it): floor_excuse × that is how far the policy lets a correct
    // head put a logit; two that far off can swap a pair the reference separates by up to twice that, a near-tie of
    // the vocabulary. Not the drift-grown budget: summed over 43 layers of worst elements it would excuse margins of
    // whole logits, and no bound from the device's own values (the device's argmax always lies within its own errors)
    const ownFloorL = logitsFloor?.isolated ?? null;
    const tieBound = ownFloorL !== null ? tieBoundOf(thresholdsFor(policy, 'logits', 'accumulated', 'logits').floor_excuse, ownFloorL) : undefined;
    const accLm = accL && compareLogits(accL, refL, choosesTopk ? benignFlipped : undefined, tieBound);
    const b = policy.behaviour;
    const behaviourFails = accLm !== null && logitReasons(accLm, b).length > 0;
    record(
      {
        name: 'logits',
        accumulated: accL && compareActs(accL, refL),
        accumulated_forced: forL && compareActs(forL, refL),
        isolated: isoL && compareActs(isoL, refL),
        logits: { accumulated: accLm, accumulated_forced: forL && compareLogits(forL, refL), isolated: isoL && compareLogits(isoL, refL) },
        ...(logitsFloor !== undefined ? { floor: logitsFloor } : {}),
        ...spreads(spread(accL, () => model.device.logits(accN!)), spread(isoL, () => model.device.logits(refN))),
        // the floor's head rows ran in the reference's one head pass: its time is in `reference`
        time_ms: { reference: tR2, device: tA2 },
      },
      { reference: refL, device: accL, device_isolated: isoL, device_forced: forL !== accL ? forL : null },
      behaviourFails && opt.mode !== 'accumulated-forced' ? 'fail' : 'pass',
    );
  }

  return finish(stages, policy, repro);
}

/** The carried markers, the first failure, the three questions and the verdict of a run's stages. */
function finish(stages: StageResult[], policy: Policy, repro: ReproCapture | null): RunResult {
  for (const [name, root] of carriedFrom(stages, policy)) stages.find((s) => s.name === name)!.carried_from = root;
  const questions = answerQuestions(stages, policy);
  const failed = stages.find((s) => s.status === 'fail');
  const pass = failed === undefined && questionsPass(questions);
  return { stages, first_failure: failed?.name ?? (pass ? null : 'logits'), verdict: pass ? 'pass' : 'fail', questions, repro };
}

/** `path`'s logits of each input (null stays null) from one call on their rows stacked: the head is decoded once. */
function headRows(path: StagePath<unknown>, inputs: ReadonlyArray<Act | null>): Array<Act | null> {
  const given = inputs.filter((x): x is Act => x !== null);
  if (given.length === 0) return inputs.map(() => null);
  const D = given[0].shape[1];
  const rows = given.reduce((n, x) => n + x.shape[0], 0);
  const all = new Float32Array(rows * D);
  let at = 0;
  for (const x of given) {
    all.set(x.data, at);
    at += x.data.length;
  }
  const out = path.logits(act([rows, D], all));
  const V = out.shape[1];
  let r0 = 0;
  return inputs.map((x) => {
    if (x === null) return null;
    const S = x.shape[0];
    const part = act([S, V], out.data.slice(r0 * V, (r0 + S) * V));
    r0 += S;
    return part;
  });
}

/**
 * `dev` with the rows of `tokens` (dim 0 of its output, sub-stages and scores) taken from `ref`: the
 * --free-selection own-error figures leave out the tokens whose benign flip changed what they compute.
 */
export function rowsFromReference(dev: LayerResult, ref: LayerResult, tokens: readonly number[]): LayerResult {
  const patch = (d: Act, r: Act | undefined): Act => {
    if (r === undefined || r.shape.length === 0 || r.shape[0] !== d.shape[0] || r.data.length !== d.data.length) return d;
    const row = d.data.length / d.shape[0];
    const data = Float32Array.from(d.data);
    for (const t of tokens) data.set(r.data.subarray(t * row, (t + 1) * row), t * row);
    return act(d.shape, data);
  };
  const subs = dev.substages && Object.fromEntries(Object.entries(dev.substages).map(([k, a]) => [k, patch(a, ref.substages?.[k])]));
  const scores = dev.scores && Object.fromEntries(Object.entries(dev.scores).map(([k, sc]) => [k, { ...sc, scores: patch(sc.scores, ref.scores?.[k]?.scores) }]));
  return { ...dev, out: patch(dev.out, ref.out), ...(subs ? { substages: subs } : {}), ...(scores ? { scores } : {}) };
}

/** Each sub-stage's FP16 floor: the floor pass's sub-stage output, rounded to FP16, against the reference's. */
export function substageFloors(ref: LayerResult, floorRun: LayerResult): Record<string, FloorMetrics> | null {
  const rs = allSubstages(ref);
  const fs = allSubstages(floorRun);
  if (rs === undefined || fs === undefined) return null;
  const out: Record<string, FloorMetrics> = {};
  for (const [k, r] of Object.entries(rs)) {
    const f = fs[k];
    if (f !== undefined) out[k] = floorOf(compareActs(isScoreSubstage(k) ? f : roundActF16(f), r));
  }
  return out;
}

/** Per selection kind, the isolated run's max |Δs| of its scores against the reference's (null: not measured). */
export function scoreErrors(ref: LayerResult, iso: LayerResult | null): Record<string, number | null> {
  const out: Record<string, number | null> = {};
  for (const [kind, r] of Object.entries(ref.scores ?? {})) {
    const d = iso?.scores?.[kind];
    out[kind] = d !== undefined ? compareActs(d.scores, r.scores).max_abs : null;
  }
  return out;
}

/** Tokens whose discrete choices differ from the reference's (the largest count over selection kinds). */
export function selectionFlips(ref: LayerResult, dev: LayerResult | null): number {
  if (dev === null || dev.selections === null || ref.selections === null) return 0;
  let n = 0;
  for (const kind of Object.keys(ref.selections)) n = Math.max(n, countFlips(ref.selections[kind], dev.selections[kind]));
  return n;
}

/**
 * A layer's sub-stage outputs, with its selection scores as sub-stages of their own (moe.scores,
 * attn.indexer.scores): a router that scores wrongly is an own-error bug there, even when its choices are
 * forced (its routing weights normalise a uniform rescale away).
 */
export function allSubstages(r: LayerResult | null): Record<string, Act> | undefined {
  if (r === null || (!r.substages && !r.scores)) return undefined;
  const out: Record<string, Act> = { ...(r.substages ?? {}) };
  for (const [kind, sc] of Object.entries(r.scores ?? {})) out[SCORE_SUBSTAGE[kind] ?? `${kind}.scores`] = sc.scores;
  return out;
}

/**
 * Score sub-stages are FP32 on the device but computed from FP16-stored operands (the router's input, the
 * indexer's qI, head weights and compressed keys), so each score carries FP16 relative error of its own
 * magnitude: their floor rounds the floor pass's scores to FP16 like every other sub-stage (unrounded, a correct
 * device's indexer scores measured 6.5× their floor on 40 tokens of deepseek-v4-tiny).
 */
const isScoreSubstage = (_k: string) => false;

export function substageMetrics(ref: LayerResult, dev: LayerResult | null): Record<string, StageMetrics> | undefined {
  const rs = allSubstages(ref);
  const ds = allSubstages(dev);
  if (rs === undefined || ds === undefined) return undefined;
  const out: Record<string, StageMetrics> = {};
  for (const [k, r] of Object.entries(rs)) {
    const d = ds[k];
    if (d !== undefined) out[k] = compareActs(d, r);
  }
  return out;
}

/** `floorRun`: the floor pass's layer (its sub-stages, rounded to FP16, give each sub-stage's floor). */
export function drillDown(stage: string, ref: LayerResult, dev: LayerResult, policy: Policy, floorRun: LayerResult | null = null): Drill {
  const subs: SubstageResult[] = [];
  const rs = allSubstages(ref);
  const ds = allSubstages(dev);
  const fs = allSubstages(floorRun);
  if (rs !== undefined && ds !== undefined) {
    for (const k of substageOrder(Object.keys(rs))) {
      const d = ds[k];
      if (d === undefined) continue;
      const name = `${stage}.${k}`;
      const metrics = compareActs(d, rs[k]);
      const fr = fs?.[k];
      const fr16 = policy.rule === 'floor' && fr !== undefined ? (isScoreSubstage(k) ? fr : roundActF16(fr)) : null;
      const floor = fr16 !== null ? floorOf(compareActs(fr16, rs[k])) : null;
      const profile = positionProfile(d, fr16, rs[k]);
      subs.push({ name, status: verdict(metrics, policy, { stage: name, mode: 'isolated', floor }), metrics, ...(floor !== null ? { floor } : {}), position_profile: profile });
    }
  }
  return { mode: 'isolated', substages: subs, first_failing: subs.find((x) => x.status === 'fail')?.name ?? null };
}

export const PROFILE_BUCKETS = 8;

/** Max |d − r| per bucket of consecutive tokens (the first axis), and the same for the floor pass's output. */
function positionProfile(d: Act, floor: Act | null, r: Act): { error: number[]; floor: number[] | null } {
  const S = r.shape[0];
  const per = r.data.length / Math.max(1, S);
  const nb = Math.min(PROFILE_BUCKETS, S);
  const prof = (x: Act) => {
    const out = new Array<number>(nb).fill(0);
    for (let t = 0; t < S; t++) {
      const b = Math.min(nb - 1, Math.floor((t * nb) / S));
      for (let i = t * per; i < (t + 1) * per; i++) {
        const e = Math.abs(x.data[i] - r.data[i]);
        if (e > out[b]) out[b] = e; // NaN compares false: a NaN element does not move the profile
      }
    }
    return out;
  };
  return { error: prof(d), floor: floor !== null ? prof(floor) : null };
}

/**
 * DIR/<stage>.safetensors with F32 `reference`, `device`, `device_isolated` (DESIGN §7), and `device_forced` where the
 * forced run is a run of its own (a model with top-k choices): compare judges drift by it as diff does.
 */
function dumpStage(dir: string, stage: string, acts: { reference: Act; device: Act | null; device_isolated: Act | null; device_forced?: Act | null }): void {
  const tensors = [];
  for (const [name, a] of Object.entries(acts)) {
    if (a === null) continue;
    tensors.push({ name, dtype: 'F32' as const, shape: a.shape, data: new Uint8Array(a.data.buffer, a.data.byteOffset, a.data.byteLength) });
  }
  writeSafetensors(path.join(dir, `${stage}.safetensors`), tensors, { format: 'pt', stage });
}
