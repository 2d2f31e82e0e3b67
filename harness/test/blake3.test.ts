import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadAddon } from '../io/addon.js';
import { Blake3, blake3File, blake3FileTs, blake3Parts, blake3PartsTs } from '../io/blake3.js';

// The official test vectors (BLAKE3-team/BLAKE3, test_vectors/test_vectors.json): input byte i is i % 251.
const vectors = JSON.parse(fs.readFileSync(path.join(import.meta.dirname, 'golden', 'blake3-vectors.json'), 'utf8')) as { cases: Array<{ input_len: number; hash: string }> };
const input = (n: number) => Uint8Array.from({ length: n }, (_, i) => i % 251);

type Native = { blake3Parts: (p: unknown, t: unknown) => string[]; blake3File: (fd: unknown, n: unknown, t: unknown) => string | null; blake3Level: (l?: number) => number };
const native = loadAddon('ld_reference') as Native;
const levels = [0, 1, 2].filter((l) => native.blake3Level(l) === l);
// every level this CPU has is tested (a level silently missing would leave its kernel untested)
const cpu = fs.existsSync('/proc/cpuinfo') ? fs.readFileSync('/proc/cpuinfo', 'utf8') : '';
afterAll(() => native.blake3Level(-1));

/** The TypeScript hasher over a part, fed in pieces of `step` bytes (the pieces' boundaries must not matter). */
const ts = (p: readonly Uint8Array[], step = 1 << 20) => {
  const h = new Blake3();
  for (const b of p) for (let at = 0; at < b.length; at += step) h.update(b.subarray(at, at + step));
  return h.hex();
};

describe('BLAKE3', () => {
  it('the TypeScript implementation gives every official test vector, however the input is fed', () => {
    for (const c of vectors.cases) {
      for (const step of [1, 63, 64, 1000, 1 << 20]) {
        if (step === 1 && c.input_len > 8193) continue;
        expect(ts([input(c.input_len)], step), `${c.input_len} bytes in pieces of ${step}`).toBe(c.hash);
      }
    }
  });

  it('the native implementation gives every official test vector at every kernel level and thread count', () => {
    expect(levels).toContain(0);
    if (/\bavx2\b/.test(cpu)) expect(levels).toContain(1);
    if (/\bavx512f\b/.test(cpu)) expect(levels).toContain(2);
    for (const l of levels) {
      native.blake3Level(l);
      for (const t of [1, 3]) expect(blake3Parts(vectors.cases.map((c) => [input(c.input_len)]), t), `level ${l}, ${t} threads`).toEqual(vectors.cases.map((c) => c.hash));
    }
  });

  it('native equals TypeScript across 8 MiB subtrees, uneven spans and threads', () => {
    const MiB = 1 << 20;
    const big = randomBytes(25 * MiB + 12345);
    const parts: Uint8Array[][] = [
      [big.subarray(0, 8 * MiB)], // exactly one subtree: its own root
      [big.subarray(0, 8 * MiB + 1)], // one byte into a second subtree
      [big.subarray(0, 16 * MiB)], // two full subtrees
      [big], // three subtrees and a short one, ending inside a chunk
      // spans whose boundaries fall inside chunks and inside a subtree's read window
      [big.subarray(0, 5_000_001), big.subarray(7, 70), new Uint8Array(0), big.subarray(100, 100 + 9 * MiB + 3)],
      [big.subarray(3, 1027)], // a view at an odd offset: only its bytes
      [],
      ...Array.from({ length: 5 }, (_, i) => [big.subarray(i * 4097, i * 4097 + 17 * 1024 + i)]),
    ];
    const want = parts.map((p) => ts(p));
    for (const l of levels) {
      native.blake3Level(l);
      for (const t of [1, 2, 5]) expect(blake3Parts(parts, t), `level ${l}, ${t} threads`).toEqual(want);
    }
  });

  it('a file through its descriptor: the same digest; null when it ends before the length; the offset untouched', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-blake3-'));
    try {
      const bytes = randomBytes(9 * (1 << 20) + 777);
      const file = path.join(dir, 'x.bin');
      fs.writeFileSync(file, bytes);
      const fd = fs.openSync(file, 'r');
      try {
        const want = ts([bytes]);
        for (const l of levels) {
          native.blake3Level(l);
          expect(blake3File(fd, bytes.length, 2)).toBe(want);
        }
        expect(blake3File(fd, 1000, 1)).toBe(ts([bytes.subarray(0, 1000)]));
        expect(blake3File(fd, 0, 1)).toBe(vectors.cases[0].hash);
        expect(blake3File(fd, bytes.length + 1, 2)).toBeNull();
        // the fallbacks without the addon give the same digests
        expect(blake3FileTs(fd, bytes.length)).toBe(want);
        expect(blake3FileTs(fd, bytes.length + 1)).toBeNull();
        expect(blake3PartsTs([[bytes.subarray(0, 5000), bytes.subarray(5000)], []])).toEqual([want, vectors.cases[0].hash]);
        const b = Buffer.alloc(4);
        fs.readSync(fd, b, 0, 4, null);
        expect(b.equals(bytes.subarray(0, 4))).toBe(true);
      } finally {
        fs.closeSync(fd);
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses what is not a list of byte arrays, a bad length or thread count', () => {
    expect(() => native.blake3Parts([[new Float32Array(4)]], 2)).toThrow(/Uint8Array/);
    expect(() => native.blake3Parts([Buffer.from('x')], 2)).toThrow(/array of Uint8Array/);
    expect(() => native.blake3Parts([], 0)).toThrow(/threads/);
    expect(() => native.blake3File(0, -1, 1)).toThrow(/length/);
    expect(() => native.blake3File(0, 1.5, 1)).toThrow(/length/);
    expect(() => native.blake3File(0, 10, 0)).toThrow(/threads/);
    for (const fd of [-1, Number.NaN, 2 ** 32 + 5, 1.5]) expect(() => native.blake3File(fd, 10, 1)).toThrow(/fd/);
    expect(() => native.blake3File(0, 2 ** 60, 1)).toThrow(/length/);
    // not an open regular file, or shorter than the length: null, before any work is sized by the length
    expect(native.blake3File(987_654, 10, 1)).toBeNull();
    expect(native.blake3File(0, 2 ** 50, 1_000_000)).toBeNull();
  });
});
