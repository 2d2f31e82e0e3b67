/**
 * Llama 3.1's rope_scaling (rope_type "llama3", issue 12): the inverse-frequency table against a second
 * transcription of transformers' _compute_llama3_parameters (modeling_rope_utils.py) written here, its three
 * bands, and both paths and both decoders on llama-tiny with the scaling set so every band is used.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyCheckpoint } from '../../fixtures/inject.js';
import { LlamaReference } from '../../reference-cpu/llama.js';
import { InputError } from '../errors.js';
import { Checkpoint } from '../io/checkpoint.js';
import { LlamaCheckpoint, llamaInvFreq, parseLlamaConfig } from '../models/llama.js';
import { architectureFor } from '../arch/registry.js';
import { LLAMA_TINY, quietDiff } from './cli.js';
import { expectLlamaDecodersMatchRecompute } from './llama-decoders.js';

process.env.OMP_NUM_THREADS ??= '1';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-llama3-'));
const dir = path.join(tmp, 'llama3');
// original_max_position_embeddings 64 with factors 1 / 4: wavelengths below 16 keep their frequency, above 64
// are divided by the factor, between are interpolated — llama-tiny's head_dim spans all three
const SCALING = { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 64 };

const setConfig = (d: string, edit: (c: Record<string, unknown>) => void) => {
  const f = path.join(d, 'config.json');
  const c = JSON.parse(fs.readFileSync(f, 'utf8')) as Record<string, unknown>;
  edit(c);
  fs.writeFileSync(f, JSON.stringify(c, null, 2));
};

beforeAll(() => {
  copyCheckpoint(LLAMA_TINY(), dir);
  setConfig(dir, (c) => (c.rope_scaling = SCALING));
});
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** transformers' _compute_llama3_parameters, transcribed element by element (torch.where → branches on the masks). */
function hfLlama3(base: number, dim: number, s: typeof SCALING): number[] {
  const inv = Array.from({ length: dim / 2 }, (_, k) => 1 / base ** ((2 * k) / dim));
  const lowWavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const highWavelen = s.original_max_position_embeddings / s.high_freq_factor;
  return inv.map((f) => {
    const wavelen = (2 * Math.PI) / f;
    const scaled = wavelen > lowWavelen ? f / s.factor : f; // inv_freq_llama
    const smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    const smoothed = ((1 - smooth) * scaled) / s.factor + smooth * scaled;
    const medium = !(wavelen < highWavelen) && !(wavelen > lowWavelen);
    return medium ? smoothed : scaled;
  });
}

