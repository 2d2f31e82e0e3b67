/**
 * Buffers recycled between tensor reads, for a pass that reads one tensor, computes on it and drops it (the
 * weights-first check reads ~1,500 tensors of a wide layer pair this way). A fresh ArrayBuffer per read costs the
 * kernel a page fault and a page clear for every 4 KiB before the read even copies into it; recycled buffers are
 * mapped and warm already. The caller promises that nothing read inside `withReadPool(fn)` is used after fn
 * returns: the next read may overwrite it.
 */
export class ReadPool {
  private readonly free: ArrayBuffer[] = [];
  private readonly used: ArrayBuffer[] = [];
  /** free bytes kept beyond this are dropped to the garbage collector */
  constructor(private readonly keepBytes = 512 * 2 ** 20) {}

  /** `length` bytes in a buffer 8-byte aligned and padded to 8 (the reads' contract) */
  take(length: number): Uint8Array {
    const want = Math.ceil(length / 8) * 8;
    let best = -1;
    for (let i = 0; i < this.free.length; i++) {
      if (this.free[i].byteLength >= want && (best < 0 || this.free[i].byteLength < this.free[best].byteLength)) best = i;
    }
    // sizes rounded up to a power of two (at least 64 KiB) so buffers fit the next tensors of a similar size
    const buf = best >= 0 ? this.free.splice(best, 1)[0] : new ArrayBuffer(Math.max(1 << 16, 2 ** Math.ceil(Math.log2(Math.max(want, 1)))));
    this.used.push(buf);
    return new Uint8Array(buf, 0, length);
  }

  /** every buffer handed out since the last release becomes reusable */
  release(): void {
    this.free.push(...this.used.splice(0));
    this.free.sort((a, b) => b.byteLength - a.byteLength);
    let kept = 0;
    this.free.splice(
      0,
      this.free.length,
      ...this.free.filter((b) => (kept += b.byteLength) <= this.keepBytes),
    );
  }
}

let active: ReadPool | null = null;

/** The pool reads draw from now, or null (then each read gets a fresh buffer). */
export function activeReadPool(): ReadPool | null {
  return active;
}

/** Run fn with reads drawing from `pool`; its buffers are released for reuse when fn returns or throws. */
export function withReadPool<T>(pool: ReadPool, fn: () => T): T {
  const outer = active;
  active = pool;
  try {
    return fn();
  } finally {
    active = outer;
    pool.release();
  }
}
