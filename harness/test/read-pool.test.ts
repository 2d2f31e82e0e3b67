/**
 * The read pool (harness/io/read_pool.ts): inside withReadPool, tensor reads draw recycled buffers, the bytes are
 * the file's, a buffer is reused only after its scope ends, and outside any scope every read is a fresh copy.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { sameBytes } from './same-bytes.js';
import { detachBuffer, mappedStats, mapPopulated, releaseMapped } from '../io/map.js';
import { MAP_READ_MIN_BYTES, ReadPool, activeReadPool, enterReadPool, outsideReadPool, sizeClass, tieToRead, withReadPool } from '../io/read_pool.js';
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

  it('a large read inside a scope is a private mapping of the file: the same bytes, released (detached) when the scope ends, never written back', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-pool-map-'));
    // a small tensor first, so the large one starts 8-byte aligned but not on a page
    const small = Uint8Array.from({ length: 24 }, (_, i) => i);
    const big = Uint8Array.from({ length: MAP_READ_MIN_BYTES + 4096 + 8 }, (_, i) => (i * 31 + (i >> 11)) & 255);
    const odd = Uint8Array.from({ length: MAP_READ_MIN_BYTES + 5 }, (_, i) => (i * 17) & 255);
    const file = path.join(dir, 'm.safetensors');
    writeSafetensors(file, [
      { name: 'small', dtype: 'U8', shape: [small.length], data: small },
      { name: 'big', dtype: 'U8', shape: [big.length], data: big },
      { name: 'odd', dtype: 'U8', shape: [odd.length], data: odd },
    ]);
    const before = fs.readFileSync(file);
    const f = SafetensorsFile.open(file);
    const info = f.get('big')!;
    expect(info.begin % 4096, 'the fixture\'s large tensor is off a page boundary').not.toBe(0);
    const pool = new ReadPool();
    let kept: Uint8Array | null = null;
    withReadPool(pool, () => {
      const r = f.read(info);
      expect(sameBytes(r, big)).toBe(true);
      expect(r.byteOffset % 8).toBe(0);
      r[0] ^= 0xff; // a write to a private mapping copies the page for this process only
      kept = r;
      // a length that is not a multiple of 8 cannot keep the reads' padded contract: an ordinary read
      const o = f.read(f.get('odd')!);
      expect(sameBytes(o, odd)).toBe(true);
    });
    expect(kept!.length, 'a view kept past its scope reads nothing').toBe(0);
    expect(pool.freeBytes(), 'a mapping is not a pool buffer: only the odd read came back').toBe(sizeClass(Math.ceil(odd.length / 8) * 8));
    withReadPool(pool, () => expect(sameBytes(f.read(info), big)).toBe(true));
    const outside = f.read(info);
    expect(sameBytes(outside, big)).toBe(true);
    f.close();
    expect(outside.length, 'outside a scope: a copy, never released').toBe(big.length);
    expect(fs.readFileSync(file).equals(before), 'the checkpoint is untouched').toBe(true);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('releaseMapped acts once, on live mappings only', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-map-'));
    const file = path.join(dir, 'x.bin');
    const bytes = Uint8Array.from({ length: 3 * 4096 }, (_, i) => (i * 5) & 255);
    fs.writeFileSync(file, bytes);
    const fd = fs.openSync(file, 'r');
    const m = mapPopulated(fd, 4096 + 8, 4096);
    expect(m, 'the native addon maps a regular file').not.toBeNull();
    expect(new Uint8Array(m!)).toEqual(bytes.subarray(4096 + 8, 2 * 4096 + 8));
    expect(mapPopulated(fd, 2 * 4096, 4097), 'past the end of the file').toBeNull();
    expect(releaseMapped(new ArrayBuffer(64)), 'not a mapping').toBe(false);
    expect(releaseMapped(m!)).toBe(true);
    expect(m!.byteLength).toBe(0);
    expect(releaseMapped(m!), 'released already').toBe(false);
    fs.closeSync(fd);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('a reserved large read takes no memory until filled (an anonymous mapping), fills with the file\'s bytes, and ends with its scope', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-pool-reserve-'));
    const big = Uint8Array.from({ length: MAP_READ_MIN_BYTES + 4096 + 3 }, (_, i) => (i * 29 + (i >> 10)) & 255);
    const small = Uint8Array.from({ length: 1000 }, (_, i) => (i * 3) & 255);
    const file = path.join(dir, 'r.safetensors');
    writeSafetensors(file, [
      { name: 'small', dtype: 'U8', shape: [small.length], data: small },
      { name: 'big', dtype: 'U8', shape: [big.length], data: big },
    ]);
    const f = SafetensorsFile.open(file);
    const pool = new ReadPool();
    let kept: Uint8Array | null = null;
    withReadPool(pool, () => {
      const live = mappedStats()!.uncounted;
      const r = f.reserve(f.get('big')!);
      expect(mappedStats()!.uncounted, 'a mapping, not a heap buffer').toBe(live + 1);
      expect(r.bytes.length).toBe(big.length);
      expect(r.bytes.byteOffset % 8).toBe(0);
      expect(r.bytes.every((b) => b === 0), 'zero bytes until filled').toBe(true);
      r.fill();
      expect(sameBytes(r.bytes, big)).toBe(true);
      kept = r.bytes;
      const s = f.reserve(f.get('small')!);
      expect(s.bytes.buffer.byteLength, 'a small one is an ordinary pool buffer').toBe(sizeClass(1000));
      s.fill();
      expect(sameBytes(s.bytes, small)).toBe(true);
    });
    expect(kept!.length, 'the mapping ended with the scope').toBe(0);
    expect(pool.freeBytes(), 'only the small buffer came back to the pool').toBe(sizeClass(1000));
    f.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('a reserved mapping handed back unwritten serves the next reservation (no new mapping, still zero), a written one is unmapped', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-pool-reserve-'));
    const big = Uint8Array.from({ length: MAP_READ_MIN_BYTES + 4096 }, (_, i) => (i * 31 + (i >> 9)) & 255);
    const file = path.join(dir, 'r.safetensors');
    writeSafetensors(file, [{ name: 'big', dtype: 'U8', shape: [big.length], data: big }]);
    const f = SafetensorsFile.open(file);
    const pool = new ReadPool();
    const live = mappedStats()!.uncounted;
    let first: Uint8Array | null = null;
    withReadPool(pool, () => {
      first = f.reserve(f.get('big')!).bytes;  // the fused pass read it itself: never filled
    });
    expect(first!.length, 'kept, not detached').toBe(big.length);
    expect(pool.reservedKept()).toBe(1);
    let filled: Uint8Array | null = null;
    withReadPool(pool, () => {
      const r = f.reserve(f.get('big')!);
      expect(r.bytes.buffer, 'the kept mapping').toBe(first!.buffer);
      expect(mappedStats()!.uncounted, 'no new mapping').toBe(live + 1);
      expect(r.bytes.every((b) => b === 0), 'zero bytes until filled').toBe(true);
      r.fill();
      expect(sameBytes(r.bytes, big)).toBe(true);
      filled = r.bytes;
    });
    expect(filled!.length, 'a filled one is unmapped with its scope').toBe(0);
    expect(pool.reservedKept()).toBe(0);
    let again: Uint8Array | null = null;
    withReadPool(pool, () => {
      const r = f.reserve(f.get('big')!);
      expect(r.bytes.every((b) => b === 0), 'a fresh mapping: zero bytes').toBe(true);
      again = r.bytes;
    });
    expect(pool.reservedKept()).toBe(1);
    pool.dropReserved();
    expect(pool.reservedKept()).toBe(0);
    expect(again!.length, 'dropReserved ends the kept mapping').toBe(0);
    expect(mappedStats()!.uncounted, 'no mapping of the pool left').toBe(live);
    f.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('tieToRead frees an array computed from a read when the read\'s own scope ends, and ties nothing else', () => {
    const pool = new ReadPool();
    const arrayBuffers = () => process.memoryUsage().arrayBuffers;
    const outer = enterReadPool(pool);
    const read = pool.take(100_000);
    const derived = new Uint16Array(8 * 2 ** 20); // 16 MiB
    derived.fill(3);
    expect(tieToRead(read, derived)).toBe(true);
    expect(tieToRead(read, derived.subarray(8)), 'a view of part of a buffer is not its owner').toBe(false);
    expect(tieToRead(read, read), 'the read itself').toBe(false);
    expect(tieToRead(new Uint8Array(64), new Uint16Array(4)), 'a buffer no pool handed out').toBe(false);
    // an inner scope of the same pool leaves the outer read's derived array alone
    withReadPool(pool, () => {
      const inner = pool.take(70_000);
      const innerDerived = new Float32Array(1024);
      expect(tieToRead(inner, innerDerived)).toBe(true);
      expect(tieToRead(read, new Float32Array(16))).toBe(true);
    });
    expect(derived.length, 'still in use: its read\'s scope is open').toBe(8 * 2 ** 20);
    expect(derived[12345]).toBe(3);
    const before = arrayBuffers();
    outer.exit();
    expect(derived.length, 'detached with its read').toBe(0);
    expect(before - arrayBuffers(), 'its 16 MiB freed at once, without a collection').toBeGreaterThanOrEqual(16 * 2 ** 20);
    expect(tieToRead(read, new Uint16Array(4)), 'the read was handed back').toBe(false);
  });

  it('free buffers beyond what a pool keeps are freed at once, and detachBuffer refuses what it cannot detach', () => {
    const pool = new ReadPool(2 * 2 ** 20);
    const a = pool.take(2 * 2 ** 20), b = pool.take(2 * 2 ** 20);
    const before = process.memoryUsage().arrayBuffers;
    pool.release();
    expect(pool.freeBytes()).toBe(2 * 2 ** 20);
    expect([a.length, b.length].sort(), 'one kept for reuse, one detached').toEqual([0, 2 * 2 ** 20]);
    expect(before - process.memoryUsage().arrayBuffers).toBeGreaterThanOrEqual(2 * 2 ** 20);
    const gone = new ArrayBuffer(8);
    expect(detachBuffer(gone)).toBe(true);
    expect(detachBuffer(gone), 'detached already').toBe(false);
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
