/**
 * LinearCache's products read an FP8-block weight's stored bytes through the fused FP8 GEMM at every row count, with
 * the FP16 copy's bits, whole or a block-aligned slice of its rows, and make no copy. A weight used once without a
 * fused product frees its copy when the product returns.
 * LinearCache's FP16 weights live as long as the read they were dequantized from: one made from a read of a pool's
 * scope (the runner's layer) is freed when that scope ends (harness/io/read_pool.ts, tieToRead), so a layer's FP16
 * weights no longer wait for the collector while the next layer allocates its own; one made from bytes read
 * outside any pool (a kept layer, the FP16 cache's mappings) stays.
 */
import { describe, expect, it } from 'vitest';
import { FAULT_CODES, loadDeviceNative, type NativeFault } from '../binding.js';
import { NF4_VALUES } from '../../harness/formats/dtypes.js';
import { LinearCache } from '../linear.js';
import type { LinearWeight } from '../../harness/formats/linear.js';
import { ReadPool, withReadPool } from '../../harness/io/read_pool.js';
import { Rng } from '../../harness/rng.js';
import { randomF16, rng } from './model.js';

const N = loadDeviceNative();
const OUT = 256;
const IN = 512;

/** an FP8-block weight [OUT, IN] (128 × 128 blocks, E8M0 scales as training leaves them) over `codes` */
function fp8Weight(codes: Uint8Array, seed: number, f32Scales = false): LinearWeight {
  const r = new Rng(seed);
  for (let i = 0; i < codes.length; i++) {
    const c = r.int(256);
    codes[i] = (c & 0x7f) === 0x7f ? c - 1 : c; // no NaN codes
  }
  const blocks = (OUT / 128) * (IN / 128);
  const scales = f32Scales ? new Uint8Array(Float32Array.from({ length: blocks }, () => (1 + r.int(1000) / 1000) * 2 ** -8).buffer) : Uint8Array.from({ length: blocks }, () => 118 + r.int(9));
  const name = `layers.0.attn.wq_a.${seed}.weight`;
  return {
    name, out: OUT, in: IN, format: 'fp8-block', encoding: 'fp8-block', block: [128, 128],
    weight: { name, dtype: 'F8_E4M3', shape: [OUT, IN], bytes: codes },
    scale: { name: name.replace('weight', 'scale'), dtype: f32Scales ? 'F32' : 'F8_E8M0', shape: [OUT / 128, IN / 128], bytes: scales },
  };
}

