/**
 * The cost of the three-question verdict (issue 10) next to the plain diff, in one process, side by side:
 *   - plain: isolated + free accumulated under the fixed rule (the diff before the verdict);
 *   - + forced: the accumulated-forced pass (one more device pass per layer; none for Llama, where it is the
 *     accumulated run itself);
 *   - + floor: the FP16 floor pass (one more reference pass per layer on FP16-rounded input);
 *   - full: both (the default `diff`).
 * Targets: full ≤ 2× plain. Each configuration runs `reps` times, interleaved, and the median is kept; the
 * weights check is left out (it is the same in every configuration).
 *
 *   node dist/scripts/bench/verdict.js
 */
import * as path from 'node:path';
import { DEFAULT_POLICY, makePolicy } from '../../harness/compare/policy.js';
import { Checkpoint } from '../../harness/io/checkpoint.js';
import { selectBackend } from '../../harness/runner/backend.js';
import { openModel } from '../../harness/runner/model.js';
import { runDiff } from '../../harness/runner/run.js';
import { packageRoot } from '../../harness/version.js';
import { median } from './median.js';


export async function benchVerdict(reps = 3): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  const fixed = makePolicy('max_abs', 0.1, 0.01);
  const configs = {
    plain: { policy: fixed, forced: false },
    forced: { policy: fixed, forced: true },
    floor: { policy: DEFAULT_POLICY, forced: false },
    full: { policy: DEFAULT_POLICY, forced: true },
  } as const;
  for (const [name, tokens] of [['llama-tiny', 64], ['deepseek-v4-tiny', 200]] as const) {
    const ck = Checkpoint.open(path.join(packageRoot(), 'fixtures', name));
    try {
      const model = openModel(ck, selectBackend('auto'), null);
      const ids = Array.from({ length: tokens }, (_, i) => (i * 37 + 11) % model.vocab);
      const times: Record<string, number[]> = { plain: [], forced: [], floor: [], full: [] };
      for (let r = 0; r < reps; r++) {
        for (const [k, c] of Object.entries(configs)) {
          const t0 = performance.now();
          runDiff(model, { tokens: ids, mode: 'both', layers: null, policy: c.policy, forced: c.forced, freeSelection: false, dumpDir: null, drill: false });
          times[k].push(performance.now() - t0);
        }
      }
      const m = Object.fromEntries(Object.entries(times).map(([k, v]) => [k, median(v)]));
      const ratio = (k: string) => m[k] / m.plain;
      console.log(
        `${name.padEnd(17)} ${tokens} tokens: plain ${(m.plain / 1000).toFixed(2)} s · +forced ${ratio('forced').toFixed(2)}× · +floor ${ratio('floor').toFixed(2)}× · full verdict ${ratio('full').toFixed(2)}× (target ≤ 2)`,
      );
      out[`${name}_verdict_ratio`] = ratio('full');
      out[`${name}_forced_ratio`] = ratio('forced');
      out[`${name}_floor_ratio`] = ratio('floor');
    } finally {
      ck.close();
    }
  }
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) await benchVerdict();
