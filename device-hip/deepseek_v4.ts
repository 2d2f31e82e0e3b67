/**
 * DeepSeek-V4 on the device path, MI250 numerics: weights dequantized to FP16, activations (the hyper-connection
 * streams included) stored in FP16 between kernels, matrix products accumulated in FP32, and DeepSeek's own
 * fp32 islands kept in FP32 (hyper-connection mixing and Sinkhorn, router, compressor projections and pooling,
 * indexer scores, softmaxes, the expert sum). The sequence of ops mirrors reference-cpu/deepseek_v4.ts and
 * its pieces file by file (deepseek_v4/: hc, rope, compressor, indexer, attention, moe); each file states its
 * precision choices. Every op is a native kernel (the emulation of the HIP kernel of the same name).
 *
 * Stage outputs are the reference's: embed [S, hidden] (one copy; a layer expands a rank-2 input to hc_mult
 * streams), layer [S, hc, hidden], final_norm [S, hidden], logits [S, vocab] in FP32.
 *
 * Faults (DESIGN §9): dequant faults go through LinearCache, at the planned layer or (no layer) everywhere,
 * so a global decode bug first shows in layer 0 — every layer of DeepSeek-V4 holds FP8 and MXFP4 linears.
 * fp16-overflow multiplies the attention output projection wo_b by 2^16 (deepseek_v4/attention.ts).
 */
import { type Act, act } from '../harness/formats/tensor.js';
import type { DeepseekV4Head, DeepseekV4LayerWeights, DeepseekV4Weights } from '../harness/models/deepseek_v4.js';
import type { LayerContext, LayerResult, Selections, StagePath } from '../harness/models/path.js';
import { type DeepseekNative, type DeviceNative, loadDeepseekNative } from './binding.js';
import { attention } from './deepseek_v4/attention.js';
import { expandStreams16, hcPost, hcPre } from './deepseek_v4/hc.js';
import { Kit } from './deepseek_v4/kit.js';
import { moe } from './deepseek_v4/moe.js';
import { faultAt, type FaultPlan } from '../harness/faults/plan.js';
import { deviceHeadLogits, LinearCache } from './linear.js';

export class DeepseekV4Device implements StagePath<DeepseekV4LayerWeights> {
  private readonly linears: LinearCache;
  /** hc_head_* and norm.weight, read on first use */
  private headW: DeepseekV4Head | null = null;

  /**
   * `K`: the DeepSeek kernels of the same backend as `N` (a separate native surface, binding.ts); the emulated
   * backend's by default.
   */
  constructor(
    private readonly m: DeepseekV4Weights,
    private readonly N: DeviceNative,
    private readonly faults: FaultPlan | null,
    private readonly K: DeepseekNative = loadDeepseekNative(),
  ) {
    this.linears = new LinearCache(N);
  }

  private kit(L: number | null): Kit {
    return new Kit(this.N, this.K, this.m.cfg, this.linears, L === null ? null : faultAt(this.faults, L));
  }

  embed(tokens: number[]): Act {
    const k = this.kit(null);
    return act([tokens.length, this.m.cfg.hidden], this.N.f16ToF32(k.vec16(this.m.embedRows(tokens))));
  }

