/**
 * The weights check's fused native compare (reference-cpu/native/check_f16.cc) against the TypeScript loop
 * it replaced, written out here element by element over dequantLinearTs (the TS exact rule) and
 * f32ToF16Bits: same first bad index, max_abs, non-finite count and block flags, on device weights that
 * are right, and wrong in seeded places (bit flips, Inf, NaN, ±0 swaps), for MXFP4 and both FP8 scale kinds.
 * The native FP16 rounding is also held to f32ToF16Bits bit for bit.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { f16ToF32, f32ToF16Bits, NF4_VALUES, roundToF16 } from '../../harness/formats/dtypes.js';
import type { LinearWeight } from '../../harness/formats/linear.js';
import { Rng } from '../../harness/rng.js';
import { residentKiB } from '../../harness/test/smaps.js';
import { sameF16 } from '../../harness/weights/decode.js';
import { exactOperands, kindOf } from '../dequant.js';
import { dequantLinearTs } from '../dequant_ts.js';
import { checkExactVsF16, checkExactVsF16Rows, checkExactVsF16RowsReading, type ExactVsF16, fp8PlanarGroups, nanCodeCount, nonFiniteAt, referenceNativeInfo, roundF16Native, roundF16Values, type RowsReadingJob, setReferenceSimd, startRowsReading, waitRowsReading } from '../native.js';
import { FAULT_CODES, loadDeviceNative } from '../../device-hip/binding.js';
import { loadAddon } from '../../harness/io/addon.js';
import { LinearCache } from '../../device-hip/linear.js';

/** Every kernel level (all give the same bits): the widest, AVX-512 without its VBMI kernels (CPUs such as Cascade
 * Lake take those), AVX2 and scalar; a level the CPU lacks runs as the best it has. */
const LEVELS = ['auto', 'avx512', 'avx2', 'scalar'] as const;

function tsCompare(lw: LinearWeight, dev: Uint16Array): Omit<ExactVsF16, 'firstReferenceNonFinite'> {
  const ref = dequantLinearTs(lw);
  const [bo, bi] = lw.block;
  // bitsandbytes: blocks of bi consecutive elements of the flattened weight
  const flat = lw.format === 'bnb4';
  const C = Math.ceil(lw.in / bi), blocks = flat ? Math.ceil((lw.out * lw.in) / bi) : Math.ceil(lw.out / bo) * C;
  const bad = new Uint8Array(blocks), over = new Uint8Array(blocks), under = new Uint8Array(blocks);
  let firstBad = -1, maxAbs = 0, nonFinite = 0;
  for (let k = 0; k < ref.length; k++) {
    const d = dev[k];
    if (f16ToF32(d) === ref[k]) continue;
    const o = Math.floor(k / lw.in);
    const blk = flat ? Math.floor(k / bi) : Math.floor(o / bo) * C + Math.floor((k - o * lw.in) / bi);
    const h = f32ToF16Bits(ref[k]);
    if ((h & 0x7c00) === 0x7c00) over[blk] = 1;
    else if (ref[k] !== 0 && (h & 0x7fff) === 0) under[blk] = 1;
    if ((d & 0x7c00) === 0x7c00) nonFinite++;
    if (sameF16(h, d)) continue;
    bad[blk] = 1;
    if (firstBad < 0) firstBad = k;
    const e = Math.abs(f16ToF32(d) - f16ToF32(h));
    maxAbs = Math.max(maxAbs, Number.isNaN(e) ? Infinity : e);
  }
  const ones = (a: Uint8Array) => a.reduce((n, x) => n + x, 0);
  return { firstBad, maxAbs, nonFinite, bad, over, under, badBlocks: ones(bad), overBlocks: ones(over), underBlocks: ones(under) };
}

// The block flags to compare: a native pass returns null for a flag it never set (it allocates none), the
// TypeScript loop an array of zeros; both read 'none'.
const list = (a: Uint8Array | null) => (a === null || !a.includes(1) ? 'none' : Array.from(a));
const flags = <T extends Pick<ExactVsF16, 'bad' | 'over' | 'under'>>(x: T) => ({ ...x, bad: list(x.bad), over: list(x.over), under: list(x.under) });

const bytes = (r: Rng, n: number, f = (b: number) => b) => Uint8Array.from({ length: n }, () => f(r.int(256)));

function weights(r: Rng, format: 'mxfp4' | 'fp8-e8m0' | 'fp8-f32', out: number, inn: number, block: [number, number] = [128, 128]): LinearWeight {
  if (format === 'mxfp4') {
    return {
      name: 'm.weight', format: 'mxfp4', out, in: inn, block: [1, 32],
      weight: { name: 'm.weight', dtype: 'U8', shape: [out, inn / 2], bytes: bytes(r, (out * inn) / 2) },
      // 100..150 spans FP16 underflow (tiny scales) and overflow (2^16 and up)
      scale: { name: 'm.scale', dtype: 'F8_E8M0', shape: [out, inn / 32], bytes: bytes(r, (out * inn) / 32, (b) => 100 + (b % 50)) },
    };
  }
  const [bo, bi] = block, R = Math.ceil(out / bo), C = Math.ceil(inn / bi);
  const codes = bytes(r, out * inn, (b) => ((b & 0x7f) === 0x7f ? b ^ 1 : b)); // no NaN codes
  const scale = format === 'fp8-e8m0'
    ? bytes(r, R * C, (b) => 105 + (b % 40))
    : new Uint8Array(Float32Array.from({ length: R * C }, () => Math.fround(r.uniform() * 2 ** (r.int(40) - 25))).buffer);
  return {
    name: 'f.weight', format: 'fp8-block', out, in: inn, block: [bo, bi],
    weight: { name: 'f.weight', dtype: 'F8_E4M3', shape: [out, inn], bytes: codes },
    scale: { name: 'f.scale', dtype: format === 'fp8-f32' ? 'F32' : 'F8_E8M0', shape: [R, C], bytes: scale },
  };
}

