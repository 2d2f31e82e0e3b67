/**
 * The HIP kernels' host-side expected values (device-hip/kernels/ld_host_ref.h, through the ld_hip addon's ref*
 * functions) against the `emulated` backend (ld_device), bit for bit, on seeded random inputs. The device check
 * (scripts/device-check.sh) holds GPU == host reference on real hardware; this holds host reference == emulation
 * on every CI run, so GPU == emulation. Also: the hip backend's probe and its messages on a machine without an
 * AMD GPU, and guard-element / NaN-Inf-first checks for the emulation ops whose element math moved into
 * ld_numerics.h for the kernels (rmsnorm, rope, swiglu, add, mulScalar, attention, MXFP4 nibbles).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import {
  type DecodeNative,
  type DeepseekNative,
  type DeviceNative,
  loadDecodeNative,
  loadDeepseekNative,
  loadDeviceNative,
  loadGptOssNative,
  validatedDecodeNative,
  validatedDeepseekNative,
} from '../binding.js';
import { type HipAddon, hipProblem, loadHipAddon, probeHip } from '../hip/hip_native.js';
import { selectBackend } from '../../harness/runner/backend.js';
import { InputError } from '../../harness/errors.js';
import { cli } from '../../harness/test/cli.js';
import { sinkhornModel } from './deepseek_model.js';
import { countNonFinite16, firstF16Mismatch, firstF32Mismatch, fr, fromF16, ldExpf, randomBytes, randomF16, rng, toF16 } from './model.js';
import { guarded } from './guard.js';

/** Every kernel level (all give the same bits): the widest, AVX-512 without its VBMI kernels (CPUs such as Cascade
 * Lake take those), AVX2 and scalar; a level the CPU lacks runs as the best it has. */
const LEVELS = ['auto', 'avx512', 'avx2', 'scalar'] as const;

let N: DeviceNative;
let K: DeepseekNative;
let Dec: DecodeNative;
let H: HipAddon;
beforeAll(() => {
  N = loadDeviceNative();
  K = loadDeepseekNative();
  Dec = loadDecodeNative();
  const h = loadHipAddon();
  if (h === null) throw new Error('ld_hip addon not built: run npm run build:native');
  H = h;
});

function same16(got: Uint16Array, want: Uint16Array, what: string): void {
  const i = firstF16Mismatch(got, want);
  expect(i, i < 0 ? what : `${what}: first mismatch at ${i}: 0x${got[i]?.toString(16)} vs 0x${want[i]?.toString(16)}`).toBe(-1);
}

/**
 * Bit for bit, but a NaN's sign: every NaN must be the element rule's canonical one (payload 0x200), where the
 * hardware's f32 → f16 conversion would keep payload bits. The sign of NaN · NaN (an E4M3 NaN code times a NaN
 * scale) is whichever operand the compiler put first, in C as on the GPU, so it is left free.
 */
function sameBits16(got: Uint16Array, want: Uint16Array, what: string): void {
  expect(got.length, what).toBe(want.length);
  const canonicalNaN = (h: number) => (h & 0x7fff) === 0x7e00;
  const i = got.findIndex((v, j) => v !== want[j] && !(canonicalNaN(v) && canonicalNaN(want[j])));
  expect(i, i < 0 ? what : `${what}: first difference at ${i}: 0x${got[i]?.toString(16)} vs 0x${want[i]?.toString(16)}`).toBe(-1);
}

