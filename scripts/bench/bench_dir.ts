/**
 * Where the wide benchmarks keep their generated checkpoints, FP16 caches and digests between runs:
 * $LAYERDIFF_BENCH_DIR, or layerdiff-bench in the system's temp folder (tens of GB: see all.ts).
 */
import * as os from 'node:os';
import * as path from 'node:path';

export function benchDir(): string {
  return process.env.LAYERDIFF_BENCH_DIR ?? path.join(os.tmpdir(), 'layerdiff-bench');
}