  /**
   * x: [S, hidden] (the embedding) or [S, hc, hidden], rounded to FP16 on entry (the device stores nothing
   * wider). Selections `experts` always, `indexer` on CSA layers; ctx.forcedSelections replaces the choices
   * (routing weights still from this path's scores). Substages attn [S, hidden], moe [S, hidden],
   * moe.router [S, top_k] (ω in the order of selections.experts, as the reference lays it out).
   */
  layer(L: number, x: Act, w: DeepseekV4LayerWeights, ctx: LayerContext): LayerResult {
    const c = this.m.cfg;
    const { hidden: D, hcMult: hc } = c;
    const { N } = this;
    const S = x.shape[0];
    if (ctx.tokens.length !== S) throw new Error(`layer ${L}: ${ctx.tokens.length} tokens but the input has ${S} rows`);
    let X: Uint16Array;
    if (x.shape.length === 2 && x.shape[1] === D) X = expandStreams16(N.f32ToF16(x.data), S, hc, D);
    else if (x.shape.length === 3 && x.shape[1] === hc && x.shape[2] === D) X = N.f32ToF16(x.data);
    else throw new Error(`layer ${L}: input shape ${JSON.stringify(x.shape)} is neither [S, ${D}] nor [S, ${hc}, ${D}]`);
    const kit = this.kit(L);
    const forced = ctx.forcedSelections;

    // Attention sublayer (§4.4 line 1)
    const pa = hcPre(kit, X, S, { fn: w.hc_attn_fn, base: w.hc_attn_base, scale: w.hc_attn_scale });
    const a = N.rmsnormF16(pa.u, kit.vec16(w.attn_norm), S, D, c.normEps);
    const att = attention(kit, a, S, w.attn, w.ratio, ctx.positions, w.attn.indexer !== null ? (forced?.indexer ?? null) : null);
    X = hcPost(kit, att.out, X, S, pa);

    // MoE sublayer (§4.4 line 2)
    const pf = hcPre(kit, X, S, { fn: w.hc_ffn_fn, base: w.hc_ffn_base, scale: w.hc_ffn_scale });
    const f = N.rmsnormF16(pf.u, kit.vec16(w.ffn_norm), S, D, c.normEps);
    const given = forced?.experts ?? (w.hash ? ctx.tokens.map((t) => this.m.hashExperts(w, t)) : null);
    const mo = moe(kit, f, S, w, given);
    X = hcPost(kit, mo.out, X, S, pf);

    const selections: Selections = { experts: mo.ids };
    if (att.indexer !== null) selections.indexer = att.indexer;
    return {
      out: act([S, hc, D], N.f16ToF32(X)),
      selections,
      substages: {
        attn: act([S, D], N.f16ToF32(att.out)),
        moe: act([S, D], N.f16ToF32(mo.out)),
        'moe.router': act([S, c.topk], Float32Array.from(mo.weights)),
      },
      scores: {
        ...(mo.scores !== null ? { experts: { scores: act([S, c.experts], mo.scores.s), bias: mo.scores.bias } } : {}),
        ...(att.indexerScores !== null ? { indexer: { scores: act([S, att.indexerScores.B], att.indexerScores.scores), bias: null } } : {}),
      },
    };
  }

  /** RMSN_norm(hc_head(X)) (§4.7): the collapse in FP32 (hcHeadF16), the norm in FP32, both stored FP16. */
  finalNorm(x: Act): Act {
    const c = this.m.cfg;
    const { hidden: D, hcMult: hc } = c;
    if (x.shape.length !== 3 || x.shape[1] !== hc || x.shape[2] !== D) throw new Error(`final_norm: input shape ${JSON.stringify(x.shape)} is not [S, ${hc}, ${D}]`);
    const S = x.shape[0];
    const h = (this.headW ??= this.m.head());
    const kit = this.kit(null);
    const v = this.K.hcHeadF16(this.N.f32ToF16(x.data), kit.f32Now(h.hc_head_fn), kit.f32Now(h.hc_head_base), kit.f32Now(h.hc_head_scale), S, hc, D, c.normEps, c.hcEps);
    return act([S, D], this.N.f16ToF32(this.N.rmsnormF16(v, kit.vec16(h.norm), S, D, c.normEps)));
  }

  /** The head reads FP16 weights and FP16 activations and keeps FP32 logits (what a sampler consumes). */
  logits(x: Act): Act {
    const { hidden: D, vocab: V } = this.m.cfg;
    return act([x.shape[0], V], deviceHeadLogits(this.N, this.m, x.data, x.shape[0], D, V));
  }

}
