/**
 * BLAKE3 digests (the hash mode, 32 bytes) for the FP16 cache's trust chain: a cryptographic hash whose
 * 1 KiB chunks are independent, so a file is hashed on every core and at SIMD width — 11–12 GB/s on two cores
 * here (round 42) where SHA-256 is one serial stream per file at ~1.2 GB/s a core.
 *
 * Two implementations. The native one (reference-cpu/native/blake3.cc: AVX-512 / AVX2 / scalar, threads over
 * 8 MiB subtrees, the tree merged level by level) is what runs. This file's Blake3 class is written from the
 * specification (§2.2 compression, §2.3 chunks, §5.1.2 the incremental tree with a stack of subtree values,
 * merged as the chunk count's trailing zero bits say) in plain TypeScript: the fallback without the addon, and
 * the second implementation the native one is tested against; both are checked against the official test
 * vectors (harness/test/golden/blake3-vectors.json).
 */
import * as fs from 'node:fs';
import { loadAddon } from './addon.js';

const IV = new Uint32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
const PERMUTATION = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8];
const CHUNK_START = 1, CHUNK_END = 2, PARENT = 4, ROOT = 8;
const BLOCK = 64, CHUNK = 1024;

const rotr = (x: number, n: number) => ((x >>> n) | (x << (32 - n))) >>> 0;

function g(v: Uint32Array, a: number, b: number, c: number, d: number, x: number, y: number): void {
  v[a] = v[a] + v[b] + x;
  v[d] = rotr(v[d] ^ v[a], 16);
  v[c] = v[c] + v[d];
  v[b] = rotr(v[b] ^ v[c], 12);
  v[a] = v[a] + v[b] + y;
  v[d] = rotr(v[d] ^ v[a], 8);
  v[c] = v[c] + v[d];
  v[b] = rotr(v[b] ^ v[c], 7);
}

/** The message word order of each round: round r applies the permutation r times (§2.2). */
const SCHEDULE: number[][] = [Array.from({ length: 16 }, (_, i) => i)];
for (let r = 1; r < 7; r++) SCHEDULE.push(PERMUTATION.map((p) => SCHEDULE[r - 1][p]));

const state = new Uint32Array(16);

/** The compression function (§2.2): the first 8 words of its output, the next chaining value. */
function compress(cv: Uint32Array, m: Uint32Array, counter: number, blockLen: number, flags: number): Uint32Array {
  const v = state;
  v.set(cv);
  v.set(IV.subarray(0, 4), 8);
  v[12] = counter % 2 ** 32;
  v[13] = Math.floor(counter / 2 ** 32);
  v[14] = blockLen;
  v[15] = flags;
  for (const s of SCHEDULE) {
    g(v, 0, 4, 8, 12, m[s[0]], m[s[1]]);
    g(v, 1, 5, 9, 13, m[s[2]], m[s[3]]);
    g(v, 2, 6, 10, 14, m[s[4]], m[s[5]]);
    g(v, 3, 7, 11, 15, m[s[6]], m[s[7]]);
    g(v, 0, 5, 10, 15, m[s[8]], m[s[9]]);
    g(v, 1, 6, 11, 12, m[s[10]], m[s[11]]);
    g(v, 2, 7, 8, 13, m[s[12]], m[s[13]]);
    g(v, 3, 4, 9, 14, m[s[14]], m[s[15]]);
  }
  const out = new Uint32Array(8);
  for (let i = 0; i < 8; i++) out[i] = v[i] ^ v[i + 8];
  return out;
}

/** Message words of a (zero-padded) block, little-endian (§2.2). */
function words(bytes: Uint8Array): Uint32Array {
  const w = new Uint32Array(16);
  for (let i = 0; i < bytes.length; i++) w[i >> 2] |= bytes[i] << (8 * (i & 3));
  return w;
}

/** What the last compression of a node needs, kept until it is known whether that node is the root. */
interface Output {
  cv: Uint32Array;
  block: Uint32Array;
  counter: number;
  blockLen: number;
  flags: number;
}

const parentOutput = (left: Uint32Array, right: Uint32Array): Output => ({ cv: IV, block: new Uint32Array([...left, ...right]), counter: 0, blockLen: BLOCK, flags: PARENT });
const chainingValue = (o: Output) => compress(o.cv, o.block, o.counter, o.blockLen, o.flags);

