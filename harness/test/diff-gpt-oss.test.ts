/**
 * End to end on the committed gpt-oss-tiny: the device path (device-hip/gpt_oss.ts, emulated backend) against
 * the FP32 reference through runDiffCommand, on the golden's 24 tokens (more than the window of 8).
 *
 * The fixture's router margins are as drawn (fixtures/gpt_oss_tiny.ts): the golden records a smallest top-2
 * margin of 5.5e-3 (logit units) at layer 3, below the FP16 drift of the router logits (~1e-3 relative),
 * so the accumulated run — each path choosing its own experts — flips one token's choice there. The
 * per-layer error is measured in isolated mode (the device takes the reference's input and choices), where
 * every stage passes the default policy; the flip is counted and named, never hidden.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { DiffArgs } from '../cli/diff.js';
import { packageRoot } from '../version.js';
import { hashTree, injectedFaultTests, quietDiff } from './cli.js';

const MODEL = () => path.join(packageRoot(), 'fixtures', 'gpt-oss-tiny');
const TOKENS = (JSON.parse(fs.readFileSync(path.join(packageRoot(), 'fixtures', 'gpt-oss-tiny-golden', 'golden.json'), 'utf8')) as { tokens: number[] }).tokens;
const STAGES = ['embed', 'layer.0', 'layer.1', 'layer.2', 'layer.3', 'final_norm', 'logits'];

const base = (over: Partial<DiffArgs> = {}): DiffArgs => ({
  model: MODEL(), tokens: TOKENS.join(','), layers: 'all', device: 'emulated', mode: 'both', metric: 'max_abs', failAbove: 0.1, warnAbove: 0.01,
  freeSelection: false, ...over,
});

/** FP16 spacing (one ulp) at magnitude v. */
const ulp16 = (v: number) => 2 ** (Math.floor(Math.log2(Math.max(v, 2 ** -14))) - 10);

