/**
 * The lockstep runner: embed → layer.0 … layer.{N−1} → final_norm → logits, both paths stage by stage.
 * Each layer's tensors are read once and handed to both paths, then dropped. Two modes (DESIGN §5):
 * accumulated (the device runs on its own previous output) and isolated (the device layer is fed the
 * reference's input, and the reference's discrete choices unless --free-selection).
 */
import * as path from 'node:path';
import { type LogitMetrics, compareActs, compareLogits, countFlips, type StageMetrics } from '../compare/metrics.js';
import { type Policy, type Status, verdict, worst } from '../compare/policy.js';
import type { Act } from '../formats/tensor.js';
import { writeSafetensors } from '../io/safetensors.js';
import type { LayerResult, ModelDef, Selections } from '../models/path.js';

export type Mode = 'both' | 'accumulated' | 'isolated';

export interface RunOptions {
  tokens: number[];
  mode: Mode;
  /** inclusive layer range; null = all */
  layers: { from: number; to: number } | null;
  policy: Policy;
  freeSelection: boolean;
  dumpDir: string | null;
  onStage?: (p: Progress) => void;
}

export interface Progress {
  stage: string;
  done: number;
  total: number;
  elapsedMs: number;
}

export interface StageResult {
  name: string;
  status: Status;
  accumulated: StageMetrics | null;
  isolated: StageMetrics | null;
  logits?: { accumulated: LogitMetrics | null; isolated: LogitMetrics | null };
  /** sub-stage metrics (isolated mode when run, else accumulated) for drill-down: attn, mlp, moe, … */
  substages?: Record<string, StageMetrics>;
  time_ms: { reference: number; device: number };
}

export interface RunResult {
  stages: StageResult[];
  first_failure: string | null;
  verdict: 'pass' | 'fail';
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

export function runDiff<LW>(model: ModelDef<LW>, opt: RunOptions): RunResult {
  const { tokens, policy } = opt;
  const positions = tokens.map((_, i) => i);
  const from = opt.layers?.from ?? 0;
  const to = opt.layers?.to ?? model.numLayers - 1;
  const doAcc = opt.mode !== 'isolated';
  const doIso = opt.mode !== 'accumulated';
  const total = stageNames(model.numLayers, opt.layers).length;
  const stages: StageResult[] = [];
  const t0 = Date.now();

  const record = (s: Omit<StageResult, 'status'>, acts: { reference: Act; device: Act | null; device_isolated: Act | null }) => {
    const status = worst(verdict(s.accumulated, policy), verdict(s.isolated, policy));
    stages.push({ ...s, status });
    if (opt.dumpDir !== null) dumpStage(opt.dumpDir, s.name, acts);
    opt.onStage?.({ stage: s.name, done: stages.length, total, elapsedMs: Date.now() - t0 });
  };
  const timed = <T>(f: () => T): [T, number] => {
    const a = performance.now();
    const v = f();
    return [v, performance.now() - a];
  };

  // Embed: its input is the tokens in both modes, so isolated = accumulated.
  let [ref, tRef] = timed(() => model.reference.embed(tokens));
  let dev: Act | null = null;
  if (from === 0) {
    const [d, tDev] = timed(() => model.device.embed(tokens));
    dev = d;
    const m = compareActs(d, ref);
    record({ name: 'embed', accumulated: doAcc ? m : null, isolated: doIso ? m : null, time_ms: { reference: tRef, device: tDev } }, { reference: ref, device: d, device_isolated: null });
  }

  for (let L = 0; L <= to; L++) {
    const w = model.loadLayer(L);
    const ctx = { tokens, positions, forcedSelections: null };
    let refOut: LayerResult;
    [refOut, tRef] = timed(() => model.reference.layer(L, ref, w, ctx));
    if (L < from) {
      ref = refOut.out; // stages before the range: reference only, to produce the range's input
      continue;
    }
    let tDev = 0;
    let acc: LayerResult | null = null;
    let iso: LayerResult | null = null;
    if (doAcc) {
      [acc, tDev] = timed(() => model.device.layer(L, dev ?? ref, w, ctx));
    }
    if (doIso) {
      const forced: Selections | null = opt.freeSelection ? null : refOut.selections;
      let t: number;
      [iso, t] = timed(() => model.device.layer(L, ref, w, { ...ctx, forcedSelections: forced }));
      tDev += t;
    }
    const flips = (r: LayerResult | null) => {
      if (r === null || r.selections === null || refOut.selections === null) return 0;
      let n = 0;
      for (const kind of Object.keys(refOut.selections)) n = Math.max(n, countFlips(refOut.selections[kind], r.selections[kind]));
      return n;
    };
    record(
      {
        name: `layer.${L}`,
        accumulated: acc ? compareActs(acc.out, refOut.out, flips(acc)) : null,
        isolated: iso ? compareActs(iso.out, refOut.out, flips(iso)) : null,
        substages: substageMetrics(refOut, iso ?? acc),
        time_ms: { reference: tRef, device: tDev },
      },
      { reference: refOut.out, device: acc?.out ?? null, device_isolated: iso?.out ?? null },
    );
    ref = refOut.out;
    dev = acc?.out ?? null;
  }

  if (to === model.numLayers - 1) {
    const [refN, tR] = timed(() => model.reference.finalNorm(ref));
    const [accN, tA] = timed(() => (doAcc ? model.device.finalNorm(dev ?? ref) : null));
    const [isoN, tI] = timed(() => (doIso ? model.device.finalNorm(ref) : null));
    record(
      { name: 'final_norm', accumulated: accN && compareActs(accN, refN), isolated: isoN && compareActs(isoN, refN), time_ms: { reference: tR, device: tA + tI } },
      { reference: refN, device: accN, device_isolated: isoN },
    );
    const [refL, tR2] = timed(() => model.reference.logits(refN));
    const [accL, tA2] = timed(() => (accN ? model.device.logits(accN) : null));
    const [isoL, tI2] = timed(() => (isoN ? model.device.logits(refN) : null));
    record(
      {
        name: 'logits',
        accumulated: accL && compareActs(accL, refL),
        isolated: isoL && compareActs(isoL, refL),
        logits: { accumulated: accL && compareLogits(accL, refL), isolated: isoL && compareLogits(isoL, refL) },
        time_ms: { reference: tR2, device: tA2 + tI2 },
      },
      { reference: refL, device: accL, device_isolated: isoL },
    );
  }

  const failed = stages.find((s) => s.status === 'fail');
  return { stages, first_failure: failed?.name ?? null, verdict: failed ? 'fail' : 'pass' };
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

/** DIR/<stage>.safetensors with F32 `reference`, `device`, `device_isolated` (DESIGN §7). */
function dumpStage(dir: string, stage: string, acts: { reference: Act; device: Act | null; device_isolated: Act | null }): void {
  const tensors = [];
  for (const [name, a] of Object.entries(acts)) {
    if (a === null) continue;
    tensors.push({ name, dtype: 'F32' as const, shape: a.shape, data: new Uint8Array(a.data.buffer, a.data.byteOffset, a.data.byteLength) });
  }
  writeSafetensors(path.join(dir, `${stage}.safetensors`), tensors, { format: 'pt', stage });
}
