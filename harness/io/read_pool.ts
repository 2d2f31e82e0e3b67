/**
 * Buffers recycled between tensor reads, for a pass that reads tensors, computes on them and drops them: the
 * weights-first check (one tensor at a time), the head (one chunk at a time) and the diff's layer loop (one
 * layer's weights and routed experts at a time). A fresh ArrayBuffer per read costs the kernel a page fault and
 * a page clear for every 4 KiB before the read even copies into it, and on the virtual machines this runs on a
 * first touch costs ~3–15 µs a page (measured: 300 reads of 4 MiB into fresh buffers 0.23 GB/s, into a recycled
 * one 16 GB/s); recycled buffers are mapped and warm already.
 * A large read (≥ MAP_READ_MIN_BYTES, mapRead) is a mapping of the file's pages instead, all mapped at once
 * (map.ts, mapPopulated): no copy, no fresh memory. A wide DeepSeek-V4 layer's routed experts (~1.2 GB) were the
 * first reads of a run into new buffers, and once the page cache had filled this VM's memory that first touch ran
 * at 0.2–1.5 GB/s (layer 0's reference 2.6–4.3 s against 0.5–1.0 s in other runs of the same diff); mapping and
 * populating the same bytes took 0.01 s. A scope's end releases its mappings (their pages leave the process, the
 * buffers are detached: a view kept past its scope has length 0), as it hands its buffers back; but a reserve()d
 * mapping handed back unwritten is kept for the next reservation, not detached, as ordinary buffers are kept
 * (dropReserved() ends those).
 * Scopes nest: withReadPool(pool, fn) hands the buffers taken inside fn back when fn returns, and no others, so
 * a scope inside another one of the same pool (a layer's head chunk inside the run's) leaves the outer one's
 * reads alone. The caller promises that nothing read inside a scope is used after it ends.
 */
import { detachBuffer, mapAnonymous, mapPopulated, releaseMapped } from './map.js';

/** Reads from this size up are mapped (mapRead); smaller ones are not worth a mapping's fixed cost. */
export const MAP_READ_MIN_BYTES = 2 ** 20;

/**
 * reserve()'s unwritten mappings kept per pool: a weights-check batch's worth (batches.ts), address space only, but
 * each counts among the addon's live mappings that V8 does not see (map.ts), so both are capped
 */
const RESERVED_KEPT = 128;
const RESERVED_KEPT_BYTES = 2 ** 30;

export class ReadPool {
  private readonly free: ArrayBuffer[] = [];
  /** buffers and mappings handed out, in order (marks index it) */
  private readonly used: ArrayBuffer[] = [];
  private readonly mapped = new WeakSet<ArrayBuffer>();
  /** reserve()'s anonymous mappings: those handed back unwritten, kept for the next reserve (see reserve) */
  private readonly reservedFree: ArrayBuffer[] = [];
  private readonly reserved = new WeakSet<ArrayBuffer>();
  private readonly written = new WeakSet<ArrayBuffer>();
  /** arrays computed from a buffer in use (tieToRead), freed when it is handed back */
  private readonly derived = new Map<ArrayBuffer, ArrayBuffer[]>();
  /** free bytes kept beyond this are freed (detached: at once, not when collected) */
  constructor(private readonly keepBytes = 512 * 2 ** 20) {}

  /** `length` bytes in a buffer 8-byte aligned and padded to 8 (the reads' contract) */
  take(length: number): Uint8Array {
    const want = Math.ceil(length / 8) * 8;
    let best = -1;
    for (let i = 0; i < this.free.length; i++) {
      if (this.free[i].byteLength >= want && (best < 0 || this.free[i].byteLength < this.free[best].byteLength)) best = i;
    }
    const buf = best >= 0 ? this.free.splice(best, 1)[0] : new ArrayBuffer(sizeClass(want));
    this.handOut(buf);
    return new Uint8Array(buf, 0, length);
  }

