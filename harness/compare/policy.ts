/**
 * Verdicts (DESIGN §5). Thresholds are data, carried into every report. A device NaN/Inf where the reference
 * has none fails the stage whatever the metric says.
 *
 * Two rules:
 *   - `fixed`: the metric against fail_above / warn_above, nothing else (what --metric/--fail-above/--warn-above
 *     give: a user who wants a fixed number gets exactly it);
 *   - `floor` (the default): the same user rule, except that an error a correct FP16 implementation also makes
 *     at that magnitude is not a failure. Each stage carries its measured FP16 floor (runner/floor.ts); a stage
 *     fails when error / floor exceeds floor_ratio (a bug far above what FP16 costs, even under 0.1), or when the
 *     error exceeds fail_above while it is more than floor_excuse × the floor (the floor cannot explain it).
 * Thresholds can differ per stage kind (embed, attn, moe, logits) and per mode (--policy FILE).
 */
import * as fs from 'node:fs';
import { InputError } from '../errors.js';
import type { StageMetrics } from './metrics.js';
import { readRegularText } from '../io/regular.js';

export const METRICS = ['max_abs', 'mean_abs', 'rms', 'rel_l2'] as const;
export type MetricName = (typeof METRICS)[number];

export const STAGE_KINDS = ['embed', 'attn', 'moe', 'logits'] as const;
export type StageKind = (typeof STAGE_KINDS)[number];

/** The modes a threshold can be set for: isolated (own error), accumulated-forced (drift), accumulated (free, information). */
export const POLICY_MODES = ['isolated', 'accumulated-forced', 'accumulated'] as const;
export type PolicyMode = (typeof POLICY_MODES)[number];

export interface Thresholds {
  metric: MetricName;
  /** fail when the metric exceeds this (default 0.1: a 0.1 shift in a hidden state moves tokens) */
  fail_above: number;
  /** warn above this (default 1e-2: an order of magnitude above what FP16 storage costs on O(1) activations) */
  warn_above: number;
  /** floor rule: fail when error / floor, in ratio_metric, exceeds this */
  floor_ratio: number;
  /**
   * the metric error / floor is taken in (default rms: the ratio of two maxima over a few thousand elements
   * scatters by ±2× run to run on short prompts, the ratio of two RMS by far less)
   */
  ratio_metric: MetricName;
  /** floor rule: an error above fail_above is excused only while error / floor stays within this */
  floor_excuse: number;
  /** floor rule: errors at or below this never fail on the ratio alone (FP32 noise on a stage whose floor is ~0) */
  min_error: number;
}

/** Behaviour (free accumulated mode), judged on the logits and on the flips (DESIGN §5). */
export interface BehaviourPolicy {
  /** fraction of tokens whose top-1 must agree with the reference's */
  top1_min: number;
  /** mean KL(p_ref ‖ p_dev) per token, nats */
  kl_mean_max: number;
  /** 99th percentile of KL per token, nats */
  kl_p99_max: number;
  /** a flip whose reference margin exceeds this × the device's score error there is a scoring bug */
  flip_factor: number;
}

export type ThresholdOverride = Partial<Thresholds>;

export interface Policy extends Thresholds {
  rule: 'floor' | 'fixed';
  /** where the policy came from: "default", "flags" (--metric/--fail-above/--warn-above) or the --policy file */
  source: string;
  /** per stage kind, then optionally per mode within it; a missing field falls back to the level above */
  kinds?: Partial<Record<StageKind, ThresholdOverride & { modes?: Partial<Record<PolicyMode, ThresholdOverride>> }>>;
  /** per named stage or sub-stage (`layer.2`, `layer.2.attn`, `logits`), as Polygraphy's per-output tolerances; above its kind */
  stages?: Record<string, ThresholdOverride & { modes?: Partial<Record<PolicyMode, ThresholdOverride>> }>;
  behaviour: BehaviourPolicy;
}

/**
 * Defaults, with why:
 *   floor_ratio 5 (in rms) — a correct emulated FP16 path lands at 1.0–4.4 × the measured floor on the bundled
 *     fixtures, every stage and sub-stage, 28–256 tokens (the floor pass rounds at stage boundaries only, the
 *     device also rounds inside); FP16 accumulation lands at 9–14 ×, RoPE angles in FP16 at 6.5 × (59 tokens)
 *     to 16 × (200 tokens) on the attention sub-stage;
 *   floor_excuse 3 — past 0.1 the floor must explain most of the error;
 *   min_error 1e-4 — below FP16 spacing of any |r| ≥ 0.25: no FP16 bug hides under it at working magnitudes;
 *   behaviour — llama.cpp's KL report reads mean KL < 0.01 as "indistinguishable" for a quantized model; an FP16
 *     path of the same weights should do much better, so mean 0.02, p99 0.2, top-1 ≥ 0.9 fail only a real change;
 *   flip_factor 4 — a flip needs |Δs_a| + |Δs_b| ≥ margin: a margin 4× beyond the score error cannot be drift.
 */
