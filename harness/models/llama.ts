/**
 * Llama (LlamaForCausalLM) as stored by Hugging Face: config fields and tensor names, bound once into typed
 * weights per layer. Both paths read the same bound bytes; nothing after binding looks tensors up by name.
 */
import * as path from 'node:path';
import { InputError } from '../errors.js';
import type { Checkpoint } from '../io/checkpoint.js';
import { assertStoredLayers } from './layers.js';
import { forEachRowChunk, readRows } from './rows.js';
import { ConfigReader } from '../io/config.js';
import { expectShape, type LinearWeight, linearTensorNames, loadLinear, parseQuantConfig, type QuantConfig, type StoredTensor } from '../formats/linear.js';

export interface LlamaConfig {
  hidden: number;
  intermediate: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  vocab: number;
  eps: number;
  ropeTheta: number;
  /** rope_scaling of type "llama3" (Llama 3.1+), or null: plain RoPE */
  ropeLlama3: Llama3RopeScaling | null;
  tieEmbeddings: boolean;
  /** attention_bias: q/k/v/o_proj carry a `.bias` [out] (transformers' LlamaAttention, bias=config.attention_bias) */
  attentionBias: boolean;
  /** mlp_bias: gate/up/down_proj carry a `.bias` [out] (LlamaMLP, bias=config.mlp_bias) */
  mlpBias: boolean;
  bos: number | null;
  eos: number | null;
}

export function parseLlamaConfig(ck: Checkpoint): LlamaConfig {
  const c = new ConfigReader(ck.config, ck.configFile);
  const hidden = c.int('hidden_size');
  const heads = c.int('num_attention_heads');
  const kvHeads = c.int('num_key_value_heads', heads);
  // transformers: hidden_size // num_attention_heads when head_dim is absent
  const headDim = c.int('head_dim', Math.floor(hidden / heads));
  if (heads % kvHeads !== 0) throw new InputError(`num_attention_heads ${heads} is not a multiple of num_key_value_heads ${kvHeads}`, { file: ck.configFile });
  if (headDim % 2 !== 0) throw new InputError(`head_dim ${headDim} must be even for RoPE`, { file: ck.configFile });
  const rope = parseRope(c, ck.configFile);
  refuseUnimplementedLlamaFields(c);
  return {
    hidden,
    intermediate: c.int('intermediate_size'),
    layers: c.int('num_hidden_layers'),
    heads,
    kvHeads,
    headDim,
    vocab: c.int('vocab_size'),
    eps: c.positive('rms_norm_eps', 1e-6),
    ropeTheta: rope.theta,
    ropeLlama3: rope.llama3,
    tieEmbeddings: c.bool('tie_word_embeddings', false),
    attentionBias: flag(c, 'attention_bias'),
    mlpBias: flag(c, 'mlp_bias'),
    bos: typeof ck.config.bos_token_id === 'number' ? ck.config.bos_token_id : null,
    eos: typeof ck.config.eos_token_id === 'number' ? ck.config.eos_token_id : null,
  };
}

/** Llama 3.1's rope_scaling (transformers' _compute_llama3_parameters). */
export interface Llama3RopeScaling {
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  originalMaxPositions: number;
}

/**
 * rope_scaling: absent, null or type "default" → plain RoPE; type "llama3" with its four fields → Llama 3.1's
 * frequency rescaling (implemented in both paths via llamaInvFreq); any other type is refused by name.
 */
