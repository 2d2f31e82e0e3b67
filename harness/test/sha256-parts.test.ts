import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { loadAddon } from '../io/addon.js';
import { sha256Parts } from '../io/sha256_parts.js';

// The independent computation: node:crypto over each part's concatenation.
const oracle = (p: readonly Uint8Array[]) => createHash('sha256').update(Buffer.concat(p)).digest('hex');

describe('sha256Parts: SHA-256 of several parts side by side', () => {
  const parts: Uint8Array[][] = [
    [Buffer.from('abc')],
    [],
    [new Uint8Array(0), Buffer.from('abc')],
    [randomBytes(5_000_001), randomBytes(63), randomBytes(1 << 20)],
    // a view into the middle of a larger buffer: only its bytes are hashed
    [randomBytes(4096).subarray(17, 3001)],
    ...Array.from({ length: 7 }, (_, i) => [randomBytes(100_000 + i)]),
  ];

  it('is the native addon here, and equals node:crypto on every part at 1, 2 and 5 threads', () => {
    const a = loadAddon('ld_reference') as { sha256Parts?: unknown };
    expect(typeof a.sha256Parts).toBe('function');
    expect(sha256Parts([[Buffer.from('abc')], []], 2)).toEqual([
      'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad', // FIPS 180-2, "abc"
      'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', // the empty message
    ]);
    const want = parts.map(oracle);
    for (const t of [1, 2, 5]) expect(sha256Parts(parts, t)).toEqual(want);
  });

  it('refuses what is not a list of byte arrays', () => {
    const a = loadAddon('ld_reference') as { sha256Parts: (p: unknown, t: unknown) => string[] };
    expect(() => a.sha256Parts([[new Float32Array(4)]], 2)).toThrow(/Uint8Array/);
    expect(() => a.sha256Parts([Buffer.from('x')], 2)).toThrow(/array of Uint8Array/);
    expect(() => a.sha256Parts([], 0)).toThrow(/threads/);
  });
});