export const DEFAULT_BEHAVIOUR: BehaviourPolicy = { top1_min: 0.9, kl_mean_max: 0.02, kl_p99_max: 0.2, flip_factor: 4 };

export const DEFAULT_POLICY: Policy = {
  rule: 'floor',
  source: 'default',
  metric: 'max_abs',
  fail_above: 0.1,
  warn_above: 0.01,
  floor_ratio: 5,
  ratio_metric: 'rms',
  floor_excuse: 3,
  min_error: 1e-4,
  behaviour: DEFAULT_BEHAVIOUR,
};

/** The fixed rule of --metric/--fail-above/--warn-above (no floor, behaviour thresholds as default). */
export function makePolicy(metric: string, failAbove: number, warnAbove: number): Policy {
  if (!(METRICS as readonly string[]).includes(metric)) throw new InputError(`--metric ${metric}: expected one of ${METRICS.join(', ')}`);
  if (!(failAbove > 0) || !Number.isFinite(failAbove)) throw new InputError(`--fail-above ${failAbove}: expected a positive number`);
  if (!(warnAbove >= 0) || !Number.isFinite(warnAbove)) throw new InputError(`--warn-above ${warnAbove}: expected a non-negative number`);
  if (warnAbove > failAbove) throw new InputError(`--warn-above ${warnAbove} is above --fail-above ${failAbove}`);
  return { ...DEFAULT_POLICY, rule: 'fixed', source: 'flags', metric: metric as MetricName, fail_above: failAbove, warn_above: warnAbove };
}

/** The policy a command runs under: --policy FILE, else the flags as a fixed rule when any is given, else the default. */
export function resolvePolicy(a: { policy?: string; metric?: string; failAbove?: number; warnAbove?: number }): Policy {
  const flags = a.metric !== undefined || a.failAbove !== undefined || a.warnAbove !== undefined;
  if (a.policy !== undefined) {
    if (flags) throw new InputError(`--policy ${a.policy}: give either a policy file or --metric/--fail-above/--warn-above, not both`);
    return loadPolicyFile(a.policy);
  }
  if (!flags) return DEFAULT_POLICY;
  return makePolicy(a.metric ?? DEFAULT_POLICY.metric, a.failAbove ?? DEFAULT_POLICY.fail_above, a.warnAbove ?? DEFAULT_POLICY.warn_above);
}

const THRESHOLD_KEYS = ['metric', 'fail_above', 'warn_above', 'floor_ratio', 'ratio_metric', 'floor_excuse', 'min_error'] as const;
const BEHAVIOUR_KEYS = ['top1_min', 'kl_mean_max', 'kl_p99_max', 'flip_factor'] as const;

/**
 * A policy file: JSON, every field optional, unknown fields refused (a typo must not silently keep a default).
 *   { "rule": "floor"|"fixed", "metric": "max_abs", "fail_above": 0.1, "warn_above": 0.01, "floor_ratio": 6,
 *     "floor_excuse": 3, "min_error": 1e-4,
 *     "kinds": { "moe": { "fail_above": 0.2, "modes": { "accumulated-forced": { "floor_ratio": 8 } } } },
 *     "behaviour": { "top1_min": 0.9, "kl_mean_max": 0.02, "kl_p99_max": 0.2, "flip_factor": 4 } }
 */
export function loadPolicyFile(file: string): Policy {
  if (!fs.existsSync(file)) throw new InputError(`--policy ${file}: no such file`);
  const text = readRegularText(file); // a FIFO or a device is refused, not read until it ends
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    throw new InputError(`--policy ${file}: ${err.code === 'ENOENT' ? 'no such file' : err instanceof SyntaxError ? `not JSON (${err.message})` : err.message}`);
  }
  return parsePolicy(raw, `--policy ${file}`);
}

/** A value as the user wrote it: JSON shows 1e309 (parsed as Infinity) as null. */
const shown = (v: unknown) => (typeof v === 'number' ? String(v) : JSON.stringify(v));

