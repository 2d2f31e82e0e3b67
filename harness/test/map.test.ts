/**
 * Mappings of file ranges (harness/io/map.ts, reference-cpu/native/file_io.cc): V8 does not count their bytes as its
 * own memory (so mapping an FP16 cache forces no collections), releaseMapped unmaps at once, a dropped mapping is
 * unmapped when collected, and past the limit of live uncounted mappings new ones are counted again.
 * process.memoryUsage().external is V8's count of memory outside its heap, ArrayBuffers' included.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadAddon } from '../io/addon.js';
import { blake3File, blake3Parts } from '../io/blake3.js';
import { mappedStats, mapPopulated, mapRange, releaseMapped } from '../io/map.js';
import { readIn } from '../io/prefetch.js';

const MiB = 2 ** 20;
let dir: string;
let file: string;
let fd: number;

/** how many of this process's mappings are of `file` (Linux: /proc/self/maps names each mapping's file) */
function mappingsOf(f: string): number {
  return fs.readFileSync('/proc/self/maps', 'utf8').split('\n').filter((l) => l.endsWith(` ${f}`)).length;
}

/** a full collection, then the turns of the event loop in which Node runs the finalizers it queued */
async function collect(): Promise<void> {
  v8.setFlagsFromString('--expose-gc');
  (vm.runInNewContext('gc') as () => void)();
  for (let i = 0; i < 4; i++) await new Promise((r) => setImmediate(r));
}

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-map-'));
  file = path.join(dir, 'weights.bin');
  fs.writeFileSync(file, Uint8Array.from({ length: 64 * MiB }, (_, i) => want(i)));
  fd = fs.openSync(file, 'r');
});

afterAll(() => {
  fs.closeSync(fd);
  fs.rmSync(dir, { recursive: true, force: true });
});

