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
import { GptOssCheckpoint, parseGptOssConfig } from '../models/gpt_oss.js';
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