describe('LinearCache and the read pool', () => {
  it('frees the FP16 weight of a read made in a scope when the scope ends, and keeps one read outside any pool', () => {
    const cache = new LinearCache(N);
    const pool = new ReadPool();
    const outside = fp8Weight(new Uint8Array(OUT * IN), 2);
    const kept = cache.get(outside, null);
    let scoped: Uint16Array | null = null;
    let scopedCopy: Uint16Array | null = null;
    withReadPool(pool, () => {
      const lw = fp8Weight(pool.take(OUT * IN), 1);
      scoped = cache.get(lw, null);
      expect(cache.get(lw, null), 'cached within the scope').toBe(scoped);
      // the device's own dequantization of the same bytes, made apart from the cache
      scopedCopy = N.dequantToF16(1, lw.weight.bytes, lw.scale!.bytes, false, OUT, IN, 128, 128, 0).slice();
      expect(scoped).toEqual(scopedCopy);
      expect(cache.get(outside, null), 'a weight read outside the pool, used inside a scope').toBe(kept);
    });
    expect(scoped!.length, 'freed with the read it came from').toBe(0);
    expect(kept.length, 'a weight read outside any pool keeps its FP16').toBe(OUT * IN);
    expect(kept).toEqual(cache.dequant(outside, null));
  });

  it('a product at any row count reads an FP8-block weight through gemmFp8F16 (whole or a block-aligned slice of its rows) with the FP16 copy\'s bits, and makes no copy; an unaligned slice multiplies the copy, made once', () => {
    let dequants = 0;
    const counted = new Proxy(N, { get: (t, p, r) => (p === 'dequantToF16' ? (...a: Parameters<typeof N.dequantToF16>) => (dequants++, t.dequantToF16(...a)) : Reflect.get(t, p, r)) });
    const rand = rng(77);
    for (const f32 of [false, true]) {
      const lw = fp8Weight(new Uint8Array(OUT * IN), 3, f32);
      // the device's FP16 copy, made apart from the cache
      const w16 = N.dequantToF16(1, lw.weight.bytes, lw.scale!.bytes, f32, OUT, IN, 128, 128, 0);
      const cache = new LinearCache(counted);
      // the GEMV kernel's row counts (≤ 4) and the tiled kernel's (5, 16, 37: a diff's)
      for (const rows of [1, 2, 4, 5, 16, 37]) {
        const x = randomF16(rand, rows * IN, 1);
        expect(cache.product(x, rows, lw, null, 0.5), `${rows} rows, whole`).toEqual(N.gemmF16(x, w16, rows, IN, OUT, 0.5));
        // block row 1 alone: its scales are the second row of blocks
        expect(cache.product(x, rows, lw, null, 1, 128, 128), `${rows} rows, rows 128..256`).toEqual(N.gemmF16(x, w16.subarray(128 * IN), rows, IN, 128, 1));
      }
      expect(dequants, 'no FP16 copy made').toBe(0);
      // a slice off the block rows: the held FP16 copy, made once for both products
      const x = randomF16(rand, 5 * IN, 1);
      const x1 = x.subarray(0, IN);
      expect(cache.product(x1, 1, lw, null, 1, 64, 128)).toEqual(N.gemmF16(x1, w16.subarray(64 * IN, 192 * IN), 1, IN, 128, 1));
      expect(cache.product(x, 5, lw, null, 1, 64, 128)).toEqual(N.gemmF16(x, w16.subarray(64 * IN, 192 * IN), 5, IN, 128, 1));
      expect(dequants, 'one copy, made once').toBe(1);
      dequants = 0;
    }
  });

  it('a weight used once (a routed expert) of FP8 blocks goes through gemmFp8F16 at any row count, with the bits of gemmF16 over its FP16 dequantization under every fault, and makes no copy', () => {
    let dequants = 0;
    const counted = new Proxy(N, { get: (t, p, r) => (p === 'dequantToF16' ? (...a: Parameters<typeof N.dequantToF16>) => (dequants++, t.dequantToF16(...a)) : Reflect.get(t, p, r)) });
    const cache = new LinearCache(counted);
    const rand = rng(78);
    for (const f32 of [false, true]) {
      const lw = fp8Weight(new Uint8Array(OUT * IN), 4, f32);
      for (const [fault, code] of [[null, 0], ['scale-axis', 4], ['scale-missing', 3]] as const) {
        const w16 = N.dequantToF16(1, lw.weight.bytes, lw.scale!.bytes, f32, OUT, IN, 128, 128, code);
        dequants = 0;
        for (const rows of [1, 5, 37]) {
          const x = randomF16(rand, rows * IN, 1);
          expect(cache.productOnce(x, rows, lw, fault, 0.75), `${f32 ? 'f32' : 'e8m0'} ${fault} ${rows} rows`).toEqual(N.gemmF16(x, w16, rows, IN, OUT, 0.75));
        }
        expect(dequants, 'no FP16 copy made').toBe(0);
      }
    }
  });
});

/** Every fault the device's dequantization takes, with its code. */
const FAULTS = [[null, 0], ...Object.entries(FAULT_CODES)] as [NativeFault | null, number][];

/** N with calls to `op` counted in count.n */
function counting(op: keyof typeof N, count: { n: number }): typeof N {
  return new Proxy(N, { get: (t, p, r) => (p === op ? (...a: unknown[]) => (count.n++, (t[op] as (...b: unknown[]) => unknown)(...a)) : Reflect.get(t, p, r)) });
}

/**
 * a bitsandbytes NF4 weight [out, inDim] in blocks of `blocksize` over the flattened tensor: absmax as F32 or,
 * double-quantized, as U8 codes under a nested absmax (blocks of 256) and map
 */