describe('host reference of the HIP kernels == emulation', () => {
  it('dequant mxfp4 (every fault code), fp8-block (E8M0 and F32 scales, every fault), bf16, f32', () => {
    const rand = rng(4001);
    const out = 40, inD = 96;
    const w = randomBytes(rand, (out * inD) / 2), s = Uint8Array.from(randomBytes(rand, (out * inD) / 32), (b) => 112 + (b % 30));
    s[3] = 0xff; // NaN scale
    for (let f = 0; f <= 11; f++) same16(H.refDequantToF16(0, w, s, false, out, inD, 1, 32, f), N.dequantToF16(0, w, s, false, out, inD, 1, 32, f), `mxfp4 fault ${f}`);
    const w8 = randomBytes(rand, 130 * 200);
    const s8 = Uint8Array.from(randomBytes(rand, 2 * 2), (b) => 118 + (b % 12));
    const sf = new Uint8Array(new Float32Array([0.002, 0.0031, 1e-4, 0.5]).buffer);
    for (let f = 0; f <= 6; f++) {
      same16(H.refDequantToF16(1, w8, s8, false, 130, 200, 128, 128, f), N.dequantToF16(1, w8, s8, false, 130, 200, 128, 128, f), `fp8 e8m0 fault ${f}`);
      same16(H.refDequantToF16(1, w8, sf, true, 130, 200, 128, 128, f), N.dequantToF16(1, w8, sf, true, 130, 200, 128, 128, f), `fp8 f32 fault ${f}`);
    }
    const b = randomBytes(rand, 2 * 3000), f4 = new Uint8Array(new Float32Array(Array.from({ length: 3000 }, () => (rand() - 0.5) * 140000)).buffer);
    same16(H.refDequantToF16(2, b, null, false, 30, 100, 1, 1, 0), N.dequantToF16(2, b, null, false, 30, 100, 1, 1, 0), 'bf16');
    same16(H.refDequantToF16(4, f4, null, false, 30, 100, 1, 1, 0), N.dequantToF16(4, f4, null, false, 30, 100, 1, 1, 0), 'f32');
  });

  it('dequant nvfp4 and bitsandbytes 4-bit (the GPU kernels\' element functions): every fault, both global-scale ops, with and without double quant, every SIMD level', () => {
    const rand = rng(4077);
    try {
      for (const level of LEVELS) {
        N.setSimd(level);
        // nvfp4: an even and an odd count of 16-value blocks a row (the vector rows take two at a time)
        for (const [out, inD] of [[24, 96], [9, 112], [3, 4096]] as const) {
          const w = randomBytes(rand, (out * inD) / 2);
          const e4 = randomBytes(rand, (out * inD) / 16);
          e4[7] = 0x7f; // a NaN scale code goes through both the same way
          e4[8] = 0x7e; // 448 · 7264.9 overflows f16: Inf values
          for (let f = 0; f <= 11; f++) {
            for (const [g, div] of [[1.5e-4, false], [7264.9, true], [7264.9, false]] as const) {
              sameBits16(N.dequantNvfp4ToF16(w, e4, out, inD, g, div, f), H.refDequantNvfp4ToF16(w, e4, out, inD, g, div, f), `${level} nvfp4 [${out}×${inD}] g ${g} ${div ? '÷' : '×'} fault ${f}`);
            }
          }
        }
        // bitsandbytes: blocks of 64 straddling rows and an odd count (the last byte's low nibble is padding), 32,
        // 256 with a short last block, 48 (off 32: vector and one-at-a-time parts) and 33 (odd: blocks starting odd);
        // 128 and 4096 (several 64-value steps a block), and 512 blocks of 64 (the vector kernels' 256-block chunks on
        // both threads)
        for (const [rows, cols, bs] of [[37, 29, 64], [16, 64, 32], [7, 300, 256], [5, 96, 48], [3, 55, 33], [8, 376, 128], [3, 2730, 4096], [64, 512, 64]] as const) {
          const n = rows * cols;
          const wb = randomBytes(rand, Math.ceil(n / 2));
          const nb = Math.ceil(n / bs);
          const qm = Float32Array.from({ length: 16 }, (_, c) => (c - 7.5) / 7.5);
          const am = Float32Array.from({ length: nb }, () => 0.01 + rand());
          // absmax specials: NaN (its canonical f16 NaN), Inf, 0, a negative, one overflowing f16, one underflowing it
          am.set([Number.NaN, Number.POSITIVE_INFINITY, 0, -0.37, 1e6, 1e-9].slice(0, Math.min(6, nb)));
          new Uint32Array(am.buffer)[Math.min(6, nb - 1)] = 0x7fa12345; // a NaN with payload bits (scalar rule: canonical)
          const amF32 = new Uint8Array(am.buffer);
          const codes = randomBytes(rand, nb);
          const nabs = Float32Array.from({ length: Math.ceil(nb / 8) }, () => 0.1 + rand());
          const nmap = Float32Array.from({ length: 256 }, (_, c) => -1 + c / 128);
          const none = new Float32Array(0);
          for (let f = 0; f <= 11; f++) {
            const what = `${level} bnb4 ${rows}×${cols} blocks of ${bs}`;
            sameBits16(N.dequantBnb4ToF16(wb, amF32, false, qm, none, none, 0, 1, rows, cols, bs, f), H.refDequantBnb4ToF16(wb, amF32, false, qm, none, none, 0, 1, rows, cols, bs, f), `${what} f32 absmax fault ${f}`);
            sameBits16(N.dequantBnb4ToF16(wb, codes, true, qm, nabs, nmap, 0.037, 8, rows, cols, bs, f), H.refDequantBnb4ToF16(wb, codes, true, qm, nabs, nmap, 0.037, 8, rows, cols, bs, f), `${what} double quant fault ${f}`);
          }
        }
      }
    } finally {
      N.setSimd('auto');
    }
  });

  it('dequant fp8-block with F32 scales of every kind (NaN, Inf, ±0, overflowing and underflowing f16, f32 subnormal): the tables built with F16C, every SIMD level', () => {
    const rand = rng(4088);
    const out = 300, inD = 260; // ragged last blocks both ways
    const w8 = randomBytes(rand, out * inD);
    const blocks = 3 * 3;
    const sf = Float32Array.from({ length: blocks }, () => (0.5 + rand()) * 2 ** -9);
    sf.set([Number.NaN, Number.NEGATIVE_INFINITY, -0, 0, 1e30, 1e-30, 1e-40, -3.1e-3]);
    new Uint32Array(sf.buffer)[8] = 0xffa12345; // a signalling NaN with payload bits the hardware's conversion would keep
    const s = new Uint8Array(sf.buffer);
    try {
      for (const level of LEVELS) {
        N.setSimd(level);
        for (let f = 0; f <= 11; f++) sameBits16(N.dequantToF16(1, w8, s, true, out, inD, 128, 128, f), H.refDequantToF16(1, w8, s, true, out, inD, 128, 128, f), `${level} fp8 f32 scales fault ${f}`);
      }
    } finally {
      N.setSimd('auto');
    }
  });

  it('FP8 blocks on AVX2 hosts decode arithmetically wherever that is exact: every finite E8M0 scale and F32 scales as checkpoints hold them (the bits themselves: the tests above, every level)', () => {
    if (N.fp8ArithExact === undefined) return; // the hip backend's host side has no emulated rows
    try {
      if (N.setSimd('avx2') !== 'avx2') return; // a CPU without AVX2: lookups only
      const e8m0 = Array.from({ length: 255 }, (_, b) => 2 ** (b - 127));
      expect(e8m0.filter((sc) => !N.fp8ArithExact!(sc))).toEqual([]);
      const rand = rng(4089);
      const f32 = Array.from({ length: 2000 }, () => Math.fround((0.5 + rand()) * 2 ** (-30 + Math.floor(rand() * 40))));
      expect(f32.filter((sc) => !N.fp8ArithExact!(sc))).toEqual([]);
      N.setSimd('scalar');
      expect(N.fp8ArithExact(1)).toBe(false);
    } finally {
      N.setSimd('auto');
    }
  });

  const GEMM: Array<[number, number, number]> = [[1, 4096, 33], [8, 1037, 20], [67, 1001, 29], [3, 7, 5], [17, 64, 9]];
  GEMM.forEach(([m, k, n], c) => {
    it(`gemm m=${m} k=${k} n=${n}: f16 and f32 outputs`, () => {
      const rand = rng(4100 + c);
      const x = randomF16(rand, m * k, 2), w = randomF16(rand, n * k, 0.5);
      same16(H.refGemmF16(x, w, m, k, n, 0.3), N.gemmF16(x, w, m, k, n, 0.3), 'f16 out');
      expect(firstF32Mismatch(H.refGemmF16F32(x, w, m, k, n), N.gemmF16F32(x, w, m, k, n)), 'f32 out').toBe(-1);
    });
  });

  it('gemm with NaN/Inf inputs and FP16 overflow (alpha 2^16)', () => {
    const rand = rng(4200);
    const m = 4, k = 45, n = 6;
    const x = randomF16(rand, m * k, 4), w = randomF16(rand, n * k, 4);
    x[3] = 0x7c00;
    w[2 * k + 5] = 0x7e00;
    const got = H.refGemmF16(x, w, m, k, n, 65536);
    expect(countNonFinite16(got)).toBeGreaterThan(0);
    same16(got, N.gemmF16(x, w, m, k, n, 65536), 'specials');
  });

  it('the emulated fused MXFP4 GEMM (gemmMxfp4F16) == dequantToF16 then gemmF16 == the kernels\' host reference, every fault and SIMD level', () => {
    const rand = rng(4301);
    // one thread and both, one k slice and several, a ragged last row block, m past a tile; m ≤ 4 (the decode
    // step's GEMV, its rows decoded per 16-row unit) on one thread and on both, with a ragged last unit
    const shapes = [[1, 64, 3], [7, 512, 41], [16, 4096, 64], [3, 2080, 9], [1, 4096, 257], [4, 2048, 300]] as const;
    try {
      for (const level of LEVELS) {
        N.setSimd(level);
        for (const [m, k, n] of shapes) {
          const x = randomF16(rand, m * k, 1);
          const q = randomBytes(rand, (n * k) / 2), s = Uint8Array.from(randomBytes(rand, (n * k) / 32), (b) => 112 + (b % 24));
          for (let f = 0; f <= 11; f++) {
            const want = N.gemmF16(x, N.dequantToF16(0, q, s, false, n, k, 1, 32, f), m, k, n, 0.75);
            same16(N.gemmMxfp4F16(x, q, s, m, k, n, 0.75, f), want, `${level} [${m}×${k}]·[${n}×${k}] fault ${f}`);
            if (level === 'auto' && k <= 512) same16(H.refGemmMxfp4F16(x, q, s, m, k, n, 0.75, f), want, `host reference [${m}×${k}] fault ${f}`);
          }
        }
      }
    } finally {
      N.setSimd('auto');
    }
    expect(() => N.gemmMxfp4F16(new Uint16Array(48), new Uint8Array(24), new Uint8Array(1), 1, 48, 1, 1, 0)).toThrow(/multiple of 32/);
  });

  it('the emulated fused FP8-block GEMM (gemmFp8F16) == dequantToF16 then gemmF16 == the kernels\' host reference: E8M0 and F32 scales, every fault and SIMD level', () => {
    const rand = rng(4311);
    // [m, k, n, blockOut, blockIn]: m ≤ 4 (the decode step's GEMV: rows decoded per 16-row unit, 8 side by side at
    // m = 1 with AVX-512VL) with ragged units, ragged 8-row groups and a k tail off the lanes; the tiled kernel
    // past m = 4; blocks that straddle units and leave ragged last blocks in both directions
    const shapes = [[1, 256, 3, 128, 128], [1, 4096, 257, 128, 128], [2, 1003, 45, 32, 64], [4, 2048, 300, 128, 128], [3, 200, 130, 128, 128], [7, 512, 41, 16, 128], [16, 300, 64, 128, 128]] as const;
    try {
      for (const level of LEVELS) {
        N.setSimd(level);
        for (const [m, k, n, bo, bi] of shapes) {
          const x = randomF16(rand, m * k, 1);
          const w = randomBytes(rand, n * k);
          const blocks = Math.ceil(n / bo) * Math.ceil(k / bi);
          const e8 = Uint8Array.from(randomBytes(rand, blocks), (b) => 116 + (b % 14));
          const f32 = new Uint8Array(Float32Array.from({ length: blocks }, () => (0.5 + rand()) * 2 ** -9).buffer);
          for (const [s, isF32] of [[e8, false], [f32, true]] as const) {
            for (let f = 0; f <= 11; f++) {
              const want = N.gemmF16(x, N.dequantToF16(1, w, s, isF32, n, k, bo, bi, f), m, k, n, 0.75);
              const what = `${level} [${m}×${k}]·[${n}×${k}] blocks ${bo}×${bi} ${isF32 ? 'f32' : 'e8m0'} fault ${f}`;
              same16(N.gemmFp8F16(x, w, s, isF32, m, k, n, bo, bi, 0.75, f), want, what);
              if (level === 'auto' && n * k <= 300 * 300) same16(H.refGemmFp8F16(x, w, s, isF32, m, k, n, bo, bi, 0.75, f), want, `host reference ${what}`);
            }
          }
        }
      }
    } finally {
      N.setSimd('auto');
    }
    expect(() => N.gemmFp8F16(new Uint16Array(8), new Uint8Array(8), new Uint8Array(0), false, 1, 8, 1, 128, 128, 1, 0)).toThrow(/scale/);
  });

  it('the emulated fused NVFP4 and bitsandbytes GEMMs (gemmNvfp4F16, gemmBnb4F16) == dequantization then gemmF16 == the kernels\' host reference: every fault, global-scale op, absmax kind and SIMD level', () => {
    const rand = rng(4312);
    // [m, k, n, bitsandbytes block size]: the GEMV's row counts (≤ 4: 16-row units, 8 side by side at m = 1 with
    // AVX-512VL) with ragged units, the tiled kernel past m = 4 with ragged tiles; k a multiple of 16 (NVFP4), with an
    // odd count of NVFP4 blocks a row (208: the rows' scalar tail after two blocks a step) and of the bitsandbytes block
    // size: 64, 32 with k an odd multiple of it (224), 16 (off 32: the AVX2 path's one-at-a-time tail), 128
    const shapes = [[1, 256, 3, 64], [1, 4096, 41, 64], [2, 192, 45, 64], [3, 208, 17, 16], [4, 2048, 70, 128], [5, 224, 33, 32], [7, 512, 41, 64], [16, 320, 64, 32]] as const;
    const none = new Float32Array(0);
    try {
      for (const level of LEVELS) {
        N.setSimd(level);
        for (const [m, k, n, bs] of shapes) {
          const x = randomF16(rand, m * k, 1);
          const w = randomBytes(rand, (n * k) / 2);
          const e4 = randomBytes(rand, (n * k) / 16);
          e4[5] = 0x7f; // a NaN scale: NaN outputs, the same from both
          const nb = (n * k) / bs;
          const qm = Float32Array.from({ length: 16 }, (_, c) => (c - 7.5) / 7.5);
          const am = new Uint8Array(Float32Array.from({ length: nb }, () => 0.01 + rand()).buffer);
          const codes = randomBytes(rand, nb);
          const nabs = Float32Array.from({ length: Math.ceil(nb / 8) }, () => 0.1 + rand());
          const nmap = Float32Array.from({ length: 256 }, (_, c) => -1 + c / 128);
          for (let f = 0; f <= 11; f++) {
            const small = level === 'auto' && n * k <= 320 * 320;
            for (const [g, div] of [[1.5e-4, false], [7264.9, true]] as const) {
              const want = N.gemmF16(x, N.dequantNvfp4ToF16(w, e4, n, k, g, div, f), m, k, n, 0.75);
              const what = `${level} nvfp4 [${m}×${k}]·[${n}×${k}] g ${g} ${div ? '÷' : '×'} fault ${f}`;
              same16(N.gemmNvfp4F16(x, w, e4, m, k, n, g, div, 0.75, f), want, what);
              if (small) same16(H.refGemmNvfp4F16(x, w, e4, m, k, n, g, div, 0.75, f), want, `host reference ${what}`);
            }
            const what = `${level} bnb4 [${m}×${k}]·[${n}×${k}] blocks of ${bs} fault ${f}`;
            const want = N.gemmF16(x, N.dequantBnb4ToF16(w, am, false, qm, none, none, 0, 1, n, k, bs, f), m, k, n, 0.75);
            same16(N.gemmBnb4F16(x, w, am, false, qm, none, none, 0, 1, m, k, n, bs, 0.75, f), want, `${what} f32 absmax`);
            if (small) same16(H.refGemmBnb4F16(x, w, am, false, qm, none, none, 0, 1, m, k, n, bs, 0.75, f), want, `host reference ${what} f32 absmax`);
            const want2 = N.gemmF16(x, N.dequantBnb4ToF16(w, codes, true, qm, nabs, nmap, 0.037, 8, n, k, bs, f), m, k, n, 0.75);
            same16(N.gemmBnb4F16(x, w, codes, true, qm, nabs, nmap, 0.037, 8, m, k, n, bs, 0.75, f), want2, `${what} double quant`);
            if (small) same16(H.refGemmBnb4F16(x, w, codes, true, qm, nabs, nmap, 0.037, 8, m, k, n, bs, 0.75, f), want2, `host reference ${what} double quant`);
          }
        }
      }
    } finally {
      N.setSimd('auto');
    }
    expect(() => N.gemmNvfp4F16(new Uint16Array(24), new Uint8Array(12), new Uint8Array(1), 1, 24, 1, 1, false, 1, 0)).toThrow(/multiple of 16/);
    expect(() => N.gemmBnb4F16(new Uint16Array(96), new Uint8Array(48), new Uint8Array(8), false, new Float32Array(16), none, none, 0, 1, 1, 96, 1, 64, 1, 0)).toThrow(/whole blocks/);
  });

  it('rmsnorm, rope (half, interleaved with offset), swiglu (clamp), add, mulScalar', () => {
    const rand = rng(4400);
    const x = randomF16(rand, 7 * 1000, 3), w = randomF16(rand, 1000, 1.5);
    same16(H.refRmsnormF16(x, w, 7, 1000, 1e-6), N.rmsnormF16(x, w, 7, 1000, 1e-6), 'rmsnorm');
    for (const [T, Hh, D, off, rot, inter] of [[5, 3, 64, 0, 64, false], [4, 2, 512, 448, 64, true], [3, 4, 10, 2, 6, false]] as const) {
      const half = rot / 2;
      const xr = randomF16(rand, T * Hh * D, 8);
      const cs = Float32Array.from({ length: T * half }, () => rand() * 2 - 1), sn = Float32Array.from({ length: T * half }, () => rand() * 2 - 1);
      same16(H.refRopeF16(xr, cs, sn, T, Hh, D, off, rot, inter), N.ropeF16(xr, cs, sn, T, Hh, D, off, rot, inter), `rope ${D}/${off}/${rot}/${inter}`);
    }
    const g = randomF16(rand, 5000, 20), u = randomF16(rand, 5000, 20);
    g[0] = 0x7e00;
    u[1] = 0xfe00;
    for (const lim of [0, 7, 10]) same16(H.refSwigluF16(g, u, lim), N.swigluF16(g, u, lim), `swiglu limit ${lim}`);
    const a = randomF16(rand, 4001, 60000), b = randomF16(rand, 4001, 60000);
    same16(H.refAddF16(a, b), N.addF16(a, b), 'add');
    for (const sc of [0.3, 1e5, -2.5]) same16(H.refMulScalarF16(a, sc), N.mulScalarF16(a, sc), `mulScalar ${sc}`);
  });

  it('swiglu over every f16 gate value: ld_deepseek.h ld_swiglu_f32 (host ref) == ld_numerics.h ld_swiglu_clamp_f32 (emulation, kernels)', () => {
    const g = Uint16Array.from({ length: 65536 }, (_, i) => i);
    for (const upv of [0x3c00, 0xc500]) {
      const u = new Uint16Array(65536).fill(upv);
      for (const lim of [0, 7]) same16(H.refSwigluF16(g, u, lim), N.swigluF16(g, u, lim), `up 0x${upv.toString(16)} limit ${lim}`);
    }
  });

  const ATT = [
    { T: 37, Hq: 8, Hkv: 2, D: 64, Dv: 64, window: 0, sinks: false },
    { T: 20, Hq: 4, Hkv: 1, D: 36, Dv: 20, window: 5, sinks: true },
    { T: 9, Hq: 2, Hkv: 2, D: 512, Dv: 512, window: 128, sinks: true },
  ];
  for (const c of ATT) {
    it(`attention T=${c.T} Hq=${c.Hq} Hkv=${c.Hkv} D=${c.D} Dv=${c.Dv} window=${c.window} sinks=${c.sinks}`, () => {
      const rand = rng(4500 + c.T);
      const q = randomF16(rand, c.T * c.Hq * c.D, 3), k = randomF16(rand, c.T * c.Hkv * c.D, 3), v = randomF16(rand, c.T * c.Hkv * c.Dv, 2);
      const sinks = c.sinks ? Float32Array.from({ length: c.Hq }, () => (rand() - 0.5) * 8) : null;
      const scale = 1 / Math.sqrt(c.D);
      same16(H.refAttentionF16(q, k, v, c.T, c.Hq, c.Hkv, c.D, c.Dv, scale, c.window, sinks), N.attentionF16(q, k, v, c.T, c.Hq, c.Hkv, c.D, c.Dv, scale, c.window, sinks), 'attention');
    });
  }

  it('softmax with and without a sink == the TypeScript model of the attention softmax (ld_expf, sequential sum, sink last)', () => {
    const rand = rng(4600);
    const rows = 6, n = 300;
    const z = Float32Array.from({ length: rows * n }, () => (rand() - 0.5) * 60);
    z[5] = -Infinity;
    const sinks = Float32Array.from({ length: rows }, () => (rand() - 0.3) * 50);
    for (const sk of [sinks, null]) {
      const want = new Uint16Array(rows * n);
      for (let r = 0; r < rows; r++) {
        let m = sk !== null ? sk[r] : -Infinity;
        for (let i = 0; i < n; i++) if (z[r * n + i] > m) m = z[r * n + i];
        const e = Array.from({ length: n }, (_, i) => ldExpf(fr(z[r * n + i] - m)));
        let l = 0;
        for (const x of e) l = fr(l + x);
        if (sk !== null) l = fr(l + ldExpf(fr(sk[r] - m)));
        for (let i = 0; i < n; i++) want[r * n + i] = toF16(fr(e[i] / l));
      }
      same16(H.refSoftmaxF16(z, sk, rows, n), want, sk !== null ? 'with sink' : 'no sink');
    }
  });

  it('MoE gather and combine (moeCombineF16), Sinkhorn (the DeepSeek model of ld_sinkhorn_f32)', () => {
    const rand = rng(4700);
    const T = 12, D = 40, rowToken = Int32Array.from([3, 0, 7, 3, 11, 0, 5, 5, 2, 9, 3, 1]);
    const y = randomF16(rand, rowToken.length * D, 4), shared = randomF16(rand, T * D, 4);
    same16(H.refMoeCombineF16(y, rowToken, shared, T, D), K.moeCombineF16(y, rowToken, shared, T, D), 'combine');
    const x = randomF16(rand, T * D, 4);
    const g = H.refMoeGatherF16(x, rowToken, T, D);
    const want = new Uint16Array(rowToken.length * D);
    rowToken.forEach((t, r) => want.set(x.subarray(t * D, (t + 1) * D), r * D));
    same16(g, want, 'gather');
    const hc = 4, iters = 20, Ts = 16;
    const A = Float32Array.from({ length: Ts * hc * hc }, () => (rand() - 0.5) * 12);
    const C = H.refSinkhornF32(A, Ts, hc, iters, 1e-6);
    for (let t = 0; t < Ts; t++) {
      const m = sinkhornModel(A.subarray(t * hc * hc, (t + 1) * hc * hc), hc, iters, 1e-6);
      expect(firstF32Mismatch(C.subarray(t * hc * hc, (t + 1) * hc * hc), m), `token ${t}`).toBe(-1);
    }
  });

  it('DeepSeek-V4 ops (the expected values of deepseek.hip): hc pre/head/post, compressor pool, router, swigluRows, indexer, sparse attention', () => {
    const rand = rng(4800);
    const f32 = (n: number, lo: number, hi: number): Float32Array => Float32Array.from({ length: n }, () => lo + (hi - lo) * rand());
    const sameF32 = (got: Float32Array, want: Float32Array, what: string): void => {
      expect(firstF32Mismatch(got, want), what).toBe(-1);
    };
    const sameI32 = (got: Int32Array, want: Int32Array, what: string): void => expect(Array.from(got), what).toEqual(Array.from(want));
    for (const [T, hc, D, iters] of [[5, 4, 64, 20], [3, 3, 37, 3], [2, 8, 21, 1]] as const) {
      const x = randomF16(rand, T * hc * D, 2);
      const nmix = (2 + hc) * hc;
      const fn = f32(nmix * hc * D, -0.05, 0.05), base = f32(nmix, -1, 1), scale = f32(3, 0.5, 1.5);
      const r = H.refHcPreF16(x, fn, base, scale, T, hc, D, 1e-6, 1e-6, iters), e = K.hcPreF16(x, fn, base, scale, T, hc, D, 1e-6, 1e-6, iters);
      same16(r.u, e.u, `hcPre u ${T}/${hc}/${D}`);
      sameF32(r.post, e.post, 'hcPre post');
      sameF32(r.comb, e.comb, 'hcPre comb');
      const hfn = fn.subarray(0, hc * hc * D), hb = base.subarray(0, hc), hs = scale.subarray(0, 1);
      same16(H.refHcHeadF16(x, hfn, hb, hs, T, hc, D, 1e-6, 1e-6), K.hcHeadF16(x, hfn, hb, hs, T, hc, D, 1e-6, 1e-6), 'hcHead');
      const f = randomF16(rand, T * D, 3);
      same16(H.refHcPostF16(f, x, e.post, e.comb, T, hc, D), K.hcPostF16(f, x, e.post, e.comb, T, hc, D), 'hcPost');
    }
    for (const [T, r, dc, ov] of [[37, 3, 7, true], [64, 4, 16, false], [256, 128, 5, false], [40, 4, 6, true]] as const) {
      const w = (ov ? 2 : 1) * dc;
      const Kp = f32(T * w, -3, 3), Z = f32(T * w, -8, 8), ape = f32(r * w, -1, 1);
      same16(H.refCompressPoolF16(Kp, Z, ape, T, r, dc, ov), K.compressPoolF16(Kp, Z, ape, T, r, dc, ov), `compressPool ${T}/${r}/${dc}/${ov}`);
    }
    {
      const T = 40, E = 64, k = 6;
      const logits = f32(T * E, -4, 4).map((v) => Math.floor(v * 4) / 4); // ties
      logits[7] = NaN;
      logits[E + 3] = 30;
      const bias = f32(E, -0.5, 0.5);
      const given = Int32Array.from({ length: T * k }, () => Math.floor(rand() * E));
      for (const [b, g] of [[null, null], [bias, null], [bias, given]] as const) {
        const r = H.refRouterF32(logits, b, T, E, k, 2.5, g), e = K.routerF32(logits, b, T, E, k, 2.5, g);
        sameI32(r.ids, e.ids, 'router ids');
        sameF32(r.weights, e.weights, 'router weights');
        sameF32(r.scores, e.scores, 'router scores');
      }
    }
    {
      const rows = 9, cols = 77;
      const g = randomF16(rand, rows * cols, 12), u = randomF16(rand, rows * cols, 12), rw = f32(rows, 0, 1);
      g[5] = 0x7e00; // NaN gate
      u[6] = 0x7c00; // +Inf up
      for (const [wts, lim] of [[null, 0], [rw, 0], [rw, 7]] as const)
        same16(H.refSwigluRowsF16(g, u, rows, cols, wts, lim), K.swigluRowsF16(g, u, rows, cols, wts, lim), `swigluRows limit ${lim}`);
    }
    for (const [T, nh, hd, ratio, topk, ties] of [[97, 3, 20, 4, 5, true], [64, 4, 33, 2, 40, false]] as const) {
      const B = Math.floor(T / ratio);
      const q = randomF16(rand, T * nh * hd, 2), w = randomF16(rand, T * nh, 1), e = randomF16(rand, B * hd, 2);
      if (ties) for (let b = 1; b < B; b += 2) e.copyWithin(b * hd, (b - 1) * hd, b * hd);
      const r = H.refIndexerTopkF16(q, w, e, T, nh, hd, B, ratio, 0, topk, 0.1), m = K.indexerTopkF16(q, w, e, T, nh, hd, B, ratio, 0, topk, 0.1);
      sameF32(r.scores, m.scores, 'indexer scores');
      sameI32(r.picks, m.picks, 'indexer picks');
      // the last rows alone (t0 > 0, T − t0 rows; t0 = T − 1 is a decode step): reference == emulation, and
      // both are the full call's rows t0..
      for (const t0 of [T - 1, T - 7, 13]) {
        const qt = q.subarray(t0 * nh * hd), wt = w.subarray(t0 * nh);
        const r0 = H.refIndexerTopkF16(qt, wt, e, T - t0, nh, hd, B, ratio, t0, topk, 0.1), m0 = K.indexerTopkF16(qt, wt, e, T - t0, nh, hd, B, ratio, t0, topk, 0.1);
        sameF32(r0.scores, m0.scores, `indexer scores t0 ${t0}`);
        sameI32(r0.picks, m0.picks, `indexer picks t0 ${t0}`);
        sameF32(r0.scores, r.scores.subarray(t0 * B), `indexer scores t0 ${t0} vs the full call`);
        sameI32(r0.picks, r.picks.subarray(t0 * topk), `indexer picks t0 ${t0} vs the full call`);
      }
    }
    for (const [T, Hh, D, window, B, Kc] of [[40, 3, 36, 5, 9, 6], [33, 2, 64, 0, 4, 3]] as const) {
      const q = randomF16(rand, T * Hh * D, 3), kv = randomF16(rand, T * D, 3), comp = randomF16(rand, B * D, 3);
      const cand = Int32Array.from({ length: T * Kc }, () => Math.floor(rand() * (B + 1)) - 1);
      const sinks = f32(Hh, -4, 4);
      same16(H.refSparseAttentionF16(q, kv, comp, T, Hh, D, B, window, cand, Kc, sinks, 0.125),
        K.sparseAttentionF16(q, kv, comp, T, Hh, D, B, window, cand, Kc, sinks, 0.125), `sparseAttention ${T}/${window}`);
    }
  });

  it('gpt-oss ops (the expected values of gpt_oss.hip): router with softmax over the top-k, interleaved clamped SwiGLU', () => {
    const rand = rng(4013);
    const f32 = (n: number, lo: number, hi: number) => Float32Array.from({ length: n }, () => fr(lo + (hi - lo) * rand()));
    const G = loadGptOssNative();
    for (const [T, E, k] of [[40, 32, 4], [7, 8, 2], [3, 128, 4]] as const) {
      const logits = f32(T * E, -4, 4).map((v) => Math.floor(v * 4) / 4); // ties
      logits[E + 3] = 30;
      const bias = f32(E, -0.5, 0.5);
      const given = Int32Array.from({ length: T * k }, (_, i) => (Math.floor(i / k) + (i % k)) % E);
      for (const [b, g] of [[null, null], [bias, null], [bias, given]] as const) {
        const r = H.refOssRouterF32(logits, b, T, E, k, g), e = G.ossRouterF32(logits, b, T, E, k, g);
        expect(Array.from(r.ids), 'oss router ids').toEqual(Array.from(e.ids));
        expect(firstF32Mismatch(r.weights, e.weights), 'oss router weights').toBe(-1);
      }
    }
    const rows = 9, I = 77;
    const h = randomF16(rand, rows * 2 * I, 12);
    h[5] = 0x7e00; // NaN gate (element 2·2 + 1 is an up: both kinds)
    h[6] = 0x7c00; // +Inf gate
    h[7] = 0xfc00; // −Inf up
    same16(H.refOssSwigluF16(h, rows, I, 7, 1.702), G.ossSwigluF16(h, rows, I, 7, 1.702), 'ossSwiglu');
  });
});

