/**
 * DeepSeek-V4 configuration (spec §1, §10.2, §10.4). `config.json` (Hugging Face names) is the primary
 * source; DeepSeek's `inference/config.json` (its own names: dim, n_layers, original_seq_len, …) is read
 * when present and cross-checked field by field. A field both files define must agree (else one InputError
 * naming both files); a field only one file defines is taken from that file; a few fields fall back to the
 * defaults of DeepSeek's `ModelArgs`/transformers where those agree. `sources.used` records, per field, which
 * file (or default) supplied it, so a report can say which was used (§10.2).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { InputError } from '../errors.js';
import { readJsonObject } from '../io/checkpoint.js';

export interface YarnConfig {
  factor: number;
  originalSeqLen: number;
  betaFast: number;
  betaSlow: number;
}

export type ConfigSource = 'config.json' | 'inference/config.json' | 'default';

export interface DeepseekV4Config {
  hidden: number;
  /** main blocks only; the MTP blocks (num_nextn_predict_layers) are not part of the forward pass */
  layers: number;
  heads: number;
  headDim: number;
  /** R: the last R dims of every head are rotated (qk_rope_head_dim) */
  ropeDim: number;
  qLoraRank: number;
  oGroups: number;
  oLoraRank: number;
  /** sliding window (raw kv of positions max(0, t − window + 1)..t) */
  window: number;
  /** one ratio per main layer: 0 sliding only, 4 CSA (overlap compressor + indexer), other r > 0 HCA */
  compressRatios: number[];
  indexHeads: number;
  indexHeadDim: number;
  indexTopk: number;
  experts: number;
  sharedExperts: number;
  topk: number;
  moeInter: number;
  scoringFunc: 'sqrtsoftplus';
  normTopkProb: boolean;
  routeScale: number;
  hashLayers: number;
  /** 0 = no clamp; routed experts only (§4.6, §8.1) */
  swigluLimit: number;
  hcMult: number;
  hcSinkhornIters: number;
  hcEps: number;
  normEps: number;
  ropeTheta: number;
  compressRopeTheta: number;
  /** YaRN for compressed layers; null when neither file declares it (DeepSeek: original_seq_len = 0) */
  yarn: YarnConfig | null;
  vocab: number;
  bos: number | null;
  eos: number | null;
  /** routed-expert storage declared by `expert_dtype` ('fp4' → MXFP4, 'fp8' → FP8 block); null = as stored */
  expertDtype: 'fp4' | 'fp8' | null;
  sources: { config: string; inference: string | null; used: Record<string, ConfigSource> };
}

/** A raw config file and the name shown in errors. */
export interface RawConfig {
  raw: Record<string, unknown>;
  file: string;
}

/** (key in config.json, key in inference/config.json); a dotted HF key reads inside rope_scaling. */
const FIELDS = {
  hidden: ['hidden_size', 'dim'],
  layers: ['num_hidden_layers', 'n_layers'],
  heads: ['num_attention_heads', 'n_heads'],
  headDim: ['head_dim', 'head_dim'],
  ropeDim: ['qk_rope_head_dim', 'rope_head_dim'],
  qLoraRank: ['q_lora_rank', 'q_lora_rank'],
  oGroups: ['o_groups', 'o_groups'],
  oLoraRank: ['o_lora_rank', 'o_lora_rank'],
  window: ['sliding_window', 'window_size'],
  compressRatios: ['compress_ratios', 'compress_ratios'],
  indexHeads: ['index_n_heads', 'index_n_heads'],
  indexHeadDim: ['index_head_dim', 'index_head_dim'],
  indexTopk: ['index_topk', 'index_topk'],
  experts: ['n_routed_experts', 'n_routed_experts'],
  sharedExperts: ['n_shared_experts', 'n_shared_experts'],
  topk: ['num_experts_per_tok', 'n_activated_experts'],
  moeInter: ['moe_intermediate_size', 'moe_inter_dim'],
  scoringFunc: ['scoring_func', 'score_func'],
  normTopkProb: ['norm_topk_prob', null],
  routeScale: ['routed_scaling_factor', 'route_scale'],
  hashLayers: ['num_hash_layers', 'n_hash_layers'],
  swigluLimit: ['swiglu_limit', 'swiglu_limit'],
  hcMult: ['hc_mult', 'hc_mult'],
  hcSinkhornIters: ['hc_sinkhorn_iters', 'hc_sinkhorn_iters'],
  hcEps: ['hc_eps', 'hc_eps'],
  normEps: ['rms_norm_eps', 'norm_eps'],
  ropeTheta: ['rope_theta', 'rope_theta'],
  compressRopeTheta: ['compress_rope_theta', 'compress_rope_theta'],
  yarnFactor: ['rope_scaling.factor', 'rope_factor'],
  yarnOriginal: ['rope_scaling.original_max_position_embeddings', 'original_seq_len'],
  yarnBetaFast: ['rope_scaling.beta_fast', 'beta_fast'],
  yarnBetaSlow: ['rope_scaling.beta_slow', 'beta_slow'],
  vocab: ['vocab_size', 'vocab_size'],
  expertDtype: ['expert_dtype', 'expert_dtype'],
  nextn: ['num_nextn_predict_layers', 'n_mtp_layers'],
} as const satisfies Record<string, readonly [string, string | null]>;