function bnb4Weight(seed: number, out: number, inDim: number, blocksize: number, doubleQuant: boolean): LinearWeight {
  const r = new Rng(seed);
  const name = `model.layers.0.mlp.down_proj.${seed}.weight`;
  const nblocks = Math.ceil((out * inDim) / blocksize);
  const quantMap = Float32Array.from(NF4_VALUES);
  const nested = doubleQuant
    ? { absmax: Float32Array.from({ length: Math.ceil(nblocks / 256) }, () => 0.01 + r.int(100) / 1000), quantMap: Float32Array.from({ length: 256 }, (_, c) => (c - 127.5) / 127.5), offset: 0.04, blocksize: 256 }
    : null;
  const absmax = doubleQuant ? Uint8Array.from({ length: nblocks }, () => r.int(256)) : new Uint8Array(Float32Array.from({ length: nblocks }, () => 0.01 + r.int(100) / 1000).buffer);
  return {
    name, out, in: inDim, format: 'bnb4', encoding: 'bnb-nf4', block: [1, blocksize],
    weight: { name, dtype: 'U8', shape: [Math.ceil((out * inDim) / 2), 1], bytes: Uint8Array.from({ length: Math.ceil((out * inDim) / 2) }, () => r.int(256)) },
    scale: { name: `${name}.absmax`, dtype: doubleQuant ? 'U8' : 'F32', shape: [nblocks], bytes: absmax },
    bnb: { quantType: 'nf4', blocksize, quantMap, namedTable: true, nested, dtype: 'bfloat16' },
  };
}

/** the device's FP16 copy of a bitsandbytes weight under a fault, made apart from any cache */
function bnb4Copy(lw: LinearWeight, code: number): Uint16Array {
  const q = lw.bnb!;
  const e = new Float32Array(0);
  return N.dequantBnb4ToF16(lw.weight.bytes, lw.scale!.bytes, q.nested !== null, q.quantMap, q.nested?.absmax ?? e, q.nested?.quantMap ?? e, q.nested?.offset ?? 0, q.nested?.blocksize ?? 1, lw.out, lw.in, q.blocksize, code);
}

describe('LinearCache.productOnce without a fused product', () => {
  it('multiplies the FP16 copy with gemmF16\'s bits and frees the copy when the product returns; an F16 weight\'s own bytes are left alone', () => {
    const seen: Uint16Array[] = [];
    const spied = new Proxy(N, { get: (t, p, r) => (p === 'gemmF16' ? (...a: Parameters<typeof N.gemmF16>) => (seen.push(a[1]), t.gemmF16(...a)) : Reflect.get(t, p, r)) });
    const cache = new LinearCache(spied);
    const rand = rng(79);
    // 96 columns in blocks of 64: every other block starts mid-row, so no fused product
    const lw = bnb4Weight(5, 40, 96, 64, false);
    const w16 = bnb4Copy(lw, 0);
    const x = randomF16(rand, 3 * 96, 1);
    const expected = N.gemmF16(x, w16, 3, 96, 40, 0.5);
    seen.length = 0;
    expect(cache.productOnce(x, 3, lw, null, 0.5)).toEqual(expected);
    expect(seen.length, 'one product').toBe(1);
    expect(seen[0].length, 'the copy is freed (its buffer detached) once the product returns').toBe(0);
    // a plain F16 weight is multiplied from a view of its stored bytes: nothing of the caller's is freed
    const plain: LinearWeight = { name: 'f16.weight', out: 40, in: 96, format: 'plain', block: [1, 1], scale: null, weight: { name: 'f16.weight', dtype: 'F16', shape: [40, 96], bytes: new Uint8Array(w16.buffer.slice(0)) } };
    seen.length = 0;
    expect(cache.productOnce(x, 3, plain, null, 0.5)).toEqual(expected);
    expect(plain.weight.bytes.length, 'the stored bytes keep their length').toBe(40 * 96 * 2);
    expect(new Uint16Array(plain.weight.bytes.buffer)).toEqual(w16);
  });
});

