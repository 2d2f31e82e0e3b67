import { InputError } from '../errors.js';
import type { DType } from '../formats/dtypes.js';
import { scaleCodeOf } from '../formats/linear.js';
import { faultApplies, FORMATS, FUSED_FORMATS } from '../formats/registry.js';
import type { FaultPlan } from '../faults/plan.js';
import type { WeightsReport } from './check.js';

/**
 * A weight fault that touches no quantized tensor of the run (an NVFP4-only fault on an MXFP4 checkpoint, a
 * fault at a layer without that format) would be a silent no-op, and the run would pass as if the tool had
 * missed a bug: bad input instead, naming the formats the checkpoint has.
 */
export function assertInjectApplies(text: string | undefined, faults: FaultPlan | null, weights: WeightsReport | null): void {
  if (faults === null || weights === null) return;
  if (![...FORMATS, ...FUSED_FORMATS].some((f) => f.faults.includes(faults.fault))) return; // an activation fault
  const inScope = weights.tensors.filter((t) => faults.layer === null || t.layer === faults.layer);
  if (inScope.some((t) => faultApplies(faults.fault, t.format, scaleCodeOf({ format: t.format, scale: { dtype: t.scale.dtype as DType } })))) return;
  const formats = [...new Set(inScope.map((t) => t.encoding))];
  throw new InputError(`--inject ${text}: touches no quantized tensor${faults.layer !== null ? ` of layer ${faults.layer}` : ''} of this checkpoint (${formats.length > 0 ? `its formats there: ${formats.join(', ')}` : 'none is quantized there'}), so it would simulate nothing`);
}
