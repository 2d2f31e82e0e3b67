/**
 * How a large tensor's bytes reach a kernel on this host, side by side in one run over the same file and bytes
 * (page cache warm): the choice between mapping the page cache (harness/io/map.ts: the FP16 cache's held weights,
 * the read pool's large reads) and reading into a warm buffer (the weights check's chunk reads) depends on it, and
 * it differs between the virtual machines this tool runs on (README, round 17).
 *   - a lazy mapping (mapRange), its first pass over the bytes and a second pass over the same mapping;
 *   - a populated mapping (mapPopulated: MADV_POPULATE_READ), its first pass;
 *   - how much of the lazy mapping the kernel mapped in 2 MiB entries (filePmdMappedBytes: why the first pass varies);
 *   - pread in 16 MiB chunks into one warm buffer, each chunk scanned after its read.
 * A pass is the reference's scan for a non-finite float32 (firstNonFinite: AVX-512 or AVX2, one thread, every byte
 * read), over bytes that hold none: FP16 weights (their pairs read as float32 are finite) or the written file.
 * Ratios are against the pread column: below 1, that way of reading is slower than a copy into a warm buffer.
 *
 *   npm run build:ts && node dist/scripts/bench/mapped_reads.js [file]
 * Without a file: a 512 MiB file of finite float32 values written under the benchmarks' folder (bench_dir.ts),
 * removed after.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { mapPopulated, mapRange } from '../../harness/io/map.js';
import { firstNonFinite } from '../../reference-cpu/native.js';
import { benchDir } from './bench_dir.js';
import { median } from './median.js';

const CHUNK = 16 * 2 ** 20;
/** one pass over b's bytes; a non-finite value would end it early, so it is refused */
function scan(b: Uint8Array): void {
  const at = firstNonFinite(new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4));
  if (at >= 0) throw new Error(`float32 ${at} of the bytes is not finite: the pass would not read every byte`);
}

/**
 * This process's file pages mapped by 2 MiB entries (/proc/self/smaps_rollup's FilePmdMapped), or null off Linux.
 * Why it is reported: a first pass over a mapping ran at 17–21 GB/s where the kernel could map the file's page
 * cache in 2 MiB folios and at 1.9–3.8 GB/s where it held small folios (round 18): how the pages came into the
 * page cache (large reads and writes, or small ones; free memory in 2 MiB blocks then) decides it.
 */
function filePmdMappedBytes(): number | null {
  try {
    const m = /^FilePmdMapped:\s+(\d+) kB/m.exec(fs.readFileSync('/proc/self/smaps_rollup', 'utf8'));
    return m === null ? null : Number(m[1]) * 1024;
  } catch {
    return null;
  }
}

function passGbps(b: Uint8Array): number {
  const t0 = performance.now();
  scan(b);
  return b.byteLength / ((performance.now() - t0) * 1e6);
}

function preadGbps(fd: number, length: number, buf: Buffer): number {
  const t0 = performance.now();
  for (let o = 0; o < length; o += CHUNK) {
    const n = Math.min(CHUNK, length - o);
    let got = 0;
    while (got < n) {
      const r = fs.readSync(fd, buf, got, n - got, o + got);
      if (r === 0) throw new Error('the file shrank while it was read');
      got += r;
    }
    scan(buf.subarray(0, n));
  }
  return length / ((performance.now() - t0) * 1e6);
}

export function benchMappedReads(file?: string, rounds = 3): Record<string, number> {
  let own: string | undefined;
  if (file === undefined) {
    const base = benchDir();
    fs.mkdirSync(base, { recursive: true });
    own = path.join(base, `mapped-reads-${process.pid}.bin`);
    const fdw = fs.openSync(own, 'w');
    const values = Float32Array.from({ length: CHUNK / 4 }, (_, i) => Math.sin(i) * 8);
    for (let i = 0; i < 32; i++) fs.writeSync(fdw, new Uint8Array(values.buffer));
    fs.closeSync(fdw);
    file = own;
  }
  const fd = fs.openSync(file, 'r');
  try {
    // whole pages, at most 1 GiB: the first byte's page to the last whole page
    const length = Math.min(2 ** 30, Math.floor(fs.fstatSync(fd).size / 4096) * 4096);
    const buf = Buffer.allocUnsafe(CHUNK);
    preadGbps(fd, length, buf); // the page cache warm, the buffer touched
    const pmd: number[] = [];
    const cols: Record<string, number[]> = { lazy_first: [], lazy_second: [], populated_first: [], pread_warm: [] };
    for (let r = 0; r < rounds; r++) {
      const before = filePmdMappedBytes();
      const lazy = mapRange(fd, 0, length);
      if (lazy === null) throw new Error(`${file}: cannot be mapped here (no addon, or not a regular file)`);
      cols.lazy_first.push(passGbps(lazy));
      if (before !== null) pmd.push((filePmdMappedBytes()! - before) / length);
      cols.lazy_second.push(passGbps(lazy));
      const pop = mapPopulated(fd, 0, length);
      if (pop === null) throw new Error(`${file}: cannot be mapped here (no addon, or not a regular file)`);
      cols.populated_first.push(passGbps(new Uint8Array(pop)));
      cols.pread_warm.push(preadGbps(fd, length, buf));
    }
    const out: Record<string, number> = { 'mapped_reads.bytes': length };
    for (const [k, v] of Object.entries(cols)) out[`mapped_reads.${k}.gbps`] = median(v);
    const p = out['mapped_reads.pread_warm.gbps'];
    console.log(`  ${(length / 2 ** 20).toFixed(0)} MiB of ${path.basename(file)}, page cache warm, median of ${rounds} rounds (GB/s, × a pread into a warm buffer)`);
    for (const k of Object.keys(cols)) {
      const g = out[`mapped_reads.${k}.gbps`];
      console.log(`  ${k.padEnd(18)} ${g.toFixed(1).padStart(7)}  ${(g / p).toFixed(2)}×`);
    }
    if (pmd.length > 0) {
      out['mapped_reads.lazy.pmd_mapped_fraction'] = median(pmd);
      console.log(`  the lazy mapping after its first pass: ${(100 * median(pmd)).toFixed(0)}% mapped in 2 MiB entries (the page cache's 2 MiB folios)`);
    }
    return out;
  } finally {
    fs.closeSync(fd);
    if (own !== undefined) fs.rmSync(own, { force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) benchMappedReads(process.argv[2]);
