/**
 * Numerics of simulated device bugs that need an arithmetic of their own (DESIGN §9), written plainly in
 * TypeScript: they run only on the layer a fault is injected into, on fixture-sized inputs.
 */
import { f16ToF32, f32ToF16Bits } from '../harness/formats/dtypes.js';

let F16_VALUES: Float32Array | null = null;

/** Every binary16 bit pattern's value (a 256 KiB table: the fault's inner loop rounds once per product). */
function f16Values(): Float32Array {
  if (F16_VALUES === null) {
    F16_VALUES = new Float32Array(65536);
    for (let b = 0; b < 65536; b++) F16_VALUES[b] = f16ToF32(b);
  }
  return F16_VALUES;
}

const SPLIT = 2 ** 42 + 1;

/**
 * A double rounded to the nearest FP16 value: 11 significant bits by Veltkamp's split for normal magnitudes
 * (ties may round away from even: immaterial for a simulated bug, and 10× faster than going through the bit
 * pattern), the fixed 2^-24 quantum below 2^-14, Inf past the largest finite value.
 */
function round16(x: number): number {
  const a = Math.abs(x);
  if (a < 2 ** -14) return Math.round(x * 2 ** 24) * 2 ** -24;
  if (a >= 65520) return x > 0 ? Infinity : -Infinity;
  const t = x * SPLIT;
  return t - (t - x);
}

/**
 * Fault fp16-accumulate: x f16 [m, k] · Wᵀ (W f16 [n, k]) → f16 [m, n] with the running sum held in FP16,
 * rounded after every fused multiply-add — a GEMM called with an FP16 compute type instead of FP32. The
 * product of two f16 values is exact in float64, so each step rounds once, as an FP16 FMA does. alpha scales
 * the final sum (then rounded to FP16), as the clean kernel's epilogue.
 */
export function gemmF16AccumulateF16(x: Uint16Array, w: Uint16Array, m: number, k: number, n: number, alpha: number): Uint16Array {
  const v = f16Values();
  const out = new Uint16Array(m * n);
  const xr = new Float64Array(k);
  for (let i = 0; i < m; i++) {
    for (let p = 0; p < k; p++) xr[p] = v[x[i * k + p]];
    for (let j = 0; j < n; j++) {
      let acc = 0;
      const wo = j * k;
      for (let p = 0; p < k; p++) acc = round16(acc + xr[p] * v[w[wo + p]]);
      out[i * n + j] = f32ToF16Bits(alpha * acc);
    }
  }
  return out;
}
