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
} from '../compare/metrics.js';
import { carriedFrom } from '../compare/carried.js';
import { type Policy, type Status, verdict, worst } from '../compare/policy.js';
import type { Act } from '../formats/tensor.js';
import { writeSafetensors } from '../io/safetensors.js';
import type { LayerContext, LayerResult, ModelDef } from '../models/path.js';

export type Mode = 'both' | 'accumulated' | 'isolated';

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
  status: Status;
  accumulated: StageMetrics | null;
  isolated: StageMetrics | null;
  logits?: { accumulated: LogitMetrics | null; isolated: LogitMetrics | null };
  /** sub-stage metrics (isolated mode when run, else accumulated) for drill-down: attn, mlp, moe, … */
  substages?: Record<string, StageMetrics>;
  /** log-binned |d − r| per mode */
  histogram?: { accumulated: ErrorHistogram | null; isolated: ErrorHistogram | null };
  /** failing layers only (unless --no-drill) */
  drill?: Drill;
  /** --repeat N: how far repeated device runs of this stage land from the first (0 for a deterministic path) */
  spread?: { runs: number; accumulated: Spread | null; isolated: Spread | null };
  time_ms: { reference: number; device: number };
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
  const doAcc = opt.mode !== 'isolated';
  const doIso = opt.mode !== 'accumulated';
  const repeat = opt.repeat ?? 1;
  const golden = opt.golden ?? null;
  const save = opt.saveGolden ?? null;
  const total = stageNames(model.numLayers, opt.layers).length;
  const stages: StageResult[] = [];
  let repro: ReproCapture | null = null;
  const t0 = Date.now();
  const stop = () => opt.failFast === true && stages.some((s) => s.status === 'fail');

  const record = (s: Omit<StageResult, 'status'>, acts: { reference: Act; device: Act | null; device_isolated: Act | null }) => {
    const status = worst(verdict(s.accumulated, policy), verdict(s.isolated, policy));
    const histogram = {
      accumulated: acts.device && s.accumulated ? errorHistogram(acts.device, acts.reference) : null,
      isolated: s.isolated ? errorHistogram(acts.device_isolated ?? acts.device!, acts.reference) : null,
    };
    const r: StageResult = { ...s, status, histogram };
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

  // Embed: its input is the tokens in both modes, so isolated = accumulated.
  let ref: Act;
  let tRef = 0;
  let dev: Act | null = null;
  if (from === 0) {
    [ref, tRef] = golden ? timed(() => golden.stage('embed').out) : timed(() => model.reference.embed(tokens));
    save?.stage('embed', { out: ref, selections: null });
    const [d, tDev] = timed(() => model.device.embed(tokens));
    dev = d;
    const m = compareActs(d, ref);
    const sp = spread(d, () => model.device.embed(tokens));
    record(
      { name: 'embed', accumulated: doAcc ? m : null, isolated: doIso ? m : null, ...spreads(doAcc ? sp : null, doIso ? sp : null), time_ms: { reference: tRef, device: tDev } },
      { reference: ref, device: d, device_isolated: null },
    );
  } else if (golden) {
    ref = golden.input();
  } else {
    ref = model.reference.embed(tokens);
  }

  for (let L = golden ? from : 0; L <= to && !stop(); L++) {
    if (L < from) {
      // stages before the range: reference only, to produce the range's input
      ref = model.reference.layer(L, ref, model.loadLayer(L), { tokens, positions, forcedSelections: null }).out;
      continue;
    }
    if (L === from && from > 0) save?.input(ref);
    const w = model.loadLayer(L);
    const ctx: LayerContext = { tokens, positions, forcedSelections: null };
    let refOut: LayerResult;
    [refOut, tRef] = golden ? timed(() => golden.stage(`layer.${L}`)) : timed(() => model.reference.layer(L, ref, w, ctx));
    save?.stage(`layer.${L}`, refOut);
    const isoCtx: LayerContext = { ...ctx, forcedSelections: opt.freeSelection ? null : refOut.selections };
    const devIn = dev ?? ref;
    let tDev = 0;
    let acc: LayerResult | null = null;
    let iso: LayerResult | null = null;
    if (doAcc) [acc, tDev] = timed(() => model.device.layer(L, devIn, w, ctx));
    if (doIso) {
      let t: number;
      [iso, t] = timed(() => model.device.layer(L, ref, w, isoCtx));
      tDev += t;
    }
    const flips = (r: LayerResult | null) => selectionFlips(refOut, r);
    const stage = `layer.${L}`;
    const s = record(
      {
        name: stage,
        accumulated: acc ? compareActs(acc.out, refOut.out, flips(acc)) : null,
        isolated: iso ? compareActs(iso.out, refOut.out, flips(iso)) : null,
        substages: substageMetrics(refOut, iso ?? acc),
        ...spreads(
          spread(acc?.out ?? null, () => model.device.layer(L, devIn, w, ctx).out),
          spread(iso?.out ?? null, () => model.device.layer(L, ref, w, isoCtx).out),
        ),
        time_ms: { reference: tRef, device: tDev },
      },
      { reference: refOut.out, device: acc?.out ?? null, device_isolated: iso?.out ?? null },
    );
    if (s.status === 'fail' && opt.drill !== false) {
      s.drill = drillDown(stage, refOut, iso ?? model.device.layer(L, ref, w, isoCtx), policy);
    }
    if (s.status === 'fail' && opt.captureRepro === true && repro === null) {
      repro = { layer: L, stage, referenceInput: ref, deviceInput: doAcc ? devIn : null, referenceOutput: refOut.out };
    }
    ref = refOut.out;
    dev = acc?.out ?? null;
  }

  if (to === model.numLayers - 1 && !stop()) {
    const [refN, tR] = golden ? timed(() => golden.stage('final_norm').out) : timed(() => model.reference.finalNorm(ref));
    save?.stage('final_norm', { out: refN, selections: null });
    const devN = dev;
    const [accN, tA] = timed(() => (doAcc ? model.device.finalNorm(devN ?? ref) : null));
    const [isoN, tI] = timed(() => (doIso ? model.device.finalNorm(ref) : null));
    record(
      {
        name: 'final_norm',
        accumulated: accN && compareActs(accN, refN),
        isolated: isoN && compareActs(isoN, refN),
        ...spreads(spread(accN, () => model.device.finalNorm(devN ?? ref)), spread(isoN, () => model.device.finalNorm(ref))),
        time_ms: { reference: tR, device: tA + tI },
      },
      { reference: refN, device: accN, device_isolated: isoN },
    );
    if (stop()) return finish(stages, policy, repro);
    const [refL, tR2] = golden ? timed(() => golden.stage('logits').out) : timed(() => model.reference.logits(refN));
    save?.stage('logits', { out: refL, selections: null });
    const [accL, tA2] = timed(() => (accN ? model.device.logits(accN) : null));
    const [isoL, tI2] = timed(() => (isoN ? model.device.logits(refN) : null));
    record(
      {
        name: 'logits',
        accumulated: accL && compareActs(accL, refL),
        isolated: isoL && compareActs(isoL, refL),
        logits: { accumulated: accL && compareLogits(accL, refL), isolated: isoL && compareLogits(isoL, refL) },
        ...spreads(spread(accL, () => model.device.logits(accN!)), spread(isoL, () => model.device.logits(refN))),
        time_ms: { reference: tR2, device: tA2 + tI2 },
      },
      { reference: refL, device: accL, device_isolated: isoL },
    );
  }

  return finish(stages, policy, repro);
}