function parseRopeScaling(c: ConfigReader, file: string, key: 'rope_scaling' | 'rope_parameters' = 'rope_scaling'): Llama3RopeScaling | null {
  const rs = c.obj(key);
  if (rs === undefined) return null;
  // transformers 4.x lets the legacy `type` win, 5.x `rope_type`: both given and different is not knowable
  if (rs.raw.rope_type !== undefined && rs.raw.type !== undefined && rs.raw.rope_type !== rs.raw.type) {
    throw new InputError(`${key} names rope_type ${JSON.stringify(rs.raw.rope_type)} and type ${JSON.stringify(rs.raw.type)}: which scaling it means is not knowable`, { file });
  }
  const type = rs.raw.rope_type ?? rs.raw.type;
  // a scaling given without its type (transformers 4.x raises on it) is not plain RoPE by omission
  if (type === undefined && Object.keys(rs.raw).some((k) => k !== 'rope_theta' && k !== 'partial_rotary_factor')) {
    throw new InputError(`${key} ${JSON.stringify(rs.raw)} has no rope_type: which scaling it means is not knowable`, { file });
  }
  if (type === undefined || type === 'default') return null;
  if (type !== 'llama3') throw new InputError(`${key} ${JSON.stringify(rs.raw)} is not supported for llama (plain RoPE, or rope_type "llama3")`, { file });
  const pos = (k: string) => {
    const v = rs.num(k);
    if (!(v > 0)) throw new InputError(`${key}.${k} must be a positive number, got ${JSON.stringify(rs.raw[k])}`, { file });
    return v;
  };
  // absent, transformers 5.x's standardize_rope_params takes max_position_embeddings (4.x raised a KeyError)
  const original = rs.raw.original_max_position_embeddings === undefined && (c.raw.max_position_embeddings ?? null) !== null ? c.positive('max_position_embeddings', 0) : pos('original_max_position_embeddings');
  const out = { factor: pos('factor'), lowFreqFactor: pos('low_freq_factor'), highFreqFactor: pos('high_freq_factor'), originalMaxPositions: original };
  if (!(out.highFreqFactor > out.lowFreqFactor)) throw new InputError(`${key}: high_freq_factor ${out.highFreqFactor} must exceed low_freq_factor ${out.lowFreqFactor}`, { file });
  return out;
}

/**
 * RoPE as configured: transformers ≤ 4.x writes `rope_theta` and `rope_scaling`; newer configs write one
 * `rope_parameters` object holding `rope_type`, `rope_theta` and the scaling fields. Either is read; both
 * present and disagreeing (another theta, another scaling) is refused, naming both, rather than guessed.
 */
function parseRope(c: ConfigReader, file: string): { theta: number; llama3: Llama3RopeScaling | null } {
  const legacy = { theta: c.positive('rope_theta', 10000), llama3: parseRopeScaling(c, file) };
  const rp = c.obj('rope_parameters');
  if (rp === undefined) return legacy;
  const params = { theta: rp.raw.rope_theta === undefined ? legacy.theta : rp.positive('rope_theta', 10000), llama3: parseRopeScaling(c, file, 'rope_parameters') };
  const scalingGiven = c.raw.rope_scaling !== undefined && c.raw.rope_scaling !== null;
  // with rope_scaling given, transformers 5.x replaces rope_parameters by it and takes rope_theta from the top
  // level (10000 when absent); 4.x never reads rope_parameters: its theta must then be that one
  if (((c.raw.rope_theta !== undefined || scalingGiven) && params.theta !== legacy.theta) || (scalingGiven && JSON.stringify(params.llama3) !== JSON.stringify(legacy.llama3))) {
    throw new InputError(`rope_parameters ${JSON.stringify(rp.raw)} disagrees with rope_theta ${JSON.stringify(c.raw.rope_theta) ?? 'absent (10000)'} / rope_scaling ${JSON.stringify(c.raw.rope_scaling)}: which one the model was trained with is not knowable`, { file });
  }
  return params;
}

/**
 * RoPE inverse frequencies f_i = rope_theta^(−2i/head_dim), i < head_dim/2, and with rope_type "llama3"
 * rescaled as transformers' _compute_llama3_parameters does (in float64 here): wavelength λ = 2π/f; λ below
 * original_max_position_embeddings/high_freq_factor keeps f; above original/low_freq_factor takes f/factor;
 * between, s = (original/λ − low) / (high − low) and f ← (1 − s)·f/factor + s·f. Both paths use this one table.
 */
