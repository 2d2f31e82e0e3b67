/**
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

const N = loadDeviceNative();
const OUT = 256;
const IN = 512;

/** an FP8-block weight [OUT, IN] (128 × 128 blocks, E8M0 scales as training leaves them) over `codes` */
function fp8Weight(codes: Uint8Array, seed: number): LinearWeight {
  const r = new Rng(seed);
  for (let i = 0; i < codes.length; i++) {
    const c = r.int(256);
    codes[i] = (c & 0x7f) === 0x7f ? c - 1 : c; // no NaN codes
  }
  const scales = Uint8Array.from({ length: (OUT / 128) * (IN / 128) }, () => 118 + r.int(9));
  const name = `layers.0.attn.wq_a.${seed}.weight`;
  return {
    name, out: OUT, in: IN, format: 'fp8-block', encoding: 'fp8-block', block: [128, 128],
    weight: { name, dtype: 'F8_E4M3', shape: [OUT, IN], bytes: codes },
    scale: { name: name.replace('weight', 'scale'), dtype: 'F8_E8M0', shape: [OUT / 128, IN / 128], bytes: scales },
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
});
