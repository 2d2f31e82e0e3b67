/**
 * gpt-oss forward pass, FP32 reference, in the order of ../shared/spec/gpt-oss.md §3 and OpenAI's
 * gpt_oss/torch/model.py:
 *   x = embed[tokens]
 *   per layer:
 *     a = RMSNorm(x)·w_in;  q, k, v = W·a + b;  RoPE (half-split) with YaRN's inv_freq on q, k, both scaled
 *     by the concentration;  scores q·k/√d, causal, windowed on sliding layers;  softmax whose denominator
 *     also holds e^{sinks[h]};  x += W_o·o + b_o                                     → sub-stage attn
 *     m = RMSNorm(x)·w_post;  g = W_r·m + b_r;  top-k of g (ties: lower id), softmax over those k logits
 *                                                                                     → sub-stage moe.router
 *     per chosen expert: h = W1·m + b1, gate = h[0::2], up = h[1::2], gate ≤ L, −L ≤ up ≤ L,
 *     act = gate·σ(1.702·gate)·(up + 1), y = W2·act + b2;  x += Σ weight·y           → sub-stage moe
 *   final_norm = RMSNorm(x)·w_norm;  logits = W_head·final_norm
 * Every weight is dequantized exactly (reference-cpu/dequant.ts), inside the products (reference-cpu/linear.ts); sums
 * run in float64 where ops.ts does.
 */
import type { LinearWeight, StoredTensor } from '../harness/formats/linear.js';
import { type Act, act } from '../harness/formats/tensor.js';
import { GPT_OSS_ALPHA, type GptOssCheckpoint, type GptOssLayerWeights, gptOssRope } from '../harness/models/gpt_oss.js';
import type { LayerContext, LayerResult, ModelDef, StagePath } from '../harness/models/path.js';
import { linear } from './linear.js';
import type { GptOssTraps } from './gpt_oss/traps.js';
import { decodeStored, headLogits } from './llama.js';
import { add, causalAttention, rmsnorm, rope, softmaxInPlace, stored } from './ops.js';

export type { GptOssTraps } from './gpt_oss/traps.js';

/**
 * y[S, out] = x·Wᵀ + bias, W decoded exactly inside the product (linear: no FP32 copy of W, a routed expert's
 * gate_up being 5760×2880). `fp16` (the floor pass, LayerContext.fp16Storage): the product, the bias and their sum
 * each stored in FP16, as an FP16 path with an unfused bias add holds them.
 */
function affine(x: Float32Array, S: number, w: LinearWeight, bias: Float32Array | null, fp16?: boolean): Float32Array {
  const outDim = w.out;
  const y = stored(linear(x, S, w), fp16);
  if (bias === null) return y;
  const b = stored(bias, fp16);
  for (let s = 0; s < S; s++) for (let o = 0; o < outDim; o++) y[s * outDim + o] += b[o];
  return stored(y, fp16);
}

/** Indices of the k largest values, ties to the lower index, in that order (largest first). */
export function topkIndices(v: ArrayLike<number>, k: number): number[] {
  const idx = Array.from({ length: v.length }, (_, i) => i);
  idx.sort((a, b) => (v[b] !== v[a] ? v[b] - v[a] : a - b));
  return idx.slice(0, k);
}

/** gpt-oss's SwiGLU on one value pair: gate clamped above, up clamped both ways and shifted by 1. */
export function gptOssSwiglu(gate: number, up: number, limit: number, t: GptOssTraps = {}): number {
  const g = t.noGateClamp ? gate : Math.min(gate, limit);
  const u = t.noUpClamp ? up : Math.min(Math.max(up, -limit), limit);
  const alpha = t.alphaOne ? 1 : GPT_OSS_ALPHA;
  return (g / (1 + Math.exp(-alpha * g))) * (t.noPlusOne ? u : u + 1);
}

