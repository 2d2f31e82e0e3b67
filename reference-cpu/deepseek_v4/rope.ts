/**
 * DeepSeek-V4 RoPE frequencies (spec §4.1 with the general forms of §10.3; DeepSeek's precompute_freqs_cis).
 * One table per layer: layers with compress ratio 0 use rope_theta without YaRN, layers with a compressor use
 * compress_rope_theta with YaRN — for all of their rotations (sliding-window q/kv, compressed entries,
 * indexer). The rotation itself (interleaved pairs on the last R dims, inverse = −φ) is ops.rope.
 *
 * DeepSeek computes these frequencies in float32; we keep float64, a relative difference of ~1e-7 in f_i.
 * No YaRN mscale is applied anywhere (§4.1).
 */
import type { DeepseekV4Config, YarnConfig } from '../../harness/models/deepseek_v4_config.js';
import { ropeInvFreq } from '../ops.js';

/** c(β) = R·ln(L₀/(2πβ)) / (2·ln base): the dim index whose wavelength turns β times over L₀ positions. */
export function yarnCorrectionDim(beta: number, R: number, base: number, originalSeqLen: number): number {
  return (R * Math.log(originalSeqLen / (beta * 2 * Math.PI))) / (2 * Math.log(base));
}

/** lo = max(⌊c(β_fast)⌋, 0), hi = min(⌈c(β_slow)⌉, R − 1); 15 and 25 for the release (§4.1). */
export function yarnRange(R: number, base: number, y: YarnConfig): { lo: number; hi: number } {
  const lo = Math.max(Math.floor(yarnCorrectionDim(y.betaFast, R, base, y.originalSeqLen)), 0);
  const hi = Math.min(Math.ceil(yarnCorrectionDim(y.betaSlow, R, base, y.originalSeqLen)), R - 1);
  return { lo, hi };
}

/**
 * f_i = base^(−2i/R), i < R/2; with YaRN f_i ← f_i·(s_i + (1 − s_i)/factor), s_i = 1 − clamp((i − lo)/(hi − lo), 0, 1).
 * DeepSeek widens hi by 0.001 when lo == hi, so the ramp stays defined.
 */
export function deepseekInvFreq(R: number, base: number, yarn: YarnConfig | null): Float64Array {
  const f = ropeInvFreq(base, R);
  if (yarn === null) return f;
  const { lo, hi } = yarnRange(R, base, yarn);
  const span = hi === lo ? 0.001 : hi - lo;
  for (let i = 0; i < f.length; i++) {
    const ramp = Math.min(Math.max((i - lo) / span, 0), 1);
    const s = 1 - ramp;
    f[i] = f[i] * (s + (1 - s) / yarn.factor);
  }
  return f;
}

/** The frequency table of a layer with this compress ratio. */
export function layerInvFreq(cfg: DeepseekV4Config, ratio: number): Float64Array {
  return ratio > 0 ? deepseekInvFreq(cfg.ropeDim, cfg.compressRopeTheta, cfg.yarn) : deepseekInvFreq(cfg.ropeDim, cfg.ropeTheta, null);
}
