import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { InputError } from '../errors.js';
import { encodeSafetensors, SafetensorsFile } from '../io/safetensors.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-st-'));

function fileWith(name: string, bytes: Uint8Array): string {
  const p = path.join(tmp, name);
  fs.writeFileSync(p, bytes);
  return p;
}

/** Build a file by hand: header JSON + data, the way a hostile writer would. */
function raw(header: unknown, data: Uint8Array, lenOverride?: bigint): Buffer {
  const hb = Buffer.from(JSON.stringify(header));
  const out = Buffer.alloc(8 + hb.length + data.length);
  out.writeBigUInt64LE(lenOverride ?? BigInt(hb.length), 0);
  hb.copy(out, 8);
  out.set(data, 8 + hb.length);
  return out;
}

describe('safetensors reader', () => {
  it('round-trips tensors written by the writer, by byte range', () => {
    const a = new Float32Array([1, 2, 3, 4, 5, 6]);
    const b = new Uint8Array([7, 8, 9]);
    const buf = encodeSafetensors([
      { name: 'a', dtype: 'F32', shape: [2, 3], data: new Uint8Array(a.buffer) },
      { name: 'b', dtype: 'U8', shape: [3], data: b },
    ]);
    expect((buf.readUInt32LE(0) + 8) % 8).toBe(0); // header padded to 8
    const f = SafetensorsFile.open(fileWith('ok.safetensors', buf));
    expect(f.metadata).toEqual({ format: 'pt' });
    const ia = f.get('a')!;
    expect(ia.shape).toEqual([2, 3]);
    expect(new Float32Array(f.read(ia).buffer, 0, 6)).toEqual(a);
    expect([...f.readRange(ia, 12, 8)]).toEqual([...new Uint8Array(a.buffer, 12, 8)]);
    expect([...f.read(f.get('b')!)]).toEqual([7, 8, 9]);
    f.close();
  });

  const hostile: Array<[string, Buffer, RegExp]> = [
    ['too short', Buffer.from([1, 2, 3]), /truncated/],
    ['header length past the end', raw({}, new Uint8Array(0), 1000n), /header length 1000 runs past/],
    ['huge header length', raw({}, new Uint8Array(0), 2n ** 60n), /exceeds/],
    ['not JSON', (() => { const b = raw({}, new Uint8Array(0)); b.write('{{', 8); return b; })(), /not valid JSON/],
    ['array header', raw([], new Uint8Array(0)), /not a JSON object/],
    ['a header that is not UTF-8', (() => { const b = raw({ tX: { dtype: 'U8', shape: [1], data_offsets: [0, 1] } }, new Uint8Array(1)); b[b.indexOf('tX') + 1] = 0xff; return b; })(), /the header is not valid UTF-8/],
    ['unknown dtype', raw({ t: { dtype: 'F4', shape: [2], data_offsets: [0, 1] } }, new Uint8Array(1)), /tensor 't'.*unknown dtype/],
    ['negative shape', raw({ t: { dtype: 'U8', shape: [-1], data_offsets: [0, 1] } }, new Uint8Array(1)), /shape/],
    ['offsets past the data', raw({ t: { dtype: 'U8', shape: [4], data_offsets: [0, 4] } }, new Uint8Array(2)), /run past/],
    ['size disagrees with shape', raw({ t: { dtype: 'F32', shape: [2], data_offsets: [0, 4] } }, new Uint8Array(4)), /needs 8 bytes/],
    ['overlap', raw({ a: { dtype: 'U8', shape: [4], data_offsets: [0, 4] }, b: { dtype: 'U8', shape: [2], data_offsets: [2, 4] } }, new Uint8Array(4)), /overlap/],
    ['hole', raw({ a: { dtype: 'U8', shape: [2], data_offsets: [2, 4] } }, new Uint8Array(4)), /hole/],
    ['trailing bytes', raw({ a: { dtype: 'U8', shape: [2], data_offsets: [0, 2] } }, new Uint8Array(4)), /cover 2/],
    ['end before begin', raw({ a: { dtype: 'U8', shape: [0], data_offsets: [2, 1] } }, new Uint8Array(2)), /end before/],
    ['metadata not strings', raw({ __metadata__: { x: 1 } }, new Uint8Array(0)), /__metadata__/],
  ];
  for (const [name, bytes, msg] of hostile) {
    it(`rejects: ${name}, naming the file`, () => {
      const p = fileWith(`${name.replace(/\W/g, '_')}.safetensors`, bytes);
      let err: unknown;
      try {
        SafetensorsFile.open(p);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(InputError);
      expect((err as Error).message).toContain(p);
      expect((err as Error).message).toMatch(msg);
    });
  }
});

describe('SafetensorsFile.map: a private mapping instead of a copy', () => {
  // header padded so the first tensor starts 8-byte aligned; the second one starts 4 bytes off (an odd F32 count)
  const a = Uint8Array.from({ length: 40_004 }, (_, i) => (i * 31 + 7) & 255);
  const b = Uint8Array.from({ length: 9000 }, (_, i) => (i * 17 + 3) & 255);
  const make = () => fileWith(`map-${Math.random()}.safetensors`, encodeSafetensors([
    { name: 'a', dtype: 'U8', shape: [a.length], data: a },
    { name: 'b', dtype: 'U8', shape: [b.length], data: b },
  ]));

  it('gives the file\'s bytes, aligned or not, and a write to a mapped tensor never reaches the file', () => {
    const p = make();
    const before = fs.readFileSync(p);
    const f = SafetensorsFile.open(p);
    const ia = f.get('a')!, ib = f.get('b')!;
    const ma = f.map(ia), mb = f.map(ib);
    expect(ma).toEqual(a);
    expect(mb).toEqual(b);
    expect(f.mapRange(ia, 8, 16)).toEqual(a.subarray(8, 24));
    expect(f.mapRange(ib, 3, 100), 'an unaligned start is read instead, the same bytes').toEqual(b.subarray(3, 103));
    expect(ia.begin % 8, 'encodeSafetensors pads the header to 8').toBe(0);
    expect(ma.buffer.byteLength, 'mapped: the buffer is the tensor itself, not an 8-padded copy').toBe(a.length);
    ma[0] ^= 0xff;
    ma[ma.length - 1] ^= 0xff;
    expect(f.map(ia)[0], 'another mapping still shows the file').toBe(a[0]);
    f.close();
    expect(fs.readFileSync(p).equals(before), 'the file is unchanged').toBe(true);
  });

  it('a file cut short after opening is refused with the read\'s InputError, never mapped past its end', () => {
    const p = make();
    const f = SafetensorsFile.open(p);
    const ib = f.get('b')!;
    fs.truncateSync(p, ib.begin + 100);
    expect(() => f.map(ib)).toThrow(InputError);
    expect(() => f.map(ib)).toThrow(/shrank/);
    f.close();
  });
});

describe('SafetensorsFile.reserve: the buffer of a read left to the caller', () => {
  it('hands out the tensor\'s buffer unread, with where its bytes are; fill() reads them as read() does', () => {
    const p = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'ld-reserve-')), 'r.safetensors');
    const b = Uint8Array.from({ length: 1003 }, (_, i) => (i * 7 + 3) & 0xff);
    fs.writeFileSync(p, encodeSafetensors([{ name: 'a', dtype: 'U8', shape: [5], data: new Uint8Array(5).fill(9) }, { name: 'b', dtype: 'U8', shape: [1003], data: b }]));
    const f = SafetensorsFile.open(p);
    const ib = f.get('b')!;
    const r = f.reserve(ib);
    expect([r.bytes.length, r.offset, r.file, r.fd]).toEqual([1003, ib.begin, p, f.descriptor]);
    expect(r.bytes.byteOffset % 8).toBe(0);
    expect(fs.readSync(r.fd, new Uint8Array(3), 0, 3, r.offset)).toBe(3);
    r.fill();
    expect(r.bytes).toEqual(b);
    fs.truncateSync(p, ib.begin + 10);
    expect(() => f.reserve(ib).fill()).toThrow(/shrank/);
    f.close();
  });
});

