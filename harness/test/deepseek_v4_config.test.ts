/**
 * DeepSeek-V4 config parsing (spec §1.1, §10.2, §10.4): config.json first, inference/config.json cross-checked,
 * per-field provenance, unsupported settings rejected with the file named.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { InputError } from '../errors.js';
import { loadDeepseekV4Config, parseDeepseekV4Config } from '../models/deepseek_v4_config.js';

const RATIOS = [0, 0, ...Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? 4 : 128)), 4, 0];

/** The released config.json's fields that matter here (spec §1.1). */
function releaseConfig(): Record<string, unknown> {
  return {
    architectures: ['DeepseekV4ForCausalLM'], model_type: 'deepseek_v4', vocab_size: 129280, hidden_size: 4096,
    num_hidden_layers: 43, num_attention_heads: 64, num_key_value_heads: 1, head_dim: 512, qk_rope_head_dim: 64,
    q_lora_rank: 1024, o_groups: 8, o_lora_rank: 1024, sliding_window: 128, compress_ratios: RATIOS,
    index_n_heads: 64, index_head_dim: 128, index_topk: 512, n_routed_experts: 256, n_shared_experts: 1,
    num_experts_per_tok: 6, moe_intermediate_size: 2048, scoring_func: 'sqrtsoftplus', norm_topk_prob: true,
    topk_method: 'noaux_tc', routed_scaling_factor: 1.5, num_hash_layers: 3, swiglu_limit: 10.0, hc_mult: 4,
    hc_sinkhorn_iters: 20, hc_eps: 1e-6, rms_norm_eps: 1e-6, rope_theta: 10000, compress_rope_theta: 160000,
    rope_scaling: { type: 'yarn', factor: 16, original_max_position_embeddings: 65536, beta_fast: 32, beta_slow: 1 },
    max_position_embeddings: 1048576, num_nextn_predict_layers: 1, tie_word_embeddings: false, bos_token_id: 0, eos_token_id: 1,
    quantization_config: { quant_method: 'fp8', fmt: 'e4m3', scale_fmt: 'ue8m0', activation_scheme: 'dynamic', weight_block_size: [128, 128] },
  };
}

/** The released inference/config.json (DeepSeek's own names; no norm_eps / hc_eps, §10.4). */
function releaseInference(): Record<string, unknown> {
  return {
    vocab_size: 129280, dim: 4096, moe_inter_dim: 2048, n_layers: 43, n_hash_layers: 3, n_heads: 64, n_routed_experts: 256,
    n_shared_experts: 1, n_activated_experts: 6, score_func: 'sqrtsoftplus', route_scale: 1.5, swiglu_limit: 10.0,
    q_lora_rank: 1024, head_dim: 512, rope_head_dim: 64, o_groups: 8, o_lora_rank: 1024, window_size: 128,
    original_seq_len: 65536, rope_theta: 10000, rope_factor: 16, beta_fast: 32, beta_slow: 1, index_n_heads: 64,
    index_head_dim: 128, index_topk: 512, hc_mult: 4, hc_sinkhorn_iters: 20, dtype: 'fp8', scale_fmt: 'ue8m0',
    expert_dtype: 'fp4', compress_rope_theta: 160000, compress_ratios: RATIOS,
  };
}

const MAIN = '/ck/config.json';
const INF = '/ck/inference/config.json';
const parse = (c: Record<string, unknown>, inf: Record<string, unknown> | null = releaseInference()) =>
  parseDeepseekV4Config({ raw: c, file: MAIN }, inf === null ? null : { raw: inf, file: INF });

function thrown(f: () => unknown): InputError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(InputError);
    return e as InputError;
  }
  throw new Error('expected an InputError');
}

