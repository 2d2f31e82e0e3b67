/**
 * The KV compressor on the device path (spec §4.5 step 3), for the attention (d_c = head_dim) and the
 * indexer (d_c = index_head_dim). Precision choices:
 *   - K = W_kv·a and Z = W_gate·a keep FP32 output (gemmF16F32): DeepSeek runs the compressor projections
 *     in fp32 (bf16 weights upcast), and the gate scores go straight into a softmax;
 *   - the per-channel pooling softmax and weighted sum run in FP32 (compressPoolF16), entries stored FP16;
 *   - RMSN_norm in FP32 → FP16 (rmsnormF16), then RoPE at the block's first position b·r (ropeF16).
 */
import type { DeepseekV4Compressor } from '../../harness/models/deepseek_v4.js';
import type { Kit } from './kit.js';
import { ropeTable } from './rope.js';

/** a f16 [S, hidden] → f16 entries [⌊S/r⌋, d_c], normed and rotated. */
export function compress(kit: Kit, a: Uint16Array, S: number, c: DeepseekV4Compressor, invFreq: Float64Array): { e: Uint16Array; B: number } {
  const { ratio, headDim: dc, overlap } = c;
  const B = Math.floor(S / ratio);
  if (B === 0) return { e: new Uint16Array(0), B };
  const R = kit.cfg.ropeDim;
  const K = kit.lin32(a, S, c.wkv);
  const Z = kit.lin32(a, S, c.wgate);
  const pooled = kit.K.compressPoolF16(K, Z, kit.f32(c.ape), S, ratio, dc, overlap);
  const normed = kit.N.rmsnormF16(pooled, kit.vec16(c.norm), B, dc, kit.cfg.normEps);
  const tab = ropeTable(Array.from({ length: B }, (_, b) => b * ratio), invFreq, kit.fault === 'rope-angle-fp16');
  return { e: kit.N.ropeF16(normed, tab.cos, tab.sin, B, 1, dc, dc - R, R, true), B };
}
