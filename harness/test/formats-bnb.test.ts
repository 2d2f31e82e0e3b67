/**
 * bitsandbytes 4-bit codes through both paths against an independent decoder written here from
 * spec/fp4-formats.md §5 (its printed tables, its formula, @petamoriken/float16 for the FP16 rounding): every
 * code of NF4 and of bitsandbytes' "fp4" times absmax values that stay in FP16, underflow it and overflow it;
 * with double quantization, every one of the 256 absmax codes through the nested table. Also the high-even
 * nibble order, and the two faults only bitsandbytes has, against their descriptions.
 */
import { f16round, getFloat16 } from '@petamoriken/float16';
import { describe, expect, it } from 'vitest';
import { BNB_FP4_VALUES, NF4_VALUES } from '../formats/dtypes.js';
import type { BnbState, LinearWeight } from '../formats/linear.js';
import { dequantLinear } from '../../reference-cpu/dequant.js';
import { FAULT_CODES, loadDeviceNative } from '../../device-hip/binding.js';
import { LinearCache } from '../../device-hip/linear.js';
import { bnbDynamicMap, quantizeBnb4 } from '../../fixtures/fp4_producers.js';
import * as path from 'node:path';
import { Checkpoint } from '../io/checkpoint.js';
import { checkTensor, checkWeights } from '../weights/check.js';
import { describeWeights } from '../../reports/format.js';

const N = loadDeviceNative();

// spec §5, as printed (7 digits): the stored float32 tables must be these values
const SPEC_NF4 = [-1, -0.6961928, -0.5250731, -0.3949175, -0.2844414, -0.1847734, -0.09105, 0, 0.0795803, 0.1609302, 0.2461123, 0.3379152, 0.4407098, 0.562617, 0.7229568, 1];
const SPEC_FP4 = [0, 0.0625, 8, 12, 4, 6, 2, 3, -0, -0.0625, -8, -12, -4, -6, -2, -3].map((v) => v / 12);
const E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6];
const f16At = (bits: Uint16Array, k: number) => getFloat16(new DataView(bits.buffer, bits.byteOffset + 2 * k, 2), 0, true);

/** A [rows, 16] weight, blocksize 16: block r holds the 16 codes in order, high-even. */
function everyCode(rows: number): Uint8Array {
  const packed = new Uint8Array(rows * 8);
  for (let k = 0; k < packed.length; k++) packed[k] = (((2 * k) % 16) << 4) | ((2 * k + 1) % 16);
  return packed;
}

function memBnb(packed: Uint8Array, rows: number, absmax: Float32Array | Uint8Array, quantMap: Float32Array, nested: BnbState['nested']): LinearWeight {
  const a = absmax instanceof Float32Array ? new Uint8Array(absmax.buffer.slice(0)) : absmax;
  return {
    name: 'test.weight',
    format: 'bnb4',
    out: rows,
    in: 16,
    weight: { name: 'test.weight', dtype: 'U8', shape: [rows * 8, 1], bytes: packed },
    scale: { name: 'test.weight.absmax', dtype: absmax instanceof Float32Array ? 'F32' : 'U8', shape: [absmax.length], bytes: a },
    block: [1, 16],
    global: null,
    bnb: { quantType: 'nf4', blocksize: 16, quantMap, namedTable: true, nested, dtype: 'bfloat16' },
  };
}

describe('bitsandbytes tables', () => {
  it('the stored NF4 and fp4 tables are the spec\'s values (fp4 is not E2M1)', () => {
    for (let c = 0; c < 16; c++) {
      expect(Math.abs(NF4_VALUES[c] - SPEC_NF4[c]), `nf4 ${c}`).toBeLessThan(6e-8);
      expect(BNB_FP4_VALUES[c]).toBe(Math.fround(SPEC_FP4[c]));
    }
    expect(BNB_FP4_VALUES.map((v) => v * 12)).not.toEqual(E2M1);
  });
});