describe.runIf(process.platform === 'linux')('mapped file ranges', () => {
  it('are not counted as V8 memory, read the file\'s bytes, and are unmapped by releaseMapped at once', () => {
    const external0 = process.memoryUsage().external;
    const lazy = mapRange(fd, 8, 64 * MiB - 8)!;
    const populated = mapPopulated(fd, 0, 32 * MiB)!;
    expect(process.memoryUsage().external - external0, '96 MiB mapped, not counted').toBeLessThan(MiB);
    expect(mappedStats()?.uncounted, 'the two, and no mapping of an earlier test').toBe(2);
    const want = fs.readFileSync(file);
    expect(Buffer.compare(Buffer.from(lazy.buffer, lazy.byteOffset, lazy.byteLength), want.subarray(8))).toBe(0);
    expect(Buffer.compare(Buffer.from(populated), want.subarray(0, 32 * MiB))).toBe(0);
    expect(mappingsOf(file)).toBe(2);
    expect(releaseMapped(lazy.buffer as ArrayBuffer)).toBe(true);
    expect(releaseMapped(populated)).toBe(true);
    expect(mappingsOf(file), 'both ranges unmapped without a collection').toBe(0);
    expect(lazy.byteLength, 'a view of a released mapping reaches nothing').toBe(0);
    expect(mappedStats()?.uncounted).toBe(0);
  });

  // file_io.cc: every range is advised MADV_HUGEPAGE, so that what the page cache lacks is read in as 2 MiB folios
  // (the FP16 cache's start-up, round 38; ranges below 2 MiB too from round 41, whose faults otherwise read 4 KiB
  // folios into their extents); /proc/self/smaps shows the advice as VmFlags "hg"
  it.runIf(fs.existsSync('/sys/kernel/mm/transparent_hugepage'))('advises huge pages on every range, lazy or populated, 2 MiB or less', () => {
    const flagsOf = (f: string): string[][] => {
      const out: string[][] = [];
      let mine = false;
      for (const l of fs.readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
        if (/^[0-9a-f]+-[0-9a-f]+ /.test(l)) mine = l.endsWith(` ${f}`);
        else if (mine && l.startsWith('VmFlags:')) out.push(l.slice(8).trim().split(/\s+/));
      }
      return out;
    };
    const ranges = [mapRange(fd, 8, 2 * MiB - 8)!.buffer as ArrayBuffer, mapPopulated(fd, 3 * MiB, 4 * MiB)!];
    try {
      expect(flagsOf(file).map((f) => f.includes('hg'))).toEqual([true, true]);
    } finally {
      for (const b of ranges) releaseMapped(b);
    }
    const small = [mapRange(fd, 4096, 2 * MiB - 4096 - 8)!.buffer as ArrayBuffer, mapPopulated(fd, 0, MiB)!];
    try {
      expect(flagsOf(file).map((f) => f.includes('hg')), 'below 2 MiB (the page the range starts in included) as well').toEqual([true, true]);
    } finally {
      for (const b of small) releaseMapped(b);
    }
  });

  // The advice's effect, not only its flag: what a mapping of 2 MiB or more reads in, faulted page by page or
  // populated, is in the folios a huge-page mapping's own reads leave (hugeMappedBytes: read in through a mapping laid
  // out for them, then the kernel's account, smaps' FilePmdMapped). Without the advice this kernel read 4 KiB folios
  // for such faults (round 38), which every later mapping of them maps a page at a time.
  it.runIf(process.platform === 'linux')('what a mapping of 2 MiB or more reads in, lazily or populated, is in the folios a huge-page mapping\'s own reads leave', () => {
    const io = loadAddon('ld_reference') as { dropCached(fd: number): boolean; hugeMappedBytes(fd: number, offset: number, length: number): number };
    const span = 8 * MiB;
    fs.fsyncSync(fd);
    expect(io.dropCached(fd)).toBe(true);
    const possible = io.hugeMappedBytes(fd, 0, span);
    for (const how of ['lazy', 'populated'] as const) {
      expect(io.dropCached(fd)).toBe(true);
      const b = how === 'lazy' ? mapRange(fd, 0, span)!.buffer as ArrayBuffer : mapPopulated(fd, 0, span)!;
      try {
        const v = new Uint8Array(b);
        let sum = 0;
        for (let i = 0; i < v.length; i += 4096) sum += v[i];  // a fault a page where nothing populated them
        expect(sum).toBeGreaterThanOrEqual(0);
      } finally {
        releaseMapped(b);
      }
      expect(io.hugeMappedBytes(fd, 0, span), `${how}: this kernel maps ${possible} B of the range by PMD entries when a huge-page mapping reads it in`).toBe(possible);
    }
  });

  // file_io.cc (round 41): a fault in a small range (an FP16-cache norm or bias between two large weights) reads its
  // whole extent as one 2 MiB folio; without the advice it read 4 KiB folios around the fault, and the extent could
  // never again be mapped by a PMD entry while they stayed in the page cache
  it.runIf(process.platform === 'linux')('a fault in a range below 2 MiB reads its extent in as a 2 MiB folio', (ctx) => {
    const io = loadAddon('ld_reference') as { dropCached(fd: number): boolean; hugeMappedBytes(fd: number, offset: number, length: number): number };
    fs.fsyncSync(fd);
    expect(io.dropCached(fd)).toBe(true);
    const possible = io.hugeMappedBytes(fd, 6 * MiB, 2 * MiB);  // what a huge-page mapping's own read leaves
    if (possible === 0) ctx.skip(`${file}: this kernel or filesystem makes no 2 MiB page-cache folios here`);
    expect(io.dropCached(fd)).toBe(true);
    const small = mapRange(fd, 6 * MiB + 65536 + 8, 4096)!;
    try {
      expect(small[0]).toBe(want(6 * MiB + 65536 + 8));  // the one fault
    } finally {
      releaseMapped(small.buffer as ArrayBuffer);
    }
    expect(io.hugeMappedBytes(fd, 6 * MiB, 2 * MiB), `the extent as the small range's fault left it (${possible} B possible)`).toBe(possible);
  });

  // file_io.cc's readIn and blake3.cc's blake3File (round 41): what a pread is about to read, missing from the page
  // cache, is read in as 2 MiB folios first. blake3File's threads pread the file interleaved, and without this the
  // kernel's read-ahead left a hashed FP16-cache layer file 3–7 % PMD-mappable.
  it.runIf(process.platform === 'linux')('readIn and blake3File read what the page cache lacks in as 2 MiB folios', (ctx) => {
    const io = loadAddon('ld_reference') as { dropCached(fd: number): boolean; hugeMappedBytes(fd: number, offset: number, length: number): number };
    fs.fsyncSync(fd);
    expect(io.dropCached(fd)).toBe(true);
    const possible = io.hugeMappedBytes(fd, 0, 64 * MiB);
    const possible46 = io.hugeMappedBytes(fd, 8 * MiB, 6 * MiB);
    if (possible === 0) ctx.skip(`${file}: this kernel or filesystem makes no 2 MiB page-cache folios here`);
    expect(io.dropCached(fd)).toBe(true);
    // control: the same preads without readIn over extents 10–12 (where they leave 2 MiB folios themselves, as on a
    // host whose read-ahead is 2 MiB or more, or where the drop was not done, readIn cannot be told apart)
    const control = Buffer.alloc(64 * 1024);
    for (let at = 20 * MiB + 100; at < 24 * MiB + 100; at += 64 * 1024) fs.readSync(fd, control, 0, 64 * 1024, at);
    if (io.hugeMappedBytes(fd, 20 * MiB, 6 * MiB) === io.hugeMappedBytes(fd, 40 * MiB, 6 * MiB)) ctx.skip('plain preads leave 2 MiB folios here too');
    expect(io.dropCached(fd)).toBe(true);
    readIn(fd, 8 * MiB + 100, 4 * MiB);  // extents 4–6
    // the pread it comes before (hugeMappedBytes would read missing extents in as 2 MiB folios itself)
    const buf = Buffer.alloc(4 * MiB);
    for (let at = 8 * MiB + 100; at < 12 * MiB + 100; at += 64 * 1024) fs.readSync(fd, buf, 0, 64 * 1024, at);
    // a 2 MiB folio the kernel could not allocate at that moment (fragmented memory) falls back to small ones: one
    // such extent is allowed; without readIn none of the three was PMD-mappable
    expect(io.hugeMappedBytes(fd, 8 * MiB, 6 * MiB), 'readIn: the extents it read').toBeGreaterThanOrEqual(possible46 - 2 * MiB);
    expect(io.dropCached(fd)).toBe(true);
    const digest = blake3File(fd, 64 * MiB, 2);
    expect(digest).toBe(blake3Parts([[fs.readFileSync(file)]], 1)[0]);
    // as above, a few extents may fall back under fragmented memory; without the read-in 8–18 of 64 MiB were left
    expect(io.hugeMappedBytes(fd, 0, 64 * MiB), 'blake3File: the whole file').toBeGreaterThanOrEqual(possible * 3 / 4);
  });

  // file_io.cc (round 41): a range that starts and ends inside 2 MiB extents, as every FP16-cache tensor does (the
  // header before them), is mapped over those whole extents at a congruent address, so its first and last extents
  // map by PMD entries too. Mapped from its own first page, they were mapped a 4 KiB page at a time, and the GEMV
  // thread whose rows start there ran at ~40 % of the other's speed.
  it.runIf(process.platform === 'linux')('a range inside 2 MiB extents maps every extent it touches by PMD entries, and reads the range\'s bytes', (ctx) => {
    const io = loadAddon('ld_reference') as { dropCached(fd: number): boolean; hugeMappedBytes(fd: number, offset: number, length: number): number };
    const at = 10664, length = 16 * MiB;  // a wide expert's [2048, 4096] FP16 weight after a cache file's header
    const pmdMappedOf = (f: string): number[] => {
      const out: number[] = [];
      let mine = false;
      for (const l of fs.readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
        if (/^[0-9a-f]+-[0-9a-f]+ /.test(l)) mine = l.endsWith(` ${f}`);
        else if (mine && l.startsWith('FilePmdMapped:')) out.push(Number.parseInt(l.slice(14), 10) * 1024);
      }
      return out;
    };
    fs.fsyncSync(fd);
    expect(io.dropCached(fd)).toBe(true);
    const possible = io.hugeMappedBytes(fd, 0, 18 * MiB);  // extents 0–8, read in as a huge-page mapping reads them
    if (possible === 0) ctx.skip(`${file}: this kernel or filesystem makes no 2 MiB page-cache folios here`);
    const want16 = fs.readFileSync(file).subarray(at, at + length);
    for (const how of ['lazy', 'populated'] as const) {
      const b = how === 'lazy' ? mapRange(fd, at, length)!.buffer as ArrayBuffer : mapPopulated(fd, at, length)!;
      try {
        const v = new Uint8Array(b);
        expect(v.length).toBe(length);
        if (how === 'lazy') for (let i = 0; i < v.length; i += 4096) expect(v[i]).toBe(want16[i]);
        expect(Buffer.compare(Buffer.from(v), want16), `${how}: the range's bytes`).toBe(0);
        expect(pmdMappedOf(file), `${how}: the whole of extents 0–8 by PMD entries, as this kernel maps ${possible} B of them`).toEqual([possible]);
      } finally {
        releaseMapped(b);
      }
    }
    // below 8 MiB the mapping is the range's own pages (a 2 MiB folio maps whole, so over the extents the process's
    // RSS would count the neighbours' pages): a populated 4 MiB range inside extents 0–2 is ~4 MiB of RSS
    const small = mapPopulated(fd, at, 4 * MiB)!;
    try {
      let rss = 0, mine = false;
      for (const l of fs.readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
        if (/^[0-9a-f]+-[0-9a-f]+ /.test(l)) mine = l.endsWith(` ${file}`);
        else if (mine && l.startsWith('Rss:')) rss += Number.parseInt(l.slice(4), 10) * 1024;
      }
      expect(rss, 'its own pages, not its extents').toBeLessThanOrEqual(4 * MiB + 8192);
    } finally {
      releaseMapped(small);
    }
  });

  it('a mapping dropped without releaseMapped is unmapped when its buffer is collected', async () => {
    (() => {
      const m = mapRange(fd, 0, 64 * MiB)!;
      expect(m[4096]).toBe(want(4096));
    })();
    expect(mappingsOf(file)).toBe(1);
    await collect();
    expect(mappingsOf(file)).toBe(0);
    expect(mappedStats()?.uncounted).toBe(0);
  });

  it('past the limit of live uncounted mappings, new ones are counted (V8 then collects dropped ones), and every one reads the file', () => {
    const { uncountedLimit } = mappedStats()!;
    expect(uncountedLimit).toBeGreaterThan(0);
    const held: ArrayBuffer[] = [];
    try {
      for (let i = 0; i < uncountedLimit; i++) held.push(mapRange(fd, (i % 64) * MiB, MiB)!.buffer as ArrayBuffer);
      expect(mappedStats()?.uncounted).toBe(uncountedLimit);
      const external0 = process.memoryUsage().external;
      const extra = Array.from({ length: 8 }, (_, i) => mapRange(fd, i * MiB, MiB)!);
      held.push(...extra.map((m) => m.buffer as ArrayBuffer));
      const grew = process.memoryUsage().external - external0;
      expect(grew, '8 MiB past the limit, counted').toBeGreaterThanOrEqual(8 * MiB);
      expect(grew).toBeLessThan(9 * MiB);
      expect(mappedStats()?.uncounted).toBe(uncountedLimit);
      for (let i = 0; i < 8; i++) expect(extra[i][12345]).toBe(want(i * MiB + 12345));
      expect(held.every((b) => b.byteLength === MiB)).toBe(true);
    } finally {
      for (const b of held) releaseMapped(b);
    }
    expect(mappedStats()?.uncounted).toBe(0);
    expect(mappingsOf(file)).toBe(0);
  });

  it('once live uncounted mappings span the machine\'s memory, new ones are counted', () => {
    const { uncountedLimit, uncountedBytesLimit } = mappedStats()!;
    expect(uncountedBytesLimit).toBeGreaterThan(0);
    // a sparse file mapped lazily: address space only, no page read or held; sized so that the bytes limit comes
    // first, at half the count limit
    const size = Math.max(64, Math.ceil(uncountedBytesLimit / (uncountedLimit / 2) / MiB)) * MiB;
    const sparse = path.join(dir, 'sparse.bin');
    fs.writeFileSync(sparse, new Uint8Array(0));
    fs.truncateSync(sparse, size);
    const sfd = fs.openSync(sparse, 'r');
    const held: ArrayBuffer[] = [];
    try {
      const fit = Math.floor(uncountedBytesLimit / size);
      for (let i = 0; i < fit; i++) held.push(mapRange(sfd, 0, size)!.buffer as ArrayBuffer);
      expect(mappedStats()).toMatchObject({ uncounted: fit, uncountedBytes: fit * size });
      const external0 = process.memoryUsage().external;
      held.push(mapRange(sfd, 0, size)!.buffer as ArrayBuffer);
      const grew = process.memoryUsage().external - external0;
      expect(grew, 'the mapping that would pass the machine\'s memory is counted').toBeGreaterThanOrEqual(size);
      expect(grew).toBeLessThan(size + MiB);
      expect(mappedStats()?.uncounted).toBe(fit);
    } finally {
      for (const b of held) releaseMapped(b);
      fs.closeSync(sfd);
    }
    expect(mappedStats()).toMatchObject({ uncounted: 0, uncountedBytes: 0 });
  });
});

/** the byte the test file holds at `i` */
function want(i: number): number {
  return (i * 31 + (i >> 12)) & 255;
}