export class GptOssReference implements StagePath<GptOssLayerWeights> {
  constructor(
    private readonly m: GptOssCheckpoint,
    private readonly traps: GptOssTraps = {},
  ) {}

  embed(tokens: number[]): Act {
    return act([tokens.length, this.m.cfg.hidden], decodeStored(this.m.embedRows(tokens)));
  }

  /** Attention block: the output added to the residual stream, [S, hidden]. */
  /** `fp16`: the floor pass's FP16 storage of every intermediate an FP16 path stores (LayerContext.fp16Storage). */
  attention(x: Float32Array, S: number, w: GptOssLayerWeights, positions: number[], fp16?: boolean): Float32Array {
    const { hidden: H, heads: NH, kvHeads: NKV, headDim: d, eps, slidingWindow } = this.m.cfg;
    const t = this.traps;
    const b = (s: StoredTensor) => (t.noAttnBias ? null : decodeStored(s));
    const a = stored(rmsnorm(x, S, H, decodeStored(w.input_layernorm), eps), fp16);
    const { invFreq, concentration } = gptOssRope(this.m.cfg);
    const c = t.noConcentration ? 1 : concentration;
    const scaled = (v: Float32Array) => (c === 1 ? v : v.map((z) => z * c));
    const q = stored(scaled(rope(affine(a, S, w.q_proj, b(w.q_bias), fp16), S, NH, d, positions, invFreq, 'half')), fp16);
    const k = stored(scaled(rope(affine(a, S, w.k_proj, b(w.k_bias), fp16), S, NKV, d, positions, invFreq, 'half')), fp16);
    const v = affine(a, S, w.v_proj, b(w.v_bias), fp16);
    const sliding = t.windowAll ? true : t.noWindow ? false : w.sliding;
    const sm = 1 / Math.sqrt(d);
    const sinks = t.noSink ? null : Float64Array.from(decodeStored(w.sinks), (z) => (t.sinkScaled ? z * sm : z));
    const o = stored(causalAttention(q, k, v, S, NH, NKV, d, d, sm, sliding ? slidingWindow : 0, sinks), fp16);
    return affine(o, S, w.o_proj, b(w.o_bias), fp16);
  }

  /** Router: per token the chosen experts (ascending ids) and their weights (softmax over the chosen logits). */
  route(m: Float32Array, S: number, w: GptOssLayerWeights, forced: number[][] | null): { experts: number[][]; weights: number[][]; logits: Float32Array } {
    const { experts: E, topk: K } = this.m.cfg;
    const g = affine(m, S, w.router, this.traps.noRouterBias ? null : decodeStored(w.router_bias));
    const experts: number[][] = [];
    const weights: number[][] = [];
    for (let s = 0; s < S; s++) {
      const row = g.subarray(s * E, (s + 1) * E);
      const ids = forced !== null ? forced[s] : topkIndices(row, K).sort((a, b) => a - b);
      let p: Float64Array;
      if (this.traps.softmaxAll) {
        const all = Float64Array.from(row);
        softmaxInPlace(all);
        p = Float64Array.from(ids, (e) => all[e]);
      } else {
        p = Float64Array.from(ids, (e) => row[e]);
        softmaxInPlace(p);
      }
      experts.push(ids);
      weights.push([...p]);
    }
    return { experts, weights, logits: g };
  }