export function llamaInvFreq(cfg: Pick<LlamaConfig, 'headDim' | 'ropeTheta' | 'ropeLlama3'>): Float64Array {
  const { headDim: hd, ropeTheta } = cfg;
  const f = Float64Array.from({ length: hd / 2 }, (_, i) => ropeTheta ** (-(2 * i) / hd));
  const s = cfg.ropeLlama3;
  if (s === null) return f;
  const lowWavelen = s.originalMaxPositions / s.lowFreqFactor;
  const highWavelen = s.originalMaxPositions / s.highFreqFactor;
  return f.map((fi) => {
    const wavelen = (2 * Math.PI) / fi;
    if (wavelen < highWavelen) return fi;
    if (wavelen > lowWavelen) return fi / s.factor;
    const smooth = (s.originalMaxPositions / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
    return (1 - smooth) * (fi / s.factor) + smooth * fi;
  });
}

/**
 * The Llama config fields that change the computation, and how each is handled (the rest — dropout,
 * initializer_range, use_cache, pretraining_tp (a summation order only) — do not change the forward pass):
 *   hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
 *   vocab_size, rms_norm_eps (> 0), rope_theta (> 0), rope_scaling (default or "llama3") or the newer
 *   rope_parameters holding both: implemented in both paths;
 *   tie_word_embeddings: implemented (the head is the embedding, as transformers ties it);
 *   attention_bias, mlp_bias: implemented (each projection adds its `.bias` after the product, in both paths);
 *   hidden_act: only "silu" (SwiGLU) is implemented ("swish" is transformers' other name for it);
 *   max_position_embeddings: positions beyond it are refused (cli/input.ts, cli/generate.ts).
 * Anything not implemented is refused with the field and its value, never silently computed as something else.
 */
function refuseUnimplementedLlamaFields(c: ConfigReader): void {
  const refuse = (key: string, why: string) => {
    throw new InputError(`${key} ${JSON.stringify(c.raw[key])} is not supported for llama: ${why}`, { file: c.file });
  };
  const act = c.raw.hidden_act;
  // transformers' ACT2FN maps "swish" to the same SiLU
  if (act !== undefined && act !== 'silu' && act !== 'swish') refuse('hidden_act', 'only "silu" (SwiGLU) is implemented');
  // partial RoPE (rotating only part of each head) is not Llama's; transformers builds inv_freq for the part
  const prf = c.raw.partial_rotary_factor;
  if (prf !== undefined && prf !== null && prf !== 1) refuse('partial_rotary_factor', 'only full RoPE (1.0) is implemented');
  const rp = c.raw.rope_parameters as Record<string, unknown> | null | undefined;
  const rpf = rp !== null && typeof rp === 'object' ? rp.partial_rotary_factor : undefined;
  if (rpf !== undefined && rpf !== null && rpf !== 1) {
    throw new InputError(`rope_parameters.partial_rotary_factor ${JSON.stringify(rpf)} is not supported for llama: only full RoPE (1.0) is implemented`, { file: c.file });
  }
}

/** A boolean config field, false when absent or null; anything else (a string, a number) is refused. */
function flag(c: ConfigReader, key: string): boolean {
  const v = c.raw[key];
  if (v === undefined || v === null) return false;
  if (typeof v !== 'boolean') throw new InputError(`${key} ${JSON.stringify(v)} is not supported for llama: expected true or false`, { file: c.file });
  return v;
}

/** One decoder layer's weights, named as in the checkpoint (model.layers.N.*). */
export interface LlamaLayerWeights {
  index: number;
  input_layernorm: StoredTensor;
  post_attention_layernorm: StoredTensor;
  q_proj: LinearWeight;
  k_proj: LinearWeight;
  v_proj: LinearWeight;
  o_proj: LinearWeight;
  gate_proj: LinearWeight;
  up_proj: LinearWeight;
  down_proj: LinearWeight;
  /** each projection's `.bias` [out] (attention_bias: q/k/v/o; mlp_bias: gate/up/down); null: none */
  bias: Record<LlamaLinear, StoredTensor | null>;
}

export const LLAMA_LINEARS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;
export type LlamaLinear = (typeof LLAMA_LINEARS)[number];
const ATTENTION_LINEARS: readonly LlamaLinear[] = ['q_proj', 'k_proj', 'v_proj', 'o_proj'];

/** KV-cache quantization scales as compressed-tensors, ModelOpt and Quark store them (self_attn.k_scale, k_proj.k_scale, k_proj.output_scale) */
const KV_CACHE_SCALE = /^model\.layers\.\d+\.self_attn\.(?:(?:[qkv]_proj\.)?(?:[qkv]|kv|prob)_scale|[qkv]_proj\.output_scale)$/;

/** The checkpoint name of layer L's projection `key` (`model.layers.L.self_attn.q_proj`, `….mlp.down_proj`), without `.weight`/`.bias`. */
export const llamaLinearStem = (L: number, key: LlamaLinear) => `model.layers.${L}.${ATTENTION_LINEARS.includes(key) ? 'self_attn' : 'mlp'}.${key}`;

/** Whether the config gives projection `key` a bias. */
export const llamaHasBias = (cfg: LlamaConfig, key: LlamaLinear) => (ATTENTION_LINEARS.includes(key) ? cfg.attentionBias : cfg.mlpBias);

export class LlamaCheckpoint {
  readonly cfg: LlamaConfig;
  readonly qc: QuantConfig;
  readonly embedName = 'model.embed_tokens.weight';
  readonly headName: string;

  constructor(readonly ck: Checkpoint) {
    this.cfg = parseLlamaConfig(ck);
    this.qc = parseQuantConfig(ck.config, ck.configFile);
    // Tied: transformers makes lm_head the embedding, whatever lm_head.weight a checkpoint also stores.
    this.headName = this.cfg.tieEmbeddings ? this.embedName : 'lm_head.weight';
    const { vocab, hidden } = this.cfg;
    assertStoredLayers(ck, this.cfg.layers);
    for (const name of [this.embedName, this.headName]) {
      const i = ck.info(name);
      if (i.dtype !== 'BF16' && i.dtype !== 'F16' && i.dtype !== 'F32') {
        throw new InputError(`dtype ${i.dtype} not supported for embeddings/head (BF16, F16, F32)`, { file: this.fileOf(name), tensor: name });
      }
      if (i.shape.length !== 2 || i.shape[0] !== vocab || i.shape[1] !== hidden) {
        throw new InputError(`shape ${JSON.stringify(i.shape)} disagrees with the config's [${vocab}, ${hidden}]`, { file: this.fileOf(name), tensor: name });
      }
    }
  }

  fileOf(name: string): string {
    return path.join(this.ck.dir, this.ck.weightMap.get(name) ?? '?');
  }

  linearShapes(): Record<(typeof LLAMA_LINEARS)[number], [number, number]> {
    const { hidden: D, heads, kvHeads, headDim, intermediate: I } = this.cfg;
    return {
      q_proj: [heads * headDim, D],
      k_proj: [kvHeads * headDim, D],
      v_proj: [kvHeads * headDim, D],
      o_proj: [D, heads * headDim],
      gate_proj: [I, D],
      up_proj: [I, D],
      down_proj: [D, I],
    };
  }

  /** Read and validate layer L's tensors (once; both paths share them). `read=false` only checks. */
  loadLayer(L: number, read = true): LlamaLayerWeights {
    const p = `model.layers.${L}`;
    const shapes = this.linearShapes();
    const lin = (sub: string, key: (typeof LLAMA_LINEARS)[number]) => loadLinear(this.ck, `${p}.${sub}.${key}.weight`, shapes[key], this.qc, read);
    const norm = (n: string) => expectShape(this.ck, `${p}.${n}.weight`, [this.cfg.hidden], ['BF16', 'F16', 'F32'], read);
    const bias = {} as LlamaLayerWeights['bias'];
    for (const key of LLAMA_LINEARS) {
      const name = `${llamaLinearStem(L, key)}.bias`;
      if (!llamaHasBias(this.cfg, key)) bias[key] = null;
      else if (!this.ck.weightMap.has(name)) throw new InputError(`missing: the config's ${ATTENTION_LINEARS.includes(key) ? 'attention_bias' : 'mlp_bias'} is true, so ${key} needs a bias`, { file: this.ck.dir, tensor: name });
      else bias[key] = expectShape(this.ck, name, [shapes[key][0]], ['BF16', 'F16', 'F32'], read);
    }
    return {
      bias,
      index: L,
      input_layernorm: norm('input_layernorm'),
      post_attention_layernorm: norm('post_attention_layernorm'),
      q_proj: lin('self_attn', 'q_proj'),
      k_proj: lin('self_attn', 'k_proj'),
      v_proj: lin('self_attn', 'v_proj'),
      o_proj: lin('self_attn', 'o_proj'),
      gate_proj: lin('mlp', 'gate_proj'),
      up_proj: lin('mlp', 'up_proj'),
      down_proj: lin('mlp', 'down_proj'),
    };
  }

  finalNorm(): StoredTensor {
    return expectShape(this.ck, 'model.norm.weight', [this.cfg.hidden], ['BF16', 'F16', 'F32']);
  }

  /**
   * Every tensor checked against the config without reading data, and every stored tensor given a role: one that
   * no path reads is bad input, named, not silently left out. A zero point or a group index beside a linear
   * (compressed-tensors' asymmetric or activation-order forms) would change every weight it decodes. Kept
   * without a role: RoPE's inv_freq buffers older transformers saved (derived from the config), and the KV-cache
   * scales of an FP8 KV cache, which is a serving option (vLLM's --kv-cache-dtype) neither path computes.
   */
  conformance(): void {
    const known = new Set<string>([this.embedName, this.headName, 'lm_head.weight', 'model.norm.weight', 'model.rotary_emb.inv_freq']);
    for (let L = 0; L < this.cfg.layers; L++) {
      const w = this.loadLayer(L, false);
      for (const key of LLAMA_LINEARS) {
        for (const n of linearTensorNames(this.ck, w[key])) known.add(n);
        if (w.bias[key] !== null) known.add(`${llamaLinearStem(L, key)}.bias`);
      }
      for (const n of ['input_layernorm.weight', 'post_attention_layernorm.weight', 'self_attn.rotary_emb.inv_freq']) known.add(`model.layers.${L}.${n}`);
    }
    this.finalNorm();
    for (const name of this.ck.names()) {
      if (known.has(name) || KV_CACHE_SCALE.test(name)) continue;
      const why = name.endsWith('.weight_zero_point')
        ? 'a zero point (asymmetric quantization) is not implemented; refused rather than decoded without it'
        : name.endsWith('.weight_g_idx')
          ? 'a group index (activation-order groups) is not implemented; refused rather than decoded without it'
          : 'tensor has no role in llama (unknown name, or a layer index past num_hidden_layers)';
      throw new InputError(why, { file: this.fileOf(name), tensor: name });
    }
  }

  /** Embedding rows for the given tokens only (the vocab × hidden table is never read whole). */
  embedRows(tokens: number[]): StoredTensor {
    return readRows(this.ck, this.embedName, this.cfg.vocab, this.cfg.hidden, tokens);
  }

  /** Visit the head in row chunks so the vocab × hidden matrix is never held whole. */
  forEachHeadChunk(rowsPerChunk: number, fn: (rowStart: number, chunk: StoredTensor) => void): void {
    forEachRowChunk(this.ck, this.headName, this.cfg.vocab, this.cfg.hidden, rowsPerChunk, fn);
  }

}
