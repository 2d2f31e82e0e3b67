/**
 * DeepSeek-V4 forward pass, FP32 reference, following DeepSeek's own inference/model.py (spec §4):
 *   embed:      h_t = embed.weight[token_t]                                   → [S, hidden] (one copy)
 *   layer L:    X ← hc_post(Attn(RMSN_attn_norm(u)), X), (u, post, C) = hc_pre(X, hc_attn_*)
 *               X ← hc_post(MoE(RMSN_ffn_norm(u)), X),   (u, post, C) = hc_pre(X, hc_ffn_*)   → [S, hc, hidden]
 *   final_norm: RMSN_norm(hc_head(X))                                          → [S, hidden]
 *   logits:     head.weight · final_norm, for every position                   → [S, vocab]
 * The pieces live in reference-cpu/deepseek_v4/ in forward order: hc, rope, attention (compressor, indexer),
 * moe; their linears go through reference-cpu/linear.ts, which decodes each weight inside the exact native GEMM
 * (linearExact). Every weight is dequantized exactly (§3), activations stay FP32, loops accumulate in float64, matrix
 * products use the native FP32 GEMM. DeepSeek's activation
 * quantization simulations and the indexer's Hadamard rotation are skipped (§4.9, indexer.ts).
 *
 * The `embed` stage is one copy [S, hidden] (as transformers' embedding output, §10.5); a layer given a
 * rank-2 input expands it to hc_mult identical streams (`unsqueeze(2).repeat`, §4.2), so layer 0 receives
 * exactly DeepSeek's block input.
 *
 * Test-only: `{ ablations }` removes single mechanisms (window, compression, indexer, sink, hash routing, clamp),
 * mirroring the numpy golden's ablations; see deepseek_v4/ablations.ts. All off by default.
 */
import type { StoredTensor } from '../harness/formats/linear.js';
import { type Act, act } from '../harness/formats/tensor.js';
import type { DeepseekV4Checkpoint, DeepseekV4Head, DeepseekV4LayerWeights } from '../harness/models/deepseek_v4.js';
import type { LayerContext, LayerResult, ModelDef, Selections, StagePath } from '../harness/models/path.js';
import { type DeepseekV4Ablations, NO_ABLATIONS } from './deepseek_v4/ablations.js';
import { attention } from './deepseek_v4/attention.js';
import { expandStreams, hcHead, hcPost, hcPre } from './deepseek_v4/hc.js';
import { moe } from './deepseek_v4/moe.js';
import { decodeStored, headLogits } from './llama.js';
import { rmsnorm, stored } from './ops.js';

export type { DeepseekV4Ablations } from './deepseek_v4/ablations.js';

export interface DeepseekV4ReferenceOptions {
  /** test-only mechanism ablations (deepseek_v4/ablations.ts); default: none */
  ablations?: DeepseekV4Ablations;
}

export class DeepseekV4Reference implements StagePath<DeepseekV4LayerWeights> {
  /** hc_head_* and norm.weight, read on first use (a few hundred KiB at real width) */
  private headW: DeepseekV4Head | null = null;

  private readonly ab: DeepseekV4Ablations;

  constructor(private readonly m: DeepseekV4Checkpoint, opts: DeepseekV4ReferenceOptions = {}) {
    this.ab = { ...(opts.ablations ?? NO_ABLATIONS) };
  }

  embed(tokens: number[]): Act {
    return act([tokens.length, this.m.cfg.hidden], decodeStored(this.m.embedRows(tokens)));
  }

