/**
 * The streaming safetensors writer (harness/io/stream_writer.ts): its file is byte for byte what encodeSafetensors
 * makes of the same tensors, however the caller chunks them, and it reaches the file in writes that each cover whole
 * 2 MiB extents (the last excepted), so the page cache holds it in the 2 MiB folios a mapping maps by PMD entries.
 */
import fsDefault, * as fs from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { loadAddon } from '../io/addon.js';
import { encodeSafetensors } from '../io/safetensors.js';
import { SafetensorsStreamWriter, type TensorSpec } from '../io/stream_writer.js';

const MiB = 2 ** 20;
let dir: string;

// an FP16 cache's layout: a small header, then weights of a few MiB each, none of them 2 MiB-aligned in the file
const specs: TensorSpec[] = [
  { name: 'layers.0.ffn.experts.0.w1.weight', dtype: 'F16', shape: [1536, 1024] },
  { name: 'layers.0.ffn.experts.0.w2.weight', dtype: 'F16', shape: [1024, 1536] },
  { name: 'layers.0.ffn.experts.0.w3.weight', dtype: 'F16', shape: [1536, 1024] },
  { name: 'layers.0.ffn.gate.bias', dtype: 'F32', shape: [7] },
  { name: 'layers.0.ffn.experts.1.w1.weight', dtype: 'F16', shape: [2048, 1024] },
];
const bytesOf = (t: TensorSpec, k: number): Uint8Array => {
  const n = t.shape.reduce((a, b) => a * b, 1) * (t.dtype === 'F16' ? 2 : 4);
  return Uint8Array.from({ length: n }, (_, i) => (i * 131 + k * 17 + (i >> 12)) & 255);
};
const data = specs.map(bytesOf);

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-stream-'));
});

afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

/** the file written with each tensor cut into chunks of `chunk` bytes; the (position, length) of each write */
function writeChunked(file: string, chunk: number): { position: number; length: number }[] {
  const writes: { position: number; length: number }[] = [];
  // node:fs's named exports follow its default object's properties once synced (the writer imports the namespace)
  const real = fsDefault.writeSync;
  const spy = vi.spyOn(fsDefault, 'writeSync').mockImplementation(((fd: number, b: Uint8Array, off: number, len: number, pos: number) => {
    writes.push({ position: pos, length: len });
    return real(fd, b, off, len, pos);
  }) as typeof fs.writeSync);
  syncBuiltinESMExports();
  try {
    const w = SafetensorsStreamWriter.create(file, specs);
    specs.forEach((t, k) => {
      for (let at = 0; at < data[k].length; at += chunk) w.write(t.name, data[k].subarray(at, Math.min(at + chunk, data[k].length)));
    });
    w.close();
  } finally {
    spy.mockRestore();
    syncBuiltinESMExports();
  }
  return writes;
}

describe('SafetensorsStreamWriter', () => {
  const want = encodeSafetensors(specs.map((t, k) => ({ name: t.name, dtype: t.dtype, shape: t.shape, data: data[k] })), { format: 'pt' });

  it.each([4096 + 8, MiB - 24, 3 * MiB + 8, 64 * MiB])('writes encodeSafetensors\' bytes in writes of whole 2 MiB extents (chunks of %i bytes)', (chunk) => {
    const file = path.join(dir, `chunks-${chunk}.safetensors`);
    const writes = writeChunked(file, chunk);
    expect(Buffer.compare(fs.readFileSync(file), want)).toBe(0);
    let at = 0;
    writes.forEach((w, i) => {
      expect(w.position, `write ${i} follows the one before`).toBe(at);
      expect(w.position % (2 * MiB), `write ${i} starts an extent`).toBe(0);
      if (i < writes.length - 1) expect(w.length % (2 * MiB), `write ${i} ends one`).toBe(0);
      at += w.length;
    });
    expect(at).toBe(want.length);
  });

  // What the writes are for: the file, still in the page cache, maps by PMD entries wherever a huge-page mapping's
  // own reads of it would (hugeMappedBytes after dropping it). Written a tensor at a time at the file's position,
  // this kernel left the extents holding a write's start or end in smaller folios (~88 % of a 256 MiB file mapped so).
  it.runIf(process.platform === 'linux')('leaves the file in the page cache as 2 MiB folios', (ctx) => {
    const io = loadAddon('ld_reference') as { dropCached(fd: number): boolean; hugeMappedBytes(fd: number, offset: number, length: number): number };
    const file = path.join(dir, 'folios.safetensors');
    writeChunked(file, MiB - 24);
    const fd = fs.openSync(file, 'r');
    try {
      const whole = Math.floor(want.length / (2 * MiB)) * 2 * MiB;  // the last extent is partial: never PMD-mapped
      const asWritten = io.hugeMappedBytes(fd, 0, whole);
      fs.fsyncSync(fd);
      expect(io.dropCached(fd)).toBe(true);
      const possible = io.hugeMappedBytes(fd, 0, whole);
      if (possible === 0) ctx.skip(`${file}: this kernel or filesystem makes no 2 MiB page-cache folios here`);
      // one extent the kernel could not give a 2 MiB folio as it wrote (fragmented memory) is allowed; written at
      // the file's position a tensor at a time, none of the 12 MiB was PMD-mappable
      expect(asWritten, 'the extents as the writes left them, against a huge-page read of them').toBeGreaterThanOrEqual(possible - 2 * MiB);
    } finally {
      fs.closeSync(fd);
    }
  });
});