describe('checkF16 (native fused compare)', () => {
  // 1024×256 = 2^18 elements: the size where the native pass goes multi-threaded.
  const CASES = [['mxfp4', 300, 256], ['mxfp4', 1024, 256], ['fp8-e8m0', 300, 200], ['fp8-f32', 260, 384], ['fp8-f32', 1024, 256]] as const;
  CASES.forEach(([format, out, inn], c) => {
    it(`check_f16(${format},out=${out},in=${inn}): as the TypeScript loop, for a right and a wrong device`, () => {
      const r = new Rng(900 + c);
      const lw = weights(r, format, out, inn);
      const right = Uint16Array.from(dequantLinearTs(lw), (v) => f32ToF16Bits(v));
      const wrong = right.slice();
      for (let t = 0; t < 40; t++) {
        const k = r.int(wrong.length);
        wrong[k] = [wrong[k] ^ (1 << r.int(16)), 0x7c00, 0x7e01, wrong[k] ^ 0x8000, 0][t % 5];
      }
      for (const [what, dev] of [['right', right], ['wrong', wrong]] as const) {
        const got = checkExactVsF16(kindOf(lw), lw.weight.bytes, lw.scale!.bytes, out, inn, lw.block[0], lw.block[1], dev);
        const want = tsCompare(lw, dev);
        expect(got.firstReferenceNonFinite, what).toBe(-1);
        expect({ ...flags(got), firstReferenceNonFinite: undefined }, what).toEqual({ ...flags(want), firstReferenceNonFinite: undefined });
        if (what === 'right') expect(got.firstBad).toBe(-1);
        else expect(got.firstBad).toBeGreaterThanOrEqual(0);
      }
      const clean = tsCompare(lw, right);
      expect(clean.over!.some((x) => x === 1) || clean.under!.some((x) => x === 1), 'the data reaches FP16 overflow or underflow').toBe(true);
    });
  });

  it('check_f16 on bitsandbytes (flat blocks straddling rows, an odd count, threaded past 2^18): as the TypeScript loop at every SIMD level, for a right and a wrong device', () => {
    const r = new Rng(950);
    // odd widths (rows start at odd elements, blocks straddle rows) and whole blocks per row (the 32- and 16-wide steps)
    for (const [out, inn, bs] of [[37, 29, 64], [700, 401, 256], [48, 256, 64], [9, 96, 32]] as const) {
      const n = out * inn, nb = Math.ceil(n / bs);
      // absmax from 2^-30 (values underflow FP16) to 2^19 (they overflow it); as trained weights have them (0.005 …
      // 0.1: every value ±0 or normal, the AVX-512 table's shorter rounding); and at FP16's edges, where a block's
      // ±1.0 · absmax is its largest finite value, rounds to Inf from inside the normal range (65520, 65535) or
      // lies past it (65536), or its smallest non-zero value (1/15 · absmax) straddles the smallest normal 2^-14
      const edges = [65504, 65519, 65520, 65535, 65536, 2 ** -14 * 15, Math.fround(2 ** -14 * 15 * (1 - 2 ** -20)), 2 ** -14 * 15 * 1.5];
      const absmax = Float32Array.from({ length: nb }, (_, b) => [
        () => Math.fround(r.uniform() * 2 ** (r.int(50) - 30)),
        () => Math.fround(0.005 + r.uniform() * 0.095),
        () => edges[b % edges.length],
      ][b % 3]());
      const lw: LinearWeight = {
        out, in: inn, name: 'b.weight', format: 'bnb4', encoding: 'bnb-nf4', block: [1, bs], global: null,
        weight: { name: 'b.weight', dtype: 'U8', shape: [Math.ceil(n / 2), 1], bytes: bytes(r, Math.ceil(n / 2)) },
        scale: { name: 'b.weight.absmax', dtype: 'F32', shape: [nb], bytes: new Uint8Array(absmax.buffer) },
        bnb: { quantType: 'nf4', blocksize: bs, quantMap: Float32Array.from({ length: 16 }, (_, c) => (c - 7.5) / 7.5), namedTable: false, dtype: 'bfloat16', nested: null },
      };
      const e = exactOperands(lw);
      const right = Uint16Array.from(dequantLinearTs(lw), (v) => f32ToF16Bits(v));
      const wrong = right.slice();
      for (let t = 0; t < 40; t++) {
        const k = r.int(wrong.length);
        wrong[k] = [wrong[k] ^ (1 << r.int(16)), 0x7c00, 0x7e01, wrong[k] ^ 0x8000, 0][t % 5];
      }
      // and the device emulation under each fault (a nibble order or code table the per-block test shared with a
      // wrong device would pass it)
      const cache = new LinearCache(loadDeviceNative());
      const faulty = Object.keys(FAULT_CODES).map((f) => [`fault ${f}`, cache.dequant(lw, f as keyof typeof FAULT_CODES)] as const);
      try {
        // the per-block tables (auto, avx2) and element by element (scalar)
        for (const level of LEVELS) {
          setReferenceSimd(level);
          for (const [what, dev] of [['right', right], ['wrong', wrong], ...faulty] as const) {
            const got = checkExactVsF16(e.kind, e.weight, e.scale, out, inn, e.bo, e.bi, dev);
            const want = tsCompare(lw, dev);
            expect({ ...flags(got), firstReferenceNonFinite: undefined }, `[${out}×${inn}] ${level} ${what}`).toEqual({ ...flags(want), firstReferenceNonFinite: undefined });
            if (what === 'right') expect(got.firstBad).toBe(-1);
            if (what === 'wrong' || what === 'fault nibble-swap') expect(got.firstBad, what).toBeGreaterThanOrEqual(0);
          }
        }
      } finally {
        setReferenceSimd('auto');
      }
      const clean = tsCompare(lw, right);
      if (n > 1 << 18) expect(clean.over!.includes(1) && clean.under!.includes(1), 'the data reaches FP16 overflow and underflow').toBe(true);
    }
  });

  it('check_f16 on bitsandbytes NF4, rows whose blocks sit inside and at the edges of FP16\'s normal range (the AVX-512 VBMI test of a row from its absmax alone): as the TypeScript loop at every SIMD level, for a right device, one that flushes FP16 subnormals to zero, and ones converting with the normal-range shortcut (for ±0 too or not)', () => {
    const r = new Rng(1270);
    const quantMap = Float32Array.from(NF4_VALUES);
    const nonZero = Array.from(quantMap, Math.abs).filter((q) => q !== 0);
    const qmin = Math.min(...nonZero), qmax = Math.max(...nonZero);
    // per row: every block at trained absmax but one, which is trained too or puts the least non-zero code's value
    // just under or at FP16's least normal (2^-14), or the largest one at, just under or past 65520 (rounding to Inf)
    const edge = [
      () => Math.fround(0.005 + r.uniform() * 0.095),
      () => Math.fround((2 ** -14 / qmin) * (1 - 2 ** -22)),
      () => Math.fround(2 ** -14 / qmin) * (1 + 2 ** -20),
      () => Math.fround((2 ** -15 / qmin) * (1 + r.uniform())),
      () => Math.fround((65520 / qmax) * (1 - 2 ** -22)),
      () => Math.fround(65520 / qmax),
      () => Math.fround(65504 / qmax),
      () => 0,
    ];
    // rows of 8 blocks (a vector of them with AVX2, a part of one with AVX-512) and of 21 (past either, with a tail):
    // row r's edge is edge[r % 8], at block ⌊r / 8⌋ of the row, so every edge sits at every block of a row
    for (const perRow of [8, 21]) {
      const bs = 64, out = edge.length * perRow, inn = perRow * bs, n = out * inn, nb = n / bs;
      const absmax = Float32Array.from({ length: nb }, (_, b) => {
        const row = Math.floor(b / perRow);
        return b % perRow === Math.floor(row / edge.length) ? edge[row % edge.length]() : Math.fround(0.005 + r.uniform() * 0.095);
      });
      const lw: LinearWeight = {
        out, in: inn, name: 'b.weight', format: 'bnb4', encoding: 'bnb-nf4', block: [1, bs], global: null,
        weight: { name: 'b.weight', dtype: 'U8', shape: [n / 2, 1], bytes: bytes(r, n / 2) },
        scale: { name: 'b.weight.absmax', dtype: 'F32', shape: [nb], bytes: new Uint8Array(absmax.buffer) },
        bnb: { quantType: 'nf4', blocksize: bs, quantMap, namedTable: true, dtype: 'bfloat16', nested: null },
      };
      const e = exactOperands(lw);
      const values = dequantLinearTs(lw);
      const right = Uint16Array.from(values, (v) => f32ToF16Bits(v));
      // a device flushing FP16 subnormals to ±0, and two converting values as if they were normal-range (the
      // exponent rebiased and the mantissa rounded to nearest, ties to even: the shortcut fast float-to-half code
      // takes), one for every value, one for all but ±0, so subnormal and overflowing values (and ±0) come out wrong
      const ftz = right.map((h) => ((h & 0x7c00) === 0 ? h & 0x8000 : h));
      const u32 = new Uint32Array(Float32Array.from(values).buffer);
      const short = (u: number) => ((((u & 0x7fffffff) + 0xfff + ((u >>> 13) & 1)) >>> 13) - (112 << 10)) & 0x7fff | ((u >>> 16) & 0x8000);
      const shortcut = Uint16Array.from(u32, short);
      const shortcutButZero = Uint16Array.from(u32, (u) => ((u & 0x7fffffff) === 0 ? u >>> 16 : short(u)));
      try {
        for (const level of LEVELS) {
          setReferenceSimd(level);
          for (const [what, dev] of [['right', right], ['flushing subnormals', ftz], ['normal-range shortcut', shortcut], ['normal-range shortcut but ±0', shortcutButZero]] as const) {
            const got = checkExactVsF16(e.kind, e.weight, e.scale, out, inn, e.bo, e.bi, dev);
            expect({ ...flags(got), firstReferenceNonFinite: undefined }, `${level} ${what}`).toEqual({ ...flags(tsCompare(lw, dev)), firstReferenceNonFinite: undefined });
            expect(got.firstBad >= 0, `${level} ${what}`).toBe(what !== 'right');
          }
        }
      } finally {
        setReferenceSimd('auto');
      }
      const clean = tsCompare(lw, right);
      expect(clean.over!.includes(1), 'blocks rounding to Inf').toBe(true);
      expect(ftz.some((h, k) => h !== right[k]), 'subnormal values present').toBe(true);
    }
  });

  it('check_f16 on NVFP4 (16-value blocks, E4M3 scales times a global one): as the TypeScript loop at every SIMD level, for the device emulation under every fault and for seeded wrong values', () => {
    const N = loadDeviceNative();
    const cache = new LinearCache(N);
    const r = new Rng(960);
    for (const [out, inn, g, op, tail] of [[40, 96, 1e-6, 'mul', false], [600, 448, 7264.9, 'div', false], [16, 64, 300, 'mul', false], [26, 1440, 300, 'mul', true]] as const) {
      // E4M3 bytes but NaN's; with the global scales, blocks that underflow FP16 (·1e-6), that overflow it (448 · 300),
      // exact ones and rounded ones (÷7264.9). `tail`: rows of 90 blocks whose scales keep every value finite (E4M3
      // 0.125 … 30, times 300) but one, ±128 (overflowing), at block 64 + row: past the 64 scale bytes one lossy-flag
      // lookup of the AVX-512 VBMI row test takes
      const gv = Math.fround(g);
      const C = inn / 16;
      const scales = tail ? Uint8Array.from({ length: out * C }, (_, k) => (k % C === 64 + Math.floor(k / C) ? 0x70 | (r.int(2) << 7) : 0x20 + r.int(0x40) | (r.int(2) << 7))) : bytes(r, (out * inn) / 16, (b) => ((b & 0x7f) === 0x7f ? b ^ 1 : b));
      const lw: LinearWeight = {
        out, in: inn, name: 'n.weight', format: 'nvfp4', encoding: 'modelopt-nvfp4', block: [1, 16],
        weight: { name: 'n.weight', dtype: 'U8', shape: [out, inn / 2], bytes: bytes(r, (out * inn) / 2) },
        scale: { name: 'n.weight_scale', dtype: 'F8_E4M3', shape: [out, inn / 16], bytes: scales },
        global: { tensor: { name: 'n.weight_scale_2', dtype: 'F32', shape: [], bytes: new Uint8Array(new Float32Array([gv]).buffer) }, value: gv, op },
      };
      const e = exactOperands(lw);
      const devices: Array<[string, Uint16Array]> = [null, ...Object.keys(FAULT_CODES)].map((f) => [`fault ${f}`, cache.dequant(lw, f as keyof typeof FAULT_CODES | null)]);
      const wrong = devices[0][1].slice();
      for (let t = 0; t < 40; t++) {
        const k = r.int(wrong.length);
        wrong[k] = [wrong[k] ^ (1 << r.int(16)), 0x7c00, 0x7e01, wrong[k] ^ 0x8000, 0][t % 5];
      }
      devices.push(['seeded wrong values', wrong]);
      try {
        for (const level of LEVELS) {
          setReferenceSimd(level);
          for (const [what, dev] of devices) {
            const got = checkExactVsF16(e.kind, e.weight, e.scale, out, inn, e.bo, e.bi, dev);
            expect({ ...flags(got), firstReferenceNonFinite: undefined }, `[${out}×${inn}] ${level} ${what}`).toEqual({ ...flags(tsCompare(lw, dev)), firstReferenceNonFinite: undefined });
            if (what === 'fault null') expect(got.firstBad, `[${out}×${inn}] ${level}: the right device passes`).toBe(-1);
          }
        }
      } finally {
        setReferenceSimd('auto');
      }
      const clean = tsCompare(lw, devices[0][1]);
      if (g === 1e-6) expect(clean.under!.includes(1), 'the data reaches FP16 underflow').toBe(true);
      if (g === 300) expect(clean.over!.includes(1), 'the data reaches FP16 overflow').toBe(true);
      if (tail) expect(clean.overBlocks, 'one overflowing block a row, past block 64').toBe(out);
    }
  });

  it('check_f16 on e2m1-lut with every one of the 256 E4M3 bytes as a block scale (NaN bytes, zero, overflowing and underflowing ones): the per-byte tables give the element-by-element result at every level', () => {
    const r = new Rng(961);
    const out = 64, inn = 256, blocks = (out * inn) / 16; // 1,024 blocks: every byte four times
    const gv = Math.fround(60);
    const lw: LinearWeight = {
      out, in: inn, name: 'n.weight', format: 'nvfp4', encoding: 'modelopt-nvfp4', block: [1, 16],
      weight: { name: 'n.weight', dtype: 'U8', shape: [out, inn / 2], bytes: bytes(r, (out * inn) / 2) },
      scale: { name: 'n.weight_scale', dtype: 'F8_E4M3', shape: [out, inn / 16], bytes: Uint8Array.from({ length: blocks }, (_, b) => (b * 37) & 255) },
      global: { tensor: { name: 'n.weight_scale_2', dtype: 'F32', shape: [], bytes: new Uint8Array(new Float32Array([gv]).buffer) }, value: gv, op: 'mul' },
    };
    const e = exactOperands(lw);
    expect(e.kind).toBe('e2m1-lut');
    expect(e.scale.length).toBe(4 * 256 + blocks);
    const right = Uint16Array.from(dequantLinearTs(lw), (v) => f32ToF16Bits(v));
    const wrong = right.slice();
    for (let t = 0; t < 40; t++) wrong[r.int(wrong.length)] ^= 1 << r.int(16);
    try {
      for (const dev of [right, wrong]) {
        const got: unknown[] = [];
        for (const level of LEVELS) {
          setReferenceSimd(level);
          got.push(flags(checkExactVsF16(e.kind, e.weight, e.scale, out, inn, 1, 16, dev)));
        }
        expect(got[0]).toEqual(got[2]);
        expect(got[1]).toEqual(got[2]);
        // the NaN bytes 0x7F and 0xFF make NaN references: bad input, found at the first block holding one
        expect((got[2] as ExactVsF16).firstReferenceNonFinite).toBe(16 * Array.from(lw.scale!.bytes).findIndex((b) => (b & 0x7f) === 0x7f));
      }
    } finally {
      setReferenceSimd('auto');
    }
    // a row of 24 values is one block and a half of 16: refused by name, as dequantExact refuses it, never read past its row
    expect(() => checkExactVsF16('e2m1-lut', e.weight, e.scale, 2, 24, 1, 16, new Uint16Array(48))).toThrow(/e2m1-lut needs an even block dividing in/);
    expect(() => checkExactVsF16('e2m1-lut', e.weight, e.scale, 2, 24, 1, 3, new Uint16Array(48))).toThrow(/e2m1-lut needs an even block dividing in/);
  });

  it('roundF16 and roundF16Values: the native FP16 rounding is f32ToF16Bits (and roundToF16) on every f16 midpoint, its neighbours and random bits, at every SIMD level', () => {
    const xs: number[] = [];
    const dv = new DataView(new ArrayBuffer(4));
    for (let h = 0; h < 0x7c00; h++) {
      const a = f16ToF32(h), b = f16ToF32(h + 1), mid = (a + b) / 2; // exact in float32
      for (const v of [mid, Math.fround(mid) + 0]) xs.push(v, -v);
      dv.setFloat32(0, mid);
      for (const d of [-1, 1]) {
        dv.setUint32(0, dv.getUint32(0) + d);
        xs.push(dv.getFloat32(0));
        dv.setFloat32(0, mid);
      }
    }
    const r = new Rng(4);
    for (let t = 0; t < 100000; t++) {
      dv.setUint32(0, r.int(2 ** 32));
      xs.push(dv.getFloat32(0));
    }
    // runs of 16 whose lanes are all ±0 or normal-range, around ties, the smallest normal and the largest finite
    // value (AVX-512's shorter form), and the same runs with one lane subnormal, overflowing or NaN (its full rule)
    for (let t = 0; t < 20000; t++) {
      const run: number[] = [];
      for (let k = 0; k < 16; k++) {
        const pick = r.int(6);
        if (pick === 0) run.push(r.int(2) ? 0 : -0);
        else {
          const e = pick === 1 ? 113 : pick === 2 ? 142 : 113 + r.int(30);
          const m = pick === 3 ? (r.int(1024) << 13) | 0x1000 | (r.int(2) ? 0 : r.int(0x1000)) : r.int(1 << 23);
          dv.setUint32(0, (r.int(2) << 31) | (e << 23) | m);
          run.push(dv.getFloat32(0));
        }
      }
      xs.push(...run);
      if (t % 4 === 0) run[r.int(16)] = [2 ** -20, 70000, NaN, 2 ** -140][t % 16 >> 2];
      xs.push(...run);
    }
    const x = Float32Array.from(xs);
    // every level: scalar, and 16 lanes at once with AVX2 or AVX-512 (the bitsandbytes check's rounding); and the
    // values FP16 storage gives (roundF16Values, the floor pass's), bit for bit the TypeScript roundToF16's
    const want = new Uint32Array(Float32Array.from(x, (v) => roundToF16(v)).buffer);
    try {
      for (const level of LEVELS) {
        setReferenceSimd(level);
        const got = roundF16Native(x);
        for (let i = 0; i < x.length; i++) if (got[i] !== f32ToF16Bits(x[i]) && !(Number.isNaN(x[i]) && (got[i] & 0x7e00) === 0x7e00)) expect.fail(`${level} ${x[i]}: 0x${got[i].toString(16)} vs 0x${f32ToF16Bits(x[i]).toString(16)}`);
        // odd lengths: the 16-lane body and the scalar tail
        for (const n of [x.length, x.length - 7, 15]) {
          const v = new Uint32Array(roundF16Values(x.subarray(0, n)).buffer);
          for (let i = 0; i < n; i++) if (v[i] !== want[i]) expect.fail(`roundF16Values ${level} ${x[i]}: 0x${v[i].toString(16)} vs 0x${want[i].toString(16)}`);
        }
      }
    } finally {
      setReferenceSimd('auto');
    }
  });
});