type Field = keyof typeof FIELDS;

/** Read config.json and, when present, `<dir>/inference/config.json`. */
export function loadDeepseekV4Config(dir: string, config: Record<string, unknown>, configFile: string, read?: (name: string) => Buffer | null): DeepseekV4Config {
  const infFile = path.join(dir, 'inference', 'config.json');
  // through the checkpoint's reader when given, so the bytes parsed are the bytes fingerprinted
  const bytes = read !== undefined ? read('inference/config.json') : fs.existsSync(infFile) ? undefined : null;
  const inference = bytes !== null ? { raw: readJsonObject(infFile, bytes), file: infFile } : null;
  return parseDeepseekV4Config({ raw: config, file: configFile }, inference);
}

/**
 * Fields of transformers' DeepseekV4Config (and of the generic HF config) that would change the forward pass and
 * that DeepSeek's reference does not read: set to anything but the released model's value, each is refused by
 * name, never computed as something else. Where transformers lets a newer field win over the legacy one
 * (layer_types over compress_ratios, mlp_layer_types over num_hash_layers, rope_parameters over
 * rope_theta/rope_scaling), the newer one is refused: this tool reads the legacy fields the released
 * config and inference/config.json share, and two descriptions of one model are not guessed between.
 */
function refuseUnimplementedV4Fields(main: RawConfig, headDim: number, ropeDim: number, fail: (msg: string) => never): void {
  const raw = main.raw;
  const given = (k: string) => raw[k] !== undefined && raw[k] !== null;
  const refuse = (k: string, why: string) => fail(`${k} ${JSON.stringify(raw[k])} is not supported for DeepSeek-V4: ${why}`);
  if (given('hidden_act') && raw.hidden_act !== 'silu') refuse('hidden_act', 'its experts and shared expert are SwiGLU ("silu")');
  for (const k of ['attention_bias', 'mlp_bias']) if (given(k) && raw[k] !== false) refuse(k, 'its projections have no biases');
  for (const k of ['layer_types', 'mlp_layer_types']) {
    if (given(k)) refuse(k, `not read: ${k === 'layer_types' ? 'compress_ratios decides each layer\'s attention' : 'num_hash_layers decides which layers route by hash'}; remove it or give the legacy field alone`);
  }
  if (given('rope_parameters')) refuse('rope_parameters', 'not read: give rope_theta, compress_rope_theta and rope_scaling as the released config does');
  if (given('partial_rotary_factor') && raw.partial_rotary_factor !== ropeDim / headDim) {
    refuse('partial_rotary_factor', `it contradicts qk_rope_head_dim ${ropeDim} of head_dim ${headDim} (${ropeDim / headDim})`);
  }
  const rs = raw.rope_scaling as Record<string, unknown> | null | undefined;
  const af = rs?.attention_factor;
  if (af !== undefined && af !== null && af !== 1) fail(`rope_scaling.attention_factor ${JSON.stringify(af)} is not supported for DeepSeek-V4: its YaRN applies no mscale (attention_factor 1)`);
}