  /**
   * x: [S, hidden] (the embedding, expanded here) or [S, hc, hidden]. Selections: `experts` always,
   * `indexer` on CSA layers; ctx.forcedSelections replaces the choices (routing weights still come from
   * this path's scores). Substages: attn [S, hidden], moe [S, hidden], moe.router [S, top_k] — ω in the
   * order of selections.experts (ascending expert id), so forced and free runs line up element by element.
   */
  layer(L: number, x: Act, w: DeepseekV4LayerWeights, ctx: LayerContext): LayerResult {
    const c = this.m.cfg;
    const { hidden: D, hcMult: hc } = c;
    const S = x.shape[0];
    if (ctx.tokens.length !== S) throw new Error(`layer ${L}: ${ctx.tokens.length} tokens but the input has ${S} rows`);
    let X: Float32Array;
    if (x.shape.length === 2 && x.shape[1] === D) X = expandStreams(x.data, S, hc, D);
    else if (x.shape.length === 3 && x.shape[1] === hc && x.shape[2] === D) X = x.data;
    else throw new Error(`layer ${L}: input shape ${JSON.stringify(x.shape)} is neither [S, ${D}] nor [S, ${hc}, ${D}]`);
    const dims = { hc, D, normEps: c.normEps, hcEps: c.hcEps, iters: c.hcSinkhornIters };
    const hcParams = (fn: StoredTensor, base: StoredTensor, scale: StoredTensor) => ({ fn: decodeStored(fn), base: decodeStored(base), scale: decodeStored(scale) });
    const forced = ctx.forcedSelections;

    // Attention sublayer (§4.4 line 1)
    const pa = hcPre(X, S, hcParams(w.hc_attn_fn, w.hc_attn_base, w.hc_attn_scale), dims);
    const fp16 = ctx.fp16Storage;
    const a = rmsnorm(pa.u, S, D, decodeStored(w.attn_norm), c.normEps);
    const att = attention(a, S, w.attn, w.ratio, c, ctx.positions, w.attn.indexer !== null ? (forced?.indexer ?? null) : null, this.ab);
    const attOut = stored(att.out, fp16);
    X = stored(hcPost(attOut, X, S, hc, D, pa.post, pa.comb), fp16);

    // MoE sublayer (§4.4 line 2)
    const pf = hcPre(X, S, hcParams(w.hc_ffn_fn, w.hc_ffn_base, w.hc_ffn_scale), dims);
    const f = rmsnorm(pf.u, S, D, decodeStored(w.ffn_norm), c.normEps);
    const hashIds = w.hash && !this.ab.scoreRouting ? ctx.tokens.map((t) => this.m.hashExperts(w, t)) : null;
    const dm = { hidden: D, experts: c.experts, topk: c.topk, routeScale: c.routeScale, swigluLimit: this.ab.noClamp ? 0 : c.swigluLimit, fp16 };
    const mo = moe(f, S, w, dm, hashIds, forced?.experts ?? null);
    const moOut = stored(mo.out, fp16);
    X = hcPost(moOut, X, S, hc, D, pf.post, pf.comb);

    const selections: Selections = { experts: mo.routing.ids };
    if (att.indexer !== null) selections.indexer = att.indexer;
    const k = mo.routing.weights[0]?.length ?? c.topk;
    const router = new Float32Array(S * k);
    mo.routing.weights.forEach((ws, t) => router.set(ws, t * k));
    return {
      out: act([S, hc, D], X),
      selections,
      substages: { attn: act([S, D], attOut), moe: act([S, D], moOut), 'moe.router': act([S, k], router) },
      scores: {
        ...(mo.scores !== null ? { experts: { scores: act([S, c.experts], Float32Array.from(mo.scores.s)), bias: mo.scores.bias } } : {}),
        ...(att.indexerScores !== null ? { indexer: { scores: act([S, att.indexerScores.B], att.indexerScores.scores), bias: null } } : {}),
      },
    };
  }

  /** RMSN_norm(hc_head(X)) (§4.7): [S, hc, hidden] → [S, hidden]. */
  finalNorm(x: Act): Act {
    const c = this.m.cfg;
    const { hidden: D, hcMult: hc } = c;
    if (x.shape.length !== 3 || x.shape[1] !== hc || x.shape[2] !== D) throw new Error(`final_norm: input shape ${JSON.stringify(x.shape)} is not [S, ${hc}, ${D}]`);
    const S = x.shape[0];
    const h = (this.headW ??= this.m.head());
    const v = hcHead(x.data, S, { fn: decodeStored(h.hc_head_fn), base: decodeStored(h.hc_head_base), scale: decodeStored(h.hc_head_scale) }, { hc, D, normEps: c.normEps, hcEps: c.hcEps });
    return act([S, D], rmsnorm(v, S, D, decodeStored(h.norm), c.normEps));
  }

  /** head.weight · x for every position (DeepSeek computes the last only), head read in 4096-row chunks. */
  logits(x: Act): Act {
    const { hidden: D, vocab: V } = this.m.cfg;
    return act([x.shape[0], V], headLogits(this.m, x.data, x.shape[0], D, V));
  }

}

/** Everything of the ModelDef but the device path, for harness/arch/deepseek_v4.ts to complete. */
export function deepseekV4Reference(m: DeepseekV4Checkpoint, opts: DeepseekV4ReferenceOptions = {}): Omit<ModelDef<DeepseekV4LayerWeights>, 'device'> {
  return {
    architecture: 'deepseek_v4',
    numLayers: m.cfg.layers,
    vocab: m.cfg.vocab,
    loadLayer: (L) => m.loadLayer(L),
    quantizedLayers: () => m.quantizedLayers(),
    conformance: () => m.conformance(),
    reference: new DeepseekV4Reference(m, opts),
  };
}