// (the form is built on CPUs with AVX2 only: the level its lookups run at)
describe.skipIf(referenceNativeInfo().simd === 'scalar')('the FP8 tables\' AVX2 form (Fp8Planes: 16-code groups looked up, the rest a run by exponent)', () => {
  // From the formats alone: under E8M0 scale 2^k, E4M3 code (e, m), e ≥ 1, is 2^(e−7)·(1 + m/8)·2^k, an FP16 normal
  // when e − 7 + k ≥ −14 and finite while 448·2^k ≤ 65504 (k ≤ 7). Every code from the first FP16 normal on then has
  // the bits of the code one exponent down plus 1 << 10, so only the groups of 16 codes (two exponents) holding
  // subnormal results are looked up: ⌈(−7 − k)/2⌉ of them below k = −8. At k = −8 the E4M3 subnormals m·2^-9 land
  // on FP16's subnormals m·2^-17 = (m << 7)·2^-24, the same run: none. Above, the E4M3 subnormals are FP16 normals
  // off the run: one group. Past k = 7 the top codes overflow to Inf: all 8 groups looked up, no run.
  const expected = (k: number) => (k > 7 ? 8 : k === -8 ? 0 : k > -8 ? 1 : Math.min(8, Math.ceil((-7 - k) / 2)));
  it('E8M0: every scale byte but NaN\'s takes the groups the formats give (the fused tests\' scales 105 … 144 cover 0 … 8)', () => {
    const b = Uint8Array.from({ length: 255 }, (_, i) => i);
    expect(Array.from(fp8PlanarGroups('fp8-e8m0', b))).toEqual(Array.from(b, (x) => expected(x - 127)));
  });
  it('float32 scales: a power of two as its E8M0 byte; scales as training leaves them (2^-13 … 2^-1) look up at most 3 groups; a scale that overflows FP16 all 8', () => {
    const r = new Rng(91);
    const pow = Float32Array.from({ length: 40 }, (_, i) => 2 ** (i - 30));
    expect(Array.from(fp8PlanarGroups('fp8-f32', new Uint8Array(pow.buffer)))).toEqual(Array.from(pow, (_, i) => expected(i - 30)));
    const trained = Float32Array.from({ length: 500 }, () => Math.fround((1 + r.uniform()) * 2 ** -(2 + r.int(12))));
    const g = Array.from(fp8PlanarGroups('fp8-f32', new Uint8Array(trained.buffer)));
    expect(Math.max(...g), 'no table left to value-by-value lookups').toBeLessThanOrEqual(3);
    expect(Math.min(...g)).toBeGreaterThanOrEqual(1);
    expect(Array.from(fp8PlanarGroups('fp8-f32', new Uint8Array(new Float32Array([448, 65504 / 448, -1e-4]).buffer)))).toEqual([8, 1, 4]);
    expect(() => fp8PlanarGroups('fp8-f32', new Uint8Array(6))).toThrow(/float32 scales take 4 bytes each/);
  });
});