export function parseDeepseekV4Config(main: RawConfig, inference: RawConfig | null): DeepseekV4Config {
  const used: Record<string, ConfigSource> = {};
  const fail = (msg: string): never => {
    throw new InputError(msg, { file: main.file });
  };
  const rs = main.raw.rope_scaling;
  if (rs !== undefined && rs !== null) {
    if (typeof rs !== 'object' || Array.isArray(rs)) fail(`rope_scaling must be an object, got ${JSON.stringify(rs)}`);
    const kind = (rs as Record<string, unknown>).type ?? (rs as Record<string, unknown>).rope_type;
    if (kind !== 'yarn') fail(`rope_scaling type ${JSON.stringify(kind)} is not supported (DeepSeek-V4 uses yarn)`);
  }
  const fromMain = (key: string): unknown => {
    if (!key.startsWith('rope_scaling.')) return main.raw[key];
    const r = main.raw.rope_scaling as Record<string, unknown> | null | undefined;
    return r?.[key.slice('rope_scaling.'.length)];
  };
  const present = (v: unknown) => v !== undefined && v !== null;

  /** The value of a field, from config.json first, cross-checked against inference/config.json. */
  const get = (field: Field): { value: unknown; from: ConfigSource; key: string } | null => {
    const [hk, ik] = FIELDS[field];
    const a = fromMain(hk);
    const b = ik !== null && inference !== null ? inference.raw[ik] : undefined;
    if (present(a) && present(b) && JSON.stringify(a) !== JSON.stringify(b)) {
      throw new InputError(
        `${main.file} has ${hk} = ${JSON.stringify(a)} but ${inference!.file} has ${ik} = ${JSON.stringify(b)}; the two config files must agree`,
        { file: main.file },
      );
    }
    if (present(a)) return { value: a, from: 'config.json', key: hk };
    if (present(b)) return { value: b, from: 'inference/config.json', key: ik! };
    return null;
  };
  const where = (g: { from: ConfigSource; key: string }) => (g.from === 'config.json' ? `${main.file}: ${g.key}` : `${inference!.file}: ${g.key}`);

  function num(field: Field, opts: { int?: boolean; min?: number; positive?: boolean; fallback?: number } = {}): number {
    const g = get(field);
    if (g === null) {
      if (opts.fallback === undefined) fail(`${FIELDS[field][0]} is missing (also not in inference/config.json as ${FIELDS[field][1] ?? '—'})`);
      used[field] = 'default';
      return opts.fallback!;
    }
    const v = g.value;
    const ok = typeof v === 'number' && Number.isFinite(v) && (!opts.int || Number.isSafeInteger(v)) && (opts.min === undefined || v >= opts.min) && (opts.positive !== true || v > 0);
    if (!ok) throw new InputError(`${where(g)} must be ${opts.int ? 'an integer' : 'a finite number'}${opts.min !== undefined ? ` ≥ ${opts.min}` : ''}${opts.positive === true ? ' > 0' : ''}, got ${JSON.stringify(v)}`);
    used[field] = g.from;
    return v as number;
  }
  const int = (field: Field, min = 1, fallback?: number) => num(field, { int: true, min, fallback });

  const hidden = int('hidden');
  const layers = int('layers');
  const heads = int('heads');
  const headDim = int('headDim');
  const ropeDim = int('ropeDim', 2);
  const qLoraRank = int('qLoraRank');
  const oGroups = int('oGroups');
  const oLoraRank = int('oLoraRank');
  const window = int('window');
  const indexHeads = int('indexHeads');
  const indexHeadDim = int('indexHeadDim');
  const indexTopk = int('indexTopk');
  const experts = int('experts');
  const sharedExperts = int('sharedExperts');
  const topk = int('topk');
  const moeInter = int('moeInter');
  const routeScale = num('routeScale', { min: 0 });
  const hashLayers = int('hashLayers', 0, 0);
  const swigluLimit = num('swigluLimit', { min: 0 });
  const hcMult = int('hcMult');
  const hcSinkhornIters = int('hcSinkhornIters');
  // DeepSeek's ModelArgs and transformers both default these to 1e-6; the released inference/config.json omits them (§10.4).
  const hcEps = num('hcEps', { min: 0, fallback: 1e-6 });
  const normEps = num('normEps', { min: 0, fallback: 1e-6 });
  const ropeTheta = num('ropeTheta', { positive: true, fallback: 10000 });
  const vocab = int('vocab');
  const nextn = int('nextn', 0, 0);

  const cr = get('compressRatios');
  if (cr === null) fail('compress_ratios is missing (one ratio per layer, then per MTP layer)');
  if (!Array.isArray(cr!.value) || !cr!.value.every((r) => Number.isSafeInteger(r) && r >= 0)) {
    throw new InputError(`${where(cr!)} must be a list of non-negative integers, got ${JSON.stringify(cr!.value)}`);
  }
  used.compressRatios = cr!.from;
  const allRatios = cr!.value as number[];
  if (allRatios.length < layers) throw new InputError(`${where(cr!)} has ${allRatios.length} entries, fewer than num_hidden_layers ${layers}`);
  const compressRatios = allRatios.slice(0, layers);
  const compressed = compressRatios.some((r) => r > 0);
  const compressRopeTheta = compressed ? num('compressRopeTheta', { positive: true }) : num('compressRopeTheta', { positive: true, fallback: ropeTheta });

  const sf = get('scoringFunc');
  if (sf === null) fail('scoring_func is missing');
  if (sf!.value !== 'sqrtsoftplus') throw new InputError(`${where(sf!)} ${JSON.stringify(sf!.value)} is not supported (only "sqrtsoftplus", DeepSeek-V4's router)`);
  used.scoringFunc = sf!.from;

  // DeepSeek's Gate always divides non-softmax weights by their sum; it has no switch for norm_topk_prob.
  const nt = get('normTopkProb');
  let normTopkProb = true;
  used.normTopkProb = 'default';
  if (nt !== null) {
    if (typeof nt.value !== 'boolean') throw new InputError(`${where(nt)} must be true or false, got ${JSON.stringify(nt.value)}`);
    if (!nt.value) throw new InputError(`${where(nt)} = false is not supported: DeepSeek's sqrtsoftplus router always normalizes the top-k weights`);
    normTopkProb = nt.value;
    used.normTopkProb = nt.from;
  }

  const ed = get('expertDtype');
  let expertDtype: 'fp4' | 'fp8' | null = null;
  if (ed !== null) {
    if (ed.value !== 'fp4' && ed.value !== 'fp8') throw new InputError(`${where(ed)} ${JSON.stringify(ed.value)} is not supported (fp4, fp8)`);
    expertDtype = ed.value;
    used.expertDtype = ed.from;
  }

  // YaRN: DeepSeek applies it iff original_seq_len > 0 (§10.2); transformers iff rope_scaling is set.
  let yarn: YarnConfig | null = null;
  const orig = get('yarnOriginal');
  if (orig !== null && !(orig.value === 0 && orig.from === 'inference/config.json')) {
    yarn = {
      originalSeqLen: int('yarnOriginal'),
      factor: num('yarnFactor', { min: 1 }),
      // both DeepSeek's ModelArgs and transformers default to 32 / 1
      betaFast: num('yarnBetaFast', { positive: true, fallback: 32 }),
      betaSlow: num('yarnBetaSlow', { positive: true, fallback: 1 }),
    };
    // the correction range runs from the dims of beta_fast rotations to those of beta_slow: fast must exceed slow
    if (!(yarn.betaFast > yarn.betaSlow)) fail(`rope_scaling needs beta_fast > beta_slow, got ${yarn.betaFast}, ${yarn.betaSlow}`);
  } else if (orig !== null) {
    used.yarnOriginal = orig.from;
  } else if (present(rs)) {
    fail('rope_scaling (yarn) has no original_max_position_embeddings, and inference/config.json no original_seq_len');
  }

  refuseUnimplementedV4Fields(main, headDim, ropeDim, fail);

  const kvHeads = main.raw.num_key_value_heads;
  if (present(kvHeads) && kvHeads !== 1) fail(`num_key_value_heads ${JSON.stringify(kvHeads)} must be 1 (DeepSeek-V4 shares one K=V head)`);
  if (main.raw.tie_word_embeddings === true) fail('tie_word_embeddings = true is not supported (DeepSeek-V4 has its own head.weight)');
  if (sharedExperts !== 1) fail(`n_shared_experts ${sharedExperts} is not supported (DeepSeek's MoE asserts exactly 1)`);
  if (ropeDim % 2 !== 0 || ropeDim >= headDim) fail(`qk_rope_head_dim ${ropeDim} must be even and smaller than head_dim ${headDim}`);
  if (heads % oGroups !== 0) fail(`num_attention_heads ${heads} is not a multiple of o_groups ${oGroups}`);
  if (compressRatios.includes(4) && indexHeadDim < ropeDim) fail(`index_head_dim ${indexHeadDim} must be ≥ qk_rope_head_dim ${ropeDim} (the indexer rotates its last R dims, §10.3)`);
  if (topk > experts) fail(`num_experts_per_tok ${topk} exceeds n_routed_experts ${experts}`);
  if (hashLayers > layers) fail(`num_hash_layers ${hashLayers} exceeds num_hidden_layers ${layers}`);
  if (nextn > 0 && allRatios.length !== layers + nextn) {
    fail(`compress_ratios has ${allRatios.length} entries; want num_hidden_layers + num_nextn_predict_layers = ${layers + nextn}`);
  }

  const tokenId = (k: string): number | null => (typeof main.raw[k] === 'number' ? (main.raw[k] as number) : null);
  return {
    hidden, layers, heads, headDim, ropeDim, qLoraRank, oGroups, oLoraRank, window, compressRatios,
    indexHeads, indexHeadDim, indexTopk, experts, sharedExperts, topk, moeInter,
    scoringFunc: 'sqrtsoftplus', normTopkProb, routeScale, hashLayers, swigluLimit,
    hcMult, hcSinkhornIters, hcEps, normEps, ropeTheta, compressRopeTheta, yarn, vocab,
    bos: tokenId('bos_token_id'), eos: tokenId('eos_token_id'), expertDtype,
    sources: { config: main.file, inference: inference?.file ?? null, used },
  };
}