/**
 * ld_attention_decode's expected values (ldref::attention_decode) == attentionDecodeF16 (src/decode.cc). Cache:
 * Bc sequences × cap slots, slot s = position s; group b reads sequence slot[b] from position start[b]. The
 * shapes cover a window that starts inside the cache (pos − window + 1 > 0) next to rows shorter than the window,
 * window = cap, the last slot of the cache, several groups on one cache sequence, groups in reverse slot order,
 * chunks (Tq > 1) whose window start moves inside the chunk, GQA/MQA and D = 512.
 */
describe('decode attention: host reference of ld_attention_decode == emulation (attentionDecodeF16)', () => {
  interface DecodeCase { B: number; Tq: number; Bc: number; cap: number; Hq: number; Hkv: number; D: number; Dv: number; window: number; sinks: boolean; slot: number[]; start: number[] }
  const name = (c: DecodeCase): string =>
    `attention_decode(B=${c.B},Tq=${c.Tq},cap=${c.cap},Bc=${c.Bc},Hq=${c.Hq},Hkv=${c.Hkv},D=${c.D},Dv=${c.Dv},window=${c.window},sinks=${c.sinks},slot=[${c.slot}],start=[${c.start}])`;
  const inputs = (c: DecodeCase, seed: number) => {
    const rand = rng(seed);
    return {
      q: randomF16(rand, c.B * c.Tq * c.Hq * c.D, 3),
      k: randomF16(rand, c.Bc * c.cap * c.Hkv * c.D, 3),
      v: randomF16(rand, c.Bc * c.cap * c.Hkv * c.Dv, 2),
      sinks: c.sinks ? Float32Array.from({ length: c.Hq }, () => (rand() - 0.5) * 8) : null,
    };
  };
  const DECODE: DecodeCase[] = [
    { B: 2, Tq: 1, Bc: 3, cap: 32, Hq: 4, Hkv: 2, D: 64, Dv: 64, window: 0, sinks: false, slot: [2, 0], start: [31, 9] },
    { B: 2, Tq: 1, Bc: 2, cap: 32, Hq: 4, Hkv: 1, D: 36, Dv: 20, window: 8, sinks: true, slot: [1, 0], start: [25, 3] },
    { B: 3, Tq: 5, Bc: 2, cap: 40, Hq: 8, Hkv: 2, D: 16, Dv: 16, window: 6, sinks: true, slot: [1, 1, 0], start: [0, 17, 35] },
    { B: 4, Tq: 1, Bc: 4, cap: 16, Hq: 3, Hkv: 1, D: 8, Dv: 8, window: 16, sinks: false, slot: [3, 2, 1, 0], start: [15, 0, 7, 14] },
    { B: 1, Tq: 3, Bc: 1, cap: 200, Hq: 2, Hkv: 2, D: 512, Dv: 512, window: 128, sinks: true, slot: [0], start: [150] },
    // rings (a sliding layer's window + chunk − 1 slots): positions past cap wrap, keys still in position order
    { B: 2, Tq: 3, Bc: 2, cap: 10, Hq: 4, Hkv: 2, D: 16, Dv: 16, window: 8, sinks: true, slot: [0, 1], start: [37, 8] },
    { B: 1, Tq: 1, Bc: 1, cap: 8, Hq: 2, Hkv: 1, D: 32, Dv: 24, window: 8, sinks: false, slot: [0], start: [1000] },
  ];
  DECODE.forEach((c, i) => {
    it(name(c), () => {
      const { q, k, v, sinks } = inputs(c, 4900 + i);
      const slot = Int32Array.from(c.slot), start = Int32Array.from(c.start), scale = 1 / Math.sqrt(c.D);
      const want = Dec.attentionDecodeF16(q, k, v, c.B, c.Tq, c.Bc, c.cap, slot, start, c.Hq, c.Hkv, c.D, c.Dv, scale, c.window, sinks);
      expect(countNonFinite16(want), 'finite inputs give finite outputs').toBe(0);
      same16(H.refAttentionDecodeF16(q, k, v, c.B, c.Tq, c.Bc, c.cap, slot, start, c.Hq, c.Hkv, c.D, c.Dv, scale, c.window, sinks), want, name(c));
    });
  });

  it('attention_decode(B=2,Tq=2,cap=24,window=5) NaN key / Inf value: exactly the rows that see them are non-finite, then bit for bit', () => {
    const c: DecodeCase = { B: 3, Tq: 2, Bc: 2, cap: 24, Hq: 4, Hkv: 2, D: 16, Dv: 8, window: 5, sinks: true, slot: [1, 0, 1], start: [12, 3, 6], };
    const { q, k, v, sinks } = inputs(c, 4990);
    const nanSeq = 1, nanPos = 10, nanHead = 0; // a NaN key in sequence 1 at position 10, kv head 0
    const infSeq = 0, infPos = 2, infHead = 1; // an Inf value in sequence 0 at position 2, kv head 1
    k[((nanSeq * c.cap + nanPos) * c.Hkv + nanHead) * c.D + 3] = 0x7e00;
    v[((infSeq * c.cap + infPos) * c.Hkv + infHead) * c.Dv + 5] = 0x7c00;
    const slot = Int32Array.from(c.slot), start = Int32Array.from(c.start);
    const got = Dec.attentionDecodeF16(q, k, v, c.B, c.Tq, c.Bc, c.cap, slot, start, c.Hq, c.Hkv, c.D, c.Dv, 0.25, c.window, sinks);
    let poisoned = 0;
    for (let b = 0; b < c.B; b++) {
      for (let t = 0; t < c.Tq; t++) {
        const pos = c.start[b] + t, s0 = Math.max(0, pos - c.window + 1);
        for (let h = 0; h < c.Hq; h++) {
          const hk = Math.floor(h / (c.Hq / c.Hkv));
          const sees = (seq: number, p: number, head: number): boolean => c.slot[b] === seq && hk === head && s0 <= p && p <= pos;
          const bad = sees(nanSeq, nanPos, nanHead) || sees(infSeq, infPos, infHead);
          const r = ((b * c.Tq + t) * c.Hq + h) * c.Dv;
          expect(countNonFinite16(got.subarray(r, r + c.Dv)) > 0, `b=${b} t=${t} h=${h}`).toBe(bad);
          if (bad) poisoned++;
        }
      }
    }
    expect(poisoned, 'the case reaches both poisoned entries').toBeGreaterThan(2);
    same16(H.refAttentionDecodeF16(q, k, v, c.B, c.Tq, c.Bc, c.cap, slot, start, c.Hq, c.Hkv, c.D, c.Dv, 0.25, c.window, sinks), got, 'NaN/Inf case');
  });

  it('refAttentionDecodeF16 and the GPU entry reject what decode.cc rejects: a slot outside the cache, start + Tq past cap', () => {
    const q = new Uint16Array(8), kc = new Uint16Array(4 * 8);
    for (const f of [H.refAttentionDecodeF16, H.attentionDecodeF16]) {
      expect(() => f(q, kc, kc, 1, 1, 1, 4, Int32Array.of(1), Int32Array.of(0), 1, 1, 8, 8, 1, 0, null)).toThrow(/slot/);
      expect(() => f(q, kc, kc, 1, 1, 1, 4, Int32Array.of(0), Int32Array.of(4), 1, 1, 8, 8, 1, 0, null)).toThrow(RangeError);
      // a ring too small for its window (window + Tq − 1 > cap) is refused; one that fits is not
      expect(() => f(q, kc, kc, 1, 1, 1, 4, Int32Array.of(0), Int32Array.of(9), 1, 1, 8, 8, 1, 5, null)).toThrow(RangeError);
      // one that fits passes the checks (the GPU entry then needs an open backend, which this machine lacks)
      if (f === H.refAttentionDecodeF16) expect(() => f(q, kc, kc, 1, 1, 1, 4, Int32Array.of(0), Int32Array.of(9), 1, 1, 8, 8, 1, 4, null)).not.toThrow();
      else expect(() => f(q, kc, kc, 1, 1, 1, 4, Int32Array.of(0), Int32Array.of(9), 1, 1, 8, 8, 1, 4, null)).toThrow(/open\(\) the hip backend/);
    }
  });
});

