/**
 * gpt-oss's config.json as transformers reads it (GptOssConfig): RoPE from rope_theta + rope_scaling (4.x) or one
 * rope_parameters object (v5), GptOssConfig's YaRN default when neither is given, swiglu_alpha, and the head tied
 * to the embedding as transformers ties it. Each against the values the committed fixture's config states.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { InputError } from '../errors.js';
import { GptOssCheckpoint, gptOssRope, parseGptOssConfig } from '../models/gpt_oss.js';
import { Checkpoint } from '../io/checkpoint.js';
import { editConfig } from '../../fixtures/inject.js';
import { packageRoot } from '../version.js';

const FILE = path.join(packageRoot(), 'fixtures', 'gpt-oss-tiny', 'config.json');
const base = () => JSON.parse(fs.readFileSync(FILE, 'utf8')) as Record<string, unknown>;
const parse = (config: Record<string, unknown>) => parseGptOssConfig({ config, configFile: FILE });

describe('gpt-oss config: RoPE, α and the head', () => {
  it("reads rope_parameters (v5) as the same model as rope_theta + rope_scaling; GptOssConfig's YaRN default when neither is given", () => {
    const legacy = parse(base());
    expect(legacy.yarn).not.toBeNull();
    const { rope_scaling: rs, rope_theta: theta, ...rest } = base();
    const v5 = parse({ ...rest, rope_parameters: { ...(rs as object), rope_theta: theta } });
    expect([v5.ropeTheta, v5.yarn]).toEqual([legacy.ropeTheta, legacy.yarn]);
    // neither: transformers' default (yarn, factor 32 over 4096 positions, β 32 / 1) and rope_theta 150000
    expect(parse(rest)).toMatchObject({ ropeTheta: 150000, yarn: { factor: 32, betaFast: 32, betaSlow: 1, originalMax: 4096 } });
    // an explicit null is no scaling at all
    expect(parse({ ...rest, rope_scaling: null }).yarn).toBeNull();
  });

  it('refuses rope_parameters that disagree with rope_theta / rope_scaling, and an α other than gpt-oss\'s', () => {
    const c = base();
    const rs = c.rope_scaling as Record<string, unknown>;
    for (const [edit, says] of [
      [{ rope_parameters: { ...rs, factor: 4 } }, /rope_parameters .* disagrees with rope_scaling/],
      [{ rope_parameters: { ...rs, rope_theta: 1000 } }, /rope_parameters\.rope_theta 1000 disagrees with rope_theta/],
      [{ swiglu_alpha: 1.5 }, /swiglu_alpha 1\.5 is not supported for gpt_oss \(only its α = 1\.702\)/],
    ] as const) {
      expect(() => parse({ ...c, ...edit }), JSON.stringify(edit)).toThrow(InputError);
      expect(() => parse({ ...c, ...edit })).toThrow(says);
    }
    expect(() => parse({ ...c, swiglu_alpha: 1.702 })).not.toThrow();
  });

  it("YaRN's correction range as transformers computes it: truncated unless rope_scaling says false, clamped to [0, d − 1]", () => {
    const c = base();
    const rs = c.rope_scaling as Record<string, unknown>;
    const { truncate: _, ...noTruncate } = rs;
    // inv_freq by transformers' _compute_yarn_parameters (find_correction_range, linear_ramp_factor) written in
    // Python from its source, float64, for head_dim 32, θ 150000, factor 32, β 32 / 1: dims 5–8 lie in the ramp
    const golden: Array<[Record<string, unknown>, boolean, Record<number, number>]> = [
      [rs, false, { 5: 0.019335001126540362, 6: 0.006794959489732219, 7: 0.0020937923789696887, 8: 0.00045648391922324086 }],
      [noTruncate, true, { 5: 0.019450967544057934, 6: 0.007015713910504388, 7: 0.002277271936341833, 8: 0.0005809475019311124 }],
      // 128 original positions: the range's low end is −0.61, clamped to 0
      [{ ...rs, original_max_position_embeddings: 128 }, false, { 1: 0.3611140287883642, 2: 0.11748292149649762, 3: 0.030155963688402038, 4: 0.0021522556280012435 }],
    ];
    for (const [scaling, truncate, want] of golden) {
      const cfg = parse({ ...c, rope_scaling: scaling, initial_context_length: undefined });
      expect(cfg.yarn?.truncate, JSON.stringify(scaling)).toBe(truncate);
      const { invFreq } = gptOssRope(cfg);
      for (const [j, v] of Object.entries(want)) expect(Math.abs(invFreq[Number(j)] - v) / v, `${JSON.stringify(scaling)} dim ${j}`).toBeLessThan(1e-14);
      expect(invFreq[0]).toBe(1);
    }
    expect(() => parse({ ...c, rope_scaling: { ...rs, truncate: 'no' } })).toThrow(/rope_scaling\.truncate "no" is not true or false/);
  });

  it("refuses what transformers and OpenAI's reference read differently: swiglu_limit ≠ 7, experts_per_token alone, OpenAI's RoPE names contradicting, partial RoPE", () => {
    const c = base();
    const { num_experts_per_tok: _, ...onlyOai } = c;
    for (const [config, says] of [
      [{ ...c, swiglu_limit: 3 }, /swiglu_limit 3 is not supported for gpt_oss \(transformers computes 7/],
      [{ ...c, swiglu_limit: 0 }, /swiglu_limit/],
      [onlyOai, /experts_per_token 2 is given without num_experts_per_tok, which transformers reads \(default 4\)/],
      [{ ...c, experts_per_token: 4 }, /experts_per_token 4 contradicts num_experts_per_tok 2/],
      [{ ...c, initial_context_length: 8192 }, /initial_context_length 8192 contradicts rope_scaling\.original_max_position_embeddings 4096/],
      [{ ...c, rope_scaling_factor: 16 }, /rope_scaling_factor 16 contradicts rope_scaling\.factor 32/],
      [{ ...c, rope_ntk_alpha: 2 }, /rope_ntk_alpha 2 contradicts rope_scaling\.beta_slow 1/],
      [{ ...c, rope_ntk_beta: 16 }, /rope_ntk_beta 16 contradicts rope_scaling\.beta_fast 32/],
      [{ ...c, rope_scaling: null, rope_scaling_factor: 32 }, /rope_scaling_factor 32 asks for YaRN, but rope_scaling is null/],
      [{ ...c, partial_rotary_factor: 0.5 }, /partial_rotary_factor 0\.5 is not supported for gpt_oss/],
    ] as const) {
      expect(() => parse(config as Record<string, unknown>), JSON.stringify(config).slice(0, 80)).toThrow(InputError);
      expect(() => parse(config as Record<string, unknown>)).toThrow(says);
    }
    // the released form: both names, agreeing; OpenAI's RoPE names agreeing; head_dim absent is GptOssConfig's 64
    expect(() => parse({ ...c, rope_scaling_factor: 32, rope_ntk_alpha: 1, rope_ntk_beta: 32, swiglu_limit: 7.0 })).not.toThrow();
    const { head_dim: __, ...noHeadDim } = c;
    expect(parse(noHeadDim).headDim).toBe(64);
  });

  it('tie_word_embeddings true: the head is the embedding, also with an lm_head.weight stored beside it (as transformers ties them)', () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-gptoss-tie-'));
    try {
      const dir = path.join(tmp, 'm');
      editConfig(path.dirname(FILE), dir, (c) => void (c.tie_word_embeddings = true));
      const ck = Checkpoint.open(dir);
      try {
        expect(ck.has('lm_head.weight')).toBe(true);
        const m = new GptOssCheckpoint(ck);
        expect(m.headName).toBe('model.embed_tokens.weight');
        expect(() => m.conformance()).not.toThrow();
      } finally {
        ck.close();
      }
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });
});
