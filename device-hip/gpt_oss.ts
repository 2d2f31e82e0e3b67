/**
 * gpt-oss on the device path, MI250 numerics (README "Precision of the device path"): weights to FP16
 * (routed experts MXFP4 → FP16 through the shared dequant, with the injected faults), activations FP16
 * between kernels, products FP32-accumulated, router logits FP32. Sequenced in the order of
 * reference-cpu/gpt_oss.ts; every op is a native kernel:
 *   attention   rmsnorm → q/k/v GEMM + bias → RoPE (half-split) with YaRN's inv_freq, cos/sin × concentration
 *               → attention with the per-head sink (unscaled) and, on sliding layers, the window → o GEMM + bias
 *   moe         rmsnorm → router GEMM (FP32 out) → ossRouterF32 (+ bias, top-k, softmax over the k) → per
 *               expert, on the block of its tokens: gate_up GEMM + bias → ossSwigluF16 → down GEMM + bias →
 *               × routing weight (f16) → moeCombineF16 (f32 sum in row order: expert ascending, then token)
 * A bias add is the elementwise f16 add (ld_add_f16) with the bias row repeated: the GEMM output is rounded to
 * FP16 first, then the sum (a GEMM with a fused bias epilogue would round once; this models the unfused kernels).
 */
import { decodeToF32 } from '../harness/formats/dtypes.js';
import type { StoredTensor } from '../harness/formats/linear.js';
import { type Act, act } from '../harness/formats/tensor.js';
import { faultAt, type FaultPlan, OVERFLOW_ALPHA } from '../harness/faults/plan.js';
import { GPT_OSS_ALPHA, type GptOssCheckpoint, type GptOssLayerWeights, gptOssRope } from '../harness/models/gpt_oss.js';
import type { LayerContext, LayerResult, StagePath } from '../harness/models/path.js';
import type { DeepseekNative, DeviceNative, GptOssNative } from './binding.js';
import { addBiasRowsF16, deviceHeadLogits, LinearCache } from './linear.js';

export class GptOssDevice implements StagePath<GptOssLayerWeights> {
  private readonly linears: LinearCache;

  constructor(
    private readonly m: GptOssCheckpoint,
    private readonly N: DeviceNative,
    private readonly G: GptOssNative,
    /** moeCombineF16 (the f32 row-order sum shared with DeepSeek-V4's MoE) */
    private readonly K: Pick<DeepseekNative, 'moeCombineF16'>,
    private readonly faults: FaultPlan | null,
  ) {
    this.linears = new LinearCache(N);
  }

  private f32(t: StoredTensor): Float32Array {
    return decodeToF32(t.dtype, t.bytes, t.shape.reduce((a, b) => a * b, 1));
  }

  private vecF16(t: StoredTensor): Uint16Array {
    return this.N.f32ToF16(this.f32(t));
  }

  /** x f16 [rows, n] + bias [n] repeated per row (ld_add_f16). */
  private addBias(x: Uint16Array, rows: number, bias: StoredTensor): Uint16Array {
    return addBiasRowsF16(this.N, x, rows, this.vecF16(bias));
  }

  /** cos/sin [S, d/2] at the positions: YaRN's inv_freq, both multiplied by the concentration, stored f32. */
  private ropeTables(positions: number[]): { cos: Float32Array; sin: Float32Array } {
    const { invFreq, concentration } = gptOssRope(this.m.cfg);
    const half = invFreq.length;
    const cos = new Float32Array(positions.length * half);
    const sin = new Float32Array(positions.length * half);
    positions.forEach((p, t) => {
      for (let j = 0; j < half; j++) {
        const phi = p * invFreq[j];
        cos[t * half + j] = Math.cos(phi) * concentration;
        sin[t * half + j] = Math.sin(phi) * concentration;
      }
    });
    return { cos, sin };
  }

  embed(tokens: number[]): Act {
    return act([tokens.length, this.m.cfg.hidden], this.N.f16ToF32(this.vecF16(this.m.embedRows(tokens))));
  }

  layer(L: number, x: Act, w: GptOssLayerWeights, ctx: LayerContext): LayerResult {
    const { heads: NH, kvHeads: NKV, headDim: d, slidingWindow } = this.m.cfg;
    const S = x.shape[0];
    const xh = this.N.f32ToF16(x.data);
    const { q, k, v } = this.qkv(L, xh, S, w, ctx.positions);
    const o = this.N.attentionF16(q, k, v, S, NH, NKV, d, d, 1 / Math.sqrt(d), w.sliding ? slidingWindow : 0, this.f32(w.sinks));
    const f = this.afterAttention(L, xh, o, S, w, ctx.forcedSelections?.experts ?? null);
    return {
      out: act([S, this.m.cfg.hidden], this.N.f16ToF32(f.out)),
      selections: { experts: f.experts },
      substages: { attn: act([S, this.m.cfg.hidden], this.N.f16ToF32(f.attn)), 'moe.router': act([S, this.m.cfg.topk], f.weights), moe: act([S, this.m.cfg.hidden], this.N.f16ToF32(f.moe)) },
      // the scores the router kernel ranks: the FP32 logits plus the bias, in f32 (the flip judgement's input)
      scores: { experts: { scores: act([S, this.m.cfg.experts], f.scores), bias: null } },
    };
  }

