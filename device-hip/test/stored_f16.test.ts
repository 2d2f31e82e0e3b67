/**
 * storedToF16 (device-hip/linear.ts): embedding and head rows stored BF16 go through one native pass
 * (dequantToF16's bf16 kind); the bits must be those of the element rule it replaced, f32ToF16 of the
 * exact BF16 widening, for all 65,536 patterns (NaNs included: both see the same widened bits).
 */
import { describe, expect, it } from 'vitest';
import { decodeToF32 } from '../../harness/formats/dtypes.js';
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
  });
});