describe('rope_scaling llama3', () => {
  it('the inverse frequencies equal transformers\' formula, with every band present', () => {
    const ck = Checkpoint.open(dir);
    try {
      const cfg = new LlamaCheckpoint(ck).cfg;
      const got = llamaInvFreq(cfg);
      const want = hfLlama3(cfg.ropeTheta, cfg.headDim, SCALING);
      got.forEach((v, i) => expect(Math.abs(v - want[i]) / want[i], `i = ${i}`).toBeLessThan(1e-14));
      const plain = llamaInvFreq({ ...cfg, ropeLlama3: null });
      const bands = Array.from(got, (v, i) => (v === plain[i] ? 'kept' : Math.abs(v - plain[i] / 8) < 1e-18 ? 'divided' : 'smoothed'));
      for (const b of ['kept', 'divided', 'smoothed']) expect(bands, b).toContain(b);
    } finally {
      ck.close();
    }
  });

  it('reads the newer rope_parameters (rope_theta inside) as the same model; disagreeing with rope_theta / rope_scaling is refused', () => {
    const cfgOf = (edit: (c: Record<string, unknown>) => void) => {
      const d = path.join(tmp, 'params');
      fs.rmSync(d, { recursive: true, force: true });
      copyCheckpoint(LLAMA_TINY(), d);
      setConfig(d, edit);
      const ck = Checkpoint.open(d);
      try {
        return new LlamaCheckpoint(ck).cfg;
      } finally {
        ck.close();
      }
    };
    const ck = Checkpoint.open(dir);
    const legacy = new LlamaCheckpoint(ck).cfg;
    ck.close();
    const v5 = cfgOf((c) => {
      c.rope_parameters = { ...SCALING, rope_theta: c.rope_theta };
      delete c.rope_theta;
      delete c.rope_scaling;
    });
    expect(Array.from(llamaInvFreq(v5))).toEqual(Array.from(llamaInvFreq(legacy)));
    expect(v5.ropeTheta).toBe(legacy.ropeTheta);
    const other = cfgOf((c) => ((c.rope_parameters = { rope_type: 'default', rope_theta: 500000 }), delete c.rope_theta));
    expect([other.ropeTheta, other.ropeLlama3]).toEqual([500000, null]);
    expect(() => cfgOf((c) => (c.rope_parameters = { ...SCALING, rope_theta: 500000 }))).toThrow(/rope_parameters .* disagrees with rope_theta 10000/);
    expect(() => cfgOf((c) => ((c.rope_scaling = SCALING), (c.rope_parameters = { ...SCALING, factor: 4 })))).toThrow(/disagrees with rope_theta .* rope_scaling/);
    expect(() => cfgOf((c) => (c.rope_parameters = { rope_type: 'yarn', factor: 4 }))).toThrow(/rope_parameters .*"yarn".* is not supported for llama/);
    // rope_scaling given: transformers 5.x replaces rope_parameters by it, theta from the top level (10000 when absent)
    expect(() => cfgOf((c) => ((c.rope_scaling = SCALING), delete c.rope_theta, (c.rope_parameters = { ...SCALING, rope_theta: 500000 })))).toThrow(/rope_parameters .* disagrees with rope_theta absent \(10000\)/);
    // 4.x lets `type` win, 5.x `rope_type`: both, different, is refused
    expect(() => cfgOf((c) => (c.rope_scaling = { ...SCALING, type: 'linear' }))).toThrow(/rope_scaling names rope_type "llama3" and type "linear"/);
  });

  it('takes transformers 5.x\'s defaults: original_max_position_embeddings from max_position_embeddings, head_dim as hidden // heads, "swish" as SiLU', () => {
    const d = path.join(tmp, 'defaults');
    const cfgOf = (edit: (c: Record<string, unknown>) => void) => {
      fs.rmSync(d, { recursive: true, force: true });
      copyCheckpoint(LLAMA_TINY(), d);
      setConfig(d, edit);
      const ck = Checkpoint.open(d);
      try {
        return parseLlamaConfig(ck);
      } finally {
        ck.close();
      }
    };
    const explicit = cfgOf((c) => (c.rope_scaling = { ...SCALING, original_max_position_embeddings: c.max_position_embeddings }));
    const implied = cfgOf((c) => {
      const { original_max_position_embeddings: _, ...rest } = SCALING;
      c.rope_scaling = rest;
    });
    expect(implied.ropeLlama3).toEqual(explicit.ropeLlama3);
    expect(Array.from(llamaInvFreq(implied))).toEqual(Array.from(llamaInvFreq(explicit)));
    const plain = cfgOf(() => undefined);
    const odd = cfgOf((c) => {
      c.hidden_size = (c.hidden_size as number) + 1; // not a multiple of the heads: transformers floors
      delete c.head_dim;
    });
    expect(odd.headDim).toBe(Math.floor(((plain.hidden as number) + 1) / plain.heads));
    expect(cfgOf((c) => (c.hidden_act = 'swish')).headDim).toBe(plain.headDim);
  });

  it('refuses another rope type or a bad field by name', () => {
    const bad = path.join(tmp, 'bad');
    for (const [edit, re] of [
      [{ ...SCALING, rope_type: 'dynamic' }, /rope_scaling .*"dynamic".* is not supported for llama/],
      [{ ...SCALING, factor: -2 }, /rope_scaling\.factor must be a positive number, got -2/],
      [{ ...SCALING, high_freq_factor: 0.5 }, /high_freq_factor 0\.5 must exceed low_freq_factor 1/],
    ] as const) {
      fs.rmSync(bad, { recursive: true, force: true });
      copyCheckpoint(LLAMA_TINY(), bad);
      setConfig(bad, (c) => (c.rope_scaling = edit));
      const ck = Checkpoint.open(bad);
      try {
        expect(() => new LlamaCheckpoint(ck)).toThrow(InputError);
        expect(() => new LlamaCheckpoint(ck)).toThrow(re);
      } finally {
        ck.close();
      }
    }
  });

  it('refuses partial RoPE, a scaling without its type, and a model_type naming another model', () => {
    const bad = path.join(tmp, 'bad-fields');
    for (const [edit, re] of [
      [(c: Record<string, unknown>) => (c.partial_rotary_factor = 0.5), /partial_rotary_factor 0\.5 is not supported for llama: only full RoPE/],
      [(c: Record<string, unknown>) => (c.rope_parameters = { rope_type: 'default', rope_theta: 10000, partial_rotary_factor: 0.5 }), /rope_parameters\.partial_rotary_factor 0\.5 is not supported/],
      [(c: Record<string, unknown>) => (c.rope_scaling = { factor: 8 }), /rope_scaling \{"factor":8\} has no rope_type/],
      [(c: Record<string, unknown>) => ((c.model_type = 'mistral'), (c.sliding_window = 4)), /model_type "mistral" disagrees with architectures\[0\] "LlamaForCausalLM"/],
    ] as const) {
      fs.rmSync(bad, { recursive: true, force: true });
      copyCheckpoint(LLAMA_TINY(), bad);
      setConfig(bad, edit);
      const ck = Checkpoint.open(bad);
      try {
        expect(() => architectureFor(ck) && new LlamaCheckpoint(ck)).toThrow(InputError);
        expect(() => architectureFor(ck) && new LlamaCheckpoint(ck)).toThrow(re);
      } finally {
        ck.close();
      }
    }
    // full RoPE said explicitly is the same model
    fs.rmSync(bad, { recursive: true, force: true });
    copyCheckpoint(LLAMA_TINY(), bad);
    setConfig(bad, (c) => (c.partial_rotary_factor = 1));
    const ck = Checkpoint.open(bad);
    try {
      expect(new LlamaCheckpoint(ck).cfg.headDim).toBeGreaterThan(0);
    } finally {
      ck.close();
    }
  });

  it('both paths compute it: the reference moves with the scaling, the device agrees (diff passes), decoders equal recompute', async () => {
    const ck = Checkpoint.open(dir);
    const plainCk = Checkpoint.open(LLAMA_TINY());
    try {
      const m = new LlamaCheckpoint(ck);
      const tokens = Array.from({ length: 40 }, (_, i) => (i * 7 + 3) % 300);
      const ctx = { tokens, positions: tokens.map((_, i) => i), forcedSelections: null };
      const x = new LlamaReference(m).embed(tokens);
      const scaled = new LlamaReference(m).layer(0, x, m.loadLayer(0), ctx).out.data;
      const pm = new LlamaCheckpoint(plainCk);
      const plain = new LlamaReference(pm).layer(0, x, pm.loadLayer(0), ctx).out.data;
      expect(Math.max(...Array.from(scaled, (v, i) => Math.abs(v - plain[i]))), 'the scaling changes layer 0').toBeGreaterThan(1e-3);

      const r = await quietDiff({ model: dir, layers: 'all', device: 'emulated', mode: 'both', freeSelection: false, tokens: tokens.join(',') });
      expect(r.code).toBe(0);

      expectLlamaDecodersMatchRecompute(m, [tokens, tokens.slice(0, 9)], 48);
    } finally {
      ck.close();
      plainCk.close();
    }
  });
});
