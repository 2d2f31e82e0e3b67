/**
 * The optimized Llama generation path on the device backend: every weight dequantized to FP16 once at
 * start (or loaded from an FP16 cache, harness/generate/fp16cache.ts), a per-layer FP16 K/V cache, and
 * incremental decoding — each step runs only the new tokens through the layers and attends over the cache
 * with attentionDecodeF16 (device-hip/src/decode.cc).
 *
 * It computes exactly what device-hip/llama.ts computes, the path the acceptance gate validated: the same
 * kernels in the same order with the same arguments (dequantToF16 through the same LinearCache, norms and
 * embeddings via f32ToF16 of their decoded values, RoPE tables by the same formula). The GEMMs and row ops
 * are row-independent and the decode attention keeps attentionF16's accumulation order, so a cached step's
 * logits equal a full LlamaDevice recompute bit for bit (harness/test/generate.test.ts checks it).
 *
 * Batching: sequences are independent and decoded in lockstep with no padding tokens. Rows of all
 * sequences are stacked for the matrix products; each sequence has its own cache region (slot) whose
 * entry s is position s, and its own length, so prompts of different lengths need neither left nor right
 * padding (a ragged batch, as paged-attention servers run it).
 */
import { decodeToF32 } from '../harness/formats/dtypes.js';
import type { StoredTensor } from '../harness/formats/linear.js';
import { LLAMA_LINEARS, type LlamaCheckpoint, llamaInvFreq } from '../harness/models/llama.js';
import type { DecodeNative, DeviceNative } from './binding.js';
import { type DecodeEntry, KvCacheDecoder, KvCacheF16, lastRows } from './kv_cache.js';
import { addBiasRowsF16, LinearCache } from './linear.js';

export type LlamaLinearKey = (typeof LLAMA_LINEARS)[number];
export const LLAMA_NORM_KEYS = ['input_layernorm', 'post_attention_layernorm'] as const;
export type LlamaNormKey = (typeof LLAMA_NORM_KEYS)[number];

/**
 * One layer's FP16 weights (f16 bits): norms [hidden], linears [out, in] as stored in the checkpoint, and the
 * projections' biases [out] where the config has them (attention_bias, mlp_bias).
 */
export type LlamaF16Layer = Record<LlamaNormKey | LlamaLinearKey, Uint16Array> & { bias: Partial<Record<LlamaLinearKey, Uint16Array>> };

export interface LlamaF16Weights {
  /** [vocab, hidden] */
  embed: Uint16Array;
  layers: LlamaF16Layer[];
  /** final norm [hidden] */
  norm: Uint16Array;
  /** [vocab, hidden]; the same array as `embed` when the checkpoint ties them */
  head: Uint16Array;
}

/** Checkpoint name of a layer tensor (the FP16 cache stores each under its checkpoint name). */
export function llamaLayerTensorName(L: number, key: LlamaNormKey | LlamaLinearKey): string {
  if ((LLAMA_NORM_KEYS as readonly string[]).includes(key)) return `model.layers.${L}.${key}.weight`;
  const sub = ['q_proj', 'k_proj', 'v_proj', 'o_proj'].includes(key) ? 'self_attn' : 'mlp';
  return `model.layers.${L}.${sub}.${key}.weight`;
}

/** Shape of a layer tensor: norms [hidden], linears their logical [out, in]. */
export function llamaLayerTensorShape(m: LlamaCheckpoint, key: LlamaNormKey | LlamaLinearKey): number[] {
  if ((LLAMA_NORM_KEYS as readonly string[]).includes(key)) return [m.cfg.hidden];
  return [...m.linearShapes()[key as LlamaLinearKey]];
}

const count = (t: StoredTensor) => t.shape.reduce((a, b) => a * b, 1);
/** A plain tensor to f16 exactly as LlamaDevice.vecF16 does (decode to f32, round once). */
const plainF16 = (N: DeviceNative, t: StoredTensor) => N.f32ToF16(decodeToF32(t.dtype, t.bytes, count(t)));

/** The whole embedding table as f16 (LlamaDevice converts the rows it reads the same way). */
export function buildLlamaF16Embed(m: LlamaCheckpoint, N: DeviceNative): Uint16Array {
  const i = m.ck.info(m.embedName);
  return plainF16(N, { name: m.embedName, dtype: i.dtype, shape: i.shape, bytes: m.ck.read(m.embedName) });
}

/** Layer L's FP16 weights. Linears go through LinearCache, the very code the diff runs (fault: none). */
export function buildLlamaF16Layer(m: LlamaCheckpoint, N: DeviceNative, L: number): LlamaF16Layer {
  const w = m.loadLayer(L);
  const linears = new LinearCache(N);
  const out = { bias: {} } as LlamaF16Layer;
  for (const k of LLAMA_NORM_KEYS) out[k] = plainF16(N, w[k]);
  for (const k of LLAMA_LINEARS) {
    out[k] = linears.get(w[k], null);
    const b = w.bias[k];
    if (b !== null) out.bias[k] = plainF16(N, b);
  }
  return out;
}

/** Final norm and head (the head is the embedding array itself when tied). */
/** The final norm's FP16 weights. */
export const buildLlamaF16Norm = (m: LlamaCheckpoint, N: DeviceNative): Uint16Array => plainF16(N, m.finalNorm());