describe('willNeed: read-ahead advice given on a background thread', () => {
  it('is queued for a regular file, refused for a closed descriptor, and checks its arguments', async () => {
    const { willNeed } = await import('../io/prefetch.js');
    const p = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'ld-willneed-')), 'w.bin');
    fs.writeFileSync(p, new Uint8Array(1 << 20).fill(1));
    const fd = fs.openSync(p, 'r');
    expect(willNeed(fd, 0, 1 << 20)).toBe(true);
    fs.closeSync(fd); // closing right away is safe: the advice holds its own descriptor
    expect(willNeed(fd, 0, 10), 'a closed descriptor').toBe(false);
    expect(() => willNeed(0, -1, 10)).toThrow(/offset and length must be ≥ 0/);
    expect(fs.readFileSync(p).every((x) => x === 1), 'the file is unchanged').toBe(true);
  });

  it('numbers the read-aheads it queues (not those it refuses), and readAheadWait returns once a mark is reached', async () => {
    const { readAheadMark, readAheadWait, willNeed } = await import('../io/prefetch.js');
    const { loadAddon } = await import('../io/addon.js');
    const io = loadAddon('ld_reference') as { readAheadWait(mark: number): void };
    const p = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'ld-mark-')), 'm.bin');
    fs.writeFileSync(p, new Uint8Array(3 << 20).fill(3));
    const fd = fs.openSync(p, 'r');
    try {
      const m0 = readAheadMark();
      expect(willNeed(fd, 0, 1 << 20)).toBe(true);
      expect(willNeed(fd, 1 << 20, 2 << 20)).toBe(true);
      expect(willNeed(987654, 0, 10), 'a descriptor that is not open').toBe(false);
      expect(readAheadMark()).toBe(m0 + 2);
      readAheadWait(m0 + 2);
      readAheadWait(0);
      expect(() => io.readAheadWait(m0 + 3), 'a mark not given yet').toThrow(/no read-ahead numbered/);
      expect(() => io.readAheadWait(-1)).toThrow(/mark must be an integer ≥ 0/);
    } finally {
      fs.closeSync(fd);
    }
  });

  // What the read-ahead leaves in the page cache: 2 MiB folios where the kernel makes them for a huge-page mapping's
  // reads (POSIX_FADV_WILLNEED left 4 KiB ones, which later mapped readers paid a fault a page for: file_io.cc). The
  // kernel's account of it (smaps' FilePmdMapped, through hugeMappedBytes): first what this kernel and filesystem
  // give a file read in through such a mapping, then what they give it read in by willNeed.
  it.runIf(process.platform === 'linux')('reads a range in as 2 MiB folios where the kernel makes them, as a huge-page mapping\'s own reads do', async () => {
    const { readAheadMark, readAheadWait, willNeed } = await import('../io/prefetch.js');
    const { loadAddon } = await import('../io/addon.js');
    const io = loadAddon('ld_reference') as { dropCached(fd: number): boolean; hugeMappedBytes(fd: number, offset: number, length: number): number };
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-readahead-'));
    const p = path.join(dir, 'r.bin');
    const size = 8 << 20;
    fs.writeFileSync(p, Uint8Array.from({ length: size }, (_, i) => (i * 2654435761) >>> 24));
    const fd = fs.openSync(p, 'r');
    try {
      fs.fsyncSync(fd);
      expect(io.dropCached(fd)).toBe(true);
      const possible = io.hugeMappedBytes(fd, 0, size);  // read in through the mapping itself
      expect(io.dropCached(fd)).toBe(true);
      expect(willNeed(fd, 0, size)).toBe(true);
      readAheadWait(readAheadMark());
      expect(io.hugeMappedBytes(fd, 0, size), `this kernel maps ${possible} B of it by PMD entries when read in through a huge-page mapping`).toBe(possible);
    } finally {
      fs.closeSync(fd);
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('dropCached (the wide benchmarks\' page-cache drop) is taken for a regular file, refused for a pipe, and leaves the file as it was', async () => {
    const { loadAddon } = await import('../io/addon.js');
    const { dropCached } = loadAddon('ld_reference') as { dropCached(fd: number): boolean };
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-dropcached-'));
    const p = path.join(dir, 'd.bin');
    fs.writeFileSync(p, new Uint8Array(1 << 20).fill(7));
    const fd = fs.openSync(p, 'r');
    expect(dropCached(fd)).toBe(true);
    fs.closeSync(fd);
    expect(dropCached(-1), 'no descriptor').toBe(false);
    const pipe = path.join(path.dirname(p), 'fifo');
    execFileSync('mkfifo', [pipe]);
    const pfd = fs.openSync(pipe, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
    expect(dropCached(pfd), 'a pipe (ESPIPE)').toBe(false);
    fs.closeSync(pfd);
    expect(fs.readFileSync(p).every((x) => x === 7), 'the file is unchanged').toBe(true);
    fs.rmSync(dir, { recursive: true, force: true });
  });
});