describe('emulation ops whose element math moved into ld_numerics.h: guards and NaN/Inf first', () => {
  it('rmsnorm: an Inf in a row makes that row non-finite and leaves the others finite; views and guards intact', () => {
    const rand = rng(4800);
    const rows = 3, dim = 37;
    const x = randomF16(rand, rows * dim, 2), w = randomF16(rand, dim, 1);
    x[dim + 4] = 0x7c00;
    const gx = guarded(x), gw = guarded(w);
    const y = N.rmsnormF16(gx.view, gw.view, rows, dim, 1e-6);
    expect(gx.intact() && gw.intact()).toBe(true);
    expect(countNonFinite16(y.subarray(0, dim))).toBe(0);
    expect(countNonFinite16(y.subarray(2 * dim))).toBe(0);
    expect(countNonFinite16(y.subarray(dim, 2 * dim))).toBeGreaterThan(0);
    same16(y, H.refRmsnormF16(x, w, rows, dim, 1e-6), 'vs host ref');
  });

  it('swiglu and mulScalar: NaN passes, overflow is Inf; subarray views and guards intact', () => {
    const rand = rng(4801);
    const g = randomF16(rand, 301, 30), u = randomF16(rand, 301, 30);
    g[7] = 0x7e00;
    u[9] = 0x7c00; // +Inf up: clamped to the limit, else Inf·silu
    const gg = guarded(g), gu = guarded(u);
    const y = N.swigluF16(gg.view, gu.view, 0);
    const yl = N.swigluF16(gg.view, gu.view, 10);
    expect(gg.intact() && gu.intact()).toBe(true);
    expect((y[7] & 0x7c00) === 0x7c00 && (y[7] & 0x3ff) !== 0).toBe(true);
    expect(Number.isFinite(fromF16(yl[9]))).toBe(true);
    same16(y, H.refSwigluF16(g, u, 0), 'no limit');
    same16(yl, H.refSwigluF16(g, u, 10), 'limit 10');
    const ga = guarded(randomF16(rand, 100, 60000));
    const p = N.mulScalarF16(ga.view, 1e5);
    expect(ga.intact()).toBe(true);
    expect(countNonFinite16(p)).toBeGreaterThan(0);
  });

  it('attention: k and v as views with guards; a NaN key poisons exactly the queries that see it', () => {
    const rand = rng(4802);
    const T = 10, Hh = 2, D = 16;
    const q = randomF16(rand, T * Hh * D), k = randomF16(rand, T * Hh * D), v = randomF16(rand, T * Hh * D);
    k[(4 * Hh + 1) * D + 3] = 0x7e00; // token 4, kv head 1
    const gk = guarded(k), gv = guarded(v);
    const y = N.attentionF16(q, gk.view, gv.view, T, Hh, Hh, D, D, 0.25, 3, null);
    expect(gk.intact() && gv.intact()).toBe(true);
    for (let t = 0; t < T; t++) {
      for (let h = 0; h < Hh; h++) {
        const row = y.subarray((t * Hh + h) * D, (t * Hh + h + 1) * D);
        const sees = h === 1 && t >= 4 && t - 3 < 4; // window 3: keys t-2..t
        expect(countNonFinite16(row) > 0, `t=${t} h=${h}`).toBe(sees);
      }
    }
    same16(y, H.refAttentionF16(q, k, v, T, Hh, Hh, D, D, 0.25, 3, null), 'vs host ref');
  });

  it('mxfp4 dequant: weight and scale views with guards, nibble order (low nibble = even index) and its swap fault', () => {
    const w = Uint8Array.from({ length: 16 }, (_, i) => (i === 0 ? 0x71 : 0)); // element 0: code 1 (0.5), element 1: code 7 (6)
    const s = new Uint8Array([127]);
    const gw = guarded(w), gs = guarded(s);
    const y = N.dequantToF16(0, gw.view, gs.view, false, 1, 32, 1, 32, 0);
    const ys = N.dequantToF16(0, gw.view, gs.view, false, 1, 32, 1, 32, 2);
    expect(gw.intact() && gs.intact()).toBe(true);
    expect([fromF16(y[0]), fromF16(y[1])]).toEqual([0.5, 6]);
    expect([fromF16(ys[0]), fromF16(ys[1])]).toEqual([6, 0.5]);
  });
});

