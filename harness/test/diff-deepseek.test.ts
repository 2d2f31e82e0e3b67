/**
 * End to end on the bundled deepseek-v4-tiny fixture: the device path (device-hip/deepseek_v4.ts) against the
 * FP32 reference through runDiffCommand, on the golden file's 96 tokens (BOS + seeded ids). 96 tokens reach
 * every trap of spec §6: S > 4·index_topk = 16 (the indexer really selects), S > sliding_window = 20, and the
 * HCA layer (ratio 16) gets 6 compressed entries.
 *
 * The fixture is tuned for an absolute threshold (fixtures/deepseek_v4_tiny.ts): its hyper-connection streams stay
 * below |x| ≈ 8 (FP16 spacing ≤ 2^-8 there), and every router and indexer choice leads the runner-up by at least
 * 1% of the score scale, far above FP16 drift (~1e-3), on the golden's tokens, `diff`'s default prompt and the
 * gate's built-in prompts. So under the default policy (max_abs 0.1) a clean run passes in both modes with no selection flips at all (worst accumulated max_abs ≈ 1.1e-2, isolated ≈ 6e-3), and
 * every injected fault fails first where it is injected, under the same default policy.
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
  model: MODEL(), tokens: TOKENS.join(','), layers: 'all', device: 'auto', mode: 'both', metric: 'max_abs', failAbove: 0.1, warnAbove: 0.01,
  freeSelection: false, ...over,
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

  it('a clean run passes under the default policy (max_abs 0.1) in both modes, with no selection flips', async () => {
    const { code, report } = await quiet(base());
    expect(report.verdict).toBe('pass');
    expect(report.first_failure).toBeNull();
    expect(code).toBe(0);
    for (const s of report.stages) {
      // accumulated FP16 drift over 4 layers reaches ≈ 1.1e-2 (a `warn`, above 1e-2); each layer's own error does not
      expect(s.status, s.name).not.toBe('fail');
      expect(s.isolated!.max_abs, `${s.name} isolated max_abs`).toBeLessThan(0.01);
      for (const [mode, m] of [['accumulated', s.accumulated!], ['isolated', s.isolated!]] as const) {
        expect(m.max_abs, `${s.name} ${mode} max_abs`).toBeLessThan(0.1);
        // the fixture's margins keep even the accumulated (free-choosing) run on the reference's choices
        expect(m.selection_flips, `${s.name} ${mode} selection flips`).toBe(0);
        // activations O(1–10), where FP16 spacing is ≤ 2^-6 (fixtures/deepseek_v4_tiny.ts)
        expect(m.max_ref, `${s.name} max |ref|`).toBeLessThan(16);
      }
    }
  });

  it('isolated mode with --free-selection makes the same expert and indexer choices as the reference', async () => {
    const { report } = await quiet(base({ mode: 'isolated', freeSelection: true }));
    for (const s of report.stages) expect(s.isolated!.selection_flips, s.name).toBe(0);
  });

  it('--layers 2-3 runs only those layers, from the reference input', async () => {
    const { report } = await quiet(base({ layers: '2-3', metric: 'rel_l2' }));
    expect(report.stages.map((s) => s.name)).toEqual(['layer.2', 'layer.3', 'final_norm', 'logits']);
  });

  describe('injected device-path bugs are caught where they happen (default policy: max_abs 0.1)', () => {
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
      expect(s.isolated!.max_abs, s.name).toBeLessThan(0.1);
    });
  });
});
