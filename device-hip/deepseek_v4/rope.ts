/**
 * RoPE tables of the DeepSeek-V4 device path (spec §4.1, §10.3): one frequency table per layer — rope_theta
 * without YaRN for ratio-0 layers, compress_rope_theta with YaRN for layers with a compressor (all of their
 * rotations) — and cos/sin per position. Written here rather than imported from the reference, so that a
 * frequency bug in either path shows up in the diff instead of cancelling. The tables are computed on the
 * host in float64 and handed to ropeF16 as f32, as a HIP deployment uploads them.
 */
import { roundToF16 } from '../../harness/formats/dtypes.js';
import type { DeepseekV4Config } from '../../harness/models/deepseek_v4_config.js';

/** f_i = base^(−2i/R); with YaRN f_i·(s_i + (1 − s_i)/factor), s_i = 1 − clamp((i − lo)/(hi − lo), 0, 1). */
export function layerInvFreq(cfg: DeepseekV4Config, ratio: number): Float64Array {
  const R = cfg.ropeDim;
  const base = ratio > 0 ? cfg.compressRopeTheta : cfg.ropeTheta;
  const f = Float64Array.from({ length: R / 2 }, (_, i) => base ** (-(2 * i) / R));
  if (ratio === 0 || cfg.yarn === null) return f;
  const { factor, originalSeqLen, betaFast, betaSlow } = cfg.yarn;
  // the dim index whose wavelength turns β times over the original context
  const corr = (beta: number) => (R * Math.log(originalSeqLen / (beta * 2 * Math.PI))) / (2 * Math.log(base));
  const lo = Math.max(Math.floor(corr(betaFast)), 0);
  const hi = Math.min(Math.ceil(corr(betaSlow)), R - 1);
  // DeepSeek's linear_ramp_factor widens an empty range by 0.001 so the ramp stays defined
  const span = hi === lo ? 0.001 : hi - lo;
  for (let i = 0; i < f.length; i++) {
    const s = 1 - Math.min(Math.max((i - lo) / span, 0), 1);
    f[i] *= s + (1 - s) / factor;
  }
  return f;
}

export interface RopeTable {
  cos: Float32Array;
  sin: Float32Array;
  /** −sin: the inverse rotation (−φ) with the same kernel */
  sinNeg: Float32Array;
}

/**
 * cos/sin [positions, R/2] of φ = pos·f_i. `fp16Angles` is the fault rope-angle-fp16: pos, f_i and their
 * product each rounded to FP16, so φ is off by up to half an FP16 ulp of φ — wrong at long positions.
 */
export function ropeTable(positions: ArrayLike<number>, invFreq: Float64Array, fp16Angles = false): RopeTable {
  const half = invFreq.length;
  const n = positions.length;
  const cos = new Float32Array(n * half), sin = new Float32Array(n * half), sinNeg = new Float32Array(n * half);
  for (let t = 0; t < n; t++) {
    for (let i = 0; i < half; i++) {
      const phi = fp16Angles ? roundToF16(roundToF16(positions[t]) * roundToF16(invFreq[i])) : positions[t] * invFreq[i];
      cos[t * half + i] = Math.cos(phi);
      sin[t * half + i] = Math.sin(phi);
      sinNeg[t * half + i] = -sin[t * half + i];
    }
  }
  return { cos, sin, sinNeg };
}
