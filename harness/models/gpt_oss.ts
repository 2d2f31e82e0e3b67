/**
 * gpt-oss (GptOssForCausalLM) as Hugging Face stores it (../shared/spec/gpt-oss.md §1–2): config fields and
 * tensor names, bound once per layer. Both paths read the same bound bytes; nothing after binding looks
 * tensors up by name.
 *
 * The routed experts are stored fused per layer: `mlp.experts.gate_up_proj_blocks` U8 [E, 2I, H/32, 16] with
 * `_scales` U8 [E, 2I, H/32] (and down_proj likewise). Expert e's slice of those bytes, [2I, H/32·16] and
 * [2I, H/32], is byte for byte the `mxfp4` linear format (harness/formats/linear.ts: [out, in/2] packed, low
 * nibble = even input, one E8M0 scale per 32 inputs), so an expert is bound as an ordinary mxfp4 LinearWeight
 * and both paths dequantize it with the code every other MXFP4 weight uses. This file is the one place that
 * knows the fused layout. Experts are read lazily (`w.expert(e)`), only when routed to.
 */
import * as path from 'node:path';
import { InputError } from '../errors.js';
import type { DType } from '../formats/dtypes.js';
import { type LinearWeight, loadLinear, parseQuantConfig, type QuantConfig, type StoredTensor } from '../formats/linear.js';
import type { Checkpoint } from '../io/checkpoint.js';
import { ConfigReader } from '../io/config.js';
import { forEachRowChunk, readRows } from './rows.js';

/** YaRN as gpt-oss uses it (OpenAI's `_compute_concentration_and_inv_freq`; HF rope_type "yarn", truncate false). */
export interface GptOssYarn {
  factor: number;
  betaFast: number;
  betaSlow: number;
  originalMax: number;
  /** round the correction range out to whole dims (transformers' default; gpt-oss's own config says false) */
  truncate: boolean;
}

export interface GptOssConfig {
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  experts: number;
  topk: number;
  intermediate: number;
  vocab: number;
  slidingWindow: number;
  /** per layer: true on sliding_attention layers (config.json layer_types) */
  sliding: boolean[];
  ropeTheta: number;
  /** null: plain RoPE (no rope_scaling) */
  yarn: GptOssYarn | null;
  swigluLimit: number;
  eps: number;
  tieEmbeddings: boolean;
}

/** SwiGLU's α in gpt-oss (a constant of the architecture; recent configs carry it as swiglu_alpha, refused unless equal). */
export const GPT_OSS_ALPHA = 1.702;

const LAYER_TYPES = ['sliding_attention', 'full_attention'] as const;

