/**
 * Llama forward pass, FP32 reference, following Hugging Face transformers' LlamaForCausalLM:
 *   h = embed(tokens)
 *   per layer: h += o_proj(attn(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))), n = RMSNorm_in(h)
 *              h += down_proj(silu(gate_proj(n)) · up_proj(n)),                n = RMSNorm_post(h)
 *   final_norm = RMSNorm(h); logits = lm_head(final_norm)
 * RoPE is rotate_half with base rope_theta; attention is causal GQA scaled by head_dim^−½. With attention_bias
 * (q/k/v/o) or mlp_bias (gate/up/down) each projection adds its bias after the product (nn.Linear).
 */
import { sharedReadPool, withReadPool } from '../harness/io/read_pool.js';
import { decodeToF32 } from '../harness/formats/dtypes.js';
import type { StoredTensor } from '../harness/formats/linear.js';
import { type Act, act } from '../harness/formats/tensor.js';
import { type LlamaCheckpoint, llamaInvFreq, type LlamaLayerWeights, type LlamaLinear } from '../harness/models/llama.js';
import type { LayerContext, LayerResult, StagePath } from '../harness/models/path.js';
import { assertFinite } from './dequant.js';
import { linear as exactLinear } from './linear.js';
import { dequantExact, type ExactKind, linearExact } from './native.js';
import { add, addRowBias, causalAttention, matmul, rmsnorm, rope, stored, swiglu } from './ops.js';

/** The exact widenings (BF16/F16/F32) run natively: embedding rows and head chunks are large. */
const NATIVE_PLAIN: Partial<Record<StoredTensor['dtype'], ExactKind>> = { BF16: 'bf16', F16: 'f16', F32: 'f32' };

export function decodeStored(t: StoredTensor): Float32Array {
  const count = t.shape.reduce((a, b) => a * b, 1);
  const kind = NATIVE_PLAIN[t.dtype];
  const rows = t.shape.length > 1 ? t.shape[0] : 1;
  const w = kind !== undefined && count > 0 ? dequantExact(kind, t.bytes, new Uint8Array(0), rows, count / rows, 1, 1, 0, rows) : decodeToF32(t.dtype, t.bytes, count);
  assertFinite(w, t);
  return w;
}

/**
 * x [S, D] · headᵀ → [S, V] for a [V, D] head read in 4096-row chunks: each chunk decoded exactly inside the
 * native GEMM (linearExact, the bits of matmul over decodeStored(chunk)), so no FP32 copy of a chunk is made.
 * Every architecture's reference logits and the FP32 decoder use it.
 */
export function headLogits(m: { forEachHeadChunk(rows: number, fn: (r0: number, chunk: StoredTensor) => void): void }, x: Float32Array, S: number, D: number, V: number): Float32Array {
  const out = new Float32Array(S * V);
  // each chunk's bytes are read into the buffer the last chunk's were (released once its product is taken)
  // (the process's pool: warm buffers the layers released)
  const pool = sharedReadPool();
  const mark = pool.mark();
  withReadPool(pool, () =>
    m.forEachHeadChunk(4096, (r0, chunk) => {
      const n = chunk.shape[0];
      const kind = NATIVE_PLAIN[chunk.dtype];
      let part: Float32Array;
      if (kind === undefined) part = matmul(x, S, D, decodeStored(chunk), n);
      else {
        const r = linearExact(x, S, kind, chunk.bytes, NO_SCALE, n, D, 1, 1, 0, n);
        if (r.firstNonFinite >= 0) decodeStored(chunk); // a NaN/Inf weight: the named InputError
        part = r.y;
      }
      for (let s = 0; s < S; s++) out.set(part.subarray(s * n, (s + 1) * n), s * V + r0);
      pool.release(mark);
    }),
  );
  return out;
}

const NO_SCALE = new Uint8Array(0);

/** y [rows, out] + the projection's bias per row (in place), or y as it is without one. */
export const withBias = (y: Float32Array, rows: number, bias: StoredTensor | null): Float32Array => addRowBias(y, rows, bias !== null ? decodeStored(bias) : null);

export class LlamaReference implements StagePath<LlamaLayerWeights> {
  constructor(private readonly m: LlamaCheckpoint) {}

  embed(tokens: number[]): Act {
    return act([tokens.length, this.m.cfg.hidden], decodeStored(this.m.embedRows(tokens)));
  }

  layer(_L: number, x: Act, w: LlamaLayerWeights, ctx: LayerContext): LayerResult {
    const { hidden: D, heads: H, kvHeads: KV, headDim: hd, eps } = this.m.cfg;
    const S = x.shape[0];
    // W decoded exactly inside the product (reference-cpu/linear.ts: matmul's bits, no FP32 copy of W)
    const linear = (inp: Float32Array, key: LlamaLinear) => withBias(exactLinear(inp, S, w[key]), S, w.bias[key]);

    // fp16 (the floor pass, LayerContext.fp16Storage): the sublayer outputs and the residual between them are
    // stored in FP16 as the device path stores them; the attention internals stay FP32 (README "The FP16 floor")
    const fp16 = ctx.fp16Storage;
    const n1 = rmsnorm(x.data, S, D, decodeStored(w.input_layernorm), eps);
    const invFreq = llamaInvFreq(this.m.cfg);
    const q = rope(linear(n1, 'q_proj'), S, H, hd, ctx.positions, invFreq, 'half');
    const k = rope(linear(n1, 'k_proj'), S, KV, hd, ctx.positions, invFreq, 'half');
    const v = linear(n1, 'v_proj');
    const attn = stored(linear(causalAttention(q, k, v, S, H, KV, hd, hd, 1 / Math.sqrt(hd)), 'o_proj'), fp16);
    const h = stored(add(x.data, attn), fp16);

    const n2 = rmsnorm(h, S, D, decodeStored(w.post_attention_layernorm), eps);
    const mlp = stored(linear(swiglu(linear(n2, 'gate_proj'), linear(n2, 'up_proj')), 'down_proj'), fp16);
    return {
      out: act([S, D], add(h, mlp)),
      selections: null,
      substages: { attn: act([S, D], attn), mlp: act([S, D], mlp) },
    };
  }

  finalNorm(x: Act): Act {
    const { hidden: D, eps } = this.m.cfg;
    return act(x.shape, rmsnorm(x.data, x.shape[0], D, decodeStored(this.m.finalNorm()), eps));
  }

  logits(x: Act): Act {
    const { hidden: D, vocab: V } = this.m.cfg;
    return act([x.shape[0], V], headLogits(this.m, x.data, x.shape[0], D, V));
  }
}