/** A streaming BLAKE3 hasher (hash mode). */
export class Blake3 {
  private cv: Uint32Array = IV;
  private chunk = 0;
  /** bytes of the current chunk already compressed (whole blocks) */
  private compressed = 0;
  private block = new Uint8Array(BLOCK);
  private blockLen = 0;
  /** values of complete subtrees, largest first (§5.1.2) */
  private readonly stack: Uint32Array[] = [];

  update(input: Uint8Array): this {
    for (let at = 0; at < input.length; ) {
      if (this.compressed + this.blockLen === CHUNK) this.endChunk();
      // a full block is compressed only once more input follows: the last block of the input may be the root's
      if (this.blockLen === BLOCK) this.compressBlock(false);
      const n = Math.min(BLOCK - this.blockLen, CHUNK - this.compressed - this.blockLen, input.length - at);
      this.block.set(input.subarray(at, at + n), this.blockLen);
      this.blockLen += n;
      at += n;
    }
    return this;
  }

  /** The hex digest of everything written so far. */
  hex(): string {
    let out = this.chunkOutput();
    for (let i = this.stack.length - 1; i >= 0; i--) out = parentOutput(this.stack[i], chainingValue(out));
    const root = compress(out.cv, out.block, out.counter, out.blockLen, out.flags | ROOT);
    return Array.from(root, (w) => [0, 8, 16, 24].map((s) => ((w >>> s) & 255).toString(16).padStart(2, '0')).join('')).join('');
  }

  private compressBlock(last: boolean): void {
    const flags = (this.compressed === 0 ? CHUNK_START : 0) | (last ? CHUNK_END : 0);
    this.cv = compress(this.cv, words(this.block.subarray(0, this.blockLen)), this.chunk, this.blockLen, flags);
    this.compressed += BLOCK;
    this.block = new Uint8Array(BLOCK);
    this.blockLen = 0;
  }

  private chunkOutput(): Output {
    const flags = (this.compressed === 0 ? CHUNK_START : 0) | CHUNK_END;
    return { cv: this.cv, block: words(this.block.subarray(0, this.blockLen)), counter: this.chunk, blockLen: this.blockLen, flags };
  }

  /** The current chunk is full and more input follows: its value joins the stack, merging complete subtrees. */
  private endChunk(): void {
    let cv = chainingValue(this.chunkOutput());
    this.chunk++;
    for (let total = this.chunk; (total & 1) === 0; total /= 2) cv = chainingValue(parentOutput(this.stack.pop()!, cv));
    this.stack.push(cv);
    this.cv = IV;
    this.compressed = 0;
    this.block = new Uint8Array(BLOCK);
    this.blockLen = 0;
  }
}

type Native = {
  blake3Parts: (parts: Uint8Array[][], threads: number) => string[];
  blake3File: (fd: number, length: number, threads: number) => string | null;
};
let native: Native | null | undefined;

function addon(): Native | null {
  if (native === undefined) {
    try {
      const a = loadAddon('ld_reference') as Partial<Native>;
      native = typeof a.blake3Parts === 'function' && typeof a.blake3File === 'function' ? (a as Native) : null;
    } catch {
      native = null;
    }
  }
  return native;
}

/** Hex BLAKE3 of each part (its arrays hashed as one concatenation), side by side on `threads` threads. */
export function blake3Parts(parts: readonly (readonly Uint8Array[])[], threads: number): string[] {
  const n = addon();
  return n !== null ? n.blake3Parts(parts.map((p) => [...p]), threads) : blake3PartsTs(parts);
}

/** blake3Parts without the addon: this file's hasher, one part after another. */
export function blake3PartsTs(parts: readonly (readonly Uint8Array[])[]): string[] {
  return parts.map((p) => p.reduce((h, b) => h.update(b), new Blake3()).hex());
}

/**
 * Hex BLAKE3 of bytes [0, length) of the file open as `fd` (positional reads: its offset untouched), or null when
 * they cannot all be read (a read error, or the file ends first).
 */
export function blake3File(fd: number, length: number, threads: number): string | null {
  const n = addon();
  return n !== null ? n.blake3File(fd, length, threads) : blake3FileTs(fd, length);
}

/** blake3File without the addon: positional reads of 1 MiB into this file's hasher. */
export function blake3FileTs(fd: number, length: number): string | null {
  const h = new Blake3();
  const buf = new Uint8Array(1 << 20);
  for (let at = 0; at < length; ) {
    let got: number;
    try {
      got = fs.readSync(fd, buf, 0, Math.min(buf.length, length - at), at);
    } catch {
      return null;
    }
    if (got <= 0) return null;
    h.update(buf.subarray(0, got));
    at += got;
  }
  return h.hex();
}