describe('nonFiniteAt (the first NaN/Inf among stored floats, natively)', () => {
  it('finds the index Float32Array/bit-pattern decoding finds, for BF16, F16 and F32, at every length and position', () => {
    const r = new Rng(78);
    // an independent decoding: BF16 is the high half of a float32; F16 by its own exponent field
    const bf16Finite = (h: number) => Number.isFinite(new Float32Array(new Uint32Array([h << 16]).buffer)[0]);
    const f16Finite = (h: number) => (h & 0x7c00) !== 0x7c00;
    for (const n of [0, 1, 2, 1023, 1024, 1025, 5000]) {
      for (const at of [-1, 0, n >> 1, n - 1]) {
        if (n === 0 && at !== -1) continue;
        const h = Uint16Array.from({ length: n }, () => r.int(0x10000) & ~0x4000); // exponent never all ones...
        const f = Float32Array.from({ length: n }, () => (r.uniform() - 0.5) * 1e30);
        if (at >= 0) {
          h[at] = 0x7f80 | (r.int(2) << 15) | r.int(0x80);
          f[at] = [NaN, Infinity, -Infinity][r.int(3)];
        }
        const b16 = new Uint8Array(h.buffer);
        expect(nonFiniteAt(b16, 'bf16'), `bf16 n ${n} at ${at}`).toBe(Array.from(h).findIndex((x) => !bf16Finite(x)));
        expect(nonFiniteAt(b16, 'f16'), `f16 n ${n} at ${at}`).toBe(Array.from(h).findIndex((x) => !f16Finite(x)));
        expect(nonFiniteAt(new Uint8Array(f.buffer), 'f32'), `f32 n ${n} at ${at}`).toBe(Array.from(f).findIndex((x) => !Number.isFinite(x)));
      }
    }
    // ...except where planted: 0x7f80 is BF16 +Inf, 0x7c00 F16 +Inf, 0x7e00 a NaN in both
    expect(nonFiniteAt(new Uint8Array(new Uint16Array([0x3f80, 0x7c00, 0x7f80]).buffer), 'bf16')).toBe(2);
    expect(nonFiniteAt(new Uint8Array(new Uint16Array([0x3c00, 0x7c00, 0x7f80]).buffer), 'f16')).toBe(1);
    expect(() => nonFiniteAt(new Uint8Array(3), 'bf16')).toThrow(/multiple of 2/);
  });
});

describe('nanCodes (NaN encodings counted natively)', () => {
  it('counts E8M0 0xFF, E4M3 S.1111.111 and float32 NaNs as a byte-by-byte count does, at every length and SIMD level', () => {
    const r = new Rng(77);
    for (const n of [0, 1, 31, 32, 33, 63, 64, 65, 1000, 4096 + 7]) {
      // bytes dense in NaN codes and their neighbours
      const b = Uint8Array.from({ length: n * 4 }, () => [0xff, 0x7f, 0xfe, 0x7e, 0x80, r.int(256)][r.int(6)]);
      const e8m0 = b.filter((x) => x === 0xff).length;
      const e4m3 = b.filter((x) => (x & 0x7f) === 0x7f).length;
      const f = new Float32Array(b.buffer);
      const f32 = f.filter((x) => Number.isNaN(x)).length;
      for (const level of LEVELS) {
        setReferenceSimd(level);
        expect([nanCodeCount(b, 'e8m0'), nanCodeCount(b, 'e4m3'), nanCodeCount(b, 'f32')], `n ${n}, ${level}`).toEqual([e8m0, e4m3, f32]);
      }
      setReferenceSimd('auto');
    }
  });
});

