/**
 * The reference's native exact dequantization (reference-cpu/native/dequant_exact.cc) against two
 * independent computations: the element-by-element TypeScript rule (reference-cpu/dequant_ts.ts) and an
 * exact-rational oracle written here from the bit fields (sign · integer significand · 2^exponent; every
 * product below has ≤ 28 significant bits, so a float64 product is the exact rational and Math.fround
 * rounds it once, as float32 must). Bits are compared, so −0 and subnormals count; NaN only as "is NaN".
 */
import { describe, expect, it } from 'vitest';
import { InputError } from '../../harness/errors.js';
import { Rng } from '../../harness/rng.js';
import type { LinearWeight } from '../../harness/formats/linear.js';
import * as path from 'node:path';
import { dequantLinear, dequantRowsExact, exactOperands, kindOf } from '../dequant.js';
import { Checkpoint } from '../../harness/io/checkpoint.js';
import { loadLinear, moduleOf, parseQuantConfig, storedLogicalShape } from '../../harness/formats/linear.js';
import { quantizedWeights } from '../../harness/weights/check.js';
import { linearRows } from '../linear.js';
import { matmul } from '../ops.js';
import { dequantLinearTs } from '../dequant_ts.js';
import { dequantExact, firstNonFinite, setReferenceSimd } from '../native.js';

const LEVELS = ['auto', 'avx2', 'scalar'] as const;

/** fn at each SIMD level this CPU has (a request it cannot honour falls back to the best it has), then 'auto' again. */
function atEveryLevel(fn: (level: string) => void): void {
  try {
    for (const mode of LEVELS) fn(setReferenceSimd(mode));
  } finally {
    setReferenceSimd('auto');
  }
}

/** Exact value of an OCP E2M1 nibble: exponent bits 2..1 (bias 1), mantissa bit 0, sign bit 3. */
function e2m1Exact(c: number): number {
  const e = (c >> 1) & 3, m = c & 1, sign = c & 8 ? -1 : 1;
  return sign * (e === 0 ? m * 2 ** -1 : (2 + m) * 2 ** (e - 2));
}
/** Exact value of an OCP E4M3 "fn" byte (NaN for S.1111.111). */
function e4m3Exact(b: number): number {
  const e = (b >> 3) & 15, m = b & 7, sign = b & 0x80 ? -1 : 1;
  if (e === 15 && m === 7) return NaN;
  return sign * (e === 0 ? m * 2 ** -9 : (8 + m) * 2 ** (e - 10));
}
const e8m0Exact = (b: number) => (b === 255 ? NaN : 2 ** (b - 127));

const bitsOf = (a: Float32Array) => new Uint32Array(a.buffer, a.byteOffset, a.length);
function expectSameBits(got: Float32Array, want: Float32Array, what: string): void {
  expect(got.length, what).toBe(want.length);
  const g = bitsOf(got), w = bitsOf(want);
  for (let i = 0; i < got.length; i++) {
    if (Number.isNaN(want[i])) expect(Number.isNaN(got[i]), `${what}[${i}] NaN`).toBe(true);
    else if (g[i] !== w[i]) expect.fail(`${what}[${i}]: ${got[i]} (0x${g[i].toString(16)}) vs ${want[i]} (0x${w[i].toString(16)})`);
  }
}

/** Decode without the NaN/Inf rejection (the tables include NaN codes on purpose). */
function lenient(lw: LinearWeight, r0 = 0, n = lw.out): Float32Array {
  try {
    return dequantRowsExact(lw, r0, n);
  } catch (e) {
    if (!(e instanceof InputError)) throw e;
    return dequantRowsExactUnchecked(lw, r0, n);
  }
}
function dequantRowsExactUnchecked(lw: LinearWeight, r0: number, n: number): Float32Array {
  const kind = lw.format === 'mxfp4' ? 'mxfp4' : lw.format === 'fp8-block' ? (lw.scale!.dtype === 'F32' ? 'fp8-f32' : 'fp8-e8m0') : lw.weight.dtype === 'BF16' ? 'bf16' : lw.weight.dtype === 'F16' ? 'f16' : 'f32';
  return dequantExact(kind, lw.weight.bytes, lw.scale?.bytes ?? new Uint8Array(0), lw.out, lw.in, lw.block[0], lw.block[1], r0, n);
}

function bytes(r: Rng, n: number): Uint8Array {
  return Uint8Array.from({ length: n }, () => Math.floor(r.uniform() * 256));
}