  /**
   * The attention's inputs for S rows of the residual stream xh (f16) at `positions`: rmsnorm → q/k/v GEMM +
   * bias → RoPE on q and k. Shared by the diff's prefill (layer) and the KV-cache decoder.
   */
  qkv(L: number, xh: Uint16Array, S: number, w: GptOssLayerWeights, positions: readonly number[]): { q: Uint16Array; k: Uint16Array; v: Uint16Array } {
    const { N } = this;
    const { hidden: H, heads: NH, kvHeads: NKV, headDim: d, eps } = this.m.cfg;
    const lin = this.lin(L);
    const a = N.rmsnormF16(xh, this.vecF16(w.input_layernorm), S, H, eps);
    const { cos, sin } = this.ropeTables([...positions]);
    return {
      q: N.ropeF16(this.addBias(lin(a, S, w.q_proj), S, w.q_bias), cos, sin, S, NH, d, 0, d, false),
      k: N.ropeF16(this.addBias(lin(a, S, w.k_proj), S, w.k_bias), cos, sin, S, NKV, d, 0, d, false),
      v: this.addBias(lin(a, S, w.v_proj), S, w.v_bias),
    };
  }

  /**
   * Everything after attention for S rows: o GEMM + bias, the residual, then the MoE (rmsnorm → router →
   * experts → combine) and the second residual. `forced`: the reference's expert choices (isolated mode).
   * Shared by the diff's prefill (layer) and the KV-cache decoder.
   */
  afterAttention(L: number, xh: Uint16Array, o: Uint16Array, S: number, w: GptOssLayerWeights, forced: number[][] | null) {
    const { N } = this;
    const { hidden: H, eps, experts: E, topk: K, intermediate: I, swigluLimit } = this.m.cfg;
    const fault = faultAt(this.faults, L);
    const lin = this.lin(L);
    const attn = this.addBias(lin(o, S, w.o_proj), S, w.o_bias);
    const h = N.addF16(xh, attn);

    // router
    const mIn = N.rmsnormF16(h, this.vecF16(w.post_attention_layernorm), S, H, eps);
    const logits = N.gemmF16F32(mIn, this.linears.get(w.router, fault), S, H, E);
    let given: Int32Array | null = null;
    if (forced !== null) {
      if (forced.length !== S || forced.some((ids) => ids.length !== K)) throw new Error(`forced expert selections must be ${S} tokens × ${K} ids`);
      given = Int32Array.from(forced.flat());
    }
    const routerBias = this.f32(w.router_bias);
    const r = this.G.ossRouterF32(logits, routerBias, S, E, K, given);

    // experts, ascending id, each on the block of its tokens
    const users = new Map<number, number[]>();
    for (let t = 0; t < S; t++) for (let j = 0; j < K; j++) {
      const e = r.ids[t * K + j];
      users.set(e, [...(users.get(e) ?? []), t * K + j]);
    }
    const ys: Uint16Array[] = [];
    const rowToken: number[] = [];
    for (const e of [...users.keys()].sort((p, q2) => p - q2)) {
      const slots = users.get(e)!;
      const n = slots.length;
      const rows = new Uint16Array(n * H);
      slots.forEach((slot, i) => rows.set(mIn.subarray(Math.floor(slot / K) * H, (Math.floor(slot / K) + 1) * H), i * H));
      const ex = w.expert(e);
      const hh = this.addBias(this.linears.productOnce(rows, n, ex.gate_up, fault), n, ex.gate_up_bias);
      const actv = this.G.ossSwigluF16(hh, n, I, swigluLimit, GPT_OSS_ALPHA);
      const y = this.addBias(this.linears.productOnce(actv, n, ex.down, fault, fault === 'fp16-overflow' ? OVERFLOW_ALPHA : 1), n, ex.down_bias);
      slots.forEach((slot, i) => {
        ys.push(N.mulScalarF16(y.subarray(i * H, (i + 1) * H), r.weights[slot]));
        rowToken.push(Math.floor(slot / K));
      });
    }
    const Y = new Uint16Array(ys.length * H);
    ys.forEach((row, i) => Y.set(row, i * H));
    const moe = this.K.moeCombineF16(Y, Int32Array.from(rowToken), new Uint16Array(S * H), S, H);
    const experts = Array.from({ length: S }, (_, t) => Array.from(r.ids.subarray(t * K, (t + 1) * K)));
    return { attn, moe, out: N.addF16(h, moe), experts, weights: r.weights, scores: logits.map((z, i) => Math.fround(z + routerBias[i % E])) };
  }

  /** a projection's GEMM on layer L's weights (FP16 out; MXFP4 and FP8-block ones from their stored bytes), with the run's fault */
  private lin(L: number) {
    const fault = faultAt(this.faults, L);
    return (inp: Uint16Array, rows: number, lw: GptOssLayerWeights['q_proj'], alpha = 1) => this.linears.product(inp, rows, lw, fault, alpha);
  }

  /** the attention sinks as the kernel takes them (f32) */
  sinksF32(w: GptOssLayerWeights): Float32Array {
    return this.f32(w.sinks);
  }

  finalNorm(x: Act): Act {
    const { hidden: H, eps } = this.m.cfg;
    const y = this.N.rmsnormF16(this.N.f32ToF16(x.data), this.vecF16(this.m.finalNorm()), x.shape[0], H, eps);
    return act(x.shape, this.N.f16ToF32(y));
  }

  /** The head reads FP16 weights and FP16 activations and keeps FP32 logits. */
  logits(x: Act): Act {
    const { hidden: H, vocab: V } = this.m.cfg;
    return act([x.shape[0], V], deviceHeadLogits(this.N, this.m, x.data, x.shape[0], H, V));
  }

}
