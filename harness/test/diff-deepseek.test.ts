/**
 * End to end on the bundled deepseek-v4-tiny fixture: the device path (device-hip/deepseek_v4.ts) against the
 * FP32 reference through runDiffCommand, on the golden file's 96 tokens (BOS + seeded ids). 96 tokens reach
 * every trap of spec §6: S > 4·index_topk = 16 (the indexer really selects), S > sliding_window = 20, and the
 * HCA layer (ratio 16) gets 6 compressed entries.
 *
 * The fixture is not tuned for the tool (fixtures/deepseek_v4_tiny.ts): its hyper-connection streams reach
 * |x| ≈ 160–240, where FP16 spacing is 0.125, and its router and indexer margins are as drawn, near-ties
 * included. Under the default policy (the FP16 floor rule, README "Reading the verdict") a clean run passes in
 * every mode although its max_abs is above 0.1 and accumulated choices flip (each judged benign), and every
 * injected fault fails first where it is injected, under the same default policy.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { DiffArgs } from '../cli/diff.js';
import { packageRoot } from '../version.js';
import { hashTree, injectedFaultTests, quietDiff } from './cli.js';

const MODEL = () => path.join(packageRoot(), 'fixtures', 'deepseek-v4-tiny');
const TOKENS = (JSON.parse(fs.readFileSync(path.join(packageRoot(), 'fixtures', 'deepseek-v4-tiny-golden', 'golden.json'), 'utf8')) as { tokens: number[] }).tokens;
const STAGES = ['embed', 'layer.0', 'layer.1', 'layer.2', 'layer.3', 'final_norm', 'logits'];

const base = (over: Partial<DiffArgs> = {}): DiffArgs => ({
  model: MODEL(), tokens: TOKENS.join(','), layers: 'all', device: 'auto', mode: 'both', freeSelection: false, ...over,
});
const quiet = quietDiff;

/** FP16 spacing (one ulp) at magnitude v. */
const ulp16 = (v: number) => 2 ** (Math.floor(Math.log2(Math.max(v, 2 ** -14))) - 10);