export function parseGptOssConfig(ck: Pick<Checkpoint, 'config' | 'configFile'>): GptOssConfig {
  const c = new ConfigReader(ck.config, ck.configFile);
  const file = ck.configFile;
  const bad = (msg: string): never => {
    throw new InputError(msg, { file });
  };
  const hidden = c.int('hidden_size');
  const layers = c.int('num_hidden_layers');
  const heads = c.int('num_attention_heads');
  const kvHeads = c.int('num_key_value_heads', heads);
  // GptOssConfig's default head_dim is 64 (gpt-oss's), not hidden / heads
  const headDim = c.int('head_dim', 64);
  const experts = c.int('num_local_experts');
  // transformers reads num_experts_per_tok only (default 4); OpenAI's name beside it must agree, and alone it is
  // ambiguous (OpenAI's code would take it, transformers 4)
  if (ck.config.experts_per_token !== undefined && ck.config.num_experts_per_tok === undefined) {
    bad(`experts_per_token ${JSON.stringify(ck.config.experts_per_token)} is given without num_experts_per_tok, which transformers reads (default 4); give num_experts_per_tok`);
  }
  const topk = c.int('num_experts_per_tok', 4);
  if (ck.config.experts_per_token !== undefined && ck.config.experts_per_token !== ck.config.num_experts_per_tok) {
    bad(`experts_per_token ${JSON.stringify(ck.config.experts_per_token)} contradicts num_experts_per_tok ${JSON.stringify(ck.config.num_experts_per_tok)}`);
  }
  if (ck.config.partial_rotary_factor !== undefined && ck.config.partial_rotary_factor !== null && ck.config.partial_rotary_factor !== 1) {
    bad(`partial_rotary_factor ${JSON.stringify(ck.config.partial_rotary_factor)} is not supported for gpt_oss (RoPE turns every dim of a head)`);
  }
  const intermediate = c.int('intermediate_size');
  if (heads % kvHeads !== 0) bad(`num_attention_heads ${heads} is not a multiple of num_key_value_heads ${kvHeads}`);
  if (headDim % 2 !== 0) bad(`head_dim ${headDim} must be even for RoPE`);
  if (topk > experts) bad(`num_experts_per_tok ${topk} exceeds num_local_experts ${experts}`);
  // The expert blocks run along the input dim in 32s: hidden for gate_up, intermediate for down.
  if (hidden % 32 !== 0) bad(`hidden_size ${hidden} must be a multiple of 32 (MXFP4 blocks of gate_up_proj)`);
  if (intermediate % 32 !== 0) bad(`intermediate_size ${intermediate} must be a multiple of 32 (MXFP4 blocks of down_proj)`);

  // attention_bias: gpt-oss has q/k/v/o biases; a config without them describes another model.
  if (c.bool('attention_bias', true) !== true) bad('attention_bias false is not supported for gpt_oss (the architecture has q/k/v/o biases)');

  const lt = ck.config.layer_types;
  let sliding: boolean[];
  if (lt === undefined || lt === null) {
    // transformers' GptOssConfig default, and OpenAI's reference: even layers slide, odd ones are full.
    sliding = Array.from({ length: layers }, (_, L) => L % 2 === 0);
  } else {
    if (!Array.isArray(lt)) bad(`layer_types must be a list, got ${JSON.stringify(lt)}`);
    const list = lt as unknown[];
    if (list.length !== layers) bad(`layer_types has ${list.length} entries, num_hidden_layers is ${layers}`);
    list.forEach((t, L) => {
      if (!(LAYER_TYPES as readonly unknown[]).includes(t)) bad(`layer_types[${L}] is ${JSON.stringify(t)} (known: ${LAYER_TYPES.join(', ')})`);
    });
    sliding = list.map((t) => t === 'sliding_attention');
  }
  const slidingWindow = sliding.some((s) => s) ? c.int('sliding_window') : c.int('sliding_window', 0, 0);

  // RoPE: transformers ≤ 4.x writes rope_theta and rope_scaling; v5 one rope_parameters object holding both. With
  // neither, GptOssConfig's default is gpt-oss's own YaRN (factor 32 over 4096 positions, β 32/1, untruncated),
  // not plain RoPE; an explicit null is none. Both forms given and disagreeing is refused rather than guessed.
  const rp = c.obj('rope_parameters');
  const legacyGiven = Object.hasOwn(ck.config, 'rope_scaling');
  if (rp !== undefined && legacyGiven) {
    // compared field by field (key order is not meaning)
    const sorted = (o: object) => JSON.stringify(Object.entries(o).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    const scaling = Object.fromEntries(Object.entries(rp.raw).filter(([k]) => k !== 'rope_theta'));
    if (sorted(scaling) !== sorted((ck.config.rope_scaling as object | null) ?? {})) bad(`rope_parameters ${JSON.stringify(rp.raw)} disagrees with rope_scaling ${JSON.stringify(ck.config.rope_scaling)}`);
  }
  if (rp !== undefined && rp.raw.rope_theta !== undefined && ck.config.rope_theta !== undefined && rp.raw.rope_theta !== ck.config.rope_theta) {
    bad(`rope_parameters.rope_theta ${JSON.stringify(rp.raw.rope_theta)} disagrees with rope_theta ${JSON.stringify(ck.config.rope_theta)}`);
  }
  const ropeTheta = rp?.raw.rope_theta !== undefined ? rp.positive('rope_theta') : c.positive('rope_theta', 150000);
  const GPT_OSS_DEFAULT_YARN = { rope_type: 'yarn', factor: 32, beta_fast: 32, beta_slow: 1, truncate: false, original_max_position_embeddings: 4096 };
  const rs = rp ?? (legacyGiven ? c.obj('rope_scaling') : new ConfigReader(GPT_OSS_DEFAULT_YARN, `${file} (GptOssConfig's default rope_scaling)`));
  let yarn: GptOssYarn | null = null;
  if (rs !== undefined) {
    const type = rs.raw.rope_type ?? rs.raw.type;
    if (type !== 'yarn') bad(`rope_scaling.rope_type ${JSON.stringify(type)} is not supported for gpt_oss (yarn only)`);
    // transformers' _compute_yarn_parameters: truncate defaults to true (gpt-oss's own config says false)
    const truncate = rs.raw.truncate ?? true;
    if (typeof truncate !== 'boolean') bad(`rope_scaling.truncate ${JSON.stringify(rs.raw.truncate)} is not true or false`);
    for (const k of ['attention_factor', 'mscale', 'mscale_all_dim']) {
      if (rs.raw[k] !== undefined && rs.raw[k] !== null) bad(`rope_scaling.${k} is not supported for gpt_oss (the concentration is 0.1·ln(factor) + 1)`);
    }
    const factor = rs.num('factor');
    const betaFast = rs.num('beta_fast', 32);
    const betaSlow = rs.num('beta_slow', 1);
    const originalMax = rs.int('original_max_position_embeddings');
    if (!(factor >= 1)) bad(`rope_scaling.factor ${factor} must be ≥ 1`);
    if (!(betaFast > betaSlow && betaSlow > 0)) bad(`rope_scaling needs beta_fast > beta_slow > 0, got ${betaFast}, ${betaSlow}`);
    yarn = factor > 1 ? { factor, betaFast, betaSlow, originalMax, truncate: truncate as boolean } : null;
    // OpenAI's names for the same values (its own config, and the released one's initial_context_length) must agree
    for (const [oai, value, hf] of [
      ['initial_context_length', originalMax, 'original_max_position_embeddings'],
      ['rope_scaling_factor', factor, 'factor'],
      ['rope_ntk_alpha', betaSlow, 'beta_slow'],
      ['rope_ntk_beta', betaFast, 'beta_fast'],
    ] as const) {
      const v = ck.config[oai];
      if (v !== undefined && v !== null && v !== value) bad(`${oai} ${JSON.stringify(v)} contradicts rope_scaling.${hf} ${value}`);
    }
  } else {
    for (const oai of ['rope_scaling_factor', 'rope_ntk_alpha', 'rope_ntk_beta']) {
      if (ck.config[oai] !== undefined && ck.config[oai] !== null) bad(`${oai} ${JSON.stringify(ck.config[oai])} asks for YaRN, but rope_scaling is null`);
    }
  }
  // recent GptOssConfig has swiglu_alpha (default 1.702); this tool computes gpt-oss's constant α only
  if (ck.config.swiglu_alpha !== undefined && ck.config.swiglu_alpha !== null && ck.config.swiglu_alpha !== GPT_OSS_ALPHA) {
    bad(`swiglu_alpha ${JSON.stringify(ck.config.swiglu_alpha)} is not supported for gpt_oss (only its α = ${GPT_OSS_ALPHA})`);
  }
  return {
    hidden, layers, heads, kvHeads, headDim, experts, topk, intermediate,
    vocab: c.int('vocab_size'),
    slidingWindow,
    sliding,
    ropeTheta,
    yarn,
    swigluLimit: swigluLimit(c, bad),
    eps: c.positive('rms_norm_eps', 1e-5),
    tieEmbeddings: c.bool('tie_word_embeddings', false),
  };
}

/**
 * gpt-oss clamps the gate to ≤ limit and the linear half to [−limit, limit]. OpenAI's reference reads the limit from
 * the config, transformers' GptOssExperts hard-codes 7.0: any other value is a model the two compute differently,
 * so it is refused, as a limit ≤ 0 (no such model) is.
 */
function swigluLimit(c: ConfigReader, bad: (msg: string) => never): number {
  const limit = c.positive('swiglu_limit', GPT_OSS_LIMIT);
  if (limit !== GPT_OSS_LIMIT) bad(`swiglu_limit ${limit} is not supported for gpt_oss (transformers computes ${GPT_OSS_LIMIT} whatever the config says, OpenAI's reference the config's value)`);
  return limit;
}
const GPT_OSS_LIMIT = 7;

/** One routed expert: gate_up [2I, H] (gate and up rows interleaved), down [H, I], both mxfp4, with their biases. */
export interface GptOssExpert {
  gate_up: LinearWeight;
  gate_up_bias: StoredTensor;
  down: LinearWeight;
  down_bias: StoredTensor;
}

export interface GptOssLayerWeights {
  index: number;
  sliding: boolean;
  input_layernorm: StoredTensor;
  post_attention_layernorm: StoredTensor;
  q_proj: LinearWeight;
  k_proj: LinearWeight;
  v_proj: LinearWeight;
  o_proj: LinearWeight;
  q_bias: StoredTensor;
  k_bias: StoredTensor;
  v_bias: StoredTensor;
  o_bias: StoredTensor;
  /** [heads] the per-head sink logits */
  sinks: StoredTensor;
  router: LinearWeight;
  router_bias: StoredTensor;
  /** routed expert e, read on first use and kept with the layer */
  expert(e: number): GptOssExpert;
}

const NORM_DTYPES: DType[] = ['F32', 'BF16'];
const VEC_DTYPES: DType[] = ['BF16', 'F32'];
const ATTN_LINEARS = ['q_proj', 'k_proj', 'v_proj', 'o_proj'] as const;

export class GptOssCheckpoint {
  readonly cfg: GptOssConfig;
  readonly qc: QuantConfig;
  readonly embedName = 'model.embed_tokens.weight';
  readonly headName: string;

  constructor(readonly ck: Checkpoint) {
    this.cfg = parseGptOssConfig(ck);
    this.qc = parseQuantConfig(ck.config, ck.configFile);
    // tied as transformers ties them: the head is the embedding, also where an lm_head.weight is stored beside it
    this.headName = this.cfg.tieEmbeddings ? this.embedName : 'lm_head.weight';
    const { vocab, hidden } = this.cfg;
    for (const name of [this.embedName, this.headName]) this.check(name, [vocab, hidden], ['BF16', 'F16', 'F32']);
  }

  fileOf(name: string): string {
    return path.join(this.ck.dir, this.ck.weightMap.get(name) ?? '?');
  }

  private where(name: string) {
    return { file: this.fileOf(name), tensor: name };
  }

  /** A non-linear tensor's dtype and shape checked (the message names file and tensor); with `read`, its bytes. */
  private check(name: string, shape: number[], dtypes: DType[], read = false): StoredTensor {
    if (!this.ck.has(name)) throw new InputError('tensor is missing from the checkpoint', { file: this.ck.dir, tensor: name });
    const i = this.ck.info(name);
    if (!dtypes.includes(i.dtype)) throw new InputError(`dtype ${i.dtype} not allowed here (want ${dtypes.join('/')})`, this.where(name));
    if (i.shape.length !== shape.length || i.shape.some((d, k) => d !== shape[k])) {
      throw new InputError(`shape ${JSON.stringify(i.shape)} disagrees with the config's ${JSON.stringify(shape)}`, this.where(name));
    }
    return { name, dtype: i.dtype, shape: i.shape, bytes: read ? this.ck.read(name) : new Uint8Array(0), file: i.file };
  }

  private linear(name: string, shape: [number, number], read: boolean): LinearWeight {
    if (!this.ck.has(name)) throw new InputError('tensor is missing from the checkpoint', { file: this.ck.dir, tensor: name });
    return loadLinear(this.ck, name, shape, this.qc, read);
  }

  /**
   * Check a fused expert tensor pair (`<base>_blocks`, `<base>_scales`, `<base>_bias`) of [E, rows, in] and
   * return the names; the scales must agree with the blocks, shape for shape.
   */
  private checkExperts(base: string, rows: number, inn: number): { blocks: string; scales: string; bias: string } {
    const { experts: E } = this.cfg;
    const blocks = `${base}_blocks`;
    const scales = `${base}_scales`;
    const bias = `${base}_bias`;
    if (!this.ck.has(blocks) && this.ck.has(base)) {
      throw new InputError('dequantized (BF16) experts are not supported; gpt_oss experts are read as MXFP4 *_blocks/*_scales', this.where(base));
    }
    this.check(blocks, [E, rows, inn / 32, 16], ['U8']);
    if (!this.ck.has(scales)) throw new InputError(`tensor is missing from the checkpoint (the E8M0 scales of ${blocks})`, { file: this.ck.dir, tensor: scales });
    const si = this.ck.info(scales);
    if (si.dtype !== 'U8' && si.dtype !== 'F8_E8M0') throw new InputError(`MXFP4 scales must be U8 (E8M0 bytes), got ${si.dtype}`, this.where(scales));
    const want = [E, rows, inn / 32];
    if (si.shape.length !== 3 || si.shape.some((d, k) => d !== want[k])) {
      throw new InputError(`shape ${JSON.stringify(si.shape)} disagrees with ${blocks} [${E}, ${rows}, ${inn / 32}, 16] (want ${JSON.stringify(want)}: one scale per 32-element block)`, this.where(scales));
    }
    this.check(bias, [E, rows], VEC_DTYPES);
    return { blocks, scales, bias };
  }

  /** Expert e's rows of a fused tensor, read with one ranged read. */
  private expertSlice(name: string, e: number, shape: number[]): StoredTensor {
    const i = this.ck.info(name);
    const bytesPer = (i.end - i.begin) / this.cfg.experts;
    return { name: `${name}[${e}]`, dtype: i.dtype, shape, bytes: this.ck.readRange(name, e * bytesPer, bytesPer), file: i.file };
  }

  /** Read and validate layer L's tensors (routed experts lazily, when routed to). `read=false` only checks. */
  loadLayer(L: number, read = true): GptOssLayerWeights {
    if (!Number.isInteger(L) || L < 0 || L >= this.cfg.layers) throw new Error(`layer ${L} is outside [0, ${this.cfg.layers})`);
    const { hidden: H, heads, kvHeads, headDim: d, experts: E, intermediate: I } = this.cfg;
    const p = `model.layers.${L}`;
    const shapes: Record<(typeof ATTN_LINEARS)[number], [number, number]> = {
      q_proj: [heads * d, H],
      k_proj: [kvHeads * d, H],
      v_proj: [kvHeads * d, H],
      o_proj: [H, heads * d],
    };
    const lin = (k: (typeof ATTN_LINEARS)[number]) => this.linear(`${p}.self_attn.${k}.weight`, shapes[k], read);
    const bias = (k: (typeof ATTN_LINEARS)[number]) => this.check(`${p}.self_attn.${k}.bias`, [shapes[k][0]], VEC_DTYPES, read);
    const gu = this.checkExperts(`${p}.mlp.experts.gate_up_proj`, 2 * I, H);
    const dn = this.checkExperts(`${p}.mlp.experts.down_proj`, H, I);
    const guBias = read ? this.ck.read(gu.bias) : null;
    const dnBias = read ? this.ck.read(dn.bias) : null;
    const biasRow = (name: string, all: Uint8Array | null, e: number, n: number): StoredTensor => {
      const i = this.ck.info(name);
      const per = (i.end - i.begin) / E;
      return { name: `${name}[${e}]`, dtype: i.dtype, shape: [n], bytes: all!.subarray(e * per, (e + 1) * per), file: i.file };
    };
    const cache = new Map<number, GptOssExpert>();
    const expert = (e: number): GptOssExpert => {
      if (!Number.isInteger(e) || e < 0 || e >= E) throw new Error(`expert ${e} is outside [0, ${E})`);
      if (!read) throw new Error('expert(): layer was bound with read=false');
      let ex = cache.get(e);
      if (ex === undefined) {
        const mx = (names: { blocks: string; scales: string }, out: number, inn: number): LinearWeight => ({
          name: `${names.blocks}[${e}]`,
          format: 'mxfp4',
          encoding: 'gpt-oss-mxfp4',
          out,
          in: inn,
          weight: this.expertSlice(names.blocks, e, [out, inn / 2]),
          scale: { ...this.expertSlice(names.scales, e, [out, inn / 32]), dtype: 'U8' },
          block: [1, 32],
        });
        ex = {
          gate_up: mx(gu, 2 * I, H),
          gate_up_bias: biasRow(gu.bias, guBias, e, 2 * I),
          down: mx(dn, H, I),
          down_bias: biasRow(dn.bias, dnBias, e, H),
        };
        cache.set(e, ex);
      }
      return ex;
    };
    return {
      index: L,
      sliding: this.cfg.sliding[L],
      input_layernorm: this.check(`${p}.input_layernorm.weight`, [H], NORM_DTYPES, read),
      post_attention_layernorm: this.check(`${p}.post_attention_layernorm.weight`, [H], NORM_DTYPES, read),
      q_proj: lin('q_proj'),
      k_proj: lin('k_proj'),
      v_proj: lin('v_proj'),
      o_proj: lin('o_proj'),
      q_bias: bias('q_proj'),
      k_bias: bias('k_proj'),
      v_bias: bias('v_proj'),
      o_bias: bias('o_proj'),
      sinks: this.check(`${p}.self_attn.sinks`, [heads], VEC_DTYPES, read),
      router: this.linear(`${p}.mlp.router.weight`, [E, H], read),
      router_bias: this.check(`${p}.mlp.router.bias`, [E], VEC_DTYPES, read),
      expert,
    };
  }

  /** Layer L's routed experts as MXFP4 linears, gate_up then down per expert (registry FUSED_FORMATS), read on call. */
  expertLinears(L: number): LinearWeight[] {
    const w = this.loadLayer(L);
    const out: LinearWeight[] = [];
    for (let e = 0; e < this.cfg.experts; e++) {
      const ex = w.expert(e);
      out.push(ex.gate_up, ex.down);
    }
    return out;
  }

  /** Layers holding FP4/FP8 weights: every layer whose experts are MXFP4 (all of them), plus any quantized attention. */
  quantizedLayers(): number[] {
    return Array.from({ length: this.cfg.layers }, (_, L) => L);
  }

  /** Every tensor checked against the config without reading data; tensors of no known role are bad input. */
  conformance(): void {
    for (let L = 0; L < this.cfg.layers; L++) this.loadLayer(L, false);
    this.finalNorm(false);
    const known = new Set<string>([this.embedName, this.headName, 'lm_head.weight', 'model.norm.weight']);
    for (let L = 0; L < this.cfg.layers; L++) {
      const p = `model.layers.${L}`;
      for (const n of ['input_layernorm.weight', 'post_attention_layernorm.weight', 'self_attn.sinks', 'mlp.router.weight', 'mlp.router.bias']) known.add(`${p}.${n}`);
      for (const k of ATTN_LINEARS) for (const s of ['weight', 'bias', 'scale', 'weight_scale_inv', 'weight_scale']) known.add(`${p}.self_attn.${k}.${s}`);
      known.add(`${p}.mlp.router.scale`);
      for (const k of ['gate_up_proj', 'down_proj']) for (const s of ['blocks', 'scales', 'bias']) known.add(`${p}.mlp.experts.${k}_${s}`);
    }
    for (const n of this.ck.names()) if (!known.has(n)) throw new InputError('tensor has no role in gpt_oss (unknown name or a layer index past num_hidden_layers)', this.where(n));
  }

  finalNorm(read = true): StoredTensor {
    return this.check('model.norm.weight', [this.cfg.hidden], NORM_DTYPES, read);
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

/**
 * RoPE frequencies and the YaRN concentration (OpenAI's `_compute_concentration_and_inv_freq`), shared by
 * both paths: freq_j = θ^(2j/d); with YaRN, low/high = (d/2)·ln(C/(β·2π))/ln θ for β = β_fast/β_slow,
 * mask_j = 1 − clamp((j − low)/(high − low), 0, 1), inv_freq_j = (1 − mask_j)/(factor·freq_j) + mask_j/freq_j,
 * and cos and sin are both multiplied by 0.1·ln(factor) + 1. Without rope_scaling: 1/freq_j and 1.
 */
export function gptOssRope(cfg: Pick<GptOssConfig, 'headDim' | 'ropeTheta' | 'yarn'>): { invFreq: Float64Array; concentration: number } {
  const { headDim: d, ropeTheta: theta, yarn } = cfg;
  const half = d / 2;
  const freq = Float64Array.from({ length: half }, (_, j) => theta ** ((2 * j) / d));
  if (yarn === null) return { invFreq: freq.map((f) => 1 / f), concentration: 1 };
  const corr = (beta: number) => (half * Math.log(yarn.originalMax / (beta * 2 * Math.PI))) / Math.log(theta);
  // transformers' find_correction_range: rounded out when truncating, then clamped to [0, d − 1]; an empty range
  // widened by 0.001 (linear_ramp_factor). OpenAI's reference asserts 0 < low < high < d/2 − 1 instead, where the
  // clamps change nothing.
  const low = Math.max(yarn.truncate ? Math.floor(corr(yarn.betaFast)) : corr(yarn.betaFast), 0);
  const high0 = Math.min(yarn.truncate ? Math.ceil(corr(yarn.betaSlow)) : corr(yarn.betaSlow), d - 1);
  const high = high0 === low ? high0 + 0.001 : high0;
  const invFreq = freq.map((f, j) => {
    const ramp = Math.min(1, Math.max(0, (j - low) / (high - low)));
    const mask = 1 - ramp;
    return (1 / (yarn.factor * f)) * (1 - mask) + (1 / f) * mask;
  });
  return { invFreq, concentration: 0.1 * Math.log(yarn.factor) + 1 };
}
