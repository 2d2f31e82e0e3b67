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
import { loadDeviceNative } from '../binding.js';
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

describe('LinearCache.productOnce without a fused product', () => {
  /** an NVFP4 (ModelOpt) weight [OUT, IN]: E2M1 codes, E4M3 block scales of 16, a float32 global scale */
  function nvfp4Weight(seed: number): LinearWeight {
    const r = new Rng(seed);
    const name = `model.layers.0.mlp.experts.${seed}.up_proj.weight`;
    const g = Math.fround(1.5e-4);
    return {
      name, out: OUT, in: IN, format: 'nvfp4', encoding: 'modelopt-nvfp4', block: [1, 16],
      weight: { name, dtype: 'U8', shape: [OUT, IN / 2], bytes: Uint8Array.from({ length: (OUT * IN) / 2 }, () => r.int(256)) },
      scale: { name: `${name}_scale`, dtype: 'F8_E4M3', shape: [OUT, IN / 16], bytes: Uint8Array.from({ length: (OUT * IN) / 16 }, () => 0x20 + r.int(0x40)) },
      global: { tensor: { name: `${name}_scale_2`, dtype: 'F32', shape: [], bytes: new Uint8Array(new Float32Array([g]).buffer) }, value: g, op: 'mul' },
    };
  }

  it('multiplies the FP16 copy with gemmF16\'s bits and frees the copy when the product returns; an F16 weight\'s own bytes are left alone', () => {
    const seen: Uint16Array[] = [];
    const spied = new Proxy(N, { get: (t, p, r) => (p === 'gemmF16' ? (...a: Parameters<typeof N.gemmF16>) => (seen.push(a[1]), t.gemmF16(...a)) : Reflect.get(t, p, r)) });
    const cache = new LinearCache(spied);
    const rand = rng(79);
    const lw = nvfp4Weight(5);
    const g = lw.global!;
    // the device's FP16 copy, made apart from the cache
    const w16 = N.dequantNvfp4ToF16(lw.weight.bytes, lw.scale!.bytes, OUT, IN, g.value, false, 0);
    const x = randomF16(rand, 3 * IN, 1);
    const expected = N.gemmF16(x, w16, 3, IN, OUT, 0.5);
    seen.length = 0;
    expect(cache.productOnce(x, 3, lw, null, 0.5)).toEqual(expected);
    expect(seen.length, 'one product').toBe(1);
    expect(seen[0].length, 'the copy is freed (its buffer detached) once the product returns').toBe(0);
    // a plain F16 weight is multiplied from a view of its stored bytes: nothing of the caller's is freed
    const plain: LinearWeight = { name: 'f16.weight', out: OUT, in: IN, format: 'plain', block: [1, 1], scale: null, weight: { name: 'f16.weight', dtype: 'F16', shape: [OUT, IN], bytes: new Uint8Array(w16.buffer.slice(0)) } };
    seen.length = 0;
    expect(cache.productOnce(x, 3, plain, null, 0.5)).toEqual(expected);
    expect(plain.weight.bytes.length, 'the stored bytes keep their length').toBe(OUT * IN * 2);
    expect(new Uint16Array(plain.weight.bytes.buffer)).toEqual(w16);
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