describe('LinearCache.product of an NVFP4 weight', () => {
  /** an NVFP4 weight [OUT, IN]: E2M1 codes, E4M3 block scales of 16, a float32 global scale (ModelOpt's multiplier or compressed-tensors' divisor) */
  function nvfp4Weight(seed: number, op: 'mul' | 'div'): LinearWeight {
    const r = new Rng(seed);
    const name = `model.layers.0.mlp.experts.${seed}.up_proj.weight`;
    const g = Math.fround(op === 'mul' ? 1.5e-4 : 6666.5);
    return {
      name, out: OUT, in: IN, format: 'nvfp4', encoding: op === 'mul' ? 'modelopt-nvfp4' : 'ct-nvfp4', block: [1, 16],
      weight: { name, dtype: 'U8', shape: [OUT, IN / 2], bytes: Uint8Array.from({ length: (OUT * IN) / 2 }, () => r.int(256)) },
      scale: { name: `${name}_scale`, dtype: 'F8_E4M3', shape: [OUT, IN / 16], bytes: Uint8Array.from({ length: (OUT * IN) / 16 }, () => 0x20 + r.int(0x40)) },
      global: { tensor: { name: `${name}_scale_2`, dtype: 'F32', shape: [], bytes: new Uint8Array(new Float32Array([g]).buffer) }, value: g, op },
    };
  }

  it('goes through gemmNvfp4F16 at every row count, whole or any slice of rows, with the bits of gemmF16 over the FP16 copy under each fault and both global-scale ops, and makes no copy', () => {
    const count = { n: 0 };
    const cache = new LinearCache(counting('dequantNvfp4ToF16', count));
    const rand = rng(81);
    for (const op of ['mul', 'div'] as const) {
      const lw = nvfp4Weight(7, op);
      const g = lw.global!;
      for (const [fault, code] of FAULTS) {
        // the device's FP16 copy under the same fault, made apart from the cache
        const w16 = N.dequantNvfp4ToF16(lw.weight.bytes, lw.scale!.bytes, OUT, IN, g.value, op === 'div', code);
        count.n = 0;
        for (const rows of [1, 3, 16, 37]) {
          const x = randomF16(rand, rows * IN, 1);
          expect(cache.product(x, rows, lw, fault, 0.75), `${op} ${fault} ${rows} rows, whole`).toEqual(N.gemmF16(x, w16, rows, IN, OUT, 0.75));
          expect(cache.productOnce(x, rows, lw, fault, 0.75), `${op} ${fault} ${rows} rows, once`).toEqual(N.gemmF16(x, w16, rows, IN, OUT, 0.75));
          // rows 37..137: any slice of rows is a weight of its own
          if (fault === null) expect(cache.product(x, rows, lw, null, 1, 37, 100), `${op} ${rows} rows, rows 37..137`).toEqual(N.gemmF16(x, w16.subarray(37 * IN, 137 * IN), rows, IN, 100, 1));
        }
        expect(count.n, `${op} ${fault}: no FP16 copy made`).toBe(0);
      }
    }
    // a slice under a fault is multiplied from the whole tensor's copy (the fault's scale indexing reads the whole shape)
    const lw = nvfp4Weight(8, 'mul');
    const w16 = N.dequantNvfp4ToF16(lw.weight.bytes, lw.scale!.bytes, OUT, IN, lw.global!.value, false, FAULT_CODES['scale-axis']);
    const x = randomF16(rand, 2 * IN, 1);
    expect(cache.product(x, 2, lw, 'scale-axis', 1, 37, 100)).toEqual(N.gemmF16(x, w16.subarray(37 * IN, 137 * IN), 2, IN, 100, 1));
    expect(count.n, 'one copy for the faulted slice').toBe(1);
  });
});

describe('LinearCache.product of a bitsandbytes 4-bit weight', () => {
  it('goes through gemmBnb4F16 at every row count where rows hold whole blocks, with the bits of gemmF16 over the FP16 copy under each fault, with and without double quant, and makes no copy', () => {
    const count = { n: 0 };
    const cache = new LinearCache(counting('dequantBnb4ToF16', count));
    const rand = rng(82);
    for (const [blocksize, doubleQuant] of [[64, false], [64, true], [256, true], [512, false]] as const) {
      const lw = bnb4Weight(9, OUT, IN, blocksize, doubleQuant);
      for (const [fault, code] of FAULTS) {
        const w16 = bnb4Copy(lw, code);
        count.n = 0;
        for (const rows of [1, 3, 16, 37]) {
          const x = randomF16(rand, rows * IN, 1);
          const what = `blocks of ${blocksize}${doubleQuant ? ', double quant' : ''}, ${fault}, ${rows} rows`;
          expect(cache.product(x, rows, lw, fault, 0.75), what).toEqual(N.gemmF16(x, w16, rows, IN, OUT, 0.75));
          expect(cache.productOnce(x, rows, lw, fault, 0.75), `${what}, once`).toEqual(N.gemmF16(x, w16, rows, IN, OUT, 0.75));
        }
        expect(count.n, `${blocksize} ${fault}: no FP16 copy made`).toBe(0);
      }
    }
  });

  it('multiplies the FP16 copy where blocks straddle rows, and for a slice of rows (held, made once)', () => {
    const count = { n: 0 };
    const cache = new LinearCache(counting('dequantBnb4ToF16', count));
    const rand = rng(83);
    // 96 columns in blocks of 64: every other block starts mid-row
    const straddling = bnb4Weight(10, 40, 96, 64, true);
    const x = randomF16(rand, 5 * 96, 1);
    expect(cache.product(x, 5, straddling, null, 1)).toEqual(N.gemmF16(x, bnb4Copy(straddling, 0), 5, 96, 40, 1));
    expect(cache.product(x, 5, straddling, null, 1, 8, 16)).toEqual(N.gemmF16(x, bnb4Copy(straddling, 0).subarray(8 * 96, 24 * 96), 5, 96, 16, 1));
    expect(count.n, 'one held copy').toBe(1);
    const lw = bnb4Weight(11, OUT, IN, 64, false);
    const y = randomF16(rand, 2 * IN, 1);
    expect(cache.product(y, 2, lw, null, 1, 37, 100)).toEqual(N.gemmF16(y, bnb4Copy(lw, 0).subarray(37 * IN, 137 * IN), 2, IN, 100, 1));
    expect(count.n, 'a slice: the held copy').toBe(2);
  });
});

