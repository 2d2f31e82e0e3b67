/**
 * Open a checkpoint as a ModelDef: the architecture registry (harness/arch/registry.ts) picks the entry from
 * config.json, which binds the weights and builds both paths.
 */
import type { Checkpoint } from '../io/checkpoint.js';
import type { ModelDef } from '../models/path.js';
import { architectureFor } from '../arch/registry.js';
import type { FaultPlan } from '../faults/plan.js';
import type { DeviceBackend } from './backend.js';

export { ARCHITECTURES, architectureOf } from '../arch/registry.js';

export function openModel(ck: Checkpoint, backend: DeviceBackend, faults: FaultPlan | null): ModelDef<unknown> {
  return architectureFor(ck).open(ck, backend, faults);
}