describe('every bitsandbytes code through both paths', () => {
  // in range, an inexact product, below FP16's subnormals, above FP16's max
  const absmaxes = [1, Math.fround(0.0371), Math.fround(3e-9), Math.fround(1e5)];
  for (const [name, table] of [['nf4', NF4_VALUES], ['fp4', BNB_FP4_VALUES]] as const) {
    it(`${name}: every code × absmax ${absmaxes.join(', ')}`, () => {
      const rows = absmaxes.length;
      const packed = everyCode(rows);
      const qm = Float32Array.from(table);
      const am = Float32Array.from(absmaxes);
      const lw = memBnb(packed, rows, am, qm, null);
      const dev = new LinearCache(N).dequant(lw, null);
      const ref = dequantLinear(lw);
      for (let r = 0; r < rows; r++) {
        for (let c = 0; c < 16; c++) {
          const want = Math.fround((name === 'nf4' ? qm[c] : Math.fround(SPEC_FP4[c])) * absmaxes[r]);
          expect(ref[r * 16 + c], `reference code ${c} absmax ${absmaxes[r]}`).toBe(want);
          expect(Object.is(f16At(dev, r * 16 + c), f16round(want)) || f16At(dev, r * 16 + c) === f16round(want), `device code ${c} absmax ${absmaxes[r]}`).toBe(true);
        }
      }
    });
  }

  it('double quant: every one of the 256 absmax codes through the nested table and offset', () => {
    const rows = 256;
    const map = bnbDynamicMap();
    expect(map.length).toBe(256);
    // signed: ±the midpoints, 0 and +1 (no −1), ascending
    expect(map[255]).toBe(1);
    expect(map[0]).toBeCloseTo(-0.99297, 4);
    expect(map.every((v, k) => k === 0 || v > map[k - 1])).toBe(true);
    const nested = { absmax: Float32Array.from([0.75, 2.5]), quantMap: map, offset: Math.fround(0.3137), blocksize: 128 };
    const codes = Uint8Array.from({ length: rows }, (_, b) => b);
    const lw = memBnb(everyCode(rows), rows, codes, Float32Array.from(NF4_VALUES), nested);
    const dev = new LinearCache(N).dequant(lw, null);
    const ref = dequantLinear(lw);
    for (let b = 0; b < rows; b++) {
      const absmax = Math.fround(Math.fround(map[b] * nested.absmax[Math.floor(b / 128)]) + nested.offset);
      for (let c = 0; c < 16; c++) {
        const want = Math.fround(NF4_VALUES[c] * absmax);
        expect(ref[b * 16 + c], `reference absmax code ${b}, code ${c}`).toBe(want);
        expect(f16At(dev, b * 16 + c), `device absmax code ${b}, code ${c}`).toBe(f16round(want));
      }
    }
    // the fault: the code itself taken as the absmax
    const raw = new LinearCache(N).dequant(lw, 'nested-absmax-raw');
    for (const b of [0, 7, 255]) expect(f16At(raw, b * 16 + 15)).toBe(f16round(NF4_VALUES[15] * b));
  });

  it('high-even nibble order; nibble-swap reads low-first; code-table reads the codes as E2M1', () => {
    const packed = Uint8Array.from([0x1e, ...new Uint8Array(7)]); // element 0 = code 1, element 1 = code 14
    const lw = memBnb(packed, 1, Float32Array.from([2]), Float32Array.from(NF4_VALUES), null);
    const c = new LinearCache(N);
    expect(dequantLinear(lw).slice(0, 2)).toEqual(Float32Array.from([NF4_VALUES[1] * 2, NF4_VALUES[14] * 2].map(Math.fround)));
    expect(f16At(c.dequant(lw, null), 0)).toBe(f16round(NF4_VALUES[1] * 2));
    expect(f16At(c.dequant(lw, 'nibble-swap'), 0)).toBe(f16round(NF4_VALUES[14] * 2));
    expect(f16At(c.dequant(lw, 'code-table'), 1)).toBe(E2M1[14] * 2);
    expect(FAULT_CODES['code-table']).toBeGreaterThan(0);
  });

  it('the weights-first check counts, per format, the blocks whose FP16 dequantization over- or underflows', () => {
    // blocks of 16: absmax 1 (in range), 3e-9 (every non-zero code underflows), 1e5 (big codes overflow)
    const lw = memBnb(everyCode(3), 3, Float32Array.from([1, 3e-9, 1e5]), Float32Array.from(NF4_VALUES), null);
    const t = checkTensor(lw, 0, new LinearCache(N), null);
    expect(t.exact).toBe(true);
    expect([t.overflow_blocks, t.underflow_blocks, t.blocks]).toEqual([1, 1, 3]);
    const ck = Checkpoint.open(path.join(import.meta.dirname, '..', '..', 'fixtures', 'llama-tiny'));
    try {
      const w = checkWeights(ck, N, { layers: null, faults: null });
      const by = w.by_format;
      expect(Object.keys(by).sort()).toEqual(['deepseek-mxfp4', 'fp8-block']);
      expect(Object.values(by).reduce((n, f) => n + f!.tensors, 0)).toBe(w.checked);
      expect(Object.values(by).reduce((n, f) => n + f!.underflow_blocks, 0)).toBe(w.underflow_blocks);
      expect(describeWeights(w)).toMatch(/\[deepseek-mxfp4 \d+, fp8-block \d+\]|\[fp8-block \d+, deepseek-mxfp4 \d+\]/);
    } finally {
      ck.close();
    }
  });

  it("the fixture recipe round-trips: bitsandbytes' own quantization decodes within half a code step of W", () => {
    const w = Float32Array.from({ length: 640 }, (_, k) => Math.sin(k * 1.7) * (1 + (k % 13)));
    for (const dq of [false, true]) {
      const q = quantizeBnb4(w, 'nf4', dq);
      const lw = memBnb(q.packed, 40, q.absmax, q.quantMap, q.nested);
      lw.bnb!.blocksize = 64;
      lw.block = [1, 64];
      const got = dequantLinear(lw);
      for (let b = 0; b < 10; b++) {
        let amax = 0;
        for (let j = b * 64; j < (b + 1) * 64; j++) amax = Math.max(amax, Math.abs(w[j]));
        // half NF4's widest step (−1 … −0.6961928) is 0.152 of absmax; double quant adds the 8-bit absmax error
        for (let j = b * 64; j < (b + 1) * 64; j++) expect(Math.abs(got[j] - w[j]), `${dq} ${j}`).toBeLessThan(amax * (dq ? 0.17 : 0.1521));
      }
    }
  });
});
