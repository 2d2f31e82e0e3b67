/**
 * Read-ahead through the reference's native addon (reference-cpu/native/file_io.cc, read_ahead): the page-cache
 * read-ahead Checkpoint.prefetchTensors asks for, given on the addon's background thread. What the page cache lacks
 * is read in through a huge-page mapping, as 2 MiB folios where the kernel makes them (posix_fadvise's WILLNEED,
 * which Node lacks anyway, read 4 KiB ones, which every later mapped reader paid a fault a page for); where that
 * cannot be done the range is advised WILLNEED. Without the addon (a build that lacks it) nothing is read ahead.
 */
import { loadAddon } from './addon.js';

let fn: ((fd: number, offset: number, length: number) => boolean) | null | undefined;

export function willNeed(fd: number, offset: number, length: number): boolean {
  if (fn === undefined) {
    try {
      const a = loadAddon('ld_reference') as { willNeed?: (fd: number, offset: number, length: number) => boolean };
      fn = typeof a.willNeed === 'function' ? a.willNeed : null;
    } catch {
      fn = null;
    }
  }
  return fn === null ? false : fn(fd, offset, length);
}
