/**
 * The FP16 floor (DESIGN §5): the error a correct FP16 implementation makes at a stage, measured rather than
 * guessed. The runner's floor pass runs the reference itself on its own input rounded to FP16 and rounds the
 * stage output to FP16 — exactly what a device with perfect kernels and FP16 storage at the stage boundaries
 * computes — and compares that with the reference, in every metric. Why a pass and not a budget from FP16
 * spacing: the spacing tells the rounding of one value, but how a rounded input moves a layer's output (the
 * attention softmax, a norm dividing by a small RMS, hyper-connection mixing at |r| ≈ 127) is the layer's own
 * sensitivity, which only running the layer measures. It costs one reference pass over the layers.
 *
 * Drift through depth (accumulated-forced mode): a chain of correct FP16 layers carries each layer's floor
 * forward. The budget is their sum over the layers so far (each layer's floor added as it passes through the
 * residual stream unamplified); final_norm and logits, whose units are not the residual stream's, take their
 * own floor times the same growth (the last layer's drift budget over its own floor).
 */
import { roundF16Values } from '../../reference-cpu/native.js';
import { type Act, act } from '../formats/tensor.js';
import type { StageMetrics } from './metrics.js';

/** The floor in each metric the policy can judge by. */
export interface FloorMetrics {
  max_abs: number;
  mean_abs: number;
  rms: number;
  rel_l2: number;
}

export const ZERO_FLOOR: FloorMetrics = { max_abs: 0, mean_abs: 0, rms: 0, rel_l2: 0 };

/**
 * Whether `v` is a stage's floors as a saved run or a bundle records them, `{ isolated, accumulated_forced }` each
 * null or every metric a finite number ≥ 0: a hand-edited figure (negative, missing, a string) would judge otherwise.
 */
export function isStageFloor(v: unknown): boolean {
  const metrics = (m: unknown) =>
    m === null || (typeof m === 'object' && !Array.isArray(m) && (Object.keys(ZERO_FLOOR) as Array<keyof FloorMetrics>).every((k) => {
      const x = (m as Record<string, unknown>)[k];
      return typeof x === 'number' && Number.isFinite(x) && x >= 0;
    }));
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return false;
  const f = v as Record<string, unknown>;
  // both keys present (null where that mode measured none): `{}` would judge by the user's number alone
  return 'isolated' in f && 'accumulated_forced' in f && metrics(f.isolated) && metrics(f.accumulated_forced);
}

/** An activation as FP16 storage holds it (round to nearest even, overflow to Inf). */
export function roundActF16(a: Act): Act {
  return act(a.shape, roundF16Values(a.data)); // f16ToF32(f32ToF16Bits(x)) of each value, natively
}

export function floorOf(m: StageMetrics): FloorMetrics {
  return { max_abs: m.max_abs, mean_abs: m.mean_abs, rms: m.rms, rel_l2: m.rel_l2 };
}

export function addFloors(a: FloorMetrics, b: FloorMetrics): FloorMetrics {
  return { max_abs: a.max_abs + b.max_abs, mean_abs: a.mean_abs + b.mean_abs, rms: a.rms + b.rms, rel_l2: a.rel_l2 + b.rel_l2 };
}

/** f × (growth.k / base.k) per metric (1 where base is 0). */
export function scaleFloor(f: FloorMetrics, growth: FloorMetrics, base: FloorMetrics): FloorMetrics {
  const g = (k: keyof FloorMetrics) => f[k] * (base[k] > 0 ? growth[k] / base[k] : 1);
  return { max_abs: g('max_abs'), mean_abs: g('mean_abs'), rms: g('rms'), rel_l2: g('rel_l2') };
}
