/**
 * Llama on the device path, MI250 numerics: weights dequantized to FP16, activations stored in FP16 between
 * kernels, matrix products accumulated in FP32, norms/softmax/SwiGLU computed in FP32 and written as FP16.
 * Every op is a native kernel call (the emulation of the HIP kernel of the same name); this file only sequences
 * them, in the same order as reference-cpu/llama.ts.
 */
import { decodeToF32, roundToF16 } from '../harness/formats/dtypes.js';
import type { StoredTensor } from '../harness/formats/linear.js';
import { type Act, act } from '../harness/formats/tensor.js';
import { type LlamaCheckpoint, llamaInvFreq, type LlamaLayerWeights, type LlamaLinear } from '../harness/models/llama.js';
import { llamaRopeTables } from './llama_decode.js';
import type { LayerContext, LayerResult, StagePath } from '../harness/models/path.js';
import type { DeviceNative } from './binding.js';
import { faultAt, type FaultPlan, OVERFLOW_ALPHA } from '../harness/faults/plan.js';
import { gemmF16AccumulateF16 } from './fault_numerics.js';
import { addBiasRowsF16, deviceHeadLogits, LinearCache } from './linear.js';

export class LlamaDevice implements StagePath<LlamaLayerWeights> {
  private readonly linears: LinearCache;

  constructor(
    private readonly m: LlamaCheckpoint,
    private readonly N: DeviceNative,
    private readonly faults: FaultPlan | null,
  ) {
    this.linears = new LinearCache(N);
  }

  private vecF16(t: StoredTensor): Uint16Array {
    return this.N.f32ToF16(decodeToF32(t.dtype, t.bytes, t.shape.reduce((a, b) => a * b, 1)));
  }

  /** `fp16Angles`: the fault rope-angle-fp16 (t, θ_i and t·θ_i each rounded to FP16). */
  private ropeTables(positions: number[], fp16Angles = false): { cos: Float32Array; sin: Float32Array } {
    if (!fp16Angles) return llamaRopeTables(llamaInvFreq(this.m.cfg), positions);
    const invFreq = llamaInvFreq(this.m.cfg);
    const half = invFreq.length;
    const cos = new Float32Array(positions.length * half);
    const sin = new Float32Array(positions.length * half);
    positions.forEach((p, t) => {
      for (let i = 0; i < half; i++) {
        const f = invFreq[i];
        const phi = fp16Angles ? roundToF16(roundToF16(p) * roundToF16(f)) : p * f;
        cos[t * half + i] = Math.cos(phi);
        sin[t * half + i] = Math.sin(phi);
      }
    });
    return { cos, sin };
  }

  embed(tokens: number[]): Act {
    const rows = this.m.embedRows(tokens);
    return act([tokens.length, this.m.cfg.hidden], this.N.f16ToF32(this.vecF16(rows)));
  }

  layer(L: number, x: Act, w: LlamaLayerWeights, ctx: LayerContext): LayerResult {
    const { N } = this;
    const { hidden: D, heads: H, kvHeads: KV, headDim: hd, eps } = this.m.cfg;
    const S = x.shape[0];
    const fault = faultAt(this.faults, L);
    // a projection: the GEMM (FP16 out; MXFP4 and FP8-block weights from their stored bytes, LinearCache.product),
    // then its bias (attention_bias / mlp_bias) as an FP16 add
    const gemm = (inp: Uint16Array, lw: LlamaLayerWeights[LlamaLinear], alpha: number) =>
      fault === 'fp16-accumulate' ? gemmF16AccumulateF16(inp, this.linears.get(lw, fault), S, lw.in, lw.out, alpha) : this.linears.product(inp, S, lw, fault, alpha);
    const lin = (inp: Uint16Array, key: LlamaLinear, alpha = 1) => {
      const lw = w[key];
      const b = w.bias[key];
      return addBiasRowsF16(N, gemm(inp, lw, alpha), S, b !== null ? this.vecF16(b) : null);
    };
    const { cos, sin } = this.ropeTables(ctx.positions, fault === 'rope-angle-fp16');

    const xh = N.f32ToF16(x.data);
    const n1 = N.rmsnormF16(xh, this.vecF16(w.input_layernorm), S, D, eps);
    const q = N.ropeF16(lin(n1, 'q_proj'), cos, sin, S, H, hd, 0, hd, false);
    const k = N.ropeF16(lin(n1, 'k_proj'), cos, sin, S, KV, hd, 0, hd, false);
    const v = lin(n1, 'v_proj');
    const attn = lin(N.attentionF16(q, k, v, S, H, KV, hd, hd, 1 / Math.sqrt(hd), 0, null), 'o_proj');
    const h = N.addF16(xh, attn);

    const n2 = N.rmsnormF16(h, this.vecF16(w.post_attention_layernorm), S, D, eps);
    const gated = N.swigluF16(lin(n2, 'gate_proj'), lin(n2, 'up_proj'), 0);
    const mlp = lin(gated, 'down_proj', fault === 'fp16-overflow' ? OVERFLOW_ALPHA : 1);
    const out = N.addF16(h, mlp);
    return {
      out: act([S, D], N.f16ToF32(out)),
      selections: null,
      substages: { attn: act([S, D], N.f16ToF32(attn)), mlp: act([S, D], N.f16ToF32(mlp)) },
    };
  }

  finalNorm(x: Act): Act {
    const { hidden: D, eps } = this.m.cfg;
    const y = this.N.rmsnormF16(this.N.f32ToF16(x.data), this.vecF16(this.m.finalNorm()), x.shape[0], D, eps);
    return act(x.shape, this.N.f16ToF32(y));
  }

  /** The head reads FP16 weights and FP16 activations and keeps FP32 logits (what a sampler consumes). */
  logits(x: Act): Act {
    const { hidden: D, vocab: V } = this.m.cfg;
    return act([x.shape[0], V], deviceHeadLogits(this.N, this.m, x.data, x.shape[0], D, V));
  }

}
