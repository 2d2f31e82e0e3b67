/**
 * Where the wide benchmarks keep their generated checkpoints, FP16 caches and digests between runs:
 * $LAYERDIFF_BENCH_DIR, or layerdiff-bench in the system's temp folder (tens of GB: see all.ts).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { dropFolderFromPageCache } from '../../harness/io/prefetch.js';

export function benchDir(): string {
  return process.env.LAYERDIFF_BENCH_DIR ?? path.join(os.tmpdir(), 'layerdiff-bench');
}

/**
 * Drop the bench folder's files from the page cache (posix_fadvise DONTNEED, reference-cpu/native/file_io.cc:
 * clean pages only). The whole `--wide` run reads and writes ~46 GB of fixtures on a 24 GB host; a section that
 * measures against a warm page cache (generation's start-up, the weights check's layers) otherwise runs with the earlier sections' pages filling
 * memory, its own files' pages in small folios and every fresh allocation reclaiming first (round 37: its FP16-cache
 * start-up 656 ms there, 368 ms after a drop, on the same code). The section then warms its own files itself.
 * Returns the bytes advised.
 */
export function dropBenchFromPageCache(): number {
  return fs.existsSync(benchDir()) ? dropFolderFromPageCache(benchDir()) : 0;
}
