/** Checks of a config's layer count against the layers a checkpoint actually stores (every architecture). */
import { InputError } from '../errors.js';
import type { Checkpoint } from '../io/checkpoint.js';

/**
 * The config's layer count must be the stored one, checked from the tensor names before anything is
 * allocated per layer: `num_hidden_layers: 1e9` is refused at once, not discovered 3 GB later. A repro
 * bundle (diff --repro) stores one layer under its original index with the original config; there every
 * stored layer must lie below the count, and the count is bounded by the tensors stored (still the input's
 * size, not its claim).
 */
export function assertStoredLayers(ck: Checkpoint, layers: number, prefix = 'model.layers.'): void {
  let stored = 0;
  for (const name of ck.weightMap.keys()) {
    if (!name.startsWith(prefix)) continue;
    const L = Number(name.slice(prefix.length).split('.')[0]);
    if (Number.isSafeInteger(L) && L + 1 > stored) stored = L + 1;
  }
  const bundle = ck.generator() === REPRO_GENERATOR;
  const ok = bundle ? stored <= layers && layers <= ck.weightMap.size : layers === stored;
  if (!ok) throw new InputError(`num_hidden_layers ${layers} disagrees with the checkpoint, which stores layers 0-${stored - 1} (${stored})`, { file: ck.configFile });
}

/** The `generator` metadata of repro bundles' shards (harness/repro/bundle.ts). */
export const REPRO_GENERATOR = 'layerdiff --repro';
