/**
 * The gpt-oss FP32 reference (reference-cpu/gpt_oss.ts) on the committed fixtures/gpt-oss-tiny against
 * scripts/golden/gpt_oss_numpy.py, a float64 numpy forward written independently from spec/gpt-oss.md and
 * OpenAI's gpt_oss/torch/model.py (its own safetensors parser, BF16/MXFP4 decoders and YaRN):
 *   - every stage and sub-stage within rel_l2 1e-5 (FP32 storage vs float64), the chosen experts equal;
 *   - each trap of spec §4 put back in turn (reference-cpu/gpt_oss/traps.ts) reproduces the golden's own
 *     ablation of that trap (so the flag does what it says) and misses the real golden by far.
 * Both files are committed: a missing one fails here, it does not skip.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { relL2 } from './rel_err.js';
import { decodeToF32 } from '../../harness/formats/dtypes.js';
import { Checkpoint } from '../../harness/io/checkpoint.js';
import { SafetensorsFile } from '../../harness/io/safetensors.js';
import { GptOssCheckpoint, gptOssRope } from '../../harness/models/gpt_oss.js';
import { GptOssReference, gptOssSwiglu, topkIndices } from '../gpt_oss.js';
import { type GptOssTraps, TRAP_NAMES } from '../gpt_oss/traps.js';

const FIXTURE = path.join(import.meta.dirname, '..', '..', 'fixtures', 'gpt-oss-tiny');
const GOLDEN = path.join(import.meta.dirname, '..', '..', 'fixtures', 'gpt-oss-tiny-golden', 'golden.safetensors');

function withGolden<T>(fn: (read: (name: string) => { shape: number[]; data: Float32Array }) => T): T {
  for (const p of [FIXTURE, GOLDEN]) if (!fs.existsSync(p)) throw new Error(`missing committed ${p}: fixtures/gpt-oss-tiny by \`layerdiff fixture gpt-oss-tiny\`, its golden by \`python3 scripts/golden/gpt_oss_numpy.py\``);
  const g = SafetensorsFile.open(GOLDEN);
  try {
    return fn((name) => {
      const i = g.get(name);
      if (i === undefined) throw new Error(`golden has no ${name}`);
      return { shape: i.shape, data: decodeToF32(i.dtype, g.read(i), i.shape.reduce((a, b) => a * b, 1)) };
    });
  } finally {
    g.close();
  }
}

/** The reference's logits for the golden's tokens, with the given traps put back. */
function forward(m: GptOssCheckpoint, tokens: number[], traps: GptOssTraps = {}) {
  const ref = new GptOssReference(m, traps);
  const ctx = { tokens, positions: tokens.map((_, i) => i), forcedSelections: null };
  let x = ref.embed(tokens);
  const layers = [];
  for (let L = 0; L < m.cfg.layers; L++) {
    const r = ref.layer(L, x, m.loadLayer(L), ctx);
    layers.push(r);
    x = r.out;
  }
  const fn = ref.finalNorm(x);
  return { embed: ref.embed(tokens), layers, finalNorm: fn, logits: ref.logits(fn) };
}