  /**
   * `length` bytes of the file fd from `offset`, mapped (map.ts), until the scope that took them ends; null where
   * a read should be used instead: under MAP_READ_MIN_BYTES, a start or length that is not a multiple of 8 (the
   * reads' contract: 8-byte aligned, padded to 8), or a range the addon could not map.
   */
  mapRead(fd: number, offset: number, length: number): Uint8Array | null {
    if (length < MAP_READ_MIN_BYTES || offset % 8 !== 0 || length % 8 !== 0) return null;
    const b = mapPopulated(fd, offset, length);
    if (b === null) return null;
    this.mapped.add(b);
    this.handOut(b);
    return new Uint8Array(b);
  }

  /**
   * `length` bytes (8-byte aligned, padded to 8) for a read that may never be made (SafetensorsFile.reserve): from
   * MAP_READ_MIN_BYTES up an anonymous mapping, which takes no memory until written; smaller ones as take() gives
   * them. A mapping handed back unwritten (no markWritten: the fused pass read its tensor itself, the usual case)
   * still takes no memory and is kept for the next reserve, a written one is unmapped. A mapping and an unmapping a
   * tensor cost the weights check ~5 % of a wide layer's time, mostly in waits: each takes the process's mapping
   * lock for writing, which the pass's threads hold for reading as they map the shards' extents (round 40).
   */
  reserve(length: number): Uint8Array {
    const padded = Math.ceil(length / 8) * 8;
    if (length < MAP_READ_MIN_BYTES) return this.take(length);
    let best = -1;
    for (let i = 0; i < this.reservedFree.length; i++) {
      const n = this.reservedFree[i].byteLength;
      if (n >= padded && (best < 0 || n < this.reservedFree[best].byteLength)) best = i;
    }
    const b = best >= 0 ? this.reservedFree.splice(best, 1)[0] : mapAnonymous(sizeClass(padded));
    if (b === null) return this.take(length);
    this.mapped.add(b);
    this.reserved.add(b);
    this.handOut(b);
    return new Uint8Array(b, 0, length);
  }

  /** `b`, a buffer reserve() handed out, is being written: it is unmapped when handed back, not kept */
  noteWritten(b: ArrayBuffer): void {
    if (this.reserved.has(b)) this.written.add(b);
  }

  /**
   * Free `array` (which owns its whole buffer) when `read`, a buffer this pool handed out, is handed back; false,
   * and nothing done, where either does not hold. See tieToRead.
   */
  adopt(read: ArrayBuffer, array: ArrayBufferView): boolean {
    const b = array.buffer;
    if (owner.get(read) !== this || !(b instanceof ArrayBuffer) || b === read || array.byteOffset !== 0 || array.byteLength !== b.byteLength) return false;
    const list = this.derived.get(read);
    if (list === undefined) this.derived.set(read, [b]);
    else list.push(b);
    return true;
  }

  private handOut(b: ArrayBuffer): void {
    this.used.push(b);
    owner.set(b, this);
  }

  /** where the buffers in use now end: release(mark) hands back only those taken after it */
  mark(): number {
    return this.used.length;
  }

  /** the buffers handed out since `mark` (default: all) become reusable */
  release(mark = 0): void {
    for (const b of this.used.splice(mark)) {
      owner.delete(b);
      for (const d of this.derived.get(b) ?? []) detachBuffer(d);
      this.derived.delete(b);
      if (this.reserved.has(b) && !this.written.has(b) && this.reservedFree.length < RESERVED_KEPT && this.reservedBytes() + b.byteLength <= RESERVED_KEPT_BYTES) this.reservedFree.push(b);
      else if (this.mapped.has(b)) releaseMapped(b);
      else this.free.push(b);
    }
    this.free.sort((a, b) => b.byteLength - a.byteLength);
    let kept = 0;
    const keep = this.free.filter((b) => (kept += b.byteLength) <= this.keepBytes || !detachBuffer(b));
    this.free.splice(0, this.free.length, ...keep);
  }

  /** reserve()'s unwritten mappings kept for reuse (for tests) */
  reservedKept(): number {
    return this.reservedFree.length;
  }

  /** End the kept reserve() mappings (the weights check's end: what follows reserves none) */
  dropReserved(): void {
    for (const b of this.reservedFree.splice(0)) releaseMapped(b);
  }