describe('deepseek_v4 config', () => {
  it('parses the release config.json + inference/config.json (spec §1.1)', () => {
    const c = parse(releaseConfig());
    expect(c).toMatchObject({
      hidden: 4096, layers: 43, heads: 64, headDim: 512, ropeDim: 64, qLoraRank: 1024, oGroups: 8, oLoraRank: 1024,
      window: 128, indexHeads: 64, indexHeadDim: 128, indexTopk: 512, experts: 256, sharedExperts: 1, topk: 6,
      moeInter: 2048, scoringFunc: 'sqrtsoftplus', normTopkProb: true, routeScale: 1.5, hashLayers: 3, swigluLimit: 10,
      hcMult: 4, hcSinkhornIters: 20, hcEps: 1e-6, normEps: 1e-6, ropeTheta: 10000, compressRopeTheta: 160000,
      yarn: { factor: 16, originalSeqLen: 65536, betaFast: 32, betaSlow: 1 }, vocab: 129280, bos: 0, eos: 1, expertDtype: 'fp4',
    });
    // 43 main layers; the 44th ratio belongs to the MTP block
    expect(c.compressRatios).toHaveLength(43);
    expect(c.compressRatios.slice(0, 4)).toEqual([0, 0, 4, 128]);
    expect(c.compressRatios.filter((r) => r === 4)).toHaveLength(21);
    expect(c.compressRatios.filter((r) => r === 128)).toHaveLength(20);
    expect(c.sources).toMatchObject({ config: MAIN, inference: INF });
    expect(c.sources.used.hidden).toBe('config.json');
    expect(c.sources.used.yarnFactor).toBe('config.json');
    // only inference/config.json declares the FP4 experts (§1.1)
    expect(c.sources.used.expertDtype).toBe('inference/config.json');
  });

  it('works from config.json alone and says so', () => {
    const c = parse(releaseConfig(), null);
    expect(c.sources.inference).toBeNull();
    expect(c.expertDtype).toBeNull();
    expect(c.yarn).toEqual({ factor: 16, originalSeqLen: 65536, betaFast: 32, betaSlow: 1 });
    expect(Object.values(c.sources.used)).not.toContain('inference/config.json');
  });

  it('a field both files define must agree: one InputError naming both files and keys', () => {
    const e = thrown(() => parse(releaseConfig(), { ...releaseInference(), dim: 2048 }));
    expect(e.message).toContain(MAIN);
    expect(e.message).toContain(INF);
    expect(e.message).toContain('hidden_size = 4096');
    expect(e.message).toContain('dim = 2048');
    const r = thrown(() => parse(releaseConfig(), { ...releaseInference(), rope_factor: 40 }));
    expect(r.message).toContain('rope_scaling.factor = 16');
    expect(r.message).toContain('rope_factor = 40');
    // original_seq_len 0 (DeepSeek's "no YaRN") against config.json's YaRN is a disagreement too
    expect(() => parse(releaseConfig(), { ...releaseInference(), original_seq_len: 0 })).toThrow(InputError);
    expect(() => parse(releaseConfig(), { ...releaseInference(), compress_ratios: [...RATIOS.slice(0, 43), 128] })).toThrow(/compress_ratios/);
  });

  it('takes a field config.json lacks from inference/config.json, and records it', () => {
    const c0 = releaseConfig();
    delete c0.swiglu_limit;
    delete c0.rope_scaling;
    const c = parse(c0);
    expect(c.swigluLimit).toBe(10);
    expect(c.sources.used.swigluLimit).toBe('inference/config.json');
    expect(c.yarn).toEqual({ factor: 16, originalSeqLen: 65536, betaFast: 32, betaSlow: 1 });
    expect(c.sources.used.yarnOriginal).toBe('inference/config.json');
  });

  it('defaults only what both DeepSeek and transformers default (eps 1e-6, beta 32/1)', () => {
    const c0 = releaseConfig();
    delete c0.rms_norm_eps;
    delete c0.hc_eps;
    const c = parse(c0);
    expect(c.normEps).toBe(1e-6);
    expect(c.hcEps).toBe(1e-6);
    expect(c.sources.used.normEps).toBe('default');
    const c1 = releaseConfig();
    delete c1.swiglu_limit;
    const e = thrown(() => parse(c1, null));
    expect(e.message).toContain('swiglu_limit is missing');
    expect(e.message).toContain(MAIN);
  });

  it('no rope_scaling anywhere → no YaRN (DeepSeek: original_seq_len 0)', () => {
    const c0 = releaseConfig();
    delete c0.rope_scaling;
    const inf = releaseInference();
    inf.original_seq_len = 0;
    expect(parse(c0, inf).yarn).toBeNull();
    expect(parse(c0, null).yarn).toBeNull();
  });

  it('rejects what DeepSeek-V4 does not do', () => {
    expect(thrown(() => parse({ ...releaseConfig(), scoring_func: 'sigmoid' }, null)).message).toMatch(/"sigmoid" is not supported/);
    expect(thrown(() => parse({ ...releaseConfig(), scoring_func: 'softmax' }, null)).message).toContain(MAIN);
    expect(() => parse({ ...releaseConfig(), norm_topk_prob: false }, null)).toThrow(/always normalizes/);
    expect(() => parse({ ...releaseConfig(), rope_scaling: { type: 'linear', factor: 2 } }, null)).toThrow(/rope_scaling type "linear"/);
    expect(() => parse({ ...releaseConfig(), rope_scaling: { type: 'yarn', factor: 16 } }, null)).toThrow(/no original_max_position_embeddings/);
    expect(() => parse({ ...releaseConfig(), num_key_value_heads: 8 }, null)).toThrow(InputError);
    expect(() => parse({ ...releaseConfig(), n_shared_experts: 2 }, null)).toThrow(InputError);
    expect(() => parse({ ...releaseConfig(), o_groups: 7 }, null)).toThrow(/o_groups/);
    expect(() => parse({ ...releaseConfig(), compress_ratios: [0, 4] }, null)).toThrow(/fewer than num_hidden_layers/);
    expect(() => parse({ ...releaseConfig(), compress_ratios: RATIOS.slice(0, 43) }, null)).toThrow(/num_nextn_predict_layers/);
    expect(() => parse({ ...releaseConfig(), hidden_size: 4096.5 }, null)).toThrow(/hidden_size must be an integer/);
    expect(() => parse(releaseConfig(), { ...releaseInference(), expert_dtype: 'fp6' })).toThrow(/expert_dtype "fp6"/);
  });

  it('refuses constants that describe no finite model and fields transformers reads that DeepSeek-V4 does not', () => {
    const rs = releaseConfig().rope_scaling as Record<string, unknown>;
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ rope_theta: 0 }, /rope_theta must be a finite number > 0, got 0/],
      [{ compress_rope_theta: -1 }, /compress_rope_theta must be a finite number > 0, got -1/],
      [{ rope_scaling: { ...rs, beta_fast: 0 } }, /beta_fast must be a finite number > 0, got 0/],
      [{ rope_scaling: { ...rs, beta_fast: 1, beta_slow: 32 } }, /beta_fast > beta_slow, got 1, 32/],
      [{ rope_scaling: { ...rs, attention_factor: 0.5 } }, /rope_scaling\.attention_factor 0\.5 is not supported/],
      [{ hidden_act: 'gelu' }, /hidden_act "gelu" is not supported for DeepSeek-V4/],
      [{ mlp_bias: true }, /mlp_bias true is not supported/],
      [{ attention_bias: true }, /attention_bias true is not supported/],
      [{ layer_types: ['sliding_attention'] }, /layer_types .* not read: compress_ratios decides/],
      [{ mlp_layer_types: ['dense'] }, /mlp_layer_types .* not read: num_hash_layers decides/],
      [{ rope_parameters: { rope_type: 'yarn', rope_theta: 10000 } }, /rope_parameters .* not read/],
      [{ partial_rotary_factor: 0.25 }, /partial_rotary_factor 0\.25 .* contradicts qk_rope_head_dim 64 of head_dim 512/],
    ];
    for (const [edit, says] of cases) {
      const e = thrown(() => parse({ ...releaseConfig(), ...edit }, null));
      expect(e.message, JSON.stringify(edit)).toMatch(says);
      expect(e.message).toContain(MAIN);
    }
    // the released values themselves are accepted
    expect(() => parse({ ...releaseConfig(), hidden_act: 'silu', attention_bias: false, partial_rotary_factor: 64 / 512, rope_scaling: { ...rs, attention_factor: 1 } }, null)).not.toThrow();
  });

  it('loadDeepseekV4Config finds inference/config.json next to config.json', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-dsv4-cfg-'));
    try {
      fs.mkdirSync(path.join(dir, 'inference'));
      fs.writeFileSync(path.join(dir, 'inference', 'config.json'), JSON.stringify(releaseInference()));
      const c = loadDeepseekV4Config(dir, releaseConfig(), path.join(dir, 'config.json'));
      expect(c.sources.inference).toBe(path.join(dir, 'inference', 'config.json'));
      expect(c.expertDtype).toBe('fp4');
      fs.writeFileSync(path.join(dir, 'inference', 'config.json'), '{not json');
      expect(() => loadDeepseekV4Config(dir, releaseConfig(), path.join(dir, 'config.json'))).toThrow(/not valid JSON/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