describe('native exact dequantization', () => {
  it('mxfp4_dequant(out=256,in=32): every E2M1 code under every E8M0 scale, as the oracle and the TS rule, at every SIMD level', () => {
    // Row o has scale byte o; its 16 bytes hold each code as low and as high nibble.
    const out = 256, inn = 32;
    const packed = new Uint8Array(out * 16), scale = Uint8Array.from({ length: out }, (_, o) => o);
    for (let o = 0; o < out; o++) for (let j = 0; j < 16; j++) packed[o * 16 + j] = j | (((j + o) & 15) << 4);
    const lw: LinearWeight = {
      name: 'e.weight', format: 'mxfp4', out, in: inn, block: [1, 32],
      weight: { name: 'e.weight', dtype: 'U8', shape: [out, 16], bytes: packed },
      scale: { name: 'e.scale', dtype: 'F8_E8M0', shape: [out, 1], bytes: scale },
    };
    const oracle = new Float32Array(out * inn);
    for (let o = 0; o < out; o++) for (let j = 0; j < 16; j++) {
      oracle[o * inn + 2 * j] = Math.fround(e2m1Exact(j) * e8m0Exact(o));
      oracle[o * inn + 2 * j + 1] = Math.fround(e2m1Exact((j + o) & 15) * e8m0Exact(o));
    }
    atEveryLevel((level) => {
      const got = lenient(lw);
      expectSameBits(got, oracle, `${level} vs oracle`);
      expectSameBits(got, dequantLinearTs(lw), `${level} vs TS`);
    });
  });

  for (const scaleDtype of ['F8_E8M0', 'F32'] as const) {
    it(`fp8_dequant(out=300,in=165,block=128,scale=${scaleDtype}): every E4M3 code, partial edge blocks (a SIMD step's tail), as the oracle and the TS rule, every SIMD level`, () => {
      const r = new Rng(scaleDtype === 'F32' ? 31 : 30);
      const out = 300, inn = 165, bo = 128, bi = 128, sr = 3, sc = 2;
      const codes = bytes(r, out * inn);
      for (let b = 0; b < 256; b++) codes[b * 7] = b; // every code at least once
      let scale: Uint8Array;
      const sv: number[] = [];
      if (scaleDtype === 'F8_E8M0') {
        scale = Uint8Array.from([0, 1, 127, 130, 200, 254]); // includes 2^-127, a float32 subnormal
        for (const b of scale) sv.push(e8m0Exact(b));
      } else {
        const f = Float32Array.from({ length: sr * sc }, (_, i) => Math.fround((r.uniform() + 0.01) * 2 ** (i * 9 - 30)));
        f[1] = 2 ** -140; // a subnormal scale: products round
        scale = new Uint8Array(f.buffer);
        sv.push(...f);
      }
      const lw: LinearWeight = {
        name: 'q.weight', format: 'fp8-block', out, in: inn, block: [bo, bi],
        weight: { name: 'q.weight', dtype: 'F8_E4M3', shape: [out, inn], bytes: codes },
        scale: { name: 'q.scale', dtype: scaleDtype, shape: [sr, sc], bytes: scale },
      };
      const oracle = Float32Array.from({ length: out * inn }, (_, k) => {
        const o = Math.floor(k / inn), i = k % inn;
        return Math.fround(e4m3Exact(codes[k]) * sv[Math.floor(o / bo) * sc + Math.floor(i / bi)]);
      });
      const ts = dequantLinearTs(lw);
      atEveryLevel((level) => {
        const whole = lenient(lw);
        expectSameBits(whole, oracle, `${level} vs oracle`);
        expectSameBits(whole, ts, `${level} vs TS`);
        for (const [r0, n] of [[0, 300], [127, 2], [100, 60], [299, 1], [5, 290], [7, 0]]) {
          expectSameBits(lenient(lw, r0, n), whole.subarray(r0 * inn, (r0 + n) * inn), `${level} rows [${r0}, ${r0 + n})`);
        }
      });
    });
  }

  it('plain_dequant(bf16,f16): all 65,536 patterns each, as the TS decoders; f32 is copied', () => {
    const patterns = new Uint8Array(new Uint16Array(Array.from({ length: 65536 }, (_, i) => i)).buffer);
    for (const dtype of ['BF16', 'F16'] as const) {
      const lw: LinearWeight = {
        name: 'p.weight', format: 'plain', out: 256, in: 256, block: [1, 1], scale: null,
        weight: { name: 'p.weight', dtype, shape: [256, 256], bytes: patterns },
      };
      expectSameBits(lenient(lw), dequantLinearTs(lw), dtype);
    }
    const f = Float32Array.from({ length: 96 }, (_, i) => i * 0.37 - 9);
    const lw: LinearWeight = {
      name: 'f.weight', format: 'plain', out: 8, in: 12, block: [1, 1], scale: null,
      weight: { name: 'f.weight', dtype: 'F32', shape: [8, 12], bytes: new Uint8Array(f.buffer) },
    };
    expectSameBits(dequantLinear(lw), f, 'F32');
  });

  it('mxfp4_dequant(out=2048,in=512): the multi-threaded path gives the TS rule\'s bits at every SIMD level', () => {
    const r = new Rng(77);
    const out = 2048, inn = 512;
    const lw: LinearWeight = {
      name: 'x.w1.weight', format: 'mxfp4', out, in: inn, block: [1, 32],
      weight: { name: 'x.w1.weight', dtype: 'I8', shape: [out, inn / 2], bytes: bytes(r, (out * inn) / 2) },
      scale: { name: 'x.w1.scale', dtype: 'F8_E8M0', shape: [out, inn / 32], bytes: Uint8Array.from(bytes(r, (out * inn) / 32), (b) => 110 + (b % 30)) },
    };
    const want = dequantLinearTs(lw);
    atEveryLevel((level) => {
      expectSameBits(dequantLinear(lw), want, `${level} threaded`);
      expectSameBits(dequantRowsExact(lw, 1000, 513), want.subarray(1000 * inn, 1513 * inn), `${level} rows`);
    });
  });

  // NVFP4 (both global-scale ops) and bitsandbytes (with and without double quant): the native decoder over the
  // scales exactOperands forms equals dequant_ts.ts's element-by-element rule bit for bit, on every quantized
  // linear of the committed format fixtures, over any row range, and inside the GEMM (linearExact).
  for (const fmt of ['modelopt-nvfp4', 'ct-nvfp4', 'bnb-nf4', 'bnb-fp4']) {
    it(`${fmt}: native exact decode = the TypeScript rule on every quantized linear of fixtures/formats/llama-tiny-${fmt}`, () => {
      const ck = Checkpoint.open(path.join(import.meta.dirname, '..', '..', 'fixtures', 'formats', `llama-tiny-${fmt}`));
      try {
        const qc = parseQuantConfig(ck.config, ck.configFile);
        const names = quantizedWeights(ck).map((t) => t.name);
        expect(names.length).toBe(21);
        for (const name of names) {
          const lw = loadLinear(ck, `${moduleOf(name)}.weight`, storedLogicalShape(ck, name), qc);
          expect(kindOf(lw)).toBe(fmt.startsWith('bnb') ? 'table4-flat-f32' : 'e2m1-lut');
          const want = dequantLinearTs(lw);
          atEveryLevel((level) => {
            expectSameBits(dequantRowsExact(lw, 0, lw.out), want, `${level} ${name}`);
            expectSameBits(dequantRowsExact(lw, 7, 5), want.subarray(7 * lw.in, 12 * lw.in), `${level} ${name} rows 7..11`);
          });
          const x = Float32Array.from({ length: 3 * lw.in }, (_, i) => Math.sin(i * 0.37));
          expectSameBits(linearRows(x, 3, lw, 0, lw.out), matmul(x, 3, lw.in, want, lw.out), `${name} inside the GEMM`);
        }
      } finally {
        ck.close();
      }
    });
  }

  // The weights check forms these scales into its recycled read buffers (exactOperands' alloc): views that may start
  // anywhere 8-aligned in a larger buffer, and that go back to their pool, so they are never kept for a later call.
  it('exactOperands into a caller\'s buffer (a view at an offset of a larger one) forms the bytes it forms alone, and keeps none of them', () => {
    for (const fmt of ['modelopt-nvfp4', 'bnb-fp4', 'bnb-nf4']) {
      const ck = Checkpoint.open(path.join(import.meta.dirname, '..', '..', 'fixtures', 'formats', `llama-tiny-${fmt}`));
      try {
        const qc = parseQuantConfig(ck.config, ck.configFile);
        const name = quantizedWeights(ck).at(-1)!.name;
        const load = () => loadLinear(ck, `${moduleOf(name)}.weight`, storedLogicalShape(ck, name), qc);
        const want = exactOperands(load()).scale;
        const lw = load();
        const big = new Uint8Array(want.length + 64).fill(0xee);
        const got = exactOperands(lw, (n) => big.subarray(24, 24 + n)).scale;
        expect(got.byteOffset, fmt).toBe(24);
        expect(Buffer.compare(got, want), fmt).toBe(0);
        expect(big.subarray(0, 24).every((b) => b === 0xee) && big.subarray(24 + want.length).every((b) => b === 0xee), `${fmt}: nothing written outside`).toBe(true);
        got.fill(0); // the pool reuses it
        expect(Buffer.compare(exactOperands(lw).scale, want), `${fmt}: formed again, not the reused buffer`).toBe(0);
      } finally {
        ck.close();
      }
    }
  });

  it('e2m1-lut (NVFP4) against the exact-rational oracle, blocks of 16, 32 and 10 values (whole SIMD steps, two a block, none), every SIMD level', () => {
    const r = new Rng(78);
    for (const [out, inn, bi] of [[9, 96, 16], [5, 128, 32], [6, 80, 10]] as const) {
      const w = Uint8Array.from({ length: (out * inn) / 2 }, () => r.int(256));
      // 256 float32 scales over a wide range, negative ones and subnormal ones included, and a byte per block picking one
      const table = Float32Array.from({ length: 256 }, () => Math.fround((r.uniform() - 0.3) * 2 ** (r.int(80) - 140)));
      const pick = Uint8Array.from({ length: (out * inn) / bi }, () => r.int(256));
      const want = Float32Array.from({ length: out * inn }, (_, k) => {
        const code = k % 2 === 0 ? w[k >> 1] & 15 : w[k >> 1] >> 4; // low nibble: the even input index
        return e2m1Exact(code) * table[pick[Math.floor(k / bi)]]; // ≤ 26 significant bits: exact in float64, rounded once by the store
      });
      const sc = new Uint8Array(4 * 256 + pick.length);
      sc.set(new Uint8Array(table.buffer));
      sc.set(pick, 4 * 256);
      atEveryLevel((level) => expectSameBits(dequantExact('e2m1-lut', w, sc, out, inn, 1, bi, 0, out), want, `${level} [${out}×${inn}] blocks of ${bi}`));
      // a scale buffer one byte short (the last block's byte) is refused, never read past
      expect(() => dequantExact('e2m1-lut', w, sc.subarray(0, sc.length - 1), out, inn, 1, bi, 0, out)).toThrow(/scale/);
    }
  });

  it('bitsandbytes: blocks that straddle rows, an odd element count and a short last block, any row range = the TypeScript rule', () => {
    const r = new Rng(77);
    for (const [out, inn, bs] of [[37, 29, 64], [5, 96, 48], [9, 300, 256]] as const) {
      const n = out * inn, nb = Math.ceil(n / bs);
      const absmax = Float32Array.from({ length: nb }, () => 0.01 + r.uniform());
      const lw: LinearWeight = {
        out, in: inn, name: 'x.weight', format: 'bnb4', encoding: 'bnb-nf4', block: [1, bs], global: null,
        weight: { name: 'x.weight', dtype: 'U8', shape: [Math.ceil(n / 2), 1], bytes: Uint8Array.from({ length: Math.ceil(n / 2) }, () => r.int(256)) },
        scale: { name: 'x.weight.absmax', dtype: 'F32', shape: [nb], bytes: new Uint8Array(absmax.buffer) },
        bnb: { quantType: 'nf4', blocksize: bs, quantMap: Float32Array.from({ length: 16 }, (_, c) => (c - 7.5) / 7.5), namedTable: false, dtype: 'bfloat16', nested: null },
      };
      const want = dequantLinearTs(lw);
      atEveryLevel((level) => {
        expectSameBits(dequantRowsExact(lw, 0, out), want, `${level} [${out}×${inn}] blocks of ${bs}`);
        expectSameBits(dequantRowsExact(lw, 3, 2), want.subarray(3 * inn, 5 * inn), `${level} [${out}×${inn}] blocks of ${bs}, rows 3..4`);
      });
    }
  });

  it('firstNonFinite: the first NaN or ±Inf at any position (SIMD body or scalar tail), at every SIMD level, as a scan in JS', () => {
    const n = 53; // 3 × 16 + 5: a tail after the AVX-512 body, 6 × 8 + 5 after the AVX2 one
    const jsFirst = (a: Float32Array) => a.findIndex((v) => !Number.isFinite(v));
    const cases: Array<[number, number]> = [[0, NaN], [7, Infinity], [15, -Infinity], [16, NaN], [31, Infinity], [47, NaN], [48, -Infinity], [52, NaN]];
    atEveryLevel((level) => {
      const clean = Float32Array.from({ length: n }, (_, i) => (i % 2 ? -1 : 1) * 3.4e38 * 2 ** -(i % 150)); // the largest finite and subnormals
      expect(firstNonFinite(clean), `${level} clean`).toBe(-1);
      expect(firstNonFinite(new Float32Array(0)), `${level} empty`).toBe(-1);
      for (const [at, v] of cases) {
        const a = clean.slice();
        a[at] = v;
        a[Math.min(n - 1, at + 3)] = NaN; // a later one does not hide the first
        expect(firstNonFinite(a), `${level} ${v} at ${at}`).toBe(jsFirst(a));
        for (const off of [1, 5]) expect(firstNonFinite(a.subarray(off)), `${level} ${v} at ${at}, offset ${off}`).toBe(jsFirst(a.subarray(off)));
      }
    });
  });

  it('an NVFP4 scale or F32 absmax shorter than its blocks is bad input naming its tensor and file, not zeros', () => {
    const nv: LinearWeight = {
      out: 4, in: 32, name: 'n.weight', format: 'nvfp4', encoding: 'modelopt-nvfp4', block: [1, 16],
      weight: { name: 'n.weight', dtype: 'U8', shape: [4, 16], bytes: new Uint8Array(64) },
      scale: { name: 'n.weight_scale', dtype: 'F8_E4M3', shape: [4, 2], bytes: new Uint8Array(7).fill(0x38), file: 'model.safetensors' },
      global: { tensor: { name: 'n.weight_scale_2', dtype: 'F32', shape: [], bytes: new Uint8Array(4) }, value: 1, op: 'mul' },
    };
    const bnb: LinearWeight = {
      out: 4, in: 32, name: 'b.weight', format: 'bnb4', encoding: 'bnb-nf4', block: [1, 64], global: null,
      weight: { name: 'b.weight', dtype: 'U8', shape: [64, 1], bytes: new Uint8Array(64) },
      scale: { name: 'b.weight.absmax', dtype: 'F32', shape: [2], bytes: new Uint8Array(7), file: 'model.safetensors' },
      bnb: { quantType: 'nf4', blocksize: 64, quantMap: Float32Array.from({ length: 16 }, (_, c) => c / 15), namedTable: false, dtype: 'bfloat16', nested: null },
    };
    for (const [lw, what] of [[nv, /7 scale bytes for 8 blocks/], [bnb, /7 bytes for 2 float32 absmax values/]] as const) {
      const err = (() => {
        try {
          dequantLinear(lw);
        } catch (e) {
          return e;
        }
        return null;
      })();
      expect(err).toBeInstanceOf(InputError);
      expect(String((err as Error).message)).toMatch(what);
      expect((err as InputError).tensor).toBe(lw.scale!.name);
    }
  });

  it('a NaN scale or code is bad input naming the tensor, its scale and the flat index in the whole tensor', () => {
    const out = 4, inn = 32;
    const scale = Uint8Array.from([127, 127, 255, 127]);
    const lw: LinearWeight = {
      name: 'n.weight', format: 'mxfp4', out, in: inn, block: [1, 32],
      weight: { name: 'n.weight', dtype: 'U8', shape: [out, 16], bytes: new Uint8Array(out * 16) },
      scale: { name: 'n.scale', dtype: 'F8_E8M0', shape: [out, 1], bytes: scale },
    };
    expect(() => dequantRowsExact(lw, 1, 3)).toThrow(InputError);
    expect(() => dequantRowsExact(lw, 1, 3)).toThrow(/NaN at flat index 64 \(check its scale n\.scale\)/);
    expect(() => dequantRowsExact(lw, 0, 2)).not.toThrow();
    scale[2] = 254;
    lw.weight.bytes[2 * 16 + 5] = 0x70; // 6 · 2^127 overflows float32
    expect(() => dequantLinear(lw)).toThrow(/Inf at flat index 75/);
  });
});
