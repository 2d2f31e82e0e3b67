/**
 * Read-ahead through the reference's native addon (reference-cpu/native/file_io.cc, read_ahead): the page-cache
 * read-ahead Checkpoint.prefetchTensors asks for, given on the addon's background thread. What the page cache lacks
 * is read in through a huge-page mapping, as 2 MiB folios where the kernel makes them (posix_fadvise's WILLNEED,
 * which Node lacks anyway, read 4 KiB ones, which every later mapped reader paid a fault a page for); where that
 * cannot be done the range is advised WILLNEED. Without the addon (a build that lacks it) nothing is read ahead.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadAddon } from './addon.js';

interface ReadAheadAddon {
  willNeed?: (fd: number, offset: number, length: number) => boolean;
  readAheadMark?: () => number;
  readAheadWait?: (mark: number) => void;
  dropCached?: (fd: number) => boolean;
  readIn?: (fd: number, offset: number, length: number) => void;
}

let addon: ReadAheadAddon | null | undefined;

function readAheadAddon(): ReadAheadAddon | null {
  if (addon === undefined) {
    try {
      addon = loadAddon('ld_reference') as ReadAheadAddon;
    } catch {
      addon = null;
    }
  }
  return addon;
}

/** Queue the read-ahead of [offset, offset + length) of fd; whether it was queued. */
export function willNeed(fd: number, offset: number, length: number): boolean {
  const f = readAheadAddon()?.willNeed;
  return typeof f === 'function' ? f(fd, offset, length) : false;
}

/** The mark of the read-ahead queued last (0: none), for readAheadWait. */
export function readAheadMark(): number {
  const f = readAheadAddon()?.readAheadMark;
  return typeof f === 'function' ? f() : 0;
}

/** Until the read-ahead marked `mark`, and every one queued before it, has been carried out (at once without the addon). */
export function readAheadWait(mark: number): void {
  const f = readAheadAddon()?.readAheadWait;
  if (mark > 0 && typeof f === 'function') f(mark);
}

/**
 * Let the page cache drop fd's pages (POSIX_FADV_DONTNEED: clean ones go, dirty ones stay); whether the advice was
 * taken (false without the addon).
 */
export function dropCached(fd: number): boolean {
  const f = readAheadAddon()?.dropCached;
  return typeof f === 'function' ? f(fd) : false;
}

/**
 * Read [offset, offset + length) of fd into the page cache now, as 2 MiB folios where it is missing (the read-ahead
 * on this thread), before reading it with pread: the kernel's own read-ahead for those reads would leave smaller
 * folios, mapped a page at a time by every later mapped reader (file_io.cc, readIn). Nothing without the addon.
 */
export function readIn(fd: number, offset: number, length: number): void {
  readAheadAddon()?.readIn?.(fd, offset, length);
}

/**
 * Let the page cache drop the pages of every regular file under `dir` (sub-folders included; dropCached above);
 * the bytes of the files whose advice was taken. Advice only: a file swapped for a link or a FIFO since the listing,
 * or one this user cannot read, is skipped. For `convert`'s finished cache (fp16cache.ts) and the wide benchmarks.
 */
export function dropFolderFromPageCache(dir: string): number {
  let bytes = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) bytes += dropFolderFromPageCache(p);
    else if (e.isFile()) {
      let fd: number;
      try {
        fd = fs.openSync(p, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
      } catch {
        continue;
      }
      try {
        const st = fs.fstatSync(fd);
        if (st.isFile() && dropCached(fd)) bytes += st.size;
      } finally {
        fs.closeSync(fd);
      }
    }
  }
  return bytes;
}