describe('layerdiff diff on gpt-oss-tiny', () => {
  it('lists every stage; on the reference input and choices every stage passes within a few FP16 ulps, no NaN', async () => {
    const before = hashTree(MODEL());
    const { report } = await quietDiff(base());
    expect(report.model.architecture).toBe('gpt_oss');
    expect(report.stages.map((s) => s.name)).toEqual(STAGES);
    for (const s of report.stages) {
      const iso = s.isolated!;
      expect(iso.nan.device + iso.inf.device, s.name).toBe(0);
      expect(iso.selection_flips, `${s.name}: isolated mode forces the reference's experts`).toBe(0);
      expect(iso.max_abs, s.name).toBeLessThan(0.01);
      expect(iso.max_abs, s.name).toBeLessThanOrEqual(4 * ulp16(iso.max_ref));
      expect(iso.rel_l2, s.name).toBeLessThan(2e-3);
      if (s.name !== 'embed') expect(s.accumulated!.max_abs, `${s.name}: FP16 leaves a footprint`).toBeGreaterThan(0);
      if (s.name.startsWith('layer.')) {
        // moe.scores: the biased router logits the top-k ranks (the flip judgement's input)
        expect(Object.keys(s.substages ?? {}).sort()).toEqual(['attn', 'moe', 'moe.router', 'moe.scores']);
        for (const [k, m] of Object.entries(s.substages!)) expect(m.rel_l2, `${s.name}.${k}`).toBeLessThan(2e-3);
      }
    }
    expect(report.stages.at(-1)!.logits!.isolated!.top1_agreement).toBe(1);
    expect(hashTree(MODEL())).toBe(before);
  });

  it('isolated mode passes the default policy; the accumulated run counts the near-tie flip at layer 3', async () => {
    const iso = await quietDiff(base({ mode: 'isolated' }));
    expect(iso.report.verdict).toBe('pass');
    expect(iso.code).toBe(0);
    const both = await quietDiff(base());
    const flips = both.report.stages.map((s) => s.accumulated?.selection_flips ?? 0);
    expect(flips.slice(1, 4), 'layers 0–2 choose as the reference does').toEqual([0, 0, 0]);
    expect(flips[4], 'layer.3: one token on a 5.5e-3 margin').toBeGreaterThan(0);
  });

  it('the weights-first check covers every expert (registry FUSED_FORMATS) and names a decode bug from the weights', async () => {
    const clean = await quietDiff({ model: MODEL(), layers: 'all', device: 'emulated', mode: 'isolated', freeSelection: false, tokens: TOKENS.join(',') });
    const cfg = JSON.parse(fs.readFileSync(path.join(MODEL(), 'config.json'), 'utf8')) as { num_hidden_layers: number; num_local_experts: number };
    const w = clean.report.weights!;
    expect(w.checked).toBe(cfg.num_hidden_layers * cfg.num_local_experts * 2);
    expect(w.exact).toBe(w.checked);
    expect(w.tensors[0]).toMatchObject({ name: 'model.layers.0.mlp.experts.gate_up_proj_blocks[0]', encoding: 'gpt-oss-mxfp4', format: 'mxfp4' });
    const bad = await quietDiff({ model: MODEL(), layers: 'all', device: 'emulated', mode: 'isolated', freeSelection: false, tokens: TOKENS.join(','), inject: 'nibble-swap@2' });
    expect(bad.report.weights!.mismatched).toBe(2 * cfg.num_local_experts);
    expect(bad.report.diagnosis[0]).toMatchObject({ stage: 'layer.2', cause: 'nibble-swap', source: 'weights' });
  });

  it('the default policy passes all three questions in both modes: every flip judged benign', async () => {
    const { code, report } = await quietDiff({ model: MODEL(), layers: 'all', device: 'emulated', mode: 'both', freeSelection: false });
    expect(code).toBe(0);
    const q = report.questions!;
    expect([q.own_error.status, q.drift.status, q.behaviour.status]).toEqual(['pass', 'pass', 'pass']);
    expect(q.behaviour.flips.count).toBeGreaterThan(0);
    expect(q.behaviour.flips.benign).toBe(q.behaviour.flips.count);
    for (const s of report.stages) for (const f of s.flips?.accumulated?.list ?? []) expect(f.margin, `${s.name} token ${f.token}`).toBeLessThanOrEqual(4 * Math.max(f.score_error, f.layer_score_error ?? 0));
  });

  it('isolated mode with --free-selection makes the reference\'s expert choices (the device router ranks like the reference)', async () => {
    const { report } = await quietDiff(base({ mode: 'isolated', freeSelection: true }));
    for (const s of report.stages) expect(s.isolated!.selection_flips, s.name).toBe(0);
  });

  describe('injected device-path bugs are caught where they happen (isolated mode, default policy)', () => {
    // Every layer's routed experts are MXFP4, so a global decode bug shows first in layer 0; fp16-overflow hits
    // the experts' down projection of its layer.
    const cases: Array<[string, string]> = [
      ['e3m0-table', 'layer.0'],
      ['nibble-swap', 'layer.0'],
      ['scale-missing', 'layer.0'],
      ['scale-axis', 'layer.0'],
      ['e8m0-as-int', 'layer.0'],
      ['fp16-overflow', 'layer.0'],
      ['e3m0-table@2', 'layer.2'],
      ['nibble-swap@3', 'layer.3'],
      ['scale-missing@1', 'layer.1'],
      ['scale-stride@2', 'layer.2'],
      ['e8m0-as-int@1', 'layer.1'],
      ['fp16-overflow@2', 'layer.2'],
    ];
    injectedFaultTests(cases, (inject) => base({ inject, mode: 'isolated' }), (s) => {
      expect(s.isolated!.rel_l2, s.name).toBeLessThan(2e-3);
      expect(s.isolated!.max_abs, s.name).toBeLessThan(0.1);
    });
  });
});