export function buildLlamaF16Head(m: LlamaCheckpoint, N: DeviceNative, embed: Uint16Array | null): { norm: Uint16Array; head: Uint16Array } {
  const norm = buildLlamaF16Norm(m, N);
  if (m.headName === m.embedName) return { norm, head: embed ?? buildLlamaF16Embed(m, N) };
  const i = m.ck.info(m.headName);
  return { norm, head: plainF16(N, { name: m.headName, dtype: i.dtype, shape: i.shape, bytes: m.ck.read(m.headName) }) };
}

/** Dequantize every weight of the model to FP16 once ("dequant at load"). */
export function buildLlamaF16(m: LlamaCheckpoint, N: DeviceNative): LlamaF16Weights {
  const embed = buildLlamaF16Embed(m, N);
  const layers: LlamaF16Layer[] = [];
  for (let L = 0; L < m.cfg.layers; L++) layers.push(buildLlamaF16Layer(m, N, L));
  return { embed, layers, ...buildLlamaF16Head(m, N, embed) };
}

/** RoPE cos/sin rows for the given positions from llamaInvFreq's table (LlamaDevice and the decoder: same doubles, same f32). */
export function llamaRopeTables(invFreq: ArrayLike<number>, positions: readonly number[]): { cos: Float32Array; sin: Float32Array } {
  const half = invFreq.length;
  const cos = new Float32Array(positions.length * half);
  const sin = new Float32Array(positions.length * half);
  positions.forEach((p, t) => {
    for (let i = 0; i < half; i++) {
      const phi = p * invFreq[i];
      cos[t * half + i] = Math.cos(phi);
      sin[t * half + i] = Math.sin(phi);
    }
  });
  return { cos, sin };
}

export class LlamaDeviceDecoder extends KvCacheDecoder {
  readonly vocab: number;
  /** per layer: K [Bc, cap, kvHeads, headDim] and V, f16 */
  protected readonly cache: KvCacheF16;
  /** RoPE inverse frequencies (llamaInvFreq: rope_theta, llama3 scaling) */
  private readonly invFreq: Float64Array;

  constructor(
    private readonly m: LlamaCheckpoint,
    private readonly N: DeviceNative,
    private readonly K: DecodeNative,
    private readonly w: LlamaF16Weights,
  ) {
    super();
    this.vocab = m.cfg.vocab;
    this.invFreq = llamaInvFreq(m.cfg);
    this.cache = new KvCacheF16(m.cfg.layers, m.cfg.kvHeads * m.cfg.headDim);
    if (w.layers.length !== m.cfg.layers) throw new Error(`FP16 weights hold ${w.layers.length} layers, the model has ${m.cfg.layers}`);
  }

  protected advance(entries: DecodeEntry[]): Float32Array[] {
    const { N, K, w } = this;
    const { hidden: D, heads: H, kvHeads: KV, headDim: hd, eps, vocab: V } = this.m.cfg;
    const rows = this.cache.rows(entries, V);
    const R = rows.tokens.length;
    let x: Uint16Array = new Uint16Array(R * D);
    rows.tokens.forEach((t, r) => x.set(w.embed.subarray(t * D, (t + 1) * D), r * D));
    const { cos, sin } = llamaRopeTables(this.invFreq, rows.rowPos);
    const scale = 1 / Math.sqrt(hd);
    const shapes = this.m.linearShapes();

    for (let L = 0; L < w.layers.length; L++) {
      const lw = w.layers[L];
      const lin = (inp: Uint16Array, wt: Uint16Array, key: LlamaLinearKey) => addBiasRowsF16(N, N.gemmF16(inp, wt, R, shapes[key][1], shapes[key][0], 1), R, lw.bias[key] ?? null);
      const n1 = N.rmsnormF16(x, lw.input_layernorm, R, D, eps);
      const q = N.ropeF16(lin(n1, lw.q_proj, 'q_proj'), cos, sin, R, H, hd, 0, hd, false);
      const k = N.ropeF16(lin(n1, lw.k_proj, 'k_proj'), cos, sin, R, KV, hd, 0, hd, false);
      const v = lin(n1, lw.v_proj, 'v_proj');
      const att = this.cache.attend(K, L, rows, entries, q, k, v, H, KV, hd, scale, 0, null);
      const h = N.addF16(x, lin(att, lw.o_proj, 'o_proj'));
      const n2 = N.rmsnormF16(h, lw.post_attention_layernorm, R, D, eps);
      const gated = N.swigluF16(lin(n2, lw.gate_proj, 'gate_proj'), lin(n2, lw.up_proj, 'up_proj'), 0);
      x = N.addF16(h, lin(gated, lw.down_proj, 'down_proj'));
    }
    this.cache.commit(entries);

    // Only each entry's last row feeds the head (the sampler reads nothing else).
    const E = entries.length;
    const normed = N.rmsnormF16(lastRows(x, D, entries), w.norm, E, D, eps);
    const logits = N.gemmF16F32(normed, w.head, E, D, V);
    return entries.map((_, i) => logits.slice(i * V, (i + 1) * V));
  }

}