describe('gpt_oss reference vs the float64 numpy golden', () => {
  it('the fixture reaches the traps: more tokens than the window, sliding and full layers, YaRN ramp inside the frequencies', () => {
    const ck = Checkpoint.open(FIXTURE);
    try {
      const m = new GptOssCheckpoint(ck);
      const tokens = withGolden((read) => Array.from(read('tokens').data));
      expect(tokens.length).toBeGreaterThan(m.cfg.slidingWindow);
      expect(m.cfg.sliding).toEqual([true, false, true, false]);
      expect(m.cfg.heads * m.cfg.headDim).not.toBe(m.cfg.hidden);
      const { invFreq, concentration } = gptOssRope(m.cfg);
      const plain = Float64Array.from({ length: m.cfg.headDim / 2 }, (_, j) => m.cfg.ropeTheta ** (-(2 * j) / m.cfg.headDim));
      const ratio = [...invFreq].map((f, j) => plain[j] / f);
      // extrapolated (1), interpolated (factor) and ramped (between) frequencies all occur
      expect(ratio.some((r) => Math.abs(r - 1) < 1e-12)).toBe(true);
      expect(ratio.some((r) => Math.abs(r - 32) < 1e-9)).toBe(true);
      expect(ratio.some((r) => r > 1 + 1e-6 && r < 32 - 1e-6)).toBe(true);
      expect(concentration).toBeCloseTo(0.1 * Math.log(32) + 1, 15);
    } finally {
      ck.close();
    }
  });

  it('every stage and sub-stage within rel_l2 1e-5, and the same experts chosen', () => {
    withGolden((read) => {
      const tokens = Array.from(read('tokens').data);
      const ck = Checkpoint.open(FIXTURE);
      try {
        const m = new GptOssCheckpoint(ck);
        m.conformance();
        const r = forward(m, tokens);
        expect(relL2(r.embed.data, read('embed').data)).toBe(0);
        r.layers.forEach((res, L) => {
          expect(res.out.shape).toEqual(read(`layer.${L}`).shape);
          const ids = read(`layer.${L}.experts`);
          const k = ids.shape[1];
          expect(res.selections?.experts, `layer.${L}.experts`).toEqual(Array.from({ length: ids.shape[0] }, (_, s) => Array.from(ids.data.subarray(s * k, (s + 1) * k))));
          expect(relL2(res.out.data, read(`layer.${L}`).data), `layer.${L}`).toBeLessThan(1e-5);
          expect(relL2(res.substages!.attn.data, read(`layer.${L}.attn`).data), `layer.${L}.attn`).toBeLessThan(1e-5);
          expect(relL2(res.substages!.moe.data, read(`layer.${L}.moe`).data), `layer.${L}.moe`).toBeLessThan(1e-5);
          expect(relL2(res.substages!['moe.router'].data, read(`layer.${L}.router_weights`).data), `layer.${L}.moe.router`).toBeLessThan(1e-5);
        });
        expect(relL2(r.finalNorm.data, read('final_norm').data)).toBeLessThan(1e-5);
        expect(relL2(r.logits.data, read('logits').data)).toBeLessThan(1e-5);
      } finally {
        ck.close();
      }
    });
  });

  for (const [flag, name] of Object.entries(TRAP_NAMES) as Array<[keyof GptOssTraps, string]>) {
    it(`trap ${name}: putting it back matches the golden's ablation and misses the golden`, () => {
      withGolden((read) => {
        const tokens = Array.from(read('tokens').data);
        const ck = Checkpoint.open(FIXTURE);
        try {
          const logits = forward(new GptOssCheckpoint(ck), tokens, { [flag]: true }).logits.data;
          expect(relL2(logits, read(`ablation.${name}.logits`).data), 'vs the golden ablation').toBeLessThan(1e-5);
          expect(relL2(logits, read('logits').data), 'vs the golden').toBeGreaterThan(1e-2);
        } finally {
          ck.close();
        }
      });
    });
  }
});

describe('gpt_oss reference pieces', () => {
  it('top-k: by value, ties to the lower index', () => {
    expect(topkIndices([1, 3, 3, 2, 3], 2)).toEqual([1, 2]);
    expect(topkIndices([0.5, -1, 0.5, 0.7], 3)).toEqual([3, 0, 2]);
  });

  it('SwiGLU: gate clamped above only, up both ways, α = 1.702, +1 (values from the formula by hand)', () => {
    const sig = (z: number) => 1 / (1 + Math.exp(-z));
    expect(gptOssSwiglu(9, 2, 7)).toBeCloseTo(7 * sig(1.702 * 7) * 3, 12);
    expect(gptOssSwiglu(-9, 2, 7)).toBeCloseTo(-9 * sig(-1.702 * 9) * 3, 15);
    expect(gptOssSwiglu(1, 9, 7)).toBeCloseTo(sig(1.702) * 8, 12);
    expect(gptOssSwiglu(1, -9, 7)).toBeCloseTo(sig(1.702) * -6, 12);
    expect(gptOssSwiglu(0.5, 0.25, 7)).toBeCloseTo(0.5 * sig(0.851) * 1.25, 12);
  });
});
