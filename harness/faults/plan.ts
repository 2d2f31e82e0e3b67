/**
 * Device-path bugs the harness can simulate (DESIGN §9), to prove the harness catches them. A fault with a
 * layer applies to that layer only; without one it applies wherever its format occurs.
 */
import { InputError } from '../errors.js';

export const FAULT_IDS = [
  'e3m0-table',
  'nibble-swap',
  'scale-missing',
  'scale-axis',
  'scale-stride',
  'fp16-overflow',
  'e8m0-as-int',
  'fp16-accumulate',
  'rope-angle-fp16',
  'router-bias-dropped',
  'global-scale-inverted',
  'e4m3-scale-as-e8m0',
  'scale-block-size',
  'code-table',
  'nested-absmax-raw',
] as const;
export type FaultId = (typeof FAULT_IDS)[number];

export interface FaultPlan {
  fault: FaultId;
  /** null: every layer (a "global" bug such as a wrong decode table) */
  layer: number | null;
}

/** A fault plan as a saved run records it (run.json, repro.json): a known fault and a layer index or null. */
export function isFaultPlan(v: unknown): v is FaultPlan {
  const f = v as { fault?: unknown; layer?: unknown } | null;
  return f !== null && typeof f === 'object' && (FAULT_IDS as readonly unknown[]).includes(f.fault) && (f.layer === null || (Number.isSafeInteger(f.layer) && (f.layer as number) >= 0));
}

export function parseInject(spec: string, numLayers: number): FaultPlan {
  const m = /^([a-z0-9-]+)(?:@(\d+))?$/.exec(spec.trim());
  if (m === null || !(FAULT_IDS as readonly string[]).includes(m[1])) {
    throw new InputError(`--inject ${JSON.stringify(spec)}: expected FAULT[@layer] with FAULT one of ${FAULT_IDS.join(', ')}`);
  }
  const layer = m[2] === undefined ? null : Number(m[2]);
  if (layer !== null && layer >= numLayers) throw new InputError(`--inject ${spec}: layer ${layer} does not exist (the model has ${numLayers})`);
  return { fault: m[1] as FaultId, layer };
}

/** Does the plan touch layer L? */
export function faultAt(plan: FaultPlan | null, L: number): FaultId | null {
  if (plan === null) return null;
  return plan.layer === null || plan.layer === L ? plan.fault : null;
}

/** A kernel that forgets a down-scaling before writing FP16 (alpha 2^16) overflows to Inf, then NaN. */
export const OVERFLOW_ALPHA = 65536;