  /** The routed experts' weighted sum for every token, [S, hidden]; each chosen expert's weights decoded inside its products. */
  moe(m: Float32Array, S: number, w: GptOssLayerWeights, routes: { experts: number[][]; weights: number[][] }, fp16?: boolean): Float32Array {
    const { hidden: H, intermediate: I, swigluLimit } = this.m.cfg;
    const t = this.traps;
    const out = new Float64Array(S * H);
    const weightOf = (s: number, e: number) => routes.weights[s][routes.experts[s].indexOf(e)];
    const users = new Map<number, number[]>();
    routes.experts.forEach((ids, s) => ids.forEach((e) => users.set(e, [...(users.get(e) ?? []), s])));
    for (const e of [...users.keys()].sort((a, b) => a - b)) {
      const ex = w.expert(e);
      const b1 = t.noExpertBias ? null : decodeStored(ex.gate_up_bias);
      const b2 = t.noExpertBias ? null : decodeStored(ex.down_bias);
      // the tokens routed to e, as one [n, H] block
      const rows = users.get(e)!;
      const n = rows.length;
      const me = new Float32Array(n * H);
      rows.forEach((s, i) => me.set(m.subarray(s * H, (s + 1) * H), i * H));
      const h = affine(me, n, ex.gate_up, b1, fp16);
      const actv = new Float32Array(n * I);
      for (let r = 0; r < n; r++) {
        const hr = h.subarray(r * 2 * I, (r + 1) * 2 * I);
        for (let i = 0; i < I; i++) {
          const [gate, up] = t.halves ? [hr[i], hr[I + i]] : [hr[2 * i], hr[2 * i + 1]];
          actv[r * I + i] = gptOssSwiglu(gate, up, swigluLimit, t);
        }
      }
      const y = affine(stored(actv, fp16), n, ex.down, b2, fp16);
      rows.forEach((s, i) => {
        const wt = weightOf(s, e);
        if (fp16 === true) {
          // an FP16 path stores each weighted expert row before the sum
          const wy = stored(Float32Array.from(y.subarray(i * H, (i + 1) * H), (z) => wt * z), true);
          for (let j = 0; j < H; j++) out[s * H + j] += wy[j];
        } else for (let j = 0; j < H; j++) out[s * H + j] += wt * y[i * H + j];
      });
    }
    return Float32Array.from(out);
  }

  layer(_L: number, x: Act, w: GptOssLayerWeights, ctx: LayerContext): LayerResult {
    const { hidden: H, eps, topk: K, experts: E } = this.m.cfg;
    const S = x.shape[0];
    const fp16 = ctx.fp16Storage;
    const attn = this.attention(x.data, S, w, ctx.positions, fp16);
    const h = stored(add(x.data, attn), fp16);
    const m = stored(rmsnorm(h, S, H, decodeStored(w.post_attention_layernorm), eps), fp16);
    const r = this.route(m, S, w, ctx.forcedSelections?.experts ?? null);
    const moe = stored(this.moe(m, S, w, r, fp16), fp16);
    return {
      out: act([S, H], add(h, moe)),
      selections: { experts: r.experts },
      substages: { attn: act([S, H], attn), 'moe.router': act([S, K], Float32Array.from(r.weights.flat())), moe: act([S, H], moe) },
      // the selection scores are the biased router logits themselves (the bias is no selection-only term)
      scores: { experts: { scores: act([S, E], r.logits), bias: null } },
    };
  }

  finalNorm(x: Act): Act {
    const { hidden: H, eps } = this.m.cfg;
    return act(x.shape, rmsnorm(x.data, x.shape[0], H, decodeStored(this.m.finalNorm()), eps));
  }

  logits(x: Act): Act {
    const { hidden: H, vocab: V } = this.m.cfg;
    return act([x.shape[0], V], headLogits(this.m, x.data, x.shape[0], H, V));
  }

}

/** Everything of the ModelDef but the device path, for harness/arch/gpt_oss.ts to complete. */
export function gptOssReference(m: GptOssCheckpoint, traps: GptOssTraps = {}): Omit<ModelDef<GptOssLayerWeights>, 'device'> {
  return {
    architecture: 'gpt_oss',
    numLayers: m.cfg.layers,
    vocab: m.cfg.vocab,
    loadLayer: (L) => m.loadLayer(L),
    quantizedLayers: () => m.quantizedLayers(),
    conformance: () => m.conformance(),
    fusedLinears: (L) => m.expertLinears(L),
    reference: new GptOssReference(m, traps),
  };
}