  private reservedBytes(): number {
    return this.reservedFree.reduce((n, b) => n + b.byteLength, 0);
  }

  /** bytes in free buffers (for tests) */
  freeBytes(): number {
    return this.free.reduce((n, b) => n + b.byteLength, 0);
  }
}

/**
 * Buffer sizes: at least 64 KiB, rounded up to the next m·2^k with 8 ≤ m < 16, so a buffer fits the next
 * tensors of a similar size and wastes at most 1/8 of itself (a power of two would waste up to half: a layer's
 * ~300 routed-expert reads would hold twice their bytes).
 */
export function sizeClass(bytes: number): number {
  const n = Math.max(1 << 16, bytes);
  const step = 2 ** Math.max(0, Math.floor(Math.log2(n)) - 3);
  return Math.ceil(n / step) * step;
}

/** the pool each buffer in use was handed out by */
const owner = new WeakMap<ArrayBuffer, ReadPool>();

/** `bytes` (a view of a buffer a pool's reserve() handed out, or any other) is about to be written: see ReadPool.reserve */
export function markWritten(bytes: Uint8Array): void {
  const b = bytes.buffer;
  if (b instanceof ArrayBuffer) owner.get(b)?.noteWritten(b);
}

/**
 * Tie `array`'s memory to the read `read` came from: when that read's scope ends, the array's buffer is detached,
 * which frees its memory at once (the allocator gets it back without a collection, and every view of it has length
 * 0). For arrays computed from a scope's reads and useless after them, such as a layer's FP16 weights dequantized
 * from the bytes the layer read: left to the collector, one layer's (~270 MB on a wide DeepSeek-V4 layer) were
 * still allocated while the next layer allocated its own, and the process's memory grew by that much a layer.
 * The array must own its whole buffer. False, and nothing done, where `read` is not a buffer of a scope still open
 * (a fresh read outside any pool, a mapping of the FP16 cache) or the array does not own its buffer.
 */
export function tieToRead(read: ArrayBufferView, array: ArrayBufferView): boolean {
  const b = read.buffer;
  return b instanceof ArrayBuffer && (owner.get(b)?.adopt(b, array) ?? false);
}

let active: ReadPool | null = null;
let shared: ReadPool | null = null;

/** The pool reads draw from now, or null (then each read gets a fresh buffer). */
export function activeReadPool(): ReadPool | null {
  return active;
}

/**
 * The process's pool for the passes over a model (the weights check, then each layer of the diff): what one pass
 * released the next reuses, warm. It keeps up to 2 GiB free: a wide DeepSeek-V4 layer's reads (its weights
 * and ≤ 96 routed experts) are ~1.5 GB, all live during the layer, so keeping them costs no peak memory.
 */
export function sharedReadPool(): ReadPool {
  return (shared ??= new ReadPool(2 * 2 ** 30));
}

/** A scope of `pool` entered by hand (a loop body that `continue`s): exit() ends it, as withReadPool's end does. */
export function enterReadPool(pool: ReadPool): { exit(): void } {
  const outer = active;
  const mark = pool.mark();
  active = pool;
  return {
    exit() {
      active = outer;
      pool.release(mark);
    },
  };
}

/**
 * Run fn with reads drawing from `pool`, keeping what it takes: the caller hands those back with pool.release(mark)
 * once nothing uses them (the weights check's batches, whose reads outlive the call that made them).
 */
export function drawFromReadPool<T>(pool: ReadPool, fn: () => T): T {
  const outer = active;
  active = pool;
  try {
    return fn();
  } finally {
    active = outer;
  }
}

/** Run fn with reads drawing from `pool`; the buffers taken inside are released for reuse when fn returns or throws. */
export function withReadPool<T>(pool: ReadPool, fn: () => T): T {
  const scope = enterReadPool(pool);
  try {
    return fn();
  } finally {
    scope.exit();
  }
}

/** Run fn with every read a fresh copy (what fn reads outlives the scope around it: a golden run's stages). */
export function outsideReadPool<T>(fn: () => T): T {
  const outer = active;
  active = null;
  try {
    return fn();
  } finally {
    active = outer;
  }
}