describe('hip backend selection on a machine without an AMD GPU', () => {
  const p = probeHip();
  const gpu = hipProblem(p) === null;

  it('the probe says what is missing: the library, or a device', () => {
    if (gpu) return; // an AMD GPU is present: nothing is missing
    expect(hipProblem(p)).toMatch(/HIP runtime was not found|no AMD GPU is visible|not built/);
    if (p.library) expect(p.deviceCount).toBe(0);
  });

  it('--device hip without a GPU is an InputError (exit 2) naming what was missing; auto falls back to emulated and says why', () => {
    if (gpu) return;
    expect(() => selectBackend('hip')).toThrow(InputError);
    expect(() => selectBackend('hip')).toThrow(/--device hip: .*(HIP runtime was not found|no AMD GPU is visible|not built).*--device emulated/);
    const a = selectBackend('auto');
    expect(a.identity.name).toBe('emulated');
    expect(a.identity.fallback).toMatch(/hip not used/);
    const e = selectBackend('emulated');
    expect(e.identity.name).toBe('emulated');
    expect(e.identity.fallback).toBeUndefined();
    expect(e.identity.description).toMatch(/not GPU hardware/);
  });

  it('layerdiff diff --device hip exits 2 with one line saying what is missing', () => {
    if (gpu) return;
    const r = cli(['diff', '--device', 'hip']);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/--device hip: .*(HIP runtime was not found|no AMD GPU is visible|not built)/);
  });

  it('the ld_hip GPU ops refuse to run before open()', () => {
    expect(() => H.gemmF16(new Uint16Array(4), new Uint16Array(4), 1, 4, 1, 1)).toThrow(/open\(\) the hip backend first/);
    if (!gpu) expect(() => H.open('/nonexistent/ld_kernels_gfx90a.co')).toThrow(/cannot read the code object|no device/);
  });

  it('the hip DeepseekNative and DecodeNative: every op passes the emulation signature\'s checks, reaches its GPU entry, and refuses before open()', () => {
    // The wrappers openHipNative builds, around the addon: a wrong shape is the emulation's TypeError/RangeError,
    // a right one reaches the native entry point (which reads every argument before it needs the device).
    const ds = validatedDeepseekNative(H), dec = validatedDecodeNative(H);
    const u16 = (n: number) => new Uint16Array(n), f32 = (n: number) => new Float32Array(n);
    const T = 4, hc = 2, D = 8, w = hc * D;
    const calls: Array<[string, () => unknown]> = [
      ['hcPreF16', () => ds.hcPreF16(u16(T * w), f32((2 + hc) * hc * w), f32((2 + hc) * hc), f32(3), T, hc, D, 1e-6, 1e-6, 2)],
      ['hcHeadF16', () => ds.hcHeadF16(u16(T * w), f32(hc * w), f32(hc), f32(1), T, hc, D, 1e-6, 1e-6)],
      ['hcPostF16', () => ds.hcPostF16(u16(T * D), u16(T * w), f32(T * hc), f32(T * hc * hc), T, hc, D)],
      ['compressPoolF16', () => ds.compressPoolF16(f32(T * 2 * D), f32(T * 2 * D), f32(2 * 2 * D), T, 2, D, true)],
      ['indexerTopkF16', () => ds.indexerTopkF16(u16(T * 2 * D), u16(T * 2), u16(2 * D), T, 2, D, 2, 2, 0, 1, 0.5)],
      ['sparseAttentionF16', () => ds.sparseAttentionF16(u16(T * 2 * D), u16(T * D), u16(2 * D), T, 2, D, 2, 0, Int32Array.of(0, -1, 1, 0, -1, -1, 1, 1), 2, f32(2), 0.5)],
      ['routerF32', () => ds.routerF32(f32(T * 6), f32(6), T, 6, 2, 1.5, null)],
      ['swigluRowsF16', () => ds.swigluRowsF16(u16(T * D), u16(T * D), T, D, f32(T), 7)],
      ['moeCombineF16', () => ds.moeCombineF16(u16(3 * D), Int32Array.of(0, 3, 0), u16(T * D), T, D)],
      ['attentionDecodeF16', () => dec.attentionDecodeF16(u16(2 * 4 * D), u16(2 * 6 * D), u16(2 * 6 * D), 2, 1, 2, 6, Int32Array.of(1, 0), Int32Array.of(5, 2), 4, 1, D, D, 0.3, 3, null)],
    ];
    for (const [op, call] of calls) expect(call, op).toThrow(/open\(\) the hip backend first/);
    expect(() => ds.hcPreF16(u16(T * w - 1), f32((2 + hc) * hc * w), f32((2 + hc) * hc), f32(3), T, hc, D, 1e-6, 1e-6, 2)).toThrow(RangeError);
    expect(() => ds.indexerTopkF16(u16(T * 2 * D), u16(T * 2), u16(2 * D), T, 2, D, 2, 2, -1, 1, 0.5)).toThrow(/indexerTopkF16: t0 must be an integer >= 0/);
    // the addon reads t0 itself too (its ref* entry has no TypeScript wrapper)
    expect(() => H.refIndexerTopkF16(u16(T * 2 * D), u16(T * 2), u16(2 * D), T, 2, D, 2, 2, -1, 1, 0.5)).toThrow(/t0 must be an integer >= 0/);
    expect(() => dec.attentionDecodeF16(u16(8), u16(32), u16(32), 1, 1, 1, 4, Int32Array.of(0), Int32Array.of(4), 1, 1, 8, 8, 1, 0, null)).toThrow(/does not fit the cache capacity/);
  });

  it('the emulated backend carries the emulation\'s DeepseekNative and DecodeNative', () => {
    const e = selectBackend('emulated');
    expect(e.deepseek).toBe(loadDeepseekNative());
    expect(e.decode).toBe(loadDecodeNative());
    expect(e.native.info().backend).toBe('emulated');
  });
});
