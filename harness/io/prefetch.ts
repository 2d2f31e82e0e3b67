/**
 * posix_fadvise(WILLNEED) through the reference's native addon (reference-cpu/native/file_io.cc): the
 * page-cache read-ahead Checkpoint.prefetchTensors asks for, given on the addon's background thread. Node has no
 * fadvise of its own. Without the addon (a build that lacks it) the advice is simply not given.
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