describe('LinearCache.product of an MXFP4 weight', () => {
  /** an MXFP4 weight [OUT, IN]: E2M1 codes, E8M0 scales as training leaves them */
  function mxfp4Weight(seed: number): LinearWeight {
    const r = new Rng(seed);
    const name = `model.layers.0.self_attn.q_proj.${seed}.weight`;
    return {
      name, out: OUT, in: IN, format: 'mxfp4', encoding: 'quark-mxfp4', block: [1, 32],
      weight: { name, dtype: 'U8', shape: [OUT, IN / 2], bytes: Uint8Array.from({ length: (OUT * IN) / 2 }, () => r.int(256)) },
      scale: { name: name.replace('weight', 'weight_scale'), dtype: 'U8', shape: [OUT, IN / 32], bytes: Uint8Array.from({ length: (OUT * IN) / 32 }, () => 118 + r.int(12)) },
    };
  }

  it('goes through gemmMxfp4F16 at every row count, whole or any slice of rows, with the bits of gemmF16 over the FP16 copy under each fault, and makes no copy', () => {
    let dequants = 0;
    const counted = new Proxy(N, { get: (t, p, r) => (p === 'dequantToF16' ? (...a: Parameters<typeof N.dequantToF16>) => (dequants++, t.dequantToF16(...a)) : Reflect.get(t, p, r)) });
    const cache = new LinearCache(counted);
    const rand = rng(80);
    const lw = mxfp4Weight(6);
    for (const [fault, code] of [[null, 0], ['e3m0-table', 1], ['nibble-swap', 2], ['scale-missing', 3], ['scale-axis', 4], ['scale-stride', 5], ['e8m0-as-int', 6]] as const) {
      // the device's FP16 copy under the same fault, made apart from the cache
      const w16 = N.dequantToF16(0, lw.weight.bytes, lw.scale!.bytes, false, OUT, IN, 1, 32, code);
      dequants = 0;
      for (const rows of [1, 3, 16, 37]) {
        const x = randomF16(rand, rows * IN, 1);
        expect(cache.product(x, rows, lw, fault, 0.75), `${fault} ${rows} rows, whole`).toEqual(N.gemmF16(x, w16, rows, IN, OUT, 0.75));
        if (fault === null) {
          // rows 37..137: any slice of rows is a weight of its own
          expect(cache.product(x, rows, lw, null, 1, 37, 100), `${rows} rows, rows 37..137`).toEqual(N.gemmF16(x, w16.subarray(37 * IN, 137 * IN), rows, IN, 100, 1));
        }
      }
      expect(dequants, `${fault}: no FP16 copy made`).toBe(0);
    }
    // a slice under a fault is multiplied from the whole tensor's copy (the fault's scale indexing reads the whole shape)
    const w16 = N.dequantToF16(0, lw.weight.bytes, lw.scale!.bytes, false, OUT, IN, 1, 32, 4);
    const x = randomF16(rand, 2 * IN, 1);
    expect(cache.product(x, 2, lw, 'scale-axis', 1, 37, 100)).toEqual(N.gemmF16(x, w16.subarray(37 * IN, 137 * IN), 2, IN, 100, 1));
    expect(dequants, 'one copy for the faulted slice').toBe(1);
  });
});
