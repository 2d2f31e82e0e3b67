/**
 * Private, copy-on-write mappings of file ranges through the reference's native addon
 * (reference-cpu/native/file_io.cc):
 *   - mapRange: for large tensors kept for a whole run (the FP16 cache's weights), where a read would copy every
 *     byte into fresh memory whose first touch is the expensive part on a virtual machine;
 *   - mapPopulated / releaseMapped: every page mapped at once, for the read pool's large reads (read_pool.ts),
 *     released when the pool's scope ends;
 *   - mapAnonymous: zero bytes that take no memory until written, for the read pool's buffers a read may never
 *     fill (the weights check's tensors, read by its fused pass into buffers of its own).
 * V8 does not count a mapping's bytes as its own memory (they are the page cache's), so mapping gigabytes forces no
 * collections; a mapping dropped without releaseMapped is unmapped when its buffer is collected, and past limits
 * on live mappings (their count, the bytes they span) new ones are counted again so that collections come
 * (file_io.cc says why and measures it).
 * Every range is advised MADV_HUGEPAGE, so that what the page cache lacks is read in as 2 MiB folios (mapped later
 * at 15–26 GB/s here, against ~2 GB/s for 4 KiB ones: file_io.cc), and ranges of 8 MiB or more are mapped over the
 * whole 2 MiB extents that hold them, at an address congruent to the file offset, so that a range starting inside
 * an extent (every FP16-cache tensor) maps its first and last folios by PMD entries too.
 * Without the addon, or where the range cannot be mapped, null: the caller reads instead.
 */
import { loadAddon } from './addon.js';

interface MapAddon {
  mapRange?: (fd: number, offset: number, length: number) => ArrayBuffer | null;
  mapPopulated?: (fd: number, offset: number, length: number) => ArrayBuffer | null;
  mapAnonymous?: (length: number) => ArrayBuffer | null;
  releaseMapped?: (buffer: ArrayBuffer) => boolean;
  mappedStats?: () => MappedStats;
  detachBuffer?: (buffer: ArrayBuffer) => boolean;
}

/** live mappings whose bytes V8 does not count, the bytes they span, and the limits past which new ones are counted */
export interface MappedStats {
  uncounted: number;
  uncountedLimit: number;
  uncountedBytes: number;
  uncountedBytesLimit: number;
}

let addon: MapAddon | null | undefined;

function mapAddon(): MapAddon | null {
  if (addon === undefined) {
    try {
      addon = loadAddon('ld_reference') as MapAddon;
    } catch {
      addon = null;
    }
  }
  return addon;
}

export function mapRange(fd: number, offset: number, length: number): Uint8Array | null {
  const f = mapAddon()?.mapRange;
  const b = typeof f === 'function' ? f(fd, offset, length) : null;
  return b === null ? null : new Uint8Array(b);
}

/** A mapping of [offset, offset + length) with its pages mapped now (MADV_POPULATE_READ), or null. */
export function mapPopulated(fd: number, offset: number, length: number): ArrayBuffer | null {
  const f = mapAddon()?.mapPopulated;
  return typeof f === 'function' ? f(fd, offset, length) : null;
}

/** `length` zero bytes in an anonymous mapping (no memory until written; releaseMapped ends it), or null. */
export function mapAnonymous(length: number): ArrayBuffer | null {
  const f = mapAddon()?.mapAnonymous;
  return typeof f === 'function' ? f(length) : null;
}

/**
 * End a mapping's use: its pages leave the process now and the buffer is detached (every view of it then has
 * length 0). False, and nothing done, for a buffer that is not a live mapping.
 */
export function releaseMapped(buffer: ArrayBuffer): boolean {
  const f = mapAddon()?.releaseMapped;
  return typeof f === 'function' ? f(buffer) : false;
}

/** The addon's mapping counts (tests), or null without the addon. */
export function mappedStats(): MappedStats | null {
  const f = mapAddon()?.mappedStats;
  return typeof f === 'function' ? f() : null;
}

/**
 * Detach `buffer` (every view of it then has length 0): an allocated buffer's memory goes back to the allocator at
 * once instead of when the collector finds it dead. False where it cannot be detached or without the addon.
 */
export function detachBuffer(buffer: ArrayBuffer): boolean {
  const f = mapAddon()?.detachBuffer;
  return typeof f === 'function' ? f(buffer) : false;
}