export function parsePolicy(raw: unknown, where: string): Policy {
  const obj = (v: unknown, at: string): Record<string, unknown> => {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new InputError(`${where}: ${at} must be a JSON object`);
    return v as Record<string, unknown>;
  };
  const only = (o: Record<string, unknown>, keys: readonly string[], at: string) => {
    for (const k of Object.keys(o)) if (!keys.includes(k)) throw new InputError(`${where}: unknown field ${at}${k} (expected one of ${keys.join(', ')})`);
  };
  const thresholds = (o: Record<string, unknown>, at: string): ThresholdOverride => {
    const t: Record<string, unknown> = {};
    for (const k of THRESHOLD_KEYS) {
      if (o[k] === undefined) continue;
      if (k === 'metric' || k === 'ratio_metric') {
        if (!(METRICS as readonly unknown[]).includes(o[k])) throw new InputError(`${where}: ${at}${k} ${JSON.stringify(o[k])}: expected one of ${METRICS.join(', ')}`);
      } else if (typeof o[k] !== 'number' || !Number.isFinite(o[k]) || (o[k] as number) < 0) {
        throw new InputError(`${where}: ${at}${k} ${shown(o[k])}: expected a non-negative number`);
      }
      t[k] = o[k];
    }
    return t as ThresholdOverride;
  };
  const top = obj(raw, 'the file');
  only(top, [...THRESHOLD_KEYS, 'rule', 'kinds', 'stages', 'behaviour'], '');
  if (top.rule !== undefined && top.rule !== 'floor' && top.rule !== 'fixed') throw new InputError(`${where}: rule ${JSON.stringify(top.rule)}: expected "floor" or "fixed"`);
  const p: Policy = { ...DEFAULT_POLICY, ...thresholds(top, ''), rule: (top.rule as Policy['rule'] | undefined) ?? 'floor', source: where.replace(/^--policy /, ''), behaviour: { ...DEFAULT_BEHAVIOUR } };
  if (top.behaviour !== undefined) {
    const b = obj(top.behaviour, 'behaviour');
    only(b, BEHAVIOUR_KEYS, 'behaviour.');
    for (const k of BEHAVIOUR_KEYS) {
      if (b[k] === undefined) continue;
      if (typeof b[k] !== 'number' || !Number.isFinite(b[k]) || (b[k] as number) < 0) throw new InputError(`${where}: behaviour.${k} ${shown(b[k])}: expected a non-negative number`);
      if (k === 'top1_min' && (b[k] as number) > 1) throw new InputError(`${where}: behaviour.top1_min ${JSON.stringify(b[k])}: a fraction of tokens, at most 1`);
      p.behaviour[k] = b[k] as number;
    }
  }
  if (top.kinds !== undefined) {
    const kinds = obj(top.kinds, 'kinds');
    only(kinds, STAGE_KINDS, 'kinds.');
    p.kinds = {};
    for (const [kind, v] of Object.entries(kinds)) {
      const ko = obj(v, `kinds.${kind}`);
      only(ko, [...THRESHOLD_KEYS, 'modes'], `kinds.${kind}.`);
      const entry: NonNullable<Policy['kinds']>[StageKind] = thresholds(ko, `kinds.${kind}.`);
      if (ko.modes !== undefined) {
        const mo = obj(ko.modes, `kinds.${kind}.modes`);
        only(mo, POLICY_MODES, `kinds.${kind}.modes.`);
        entry.modes = {};
        for (const [mode, mv] of Object.entries(mo)) {
          const mt = obj(mv, `kinds.${kind}.modes.${mode}`);
          only(mt, THRESHOLD_KEYS, `kinds.${kind}.modes.${mode}.`);
          entry.modes[mode as PolicyMode] = thresholds(mt, `kinds.${kind}.modes.${mode}.`);
        }
      }
      p.kinds[kind as StageKind] = entry;
    }
  }
  if (top.stages !== undefined) {
    const stages = obj(top.stages, 'stages');
    p.stages = {};
    for (const [name, v] of Object.entries(stages)) {
      // a stage or sub-stage name as the reports print it; anything else would silently never apply
      if (!/^(embed|final_norm|logits|layer\.\d+(\.[a-z_]+(\.[a-z_]+)*)?)$/.test(name)) throw new InputError(`${where}: stages.${name}: not a stage name (embed, layer.N, layer.N.<sub-stage>, final_norm, logits)`);
      const so = obj(v, `stages.${name}`);
      only(so, [...THRESHOLD_KEYS, 'modes'], `stages.${name}.`);
      const entry: NonNullable<Policy['stages']>[string] = thresholds(so, `stages.${name}.`);
      if (so.modes !== undefined) {
        const mo = obj(so.modes, `stages.${name}.modes`);
        only(mo, POLICY_MODES, `stages.${name}.modes.`);
        entry.modes = {};
        for (const [mode, mv] of Object.entries(mo)) {
          const mt = obj(mv, `stages.${name}.modes.${mode}`);
          only(mt, THRESHOLD_KEYS, `stages.${name}.modes.${mode}.`);
          entry.modes[mode as PolicyMode] = thresholds(mt, `stages.${name}.modes.${mode}.`);
        }
      }
      p.stages[name] = entry;
    }
  }
  for (const kind of STAGE_KINDS) for (const mode of POLICY_MODES) checkOrder(thresholdsFor(p, kind, mode), `${where}: kinds.${kind}.modes.${mode}`);
  for (const name of Object.keys(p.stages ?? {})) for (const mode of POLICY_MODES) checkOrder(thresholdsFor(p, stageKind(name), mode, name), `${where}: stages.${name}.modes.${mode}`);
  return p;
}