describe('layerdiff diff on deepseek-v4-tiny', () => {
  it('the fixture and tokens reach the traps of spec §6', () => {
    const cfg = JSON.parse(fs.readFileSync(path.join(MODEL(), 'config.json'), 'utf8'));
    expect(TOKENS.length).toBeGreaterThan(4 * cfg.index_topk);
    expect(TOKENS.length).toBeGreaterThan(cfg.sliding_window);
    for (const r of cfg.compress_ratios.slice(0, cfg.num_hidden_layers)) expect(TOKENS.length).toBeGreaterThanOrEqual(r);
  });

  it('a clean run lists every stage; isolated errors stay within FP16 resolution, with no NaN and no selection flips', async () => {
    const before = hashTree(MODEL());
    const { report } = await quiet(base());
    expect(report.model.architecture).toBe('deepseek_v4');
    expect(report.backends.device.name).toBe('emulated');
    expect(report.stages.map((s) => s.name)).toEqual(STAGES);
    for (const s of report.stages) {
      for (const m of [s.accumulated!, s.isolated!]) {
        expect(m.nan.device + m.inf.device, s.name).toBe(0);
        expect(m.nan.reference + m.inf.reference, s.name).toBe(0);
      }
      const iso = s.isolated!;
      expect(iso.selection_flips, `${s.name} isolated flips (forced selections)`).toBe(0);
      // Numeric error only: ≤ 3 FP16 ulps at the stage's magnitude and a relative L2 error of a few FP16 units.
      expect(iso.max_abs, s.name).toBeLessThanOrEqual(3 * ulp16(iso.max_ref));
      expect(iso.rel_l2, s.name).toBeLessThan(2e-3);
      if (s.name !== 'embed') expect(s.accumulated!.max_abs, `${s.name}: FP16 leaves a footprint`).toBeGreaterThan(0);
      if (s.name.startsWith('layer.')) {
        // the selection scores are sub-stages too (moe.scores on score-routed layers, attn.indexer.scores on CSA layers)
        expect(Object.keys(s.substages ?? {}).filter((k) => !k.endsWith('.scores')).sort()).toEqual(['attn', 'moe', 'moe.router']);
        for (const [k, m] of Object.entries(s.substages!)) expect(m.rel_l2, `${s.name}.${k}`).toBeLessThan(2e-3);
      }
    }
    expect(report.stages.at(-1)!.logits!.isolated!.top1_agreement).toBe(1);
    expect(hashTree(MODEL())).toBe(before);
  });

  it('a clean run passes under the default policy in every mode at real magnitudes, where the fixed rule (max_abs 0.1) fails it', async () => {
    const { code, report } = await quiet(base());
    expect(report.verdict).toBe('pass');
    expect(report.first_failure).toBeNull();
    expect(code).toBe(0);
    let maxRef = 0;
    let overFixed = 0;
    for (const s of report.stages) {
      expect(s.status, s.name).not.toBe('fail');
      expect(s.statuses?.isolated, `${s.name} own error`).not.toBe('fail');
      expect(s.isolated!.rel_l2, `${s.name} isolated rel_l2`).toBeLessThan(2e-3);
      maxRef = Math.max(maxRef, s.isolated!.max_ref);
      if (s.isolated!.max_abs > 0.1) overFixed++;
      // every accumulated flip is a near-tie the device's own score error explains
      for (const f of s.flips?.accumulated?.list ?? []) expect(f.judgement, `${s.name} token ${f.token}`).toBe('benign');
    }
    expect(maxRef, 'the streams reach real magnitudes').toBeGreaterThan(64);
    expect(overFixed, 'stages a fixed max_abs 0.1 would fail on a correct path').toBeGreaterThan(0);
    const fixed = await quiet(base({ metric: 'max_abs', failAbove: 0.1, warnAbove: 0.01 }));
    expect(fixed.code).toBe(1);
  });

  it('isolated mode with --free-selection: own choices that flip are near-ties judged benign, and own error passes', async () => {
    const { code, report } = await quiet(base({ mode: 'isolated', freeSelection: true }));
    expect(code).toBe(0);
    expect(report.questions!.own_error.status).toBe('pass');
    for (const s of report.stages) {
      const f = s.flips?.isolated;
      if (f) expect([f.scoring_bug, f.unjudged], s.name).toEqual([0, 0]);
    }
  });

  it('isolated mode with --free-selection and router-bias-dropped@2: the device\'s own choices fail as a scoring bug at layer.2', async () => {
    const { code, report } = await quiet(base({ mode: 'isolated', freeSelection: true, inject: 'router-bias-dropped@2' }));
    expect(code).toBe(1);
    expect(report.first_failure).toBe('layer.2');
    expect(report.questions!.own_error).toMatchObject({ status: 'fail', first_failure: 'layer.2' });
    const f = report.stages.find((s) => s.name === 'layer.2')!.flips!.isolated!;
    expect(f.scoring_bug).toBeGreaterThan(f.count / 2);
    expect(report.diagnosis[0]).toMatchObject({ stage: 'layer.2', cause: 'router-bias-dropped' });
  });

  it('--layers 2-3 runs only those layers, from the reference input', async () => {
    const { report } = await quiet(base({ layers: '2-3', metric: 'rel_l2' }));
    expect(report.stages.map((s) => s.name)).toEqual(['layer.2', 'layer.3', 'final_norm', 'logits']);
  });

  describe('injected device-path bugs are caught where they happen (default policy)', () => {
    // Every layer holds FP8 attention/shared-expert and MXFP4 routed-expert linears, so a global decode bug
    // shows first in layer 0; fp16-overflow hits the attention output projection wo_b of its layer.
    const cases: Array<[string, string]> = [
      ['e3m0-table', 'layer.0'],
      ['nibble-swap', 'layer.0'],
      ['scale-missing', 'layer.0'],
      ['scale-axis', 'layer.0'],
      ['scale-stride', 'layer.0'],
      ['e8m0-as-int', 'layer.0'],
      ['fp16-overflow', 'layer.0'],
      ['e3m0-table@2', 'layer.2'],
      ['nibble-swap@3', 'layer.3'],
      ['scale-missing@1', 'layer.1'],
      ['scale-axis@2', 'layer.2'],
      ['scale-stride@3', 'layer.3'],
      ['e8m0-as-int@1', 'layer.1'],
      ['fp16-overflow@2', 'layer.2'],
    ];
    // a layer-local bug: every other layer's isolated error stays at its clean level
    injectedFaultTests(cases, (inject) => base({ inject }), (s) => {
      expect(s.isolated!.rel_l2, s.name).toBeLessThan(2e-3);
      expect(s.statuses?.isolated, s.name).not.toBe('fail');
    });
  });
});