describe('checkF16Rows (the fused pass: the device emulation\'s rows pulled from its row source)', () => {
  const N = loadDeviceNative();
  const cache = new LinearCache(N);
  const fusedDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-fused-'));
  afterAll(() => fs.rmSync(fusedDir, { recursive: true, force: true }));
  /** the kinds the pass reads itself (fill): rows of whole bytes */
  const READS = new Set(['mxfp4', 'fp8-e8m0', 'fp8-f32', 'e2m1-lut', 'table4-flat-f32']);
  /**
   * The fused pass over lw's row source, fast and element by element, at every level of the reference and of the
   * device, equals checkF16 over the device's whole tensor, under no fault and under each fault; the correct device
   * passes. → how many faults it caught.
   */
  function fusedIsWhole(lw: LinearWeight): number {
    const e = exactOperands(lw);
    let caught = 0;
    // the weight's bytes also in a file, at an odd offset: the pass that reads them itself (fill) must agree too, with
    // a buffer of garbage under its row source (the bytes it decodes are the ones it read, never the buffer's)
    const file = path.join(fusedDir, `${lw.name}-${lw.out}x${lw.in}`);
    fs.writeFileSync(file, Buffer.concat([Buffer.alloc(777, 0x5a), lw.weight.bytes]));
    const fill = { fd: fs.openSync(file, 'r'), offset: 777 };
    const garbage = Uint8Array.from(lw.weight.bytes, (b) => b ^ 0xa5);
    try {
      for (const fault of [null, ...Object.keys(FAULT_CODES)] as const) {
        const f = fault as keyof typeof FAULT_CODES | null;
        const want = flags(checkExactVsF16(e.kind, e.weight, e.scale, lw.out, lw.in, e.bo, e.bi, cache.dequant(lw, f)));
        for (const devLevel of LEVELS) {
          N.setSimd(devLevel);
          const src = cache.rowSource(lw, f);
          expect(src).not.toBeNull();
          for (const level of LEVELS) {
            setReferenceSimd(level);
            for (const fast of [true, false]) {
              const got = flags(checkExactVsF16Rows(e.kind, e.weight, e.scale, lw.out, lw.in, e.bo, e.bi, src, fast));
              expect(got, `[${lw.out}×${lw.in}] ${fault ?? 'no fault'}, device ${devLevel}, reference ${level}, fast ${fast}`).toEqual(want);
            }
            if (!READS.has(e.kind)) continue;
            const read = checkExactVsF16RowsReading(e.kind, garbage, e.scale, lw.out, lw.in, e.bo, e.bi, cache.rowSource({ ...lw, weight: { ...lw.weight, bytes: garbage } }, f), fill);
            expect('readError' in read ? read : read.weightNanCodes).toBe(0);
            if ('readError' in read) continue;
            const { weightNanCodes: _, mappedBytes: __, ...rest } = read;
            expect(flags(rest), `[${lw.out}×${lw.in}] read by the pass, ${fault ?? 'no fault'}, device ${devLevel}, reference ${level}`).toEqual(want);
          }
        }
        if (fault === null) expect(want.firstBad, 'the correct device matches').toBe(-1);
        else if (want.firstBad >= 0) caught++;
      }
    } finally {
      N.setSimd('auto');
      setReferenceSimd('auto');
      fs.closeSync(fill.fd);
    }
    return caught;
  }
  // MXFP4 with every E8M0 byte but NaN's (0 … 254: FP16 underflow, float32 subnormals, overflow, and 6·2^127,
  // which leaves float32), and the usual cases; each with the correct device and each injected fault.
  const full = (r: Rng, out: number, inn: number): LinearWeight => {
    const lw = weights(r, 'mxfp4', out, inn);
    return { ...lw, scale: { ...lw.scale!, bytes: Uint8Array.from(lw.scale!.bytes, (_, i) => i % 255) } };
  };
  // MXFP4 rows of 8 blocks by the row's place in 6: scales as training leaves them, where every reference value's low
  // FP16 byte is zero (both sides' AVX2 rows then look up high bytes only), the edges of that run (112, 140), one
  // block just past them (111: 2^-17 has a low byte; 141: Inf, lossy), and 100 … 149 anywhere.
  const edges = (r: Rng, out: number, inn: number): LinearWeight => {
    const lw = weights(r, 'mxfp4', out, inn);
    const C = inn / 32, pick = (xs: number[]) => xs[r.int(xs.length)];
    const s = Uint8Array.from(lw.scale!.bytes, (b, k) => {
      const row = Math.floor(k / C) % 6, last = k % C === C - 1;
      if (row < 2) return 118 + (b % 16);
      if (row === 2) return pick([112, 140]);
      if (row === 3) return last ? 111 : pick([112, 140]);
      if (row === 4) return last ? 141 : pick([112, 140]);
      return b;
    });
    return { ...lw, scale: { ...lw.scale!, bytes: s } };
  };
  const CASES = [['mxfp4 all scales', 96, 512], ['mxfp4 edge scales', 120, 256], ['mxfp4', 1024, 256], ['mxfp4', 40, 96], ['fp8-e8m0', 300, 200], ['fp8-f32', 1024, 256], ['fp8-e8m0', 1030, 256, [20, 96]]] as const;
  CASES.forEach(([what, out, inn, block], c) => {
    it(`${what} [${out}×${inn}]${block ? ` in [${block.join('×')}] blocks` : ''}: the fused pass (fast and element by element) is checkF16 over the device's whole tensor, for the right device and every fault`, () => {
      const r = new Rng(1200 + c);
      const lw = what === 'mxfp4 all scales' ? full(r, out, inn) : what === 'mxfp4 edge scales' ? edges(r, out, inn) : weights(r, what, out, inn, block ? [...block] : undefined);
      let caught = 0;
      for (const fault of [null, ...Object.keys(FAULT_CODES)] as const) {
        const f = fault as keyof typeof FAULT_CODES | null;
        const dev = cache.dequant(lw, f);
        const want = flags(checkExactVsF16(kindOf(lw), lw.weight.bytes, lw.scale!.bytes, out, inn, lw.block[0], lw.block[1], dev));
        const src = cache.rowSource(lw, f);
        expect(src).not.toBeNull();
        // every SIMD level of the reference's fast test (AVX-512BW and AVX2 whole-row tests, the per-block one, scalar)
        for (const level of LEVELS) {
          setReferenceSimd(level);
          for (const fast of [true, false]) {
            const got = flags(checkExactVsF16Rows(kindOf(lw), lw.weight.bytes, lw.scale!.bytes, out, inn, lw.block[0], lw.block[1], src, fast));
            expect(got, `${fault ?? 'no fault'}, ${level}, fast ${fast}`).toEqual(want);
          }
        }
        setReferenceSimd('auto');
        if (fault === null) expect(want.firstBad, 'the correct device matches').toBe(-1);
        else if (want.firstBad >= 0) caught++;
      }
      expect(caught, 'faults that apply to the format are caught').toBeGreaterThanOrEqual(what.startsWith('mxfp4') ? 6 : 3);
      if (what === 'mxfp4 all scales') {
        const w = flags(checkExactVsF16(kindOf(lw), lw.weight.bytes, lw.scale!.bytes, out, inn, 1, 32, cache.dequant(lw, null)));
        expect(w.firstReferenceNonFinite, '6·2^127 leaves float32').toBeGreaterThanOrEqual(0);
        expect(w.over !== 'none' && w.under !== 'none').toBe(true);
        expect([w.overBlocks, w.underBlocks]).toEqual([(w.over as number[]).filter((x) => x === 1).length, (w.under as number[]).filter((x) => x === 1).length]);
      }
    });
  });

  it('nvfp4 [600×448] (every E4M3 scale byte but NaN\'s, a global scale that overflows FP16): the fused pass over the device\'s NVFP4 row source (fast and element by element, every level on both sides) is checkF16 over its whole tensor, for the right device and every fault', () => {
    const r = new Rng(1250);
    const out = 600, inn = 448, g = Math.fround(300);
    const lw: LinearWeight = {
      out, in: inn, name: 'n.weight', format: 'nvfp4', encoding: 'modelopt-nvfp4', block: [1, 16],
      weight: { name: 'n.weight', dtype: 'U8', shape: [out, inn / 2], bytes: bytes(r, (out * inn) / 2) },
      scale: { name: 'n.weight_scale', dtype: 'F8_E4M3', shape: [out, inn / 16], bytes: Uint8Array.from({ length: (out * inn) / 16 }, (_, i) => ((i % 254) & 0x7f) === 0x7f ? 0 : i % 254) },
      global: { tensor: { name: 'n.weight_scale_2', dtype: 'F32', shape: [], bytes: new Uint8Array(new Float32Array([g]).buffer) }, value: g, op: 'mul' },
    };
    const e = exactOperands(lw);
    const caught = fusedIsWhole(lw);
    expect(caught, 'faults that apply to NVFP4 are caught').toBeGreaterThanOrEqual(5);
    const clean = flags(checkExactVsF16(e.kind, e.weight, e.scale, out, inn, e.bo, e.bi, cache.dequant(lw, null)));
    expect(clean.over !== 'none', 'FP16 overflow blocks present (448 · 6 · 300)').toBe(true);
  });

  it('bitsandbytes, rows of whole blocks ([96×256] NF4 in 64s with double quant, [40×128] in 32s, absmax from FP16 underflow to overflow): the fused pass over the device\'s bitsandbytes row source (fast and element by element, every level on both sides) is checkF16 over its whole tensor, for the right device and every fault; blocks that straddle rows have no row source and are refused by the fused pass', () => {
    const r = new Rng(1260);
    let anySource: unknown = null;
    for (const [out, inn, bs, dq] of [[96, 256, 64, true], [40, 128, 32, false]] as const) {
      const n = out * inn, nb = n / bs;
      const nestedBs = 8;
      const lw: LinearWeight = {
        out, in: inn, name: 'b.weight', format: 'bnb4', encoding: 'bnb-nf4', block: [1, bs], global: null,
        weight: { name: 'b.weight', dtype: 'U8', shape: [n / 2, 1], bytes: bytes(r, n / 2) },
        scale: dq
          ? { name: 'b.weight.absmax', dtype: 'U8', shape: [nb], bytes: bytes(r, nb) }
          : { name: 'b.weight.absmax', dtype: 'F32', shape: [nb], bytes: new Uint8Array(Float32Array.from({ length: nb }, () => Math.fround(r.uniform() * 2 ** (r.int(50) - 30))).buffer) },
        bnb: {
          quantType: 'nf4', blocksize: bs, quantMap: Float32Array.from({ length: 16 }, (_, c) => (c - 7.5) / 7.5), namedTable: false, dtype: 'bfloat16',
          // nested absmax over 2^-30 .. 2^19 as well, so double-quantized blocks underflow and overflow FP16 too
          nested: dq ? { absmax: Float32Array.from({ length: Math.ceil(nb / nestedBs) }, () => Math.fround(r.uniform() * 2 ** (r.int(50) - 30))), quantMap: Float32Array.from({ length: 256 }, (_, c) => (c - 127.5) / 127.5), offset: 2 ** -31, blocksize: nestedBs } : null,
        },
      };
      const e = exactOperands(lw);
      anySource = cache.rowSource(lw, null);
      const caught = fusedIsWhole(lw);
      expect(caught, 'faults that apply to bitsandbytes are caught').toBeGreaterThanOrEqual(3);
      const clean = flags(checkExactVsF16(e.kind, e.weight, e.scale, out, inn, e.bo, e.bi, cache.dequant(lw, null)));
      expect(clean.over !== 'none' && clean.under !== 'none', 'FP16 overflow and underflow blocks present').toBe(true);
    }
    // [37×29] in 64s: blocks straddle rows
    const straddle: LinearWeight = {
      out: 37, in: 29, name: 's.weight', format: 'bnb4', encoding: 'bnb-nf4', block: [1, 64], global: null,
      weight: { name: 's.weight', dtype: 'U8', shape: [537, 1], bytes: bytes(r, 537) },
      scale: { name: 's.weight.absmax', dtype: 'F32', shape: [17], bytes: new Uint8Array(new Float32Array(17).fill(0.5).buffer) },
      bnb: { quantType: 'nf4', blocksize: 64, quantMap: Float32Array.from({ length: 16 }, (_, c) => (c - 7.5) / 7.5), namedTable: false, dtype: 'bfloat16', nested: null },
    };
    expect(cache.rowSource(straddle, null)).toBeNull();
    // refused by the fused pass before it looks at the source (any source: this one is another weight's)
    const s2 = exactOperands(straddle);
    expect(() => checkExactVsF16Rows(s2.kind, s2.weight, s2.scale, 37, 29, s2.bo, s2.bi, anySource)).toThrow(/bitsandbytes blocks straddle rows/);
    // flat blocks take no row block: a bo other than 1 is refused (the flags are counted flat), never written past
    const w64 = exactOperands({ ...straddle, out: 64, in: 64, weight: { ...straddle.weight, bytes: bytes(r, 2048) }, scale: { ...straddle.scale!, bytes: new Uint8Array(new Float32Array(64).fill(0.5).buffer) } });
    expect(() => checkExactVsF16Rows(w64.kind, w64.weight, w64.scale, 64, 64, 64, 64, anySource)).toThrow(/bo must be 1/);
    expect(() => checkExactVsF16(w64.kind, w64.weight, w64.scale, 64, 64, 64, 64, new Uint16Array(4096))).toThrow(/bo must be 1/);
  });

  // Device rows wrong in seeded places, as no fault of the emulation makes them: every single bit flip (a sign or
  // exponent bit changes only a value's high byte, a mantissa bit often only its low one), Inf, NaN, ±0. They come
  // from the row source of a plain f16 tensor (kind 3 hands its stored bits out as rows), so the fused pass meets
  // exactly these bits, and must flag what checkF16 over the same array flags, at every SIMD level.
  // Blocks of 20 × 96 rows: a block row ends inside the FP8 pass's 8-row steps, and a block inside a 64-code step.
  // MXFP4 rows of 3 blocks: the AVX-512 row test takes blocks two at a time, and a last odd one on its own.
  // And FP8 rows of 32 blocks at scales as training leaves them (2^-9 … 2^-1: none loses range), where a row whose
  // blocks all pass is done without a look at each block (AVX-512 VBMI); MXFP4 rows of 8 blocks at such scales,
  // which AVX2 compares on high bytes and the or of the low ones (a flipped low bit must still be caught).
  const WRONG = [['mxfp4', 1024, 256], ['mxfp4', 256, 96], ['mxfp4', 512, 256, undefined, 'trained'], ['fp8-e8m0', 300, 200], ['fp8-e8m0', 512, 512], ['fp8-f32', 1024, 256], ['fp8-e8m0', 1030, 256, [20, 96]], ['fp8-e8m0', 256, 4096, [128, 128], 'trained']] as const;
  WRONG.forEach(([format, out, inn, block, scales], c) => {
    it(`${format} [${out}×${inn}]${block ? ` in [${block.join('×')}] blocks` : ''}${scales ? ` at ${scales} scales` : ''}: the fused pass flags device rows wrong in one byte of a value (high or low) as checkF16 does`, () => {
      const r = new Rng(1300 + c);
      const lw = weights(r, format, out, inn, block ? [...block] : undefined);
      if (scales === 'trained') lw.scale = { ...lw.scale!, bytes: bytes(r, lw.scale!.bytes.length, (b) => 118 + (b % 9)) };
      const right = cache.dequant(lw, null);
      for (let t = 0; t < 20; t++) {
        const dev = right.slice();
        // a few rows, each with one kind of corruption, so a clean row's blocks pass between them
        for (let k = 0; k < 6; k++) {
          const i = r.int(dev.length);
          dev[i] = t < 16 ? dev[i] ^ (1 << t) : [0x7c00, 0x7e01, dev[i] ^ 0x8000, 0][t - 16];
        }
        const want = flags(checkExactVsF16(kindOf(lw), lw.weight.bytes, lw.scale!.bytes, out, inn, lw.block[0], lw.block[1], dev));
        const src = N.dequantRowSource!(3, new Uint8Array(dev.buffer, dev.byteOffset, dev.byteLength), null, false, out, inn, 1, 1, 0);
        for (const level of LEVELS) {
          setReferenceSimd(level);
          for (const fast of [true, false]) {
            const got = flags(checkExactVsF16Rows(kindOf(lw), lw.weight.bytes, lw.scale!.bytes, out, inn, lw.block[0], lw.block[1], src, fast));
            expect(got, `corruption ${t}, ${level}, fast ${fast}`).toEqual(want);
          }
        }
        setReferenceSimd('auto');
        if (t < 16 || t === 18) expect(want.firstBad, `corruption ${t} is caught`).toBeGreaterThanOrEqual(0);
      }
    });
  });

  // A device whose values keep their high bytes and lose their low ones (as one flushing the FP16 subnormals below
  // 2^-16 would, at scale 2^-16): at scale byte 111 that changes 2^-17 (0x0080 → 0) and 1.5 · 2^-16 (0x0180 → 0x0100),
  // at 112 nothing. Rows of 111 lie just below the run the AVX2 compare tests on high bytes: flagged at every level,
  // as checkF16 flags them (a run one byte too wide would pass them).
  it('mxfp4 rows at scale bytes 111 and 112 from a device that drops low bytes: the fused pass flags them as checkF16 does, at every level', () => {
    const lw = weights(new Rng(1400), 'mxfp4', 64, 256);
    lw.scale = { ...lw.scale!, bytes: Uint8Array.from(lw.scale!.bytes, (_, k) => (Math.floor(k / 8) % 2 === 0 ? 111 : 112)) };
    const dev = cache.dequant(lw, null).map((h) => h & 0xff00);
    const want = flags(checkExactVsF16(kindOf(lw), lw.weight.bytes, lw.scale.bytes, 64, 256, 1, 32, dev));
    expect(want.badBlocks, 'the rows at 111 differ in some block').toBeGreaterThan(0);
    const src = N.dequantRowSource!(3, new Uint8Array(dev.buffer, dev.byteOffset, dev.byteLength), null, false, 64, 256, 1, 1, 0);
    for (const level of LEVELS) {
      setReferenceSimd(level);
      for (const fast of [true, false]) expect(flags(checkExactVsF16Rows(kindOf(lw), lw.weight.bytes, lw.scale.bytes, 64, 256, 1, 32, src, fast)), `${level}, fast ${fast}`).toEqual(want);
    }
    setReferenceSimd('auto');
  });

  it('refuses what is not a row source, and a row source of another shape, by name', () => {
    const r = new Rng(7);
    const lw = weights(r, 'mxfp4', 64, 64);
    const args = [kindOf(lw), lw.weight.bytes, lw.scale!.bytes, 64, 64, 1, 32] as const;
    expect(() => checkExactVsF16Rows(...args, {})).toThrow(/source must be a device row source/);
    expect(() => checkExactVsF16Rows(...args, null)).toThrow(/source must be a device row source/);
    const other = weights(r, 'mxfp4', 32, 64);
    expect(() => checkExactVsF16Rows(...args, cache.rowSource(other, null))).toThrow(/row source is \[32×64\], the weight \[64×64\]/);
    // dequantRowSource checks dequantToF16's arguments with its messages
    expect(() => N.dequantRowSource!(0, lw.weight.bytes, lw.scale!.bytes, false, 64, 63, 1, 32, 0)).toThrow(/dequantToF16: mxfp4 weight \[64×63\]: in must be a multiple of 32/);
  });

  // The fused read: the weight's bytes come from a file, read by the threads as they compare (check_f16.cc).
  describe('reading the weight itself (fill)', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-fill-'));
    // the weight's bytes at an odd offset of a file, after 1,000,003 bytes of something else
    const lead = 1_000_003;
    const inFile = (name: string, bytes: Uint8Array, cut = 0): { fd: number; offset: number } => {
      const f = path.join(dir, name);
      const all = new Uint8Array(lead + bytes.length - cut);
      all.fill(0x5a, 0, lead);
      all.set(bytes.subarray(0, bytes.length - cut), lead);
      fs.writeFileSync(f, all);
      return { fd: fs.openSync(f, 'r'), offset: lead };
    };
    // rows not a multiple of the 64-row chunk, past 2^18 elements (both threads), and a small one-thread tensor
    const FILL = [['mxfp4', 1000, 512], ['mxfp4', 40, 96], ['fp8-e8m0', 1030, 256, [20, 96]], ['fp8-f32', 300, 1024]] as const;
    // and [260×16384] float32-scale FP8: a read's chunk holds 64 rows, half a block row, so two threads share a
    // block row's tables (each builds those the other has not taken, then waits for the rest)
    [...FILL, ['fp8-f32', 260, 16384] as const].forEach(([what, out, inn, block], c) => {
      it(`${what} [${out}×${inn}]: the result is checkF16Rows' on the read tensor, right device and every fault, and the buffer is left as it was`, () => {
        const r = new Rng(1500 + c);
        const lw = weights(r, what, out, inn, block ? [...block] : undefined);
        const fill = inFile(`w${c}`, lw.weight.bytes);
        try {
          for (const fault of [null, 'nibble-swap', 'scale-axis', 'e3m0-table'] as const) {
            const src = cache.rowSource(lw, fault as keyof typeof FAULT_CODES | null);
            const want = flags(checkExactVsF16Rows(kindOf(lw), lw.weight.bytes, lw.scale!.bytes, out, inn, lw.block[0], lw.block[1], src));
            // the buffer the row source was made on holds garbage, as a recycled buffer does: the pass reads the
            // file's bytes into per-thread chunks and hands them to the row source (rows_from), never to buf
            const buf = Uint8Array.from(lw.weight.bytes, (b) => b ^ 0xa5);
            const before = buf.slice();
            const src2 = cache.rowSource({ ...lw, weight: { ...lw.weight, bytes: buf } }, fault as keyof typeof FAULT_CODES | null);
            const got = checkExactVsF16RowsReading(kindOf(lw), buf, lw.scale!.bytes, out, inn, lw.block[0], lw.block[1], src2, fill);
            expect('readError' in got, `${fault}`).toBe(false);
            if ('readError' in got) continue;
            expect(got.weightNanCodes).toBe(0);
            const { weightNanCodes: _, mappedBytes: __, ...rest } = got;
            expect(flags(rest), `${fault ?? 'no fault'}`).toEqual(want);
            expect(Buffer.compare(buf, before), 'the buffer is left as it was').toBe(0);
            if (fault === null) expect(want.firstBad).toBe(-1);
          }
        } finally {
          fs.closeSync(fill.fd);
        }
      });
    });

    // NVFP4 and bitsandbytes weights larger than one read (1 MiB): later chunks start at a row other than 0, where
    // the reference finds a row's codes in its chunk (bitsandbytes' flat codes from that row's first element on)
    it('nvfp4 [2400×1024] and bitsandbytes [2048×1536] (NF4 in 64s, double quant) and [1400×1536] (FP4 in 48s), each read in more than one chunk: the result is checkF16\'s over the device\'s whole tensor, right device and every fault, every reference level', () => {
      const r = new Rng(1650);
      const nv: LinearWeight = {
        out: 2400, in: 1024, name: 'n.weight', format: 'nvfp4', encoding: 'modelopt-nvfp4', block: [1, 16],
        weight: { name: 'n.weight', dtype: 'U8', shape: [2400, 512], bytes: bytes(r, 2400 * 512) },
        // every E4M3 byte but NaN's: blocks that overflow and underflow FP16 in every chunk
        scale: { name: 'n.weight_scale', dtype: 'F8_E4M3', shape: [2400, 64], bytes: bytes(r, 2400 * 64, (b) => ((b & 0x7f) === 0x7f ? b ^ 1 : b)) },
        global: { tensor: { name: 'n.weight_scale_2', dtype: 'F32', shape: [], bytes: new Uint8Array(new Float32Array([Math.fround(300)]).buffer) }, value: Math.fround(300), op: 'mul' },
      };
      const n = 2048 * 1536, nb = n / 64;
      const bnb: LinearWeight = {
        out: 2048, in: 1536, name: 'b.weight', format: 'bnb4', encoding: 'bnb-nf4', block: [1, 64], global: null,
        weight: { name: 'b.weight', dtype: 'U8', shape: [n / 2, 1], bytes: bytes(r, n / 2) },
        scale: { name: 'b.weight.absmax', dtype: 'U8', shape: [nb], bytes: bytes(r, nb) },
        bnb: {
          quantType: 'nf4', blocksize: 64, quantMap: Float32Array.from({ length: 16 }, (_, c) => (c - 7.5) / 7.5), namedTable: false, dtype: 'bfloat16',
          nested: { absmax: Float32Array.from({ length: Math.ceil(nb / 256) }, () => Math.fround(r.uniform() * 2 ** (r.int(50) - 30))), quantMap: Float32Array.from({ length: 256 }, (_, c) => (c - 127.5) / 127.5), offset: 2 ** -31, blocksize: 256 },
        },
      };
      // blocks of 48 (F32 absmax): whole 32-value steps and a 16-value tail a block, from chunks that start past row 0
      const n48 = 1400 * 1536, nb48 = n48 / 48;
      const bnb48: LinearWeight = {
        out: 1400, in: 1536, name: 'b48.weight', format: 'bnb4', encoding: 'bnb-fp4', block: [1, 48], global: null,
        weight: { name: 'b48.weight', dtype: 'U8', shape: [n48 / 2, 1], bytes: bytes(r, n48 / 2) },
        scale: { name: 'b48.weight.absmax', dtype: 'F32', shape: [nb48], bytes: new Uint8Array(Float32Array.from({ length: nb48 }, (_, b) => (b % 97 === 0 ? 70000 : b % 89 === 0 ? 2 ** -30 : Math.fround(0.005 + r.uniform() * 0.1))).buffer) },
        bnb: { quantType: 'fp4', blocksize: 48, quantMap: Float32Array.from({ length: 16 }, (_, c) => (c < 8 ? 1 : -1) * [0, 0.0052, 0.6667, 1, 0.3333, 0.5, 0.1667, 0.25][c % 8]), namedTable: false, dtype: 'bfloat16', nested: null },
      };
      for (const lw of [nv, bnb, bnb48]) {
        expect(lw.weight.bytes.length, 'more than one 1 MiB read').toBeGreaterThan(1 << 20);
        const e = exactOperands(lw);
        const fill = inFile(`chunks-${lw.name}`, lw.weight.bytes);
        const buf = Uint8Array.from(lw.weight.bytes, (b) => b ^ 0x3c);
        const before = buf.slice();
        let caught = 0;
        try {
          for (const fault of [null, ...Object.keys(FAULT_CODES)] as const) {
            const f = fault as keyof typeof FAULT_CODES | null;
            const want = flags(checkExactVsF16(e.kind, e.weight, e.scale, lw.out, lw.in, e.bo, e.bi, cache.dequant(lw, f)));
            for (const level of LEVELS) {
              setReferenceSimd(level);
              const got = checkExactVsF16RowsReading(e.kind, buf, e.scale, lw.out, lw.in, e.bo, e.bi, cache.rowSource({ ...lw, weight: { ...lw.weight, bytes: buf } }, f), fill);
              expect('readError' in got ? got : got.weightNanCodes).toBe(0);
              if ('readError' in got) continue;
              const { weightNanCodes: _, mappedBytes: __, ...rest } = got;
              expect(flags(rest), `${lw.format} ${fault ?? 'no fault'}, reference ${level}`).toEqual(want);
            }
            if (fault === null) expect(want.firstBad).toBe(-1);
            else if (want.firstBad >= 0) caught++;
          }
          expect(Buffer.compare(buf, before), 'the buffer is left as it was').toBe(0);
          expect(caught, `${lw.format}: faults caught`).toBeGreaterThanOrEqual(3);
          const clean = flags(checkExactVsF16(e.kind, e.weight, e.scale, lw.out, lw.in, e.bo, e.bi, cache.dequant(lw, null)));
          // NVFP4's values span 2^-10 … 2688 times the global scale: FP16 overflow at 300, no underflow
          expect(clean.over !== 'none' && (lw.format === 'nvfp4' || clean.under !== 'none'), `${lw.format}: FP16 overflow (and for bitsandbytes underflow) blocks present`).toBe(true);
        } finally {
          setReferenceSimd('auto');
          fs.closeSync(fill.fd);
        }
      }
    });

    it('counts an FP8 weight\'s E4M3 NaN codes as nanCodes does; MXFP4 has none to count', () => {
      const r = new Rng(1600);
      const lw = weights(r, 'fp8-e8m0', 300, 1024);
      const w = lw.weight.bytes.slice();
      for (const k of [0, 77, 1023, 5000, 150_000, 307_199]) w[k] = k % 2 ? 0x7f : 0xff;
      const fill = inFile('nan', w);
      try {
        const buf = new Uint8Array(w.length);
        const got = checkExactVsF16RowsReading(kindOf(lw), buf, lw.scale!.bytes, 300, 1024, 128, 128, cache.rowSource({ ...lw, weight: { ...lw.weight, bytes: buf } }, null), fill);
        expect('readError' in got ? -1 : got.weightNanCodes).toBe(nanCodeCount(w, 'e4m3'));
        expect(nanCodeCount(w, 'e4m3')).toBe(6);
      } finally {
        fs.closeSync(fill.fd);
      }
    });

    // The mapped read (check_f16.cc, mapped_rows): a tensor whose 2 MiB extents the page cache holds as 2 MiB folios is
    // compared where it lies, the rest read. Which extents those are is the kernel's (its filesystem, its transparent
    // huge pages): the file is dropped from the page cache and read back through a huge-page mapping, and the kernel's
    // own account of it (smaps' FilePmdMapped, hugeMappedBytes) says whether the pass must have mapped rows (it finds
    // them another way, PAGEMAP_SCAN) or must have read them all. Either way the result is the in-memory compare's.
    it('MXFP4 [2048×4096] and FP8 [1024×4096] straddling 2 MiB extents: compared in place where the kernel maps them by PMD entries (none read then), read where not, with the in-memory result for the right device and every fault', () => {
      const io = loadAddon('ld_reference') as { dropCached(fd: number): boolean; hugeMappedBytes(fd: number, offset: number, length: number): number; mappedRowsAvailable(): boolean };
      const asks = io.mappedRowsAvailable();  // PAGEMAP_SCAN (Linux 6.7): without it every row is read
      const r = new Rng(1680);
      for (const [what, out, inn] of [['mxfp4', 2048, 4096], ['fp8-e8m0', 1024, 4096]] as const) {
        const lw = weights(r, what, out, inn);
        const n = lw.weight.bytes.length;
        const fill = inFile(`mapped-${what}`, lw.weight.bytes);
        let caught = 0;  // faults that make this format's device wrong, found through the same pass
        try {
          fs.fsyncSync(fill.fd);
          io.dropCached(fill.fd);
          const huge = io.hugeMappedBytes(fill.fd, fill.offset, n);
          for (const fault of [null, 'nibble-swap', 'scale-axis', 'e3m0-table'] as const) {
            const want = flags(checkExactVsF16Rows(kindOf(lw), lw.weight.bytes, lw.scale!.bytes, out, inn, lw.block[0], lw.block[1], cache.rowSource(lw, fault)));
            const buf = new Uint8Array(n);
            const got = checkExactVsF16RowsReading(kindOf(lw), buf, lw.scale!.bytes, out, inn, lw.block[0], lw.block[1], cache.rowSource({ ...lw, weight: { ...lw.weight, bytes: buf } }, fault), fill);
            if ('readError' in got) throw new Error(got.readError);
            const { weightNanCodes: _, mappedBytes, ...rest } = got;
            expect(flags(rest), `${what}, ${fault ?? 'no fault'}`).toEqual(want);
            if (fault === null) expect(want.firstBad).toBe(-1);
            else caught += want.firstBad >= 0 ? 1 : 0;
            // the extents wholly inside the tensor (the file's offset 1,000,003 puts its ends inside others)
            const inner = Math.floor((fill.offset + n) / 2 ** 21) * 2 ** 21 - Math.ceil(fill.offset / 2 ** 21) * 2 ** 21;
            if (!asks) expect(mappedBytes, 'no PAGEMAP_SCAN: every row read').toBe(0);
            else if (huge >= inner + 2 ** 21) expect(mappedBytes, `${what}, ${fault}: mapped ${huge} B by PMD entries`).toBeGreaterThanOrEqual(inner / 2);
            if (huge === 0) expect(mappedBytes, `${what}, ${fault}: no extent mapped by a PMD entry`).toBe(0);
          }
          expect(caught, what).toBeGreaterThan(0);
          // on the background worker too, and a compared tensor's pages leave the process once its batch is done, not
          // when the batch's handle is collected (mapped pages kept that long counted every checked tensor in the
          // process's RSS), and so does the file's mapping once no batch in flight holds it
          const buf = new Uint8Array(n);
          const batch = startRowsReading([{ kind: kindOf(lw), weight: buf, scale: lw.scale!.bytes, out, inn, bo: lw.block[0], bi: lw.block[1], source: cache.rowSource({ ...lw, weight: { ...lw.weight, bytes: buf } }, null), fill }]);
          const [res] = waitRowsReading(batch);
          expect('readError' in res ? res.readError : res.firstBad).toBe(-1);
          const file = fs.readlinkSync(`/proc/self/fd/${fill.fd}`);
          expect(residentKiB(file), 'pages of the file left mapped').toBe(0);
          const mapsOf = () => fs.readFileSync('/proc/self/maps', 'utf8').split('\n').filter((l) => l.endsWith(` ${file}`)).length;
          expect(mapsOf(), 'the file still mapped after its last batch').toBe(0);
          expect(batch.size).toBe(1);  // the handle is alive here
        } finally {
          fs.closeSync(fill.fd);
        }
      }
    });

    it('a file that ends inside the tensor gives readError, not a result; bad fill arguments and kinds are refused by name', () => {
      const r = new Rng(1700);
      const lw = weights(r, 'mxfp4', 1000, 512);
      const fill = inFile('short', lw.weight.bytes, 1000);
      try {
        const buf = new Uint8Array(lw.weight.bytes.length);
        const src = cache.rowSource({ ...lw, weight: { ...lw.weight, bytes: buf } }, null);
        const got = checkExactVsF16RowsReading('mxfp4', buf, lw.scale!.bytes, 1000, 512, 1, 32, src, fill);
        expect(got).toEqual({ readError: 'the file ended before the tensor did' });
        const bad = checkExactVsF16RowsReading('mxfp4', buf, lw.scale!.bytes, 1000, 512, 1, 32, src, { fd: 987654, offset: 0 });
        expect(bad).toEqual({ readError: expect.stringMatching(/bad file descriptor/i) });
        expect(() => checkExactVsF16RowsReading('mxfp4', buf, lw.scale!.bytes, 1000, 512, 1, 32, src, { fd: -1, offset: 0 })).toThrow(/fill.fd and fill.offset must be integers/);
        expect(() => checkExactVsF16RowsReading('mxfp4', buf, lw.scale!.bytes, 1000, 512, 1, 32, src, { fd: fill.fd, offset: 0.5 })).toThrow(/fill.fd and fill.offset must be integers/);
        const f32 = new Uint8Array(64 * 64 * 4);
        const plain = N.dequantRowSource!(4, f32, null, false, 64, 64, 1, 1, 0);
        expect(() => checkExactVsF16RowsReading('f32', f32, new Uint8Array(0), 64, 64, 1, 1, plain, fill)).toThrow(/fill reads MXFP4, NVFP4, FP8-block and bitsandbytes weights \(rows of whole bytes\) only/);
        // bitsandbytes rows of an odd length start inside a byte: not rows of whole bytes (blocks of 11 in rows of 33)
        const f16 = new Uint8Array(8 * 33 * 2);
        const odd = N.dequantRowSource!(3, f16, null, false, 8, 33, 1, 1, 0);
        const absmax = new Uint8Array(new Float32Array(16 + 24).fill(1).buffer);
        expect(() => checkExactVsF16RowsReading('table4-flat-f32', new Uint8Array(132), absmax, 8, 33, 1, 11, odd, fill)).toThrow(/fill reads MXFP4, NVFP4, FP8-block and bitsandbytes weights \(rows of whole bytes\) only/);
      } finally {
        fs.closeSync(fill.fd);
      }
    });

    // The batch (check.ts's path): one background pass over every chunk of every job; each job's result must be the
    // one checkExactVsF16RowsReading gives it alone, whatever its neighbours in the batch are doing.
    it('a batch on the background thread gives each job its own result, in order: devices, faults, NaN codes and a short file side by side', () => {
      const r = new Rng(1800);
      const made = FILL.map(([what, out, inn, block], c) => {
        const lw = weights(r, what, out, inn, block ? [...block] : undefined);
        const w = lw.weight.bytes.slice();
        if (what === 'fp8-e8m0') for (const k of [3, 4096, 100_001]) w[k] = 0x7f;
        return { lw: { ...lw, weight: { ...lw.weight, bytes: w } }, fill: inFile(`b${c}`, w, what === 'fp8-f32' ? 7 : 0) };
      });
      try {
        const faults = [null, 'nibble-swap', null, null, 'e3m0-table', 'scale-axis', null, null] as const;
        const jobs: RowsReadingJob[] = [];
        const alone: ReturnType<typeof checkExactVsF16RowsReading>[] = [];
        faults.forEach((fault, k) => {
          const { lw, fill } = made[k % made.length];
          const buf = new Uint8Array(lw.weight.bytes.length);
          const source = cache.rowSource({ ...lw, weight: { ...lw.weight, bytes: buf } }, fault);
          jobs.push({ kind: kindOf(lw), weight: buf, scale: lw.scale!.bytes, out: lw.out, inn: lw.in, bo: lw.block[0], bi: lw.block[1], source, fill });
          alone.push(checkExactVsF16RowsReading(kindOf(lw), buf, lw.scale!.bytes, lw.out, lw.in, lw.block[0], lw.block[1], source, fill));
        });
        const batch = startRowsReading(jobs);
        expect(batch.size).toBe(jobs.length);
        const got = waitRowsReading(batch);
        expect(got).toHaveLength(jobs.length);
        got.forEach((g, k) => {
          const a = alone[k];
          if ('readError' in a) return expect(g, `job ${k}`).toEqual(a);
          expect('readError' in g, `job ${k}`).toBe(false);
          if ('readError' in g) return;
          const { weightNanCodes: gn, ...grest } = g;
          const { weightNanCodes: an, ...arest } = a;
          expect(gn, `job ${k} NaN codes`).toBe(an);
          expect(flags(grest), `job ${k}`).toEqual(flags(arest));
        });
        // the independent checks of what the jobs hold: the short FP8-f32 file fails, the NaN codes are counted,
        // the faults are caught and the right devices pass
        expect(got[3]).toEqual({ readError: 'the file ended before the tensor did' });
        expect(got[7]).toEqual({ readError: 'the file ended before the tensor did' });
        expect('readError' in got[2] ? -1 : got[2].weightNanCodes).toBe(nanCodeCount(made[2].lw.weight.bytes, 'e4m3'));
        expect(nanCodeCount(made[2].lw.weight.bytes, 'e4m3')).toBe(3);
        for (const k of [1, 4, 5]) expect('readError' in got[k] ? -1 : got[k].firstBad, `fault in job ${k} is caught`).toBeGreaterThanOrEqual(0);
        for (const k of [0, 6]) expect('readError' in got[k] ? 0 : got[k].firstBad, `job ${k} passes`).toBe(-1);
        expect(() => waitRowsReading(batch)).toThrow(/this batch's results were already taken/);
        expect(waitRowsReading(startRowsReading([]))).toEqual([]);
        // several batches in flight at once (the worker's team takes their chunks in turn, across batches, with an
        // empty one among them), waited for last first: each job still has its own result
        const several = [jobs.slice(0, 3), [], jobs.slice(3, 4), jobs.slice(4)].map((js) => startRowsReading(js));
        const back = several.slice().reverse().map((b) => waitRowsReading(b)).reverse().flat();
        expect(back).toEqual(got);
      } finally {
        for (const m of made) fs.closeSync(m.fill.fd);
      }
    });

    // The worker thread holds an OpenMP team of its own; while it lives libgomp counts more threads than cores and
    // every team's idle threads sleep after a few turns instead of spinning (check_f16.cc, BatchWorker). It must end
    // once idle, taking its team with it.
    it.runIf(process.platform === 'linux')('the background worker ends once no batch comes, and its OpenMP team with it (Linux: its threads counted in /proc/self/task)', () => {
      const threads = () => fs.readdirSync('/proc/self/task').length;
      const sleep = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
      const lw = weights(new Rng(1900), 'mxfp4', 1000, 512);
      const fill = inFile('idle', lw.weight.bytes);
      try {
        sleep(300); // any worker of an earlier test has ended
        const before = threads();
        const buf = new Uint8Array(lw.weight.bytes.length);
        const source = cache.rowSource({ ...lw, weight: { ...lw.weight, bytes: buf } }, null);
        const job: RowsReadingJob = { kind: kindOf(lw), weight: buf, scale: lw.scale!.bytes, out: lw.out, inn: lw.in, bo: 1, bi: 32, source, fill };
        const got = waitRowsReading(startRowsReading([job]));
        expect('readError' in got[0] ? -2 : got[0].firstBad).toBe(-1);
        expect(threads(), 'the worker (and its team) right after its batch').toBeGreaterThan(before);
        sleep(300);
        expect(threads(), 'the worker and its team gone once idle').toBe(before);
        // and a later batch starts a worker again
        expect(waitRowsReading(startRowsReading([job]))).toHaveLength(1);
      } finally {
        fs.closeSync(fill.fd);
      }
    });

    // A batch may come just as the worker's team gives up waiting (its 50 ms idle time): it must still run, by the
    // team about to stop or by a new one, never be left waiting. Batches submitted at delays around that time; a batch
    // left waiting shows as this test never ending (the wait blocks; a team that dropped such a batch hung it here).
    it('batches that come around the worker\'s idle time are all run (no batch left waiting as its team stops)', () => {
      const sleep = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
      const lw = weights(new Rng(1950), 'mxfp4', 64, 256);
      const fill = inFile('idle-edge', lw.weight.bytes);
      try {
        const buf = new Uint8Array(lw.weight.bytes.length);
        const source = cache.rowSource({ ...lw, weight: { ...lw.weight, bytes: buf } }, 'nibble-swap');
        const job: RowsReadingJob = { kind: kindOf(lw), weight: buf, scale: lw.scale!.bytes, out: lw.out, inn: lw.in, bo: 1, bi: 32, source, fill };
        // the result the synchronous pass (run_jobs, not the worker) gives the job
        const want = [checkExactVsF16RowsReading(job.kind, buf, job.scale, job.out, job.inn, 1, 32, source, fill)];
        expect('readError' in want[0] ? -1 : want[0].firstBad, 'the fault is caught').toBeGreaterThanOrEqual(0);
        for (let ms = 44; ms <= 56; ms++) {
          sleep(ms);
          expect(waitRowsReading(startRowsReading([job, job])), `after ${ms} ms idle`).toEqual([want[0], want[0]]);
        }
      } finally {
        fs.closeSync(fill.fd);
      }
    });

    it('a batch refuses a bad job by its index and name before anything runs', () => {
      const r = new Rng(1900);
      const lw = weights(r, 'mxfp4', 64, 64);
      const fill = inFile('refuse', lw.weight.bytes);
      try {
        const ok: RowsReadingJob = { kind: 'mxfp4', weight: lw.weight.bytes, scale: lw.scale!.bytes, out: 64, inn: 64, bo: 1, bi: 32, source: cache.rowSource(lw, null), fill };
        expect(() => startRowsReading([ok, { ...ok, source: {} }])).toThrow(/source must be a device row source/);
        expect(() => startRowsReading([ok, { ...ok, fill: { fd: -1, offset: 0 } }])).toThrow(/fill.fd and fill.offset must be integers/);
        expect(() => startRowsReading([{ ...ok, inn: 0 }])).toThrow(/in must be a positive integer/);
        expect(() => waitRowsReading({ handle: {}, size: 0 })).toThrow(/expected a handle from checkF16RowsStart/);
        // a refused batch ran nothing: the good one after it still gives the single result
        const [g] = waitRowsReading(startRowsReading([ok]));
        expect('readError' in g ? -2 : g.firstBad).toBe(-1);
      } finally {
        fs.closeSync(fill.fd);
      }
    });
  });
});
