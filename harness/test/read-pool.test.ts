/**
 * The read pool (harness/io/read_pool.ts): inside withReadPool, tensor reads draw recycled buffers, the bytes are
 * the file's, a buffer is reused only after its scope ends, and outside any scope every read is a fresh copy.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ReadPool, activeReadPool, enterReadPool, outsideReadPool, sizeClass, withReadPool } from '../io/read_pool.js';
import { SafetensorsFile, writeSafetensors } from '../io/safetensors.js';

describe('ReadPool', () => {
  it('reuses a buffer only after its scope, keeps reads correct, and is inactive outside withReadPool', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-pool-'));
    const a = Uint8Array.from({ length: 100_003 }, (_, i) => (i * 7) & 255);
    const b = Uint8Array.from({ length: 90_001 }, (_, i) => (i * 13) & 255);
    const file = path.join(dir, 'm.safetensors');
    writeSafetensors(file, [
      { name: 'a', dtype: 'U8', shape: [a.length], data: a },
      { name: 'b', dtype: 'U8', shape: [b.length], data: b },
    ]);
    const f = SafetensorsFile.open(file);
    const pool = new ReadPool();
    let first: ArrayBufferLike[] = [];
    withReadPool(pool, () => {
      const ra = f.read(f.get('a')!), rb = f.read(f.get('b')!);
      expect(ra).toEqual(a);
      expect(rb).toEqual(b);
      expect(ra.buffer, 'two live reads never share a buffer').not.toBe(rb.buffer);
      expect(ra.byteOffset % 8).toBe(0);
      first = [ra.buffer, rb.buffer];
    });
    withReadPool(pool, () => {
      const rb = f.read(f.get('b')!);
      expect(rb).toEqual(b);
      expect(first, 'the first scope\'s buffers are reused after it ended').toContain(rb.buffer);
      const ra = f.read(f.get('a')!);
      expect(ra).toEqual(a);
    });
    expect(activeReadPool()).toBeNull();
    const fresh1 = f.read(f.get('a')!), fresh2 = f.read(f.get('a')!);
    expect(fresh1.buffer).not.toBe(fresh2.buffer);
    // a throwing scope still releases and deactivates
    expect(() => withReadPool(pool, () => {
      f.read(f.get('a')!);
      throw new Error('boom');
    })).toThrow('boom');
    expect(activeReadPool()).toBeNull();
    f.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('a released buffer is handed out again (no fresh allocation for a same-size read)', () => {
    const pool = new ReadPool();
    const x = pool.take(5000);
    pool.release();
    const y = pool.take(4000);
    expect(y.buffer).toBe(x.buffer);
    const z = pool.take(4000);
    expect(z.buffer, 'in use: not handed out twice').not.toBe(y.buffer);
  });

  it('a scope hands back only what it took: an inner scope of the same pool leaves the outer one\'s reads alone', () => {
    const pool = new ReadPool();
    const outer = enterReadPool(pool);
    const kept = pool.take(70_000);
    kept.fill(7);
    withReadPool(pool, () => pool.take(70_000));
    // the inner scope's buffer is free again; the outer one's is still in use, so never handed out
    const again = pool.take(70_000);
    expect(again.buffer).not.toBe(kept.buffer);
    expect(kept.every((b) => b === 7)).toBe(true);
    outer.exit();
    expect(activeReadPool()).toBeNull();
    expect(pool.freeBytes()).toBe(2 * sizeClass(70_000));
  });

  it('outsideReadPool reads fresh copies inside a scope, and restores the scope after', () => {
    const pool = new ReadPool();
    withReadPool(pool, () => {
      expect(outsideReadPool(() => activeReadPool())).toBeNull();
      expect(activeReadPool()).toBe(pool);
    });
  });

  it('size classes waste at most an eighth of a buffer and are at least 64 KiB', () => {
    for (const n of [1, 65_536, 65_537, 90_008, 100_008, 4_194_304, 4_194_305, 33_554_432 + 8, 1e9 + 8]) {
      const c = sizeClass(n);
      expect(c).toBeGreaterThanOrEqual(Math.max(n, 65_536));
      if (n > 65_536) expect((c - n) / c).toBeLessThanOrEqual(1 / 8);
      expect(sizeClass(c), 'a class is its own class').toBe(c);
    }
    expect(sizeClass(4_194_304), 'a routed expert\'s 4 MiB fits exactly').toBe(4_194_304);
  });
});
