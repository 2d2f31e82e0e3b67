/**
 * storedToF16 (device-hip/linear.ts): embedding and head rows stored BF16 go through one native pass
 * (dequantToF16's bf16 kind); the bits must be those of the element rule it replaced, f32ToF16 of the
 * exact BF16 widening, for all 65,536 patterns (NaNs included: both see the same widened bits).
 */
import { describe, expect, it } from 'vitest';
import { decodeToF32, f32ToF16Bits } from '../../harness/formats/dtypes.js';
import { loadDeviceNative } from '../binding.js';
import { storedToF16 } from '../linear.js';

describe('storedToF16', () => {
  it('bf16_rows_to_f16(rows=256,cols=256): every BF16 pattern, as f32ToF16(decodeToF32(·))', () => {
    const N = loadDeviceNative();
    const bytes = new Uint8Array(new Uint16Array(Array.from({ length: 65536 }, (_, i) => i)).buffer);
    const t = { name: 'embed.weight', dtype: 'BF16' as const, shape: [256, 256], bytes };
    const want = N.f32ToF16(decodeToF32('BF16', bytes, 65536));
    expect(Array.from(storedToF16(N, t))).toEqual(Array.from(want));
    const vec = { ...t, shape: [65536] };
    expect(Array.from(storedToF16(N, vec))).toEqual(Array.from(want));
    // and against the TypeScript rounding (harness/formats/dtypes.ts), at every SIMD level and an odd length
    const ts = Array.from(decodeToF32('BF16', bytes, 65536), (v) => f32ToF16Bits(v));
    for (const level of ['auto', 'scalar'] as const) {
      N.setSimd(level);
      const got = N.dequantToF16(2, bytes, null, false, 1, 65536, 1, 1, 0);
      for (let i = 0; i < 65536; i++) {
        // a NaN is any NaN in the TypeScript rule; the device's is canonical (0x7e00 with the sign)
        if (Number.isNaN(decodeToF32('BF16', bytes.subarray(2 * i, 2 * i + 2), 1)[0])) expect(got[i] & 0x7fff, `NaN ${i}`).toBe(0x7e00);
        else if (got[i] !== ts[i]) expect.fail(`${level}: bf16 0x${i.toString(16)} → 0x${got[i].toString(16)}, want 0x${ts[i].toString(16)}`);
      }
      const odd = N.dequantToF16(2, bytes.subarray(2, 2 + 2 * 40001), null, false, 1, 40001, 1, 1, 0);
      expect(Array.from(odd)).toEqual(Array.from(want.subarray(1, 40002)));
    }
    N.setSimd('auto');
  });
});