function checkOrder(t: Thresholds, at: string): void {
  if (!(t.fail_above > 0)) throw new InputError(`${at}: fail_above must be positive`);
  // the floor is what a correct FP16 path costs: a ratio or excuse under 1 fails a correct device by definition
  if (!(t.floor_ratio >= 1)) throw new InputError(`${at}: floor_ratio ${t.floor_ratio} must be at least 1 (error / floor of a correct FP16 path is about 1)`);
  if (!(t.floor_excuse >= 1)) throw new InputError(`${at}: floor_excuse ${t.floor_excuse} must be at least 1`);
  if (t.warn_above > t.fail_above) throw new InputError(`${at}: warn_above ${t.warn_above} is above fail_above ${t.fail_above}`);
}

/**
 * Stage names to kinds: embed → embed; final_norm and logits → logits (the head's input and output);
 * a layer's attention sub-stages (attn, attn.*) → attn; its FFN sub-stages (moe, moe.*, mlp) → moe; the layer
 * output itself → moe (it is the residual stream after the FFN sublayer, the layer's last sub-stage).
 */
export function stageKind(name: string): StageKind {
  if (name === 'embed') return 'embed';
  if (name === 'final_norm' || name === 'logits') return 'logits';
  const m = /^layer\.\d+\.(.+)$/.exec(name);
  if (m !== null && m[1].split('.')[0] === 'attn') return 'attn';
  return 'moe';
}

export function thresholdsFor(p: Policy, kind: StageKind, mode: PolicyMode, stage?: string): Thresholds {
  const k = p.kinds?.[kind];
  const st = stage !== undefined ? p.stages?.[stage] : undefined;
  const pick = <K extends keyof Thresholds>(key: K): Thresholds[K] => (st?.modes?.[mode]?.[key] ?? st?.[key] ?? k?.modes?.[mode]?.[key] ?? k?.[key] ?? p[key]) as Thresholds[K];
  return {
    metric: pick('metric'),
    fail_above: pick('fail_above'),
    warn_above: pick('warn_above'),
    floor_ratio: pick('floor_ratio'),
    ratio_metric: pick('ratio_metric'),
    floor_excuse: pick('floor_excuse'),
    min_error: pick('min_error'),
  };
}

export type Status = 'pass' | 'warn' | 'fail';

export function newNonFinite(m: StageMetrics): boolean {
  return m.nan.device > m.nan.reference || m.inf.device > m.inf.reference;
}

/** error / floor, with 0/0 = 0 and e/0 = Infinity (an error where a perfect FP16 path has none). */
export function floorRatio(error: number, floor: number): number {
  if (error === 0) return 0;
  return floor > 0 ? error / floor : Infinity;
}

/**
 * One stage in one mode. `floor` is the FP16 floor per metric (null: none measured, e.g. the fixed rule, or a
 * stage the floor pass does not cover — then the user's rule decides alone).
 */
export function verdict(m: StageMetrics | null | undefined, p: Policy, opts: { stage?: string; mode?: PolicyMode; floor?: Partial<Record<MetricName, number>> | null } = {}): Status {
  if (m === null || m === undefined) return 'pass';
  if (newNonFinite(m)) return 'fail';
  const t = thresholdsFor(p, stageKind(opts.stage ?? 'layer'), opts.mode ?? 'isolated', opts.stage);
  const v = m[t.metric];
  // NaN: the paths disagree on a non-finite element (also one the reference has and the device not)
  if (Number.isNaN(v)) return 'fail';
  const floor = p.rule === 'floor' ? (opts.floor?.[t.metric] ?? null) : null;
  if (floor === null) {
    if (v > t.fail_above) return 'fail';
    if (v > t.warn_above) return 'warn';
    return 'pass';
  }
  const rv = m[t.ratio_metric];
  const ratio = floorRatio(rv, opts.floor?.[t.ratio_metric] ?? 0);
  if (rv > t.min_error && ratio > t.floor_ratio) return 'fail';
  if (v > t.fail_above && floorRatio(v, floor) > t.floor_excuse) return 'fail';
  if (v > t.warn_above || (rv > t.min_error && ratio > t.floor_ratio / 2)) return 'warn';
  return 'pass';
}

export function worst(a: Status, b: Status): Status {
  const rank = { pass: 0, warn: 1, fail: 2 } as const;
  return rank[a] >= rank[b] ? a : b;
}