/** The carried markers, the first failure and the verdict of a run's stages. */
function finish(stages: StageResult[], policy: Policy, repro: ReproCapture | null): RunResult {
  for (const [name, root] of carriedFrom(stages, policy)) stages.find((s) => s.name === name)!.carried_from = root;
  const failed = stages.find((s) => s.status === 'fail');
  return { stages, first_failure: failed?.name ?? null, verdict: failed ? 'fail' : 'pass', repro };
}

/** Tokens whose discrete choices differ from the reference's (the largest count over selection kinds). */
export function selectionFlips(ref: LayerResult, dev: LayerResult | null): number {
  if (dev === null || dev.selections === null || ref.selections === null) return 0;
  let n = 0;
  for (const kind of Object.keys(ref.selections)) n = Math.max(n, countFlips(ref.selections[kind], dev.selections[kind]));
  return n;
}

function substageMetrics(ref: LayerResult, dev: LayerResult | null): Record<string, StageMetrics> | undefined {
  if (!ref.substages || !dev?.substages) return undefined;
  const out: Record<string, StageMetrics> = {};
  for (const [k, r] of Object.entries(ref.substages)) {
    const d = dev.substages[k];
    if (d !== undefined) out[k] = compareActs(d, r);
  }
  return out;
}

export function drillDown(stage: string, ref: LayerResult, dev: LayerResult, policy: Policy): Drill {
  const subs: SubstageResult[] = [];
  if (ref.substages && dev.substages) {
    for (const k of substageOrder(Object.keys(ref.substages))) {
      const d = dev.substages[k];
      if (d === undefined) continue;
      const metrics = compareActs(d, ref.substages[k]);
      subs.push({ name: `${stage}.${k}`, status: verdict(metrics, policy), metrics });
    }
  }
  return { mode: 'isolated', substages: subs, first_failing: subs.find((x) => x.status === 'fail')?.name ?? null };
}

/** DIR/<stage>.safetensors with F32 `reference`, `device`, `device_isolated` (DESIGN §7). */
function dumpStage(dir: string, stage: string, acts: { reference: Act; device: Act | null; device_isolated: Act | null }): void {
  const tensors = [];
  for (const [name, a] of Object.entries(acts)) {
    if (a === null) continue;
    tensors.push({ name, dtype: 'F32' as const, shape: a.shape, data: new Uint8Array(a.data.buffer, a.data.byteOffset, a.data.byteLength) });
  }
  writeSafetensors(path.join(dir, `${stage}.safetensors`), tensors, { format: 'pt', stage });
}
