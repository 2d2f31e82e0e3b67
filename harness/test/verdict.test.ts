/**
 * Issue 10: the three-question verdict. A correct FP16 device path passes on 200 tokens of deepseek-v4-tiny
 * (routing margins as drawn, streams at |x| ≈ 160–240), where top-k flips happen and are judged benign; the
 * new faults fail at their layer with their cause under the default policy (the floor rule); a router that
 * rescales its scores fails as a scoring bug; the floor pass equals a direct computation; policy files are
 * validated. Runs go through runDiffCommand / runDiff without the weights check where it is not the point.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { judgeFlips, topkIds } from '../compare/flips.js';
import { roundActF16 } from '../compare/floor.js';
import { forcedRows, nextPrefixEnd, pickRows, prefixesBefore } from '../compare/forced_rows.js';
import { compareActs, compareLogits, judgedKlP99, judgedTop1 } from '../compare/metrics.js';
import { DEFAULT_POLICY, loadPolicyFile, makePolicy, parsePolicy, resolvePolicy, stageKind, thresholdsFor, verdict } from '../compare/policy.js';
import type { DiffArgs } from '../cli/diff.js';
import { runGate } from '../cli/gate.js';
import { roundToF16 } from '../formats/dtypes.js';
import { LlamaCheckpoint, type LlamaLayerWeights } from '../models/llama.js';
import { dequantLinear } from '../../reference-cpu/dequant.js';
import { decodeStored } from '../../reference-cpu/llama.js';
import { add, causalAttention, matmul, rmsnorm, rope, ropeInvFreq, swiglu } from '../../reference-cpu/ops.js';
import { act } from '../formats/tensor.js';
import { InputError } from '../errors.js';
import { Checkpoint } from '../io/checkpoint.js';
import type { LayerResult, ModelDef, StagePath } from '../models/path.js';
import { selectBackend } from '../runner/backend.js';
import { openModel } from '../runner/model.js';
import { runDiff } from '../runner/run.js';
import { packageRoot } from '../version.js';
import { cli, LLAMA_TINY, quietDiff } from './cli.js';

const DSV4 = () => path.join(packageRoot(), 'fixtures', 'deepseek-v4-tiny');
/** 200 tokens (vocab 384): long enough for flips on the fixture and for RoPE angle errors to grow */
const LONG = Array.from({ length: 200 }, (_, i) => (i * 37 + 11) % 384);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-verdict-'));

const args = (over: Partial<DiffArgs> = {}): DiffArgs => ({ model: DSV4(), tokens: LONG.join(','), layers: 'all', device: 'emulated', mode: 'both', freeSelection: false, weights: false, ...over });

describe('policy as data', () => {
  it('the default is the floor rule; any of --metric/--fail-above/--warn-above makes a fixed rule', () => {
    expect(resolvePolicy({})).toBe(DEFAULT_POLICY);
    expect(DEFAULT_POLICY).toMatchObject({ rule: 'floor', metric: 'max_abs', fail_above: 0.1, warn_above: 0.01 });
    expect(resolvePolicy({ failAbove: 0.2 })).toMatchObject({ rule: 'fixed', source: 'flags', metric: 'max_abs', fail_above: 0.2, warn_above: 0.01 });
    expect(() => resolvePolicy({ policy: 'x.json', metric: 'rms' })).toThrow(InputError);
  });

  it('a file overrides per stage kind and mode; unknown fields and bad values are refused naming them', () => {
    const p = parsePolicy({ floor_ratio: 8, kinds: { moe: { fail_above: 0.2, modes: { 'accumulated-forced': { floor_ratio: 10 } } } }, behaviour: { kl_mean_max: 0.05 } }, 'test');
    expect(thresholdsFor(p, 'moe', 'accumulated-forced')).toMatchObject({ fail_above: 0.2, floor_ratio: 10 });
    expect(thresholdsFor(p, 'moe', 'isolated')).toMatchObject({ fail_above: 0.2, floor_ratio: 8 });
    expect(thresholdsFor(p, 'attn', 'isolated')).toMatchObject({ fail_above: 0.1, floor_ratio: 8 });
    expect(p.behaviour).toMatchObject({ kl_mean_max: 0.05, top1_min: DEFAULT_POLICY.behaviour.top1_min });
    expect(() => parsePolicy({ fail_abov: 1 }, 'f')).toThrow(/unknown field fail_abov/);
    expect(() => parsePolicy({ kinds: { mlp: {} } }, 'f')).toThrow(/unknown field kinds\.mlp/);
    expect(() => parsePolicy({ kinds: { attn: { modes: { both: {} } } } }, 'f')).toThrow(/kinds\.attn\.modes\.both/);
    expect(() => parsePolicy({ metric: 'l3' }, 'f')).toThrow(/metric "l3"/);
    expect(() => parsePolicy({ warn_above: 0.5 }, 'f')).toThrow(/warn_above 0.5 is above fail_above 0.1/);
    // values no correct device can meet, which failed it with a misleading cause: refused by name
    expect(() => parsePolicy({ floor_ratio: 0 }, 'f')).toThrow(/floor_ratio 0 must be at least 1/);
    expect(() => parsePolicy({ kinds: { moe: { floor_excuse: 0.5 } } }, 'f')).toThrow(/kinds\.moe\.modes\.isolated: floor_excuse 0\.5 must be at least 1/);
    expect(() => parsePolicy({ behaviour: { top1_min: 2 } }, 'f')).toThrow(/behaviour\.top1_min 2: a fraction of tokens, at most 1/);
    expect(() => parsePolicy(JSON.parse('{"fail_above": 1e309}'), 'f')).toThrow(/fail_above Infinity: expected a non-negative number/);
    const file = path.join(tmp, 'bad.json');
    fs.writeFileSync(file, '{ not json');
    expect(() => loadPolicyFile(file)).toThrow(/not JSON/);
    expect(() => loadPolicyFile(path.join(tmp, 'missing.json'))).toThrow(/no such file/);
  });

  it('a file overrides per named stage above its kind (Polygraphy-style per-output tolerances), through the real CLI', () => {
    const p = parsePolicy({ kinds: { moe: { fail_above: 0.2 } }, stages: { 'layer.1': { fail_above: 0.5, modes: { accumulated: { fail_above: 0.7 } } } } }, 'test');
    expect(thresholdsFor(p, 'moe', 'isolated', 'layer.1')).toMatchObject({ fail_above: 0.5 });
    expect(thresholdsFor(p, 'moe', 'accumulated', 'layer.1')).toMatchObject({ fail_above: 0.7 });
    expect(thresholdsFor(p, 'moe', 'isolated', 'layer.2')).toMatchObject({ fail_above: 0.2 });
    expect(() => parsePolicy({ stages: { 'layer2': {} } }, 'f')).toThrow(/stages\.layer2: not a stage name/);
    expect(() => parsePolicy({ stages: { 'layer.2': { fail_abov: 1 } } }, 'f')).toThrow(/unknown field stages\.layer\.2\.fail_abov/);
    expect(() => parsePolicy({ stages: { 'layer.2': { warn_above: 0.5 } } }, 'f')).toThrow(/stages\.layer\.2/);
    // a fixed rule, tightened for layer.1 alone: that stage (and only it) fails on the clean bundled fixture
    const file = path.join(tmp, 'per-stage.json');
    fs.writeFileSync(file, JSON.stringify({ rule: 'fixed', stages: { 'layer.1': { fail_above: 1e-4, warn_above: 5e-5 } } }));
    const json = path.join(tmp, 'per-stage-report.json');
    const r = cli(['diff', LLAMA_TINY(), '--mode', 'isolated', '--policy', file, '--json', json, '--no-drill', '-q']);
    expect(r.code, r.stderr).toBe(1);
    const rep = JSON.parse(fs.readFileSync(json, 'utf8')) as { first_failure: string; stages: Array<{ name: string; status: string }>; policy: { stages?: unknown } };
    expect(rep.first_failure).toBe('layer.1');
    expect(rep.stages.filter((st) => st.status === 'fail').map((st) => st.name)).toEqual(['layer.1']);
    expect(rep.policy.stages).toEqual({ 'layer.1': { fail_above: 1e-4, warn_above: 5e-5 } });
  });

  it('stage names map to kinds: layer output and FFN sub-stages are moe, attention sub-stages attn', () => {
    expect(['embed', 'layer.3', 'layer.3.attn', 'layer.3.attn.indexer.scores', 'layer.3.moe.scores', 'layer.3.mlp', 'final_norm', 'logits'].map(stageKind)).toEqual(['embed', 'moe', 'attn', 'attn', 'moe', 'moe', 'logits', 'logits']);
  });

  it('the floor rule: fail on rms error/floor beyond the bound, or above 0.1 when the floor does not explain it', () => {
    const m = (max_abs: number, rms: number) => ({ max_abs, max_at: [0], mean_abs: 0, rms, rel_l2: 0, cosine: 1, max_ref: 127, nan: { reference: 0, device: 0 }, inf: { reference: 0, device: 0 }, selection_flips: 0 });
    // |r| ≈ 127: FP16 spacing 0.0625; a correct path's floor there is ~0.06 (max) / 0.01 (rms); 0.12 is 2× it
    const floor = { max_abs: 0.06, rms: 0.01 };
    expect(verdict(m(0.12, 0.02), DEFAULT_POLICY, { floor })).toBe('warn');
    expect(verdict(m(0.12, 0.02), makePolicy('max_abs', 0.1, 0.01))).toBe('fail');
    expect(verdict(m(0.2, 0.02), DEFAULT_POLICY, { floor })).toBe('fail'); // max 3.3× > floor_excuse 3, above 0.1
    expect(verdict(m(0.05, 0.06), DEFAULT_POLICY, { floor })).toBe('fail'); // rms 6× > floor_ratio 5, under 0.1
    expect(verdict(m(5e-5, 5e-5), DEFAULT_POLICY, { floor: { max_abs: 0, rms: 0 } })).toBe('pass'); // below min_error
  });
});

describe('the FP16 floor pass', () => {
  it('equals a direct computation: the Llama layer on its FP16-rounded input, storing attention, residual and MLP in FP16, output rounded', () => {
    const ck = Checkpoint.open(LLAMA_TINY());
    try {
      const model = openModel(ck, selectBackend('emulated'), null);
      const { hidden: D, heads: H, kvHeads: KV, headDim: hd, intermediate: I, eps, ropeTheta } = new LlamaCheckpoint(ck).cfg;
      const tokens = [1, 17, 4, 123, 42, 7];
      const S = tokens.length;
      const run = runDiff(model, { tokens, mode: 'isolated', layers: null, policy: DEFAULT_POLICY, freeSelection: false, dumpDir: null });
      const positions = tokens.map((_, i) => i);
      const ctx = { tokens, positions, forcedSelections: null };
      // the direct computation: the layer written out here from the ops, every FP16 store made with the
      // format's own rounding (dtypes.roundToF16) where the floor pass stores: the sublayer outputs, the
      // residual between them, the layer output
      const r16 = (v: Float32Array) => Float32Array.from(v, (z) => roundToF16(z));
      const direct = (x: Float32Array, w: LlamaLayerWeights): Float32Array => {
        const lin = (inp: Float32Array, lw: LlamaLayerWeights['q_proj']) => matmul(inp, S, lw.in, dequantLinear(lw), lw.out);
        const n1 = rmsnorm(x, S, D, decodeStored(w.input_layernorm), eps);
        const inv = ropeInvFreq(ropeTheta, hd);
        const q = rope(lin(n1, w.q_proj), S, H, hd, positions, inv, 'half');
        const k = rope(lin(n1, w.k_proj), S, KV, hd, positions, inv, 'half');
        const attn = r16(lin(causalAttention(q, k, lin(n1, w.v_proj), S, H, KV, hd, hd, 1 / Math.sqrt(hd)), w.o_proj));
        const h = r16(add(x, attn));
        const n2 = rmsnorm(h, S, D, decodeStored(w.post_attention_layernorm), eps);
        const mlp = r16(matmul(swiglu(lin(n2, w.gate_proj), lin(n2, w.up_proj)), S, I, dequantLinear(w.down_proj), D));
        return r16(add(h, mlp));
      };
      let x = model.reference.embed(tokens);
      expect(run.stages[0].floor!.isolated!.max_abs).toBe(compareActs(act(x.shape, r16(x.data)), x).max_abs);
      for (let L = 0; L < model.numLayers; L++) {
        const w = model.loadLayer(L) as LlamaLayerWeights;
        const ref = model.reference.layer(L, x, w, ctx).out;
        const d = compareActs(act(ref.shape, direct(r16(x.data), w)), ref);
        const s = run.stages.find((q) => q.name === `layer.${L}`)!;
        expect(s.floor!.isolated!.max_abs, s.name).toBe(d.max_abs);
        expect(s.floor!.isolated!.rel_l2, s.name).toBeCloseTo(d.rel_l2, 12);
        expect(d.max_abs, `${s.name}: the floor is at least half an FP16 ulp of something`).toBeGreaterThan(0);
        // the sub-stage floors: the stored sublayer outputs against the reference's
        expect(s.substage_floor!.attn.max_abs, `${s.name}.attn`).toBeGreaterThan(0);
        x = ref;
      }
      expect(roundActF16(act([3], Float32Array.of(1 + 2 ** -11, 127.03, 70000))).data).toEqual(Float32Array.of(1, 127, Infinity));
    } finally {
      ck.close();
    }
  });
});

describe('flips judged', () => {
  const sel = (ids: number[][]): LayerResult => ({ out: act([1], new Float32Array(1)), selections: { experts: ids } });
  const withScores = (r: LayerResult, s: number[][], bias: number[] | null): LayerResult => ({
    ...r,
    scores: { experts: { scores: act([s.length, s[0].length], Float32Array.from(s.flat())), bias: bias && Float32Array.from(bias) } },
  });
  it('benign within the score error, a scoring bug far beyond it; the margin is the reference selection score gap', () => {
    // reference: s + bias = [1.0, 0.9, 0.5, 0.899] → top-2 {0, 1}; device s' picks {0, 3}
    const ref = withScores(sel([[0, 1]]), [[1.0, 0.8, 0.5, 0.799]], [0, 0.1, 0, 0.1]);
    const near = withScores(sel([[0, 3]]), [[1.0, 0.7995, 0.5, 0.7999]], [0, 0.1, 0, 0.1]);
    const f = judgeFlips(2, ref, near, 'accumulated', 4, { experts: 1e-4 })!;
    expect(f).toMatchObject({ count: 1, benign: 1, scoring_bug: 0 });
    expect(f.list[0]).toMatchObject({ token: 0, layer: 2, kind: 'experts', reference_choice: 1, device_choice: 3 });
    expect(f.list[0].margin).toBeCloseTo(0.001, 6);
    expect(f.list[0].score_error).toBeCloseTo(0.0005 + 0.0009, 6);
    // the device's scores agree to 1e-4 but it chose as if there were no bias: a scoring bug, and its signature
    const bad = withScores(sel([[0, 2]]), [[1.0, 0.8, 0.50005, 0.799]], [0, 0.1, 0, 0.1]);
    const g = judgeFlips(2, ref, bad, 'accumulated', 4, { experts: 1e-4 })!;
    expect(g).toMatchObject({ count: 1, benign: 0, scoring_bug: 1 });
    expect(g.list[0].device_choice).toBe(2);
    expect(topkIds([1, 3, 3, 2], 2)).toEqual([1, 2]); // ties to the lowest index
    // a set of another size or with a candidate twice: no near-tie explains it, whatever the scores (DESIGN §5: every flip judged)
    for (const ids of [[[0]], [[0, 1, 3]], [[0, 0]]]) {
      const h = judgeFlips(2, ref, withScores(sel(ids), [[1.0, 0.8, 0.5, 0.799]], [0, 0.1, 0, 0.1]), 'accumulated', 4, { experts: 1e-4 })!;
      expect(h, JSON.stringify(ids)).toMatchObject({ count: 1, scoring_bug: 1, unjudged: 0 });
    }
  });

  it('a top-1 that differs where the reference\'s own two candidates are within the tie bound is a near-tie, left out of the judged top-1', () => {
    // two tokens over a vocabulary of 4: token 0's reference separates its top two by 1e-5 (a near-tie the device
    // swaps), token 1 agrees; and the same with a margin of 0.5, which no correct FP16 path at this bound can swap
    const logits = (rows: number[][]) => act([rows.length, 4], Float32Array.from(rows.flat()));
    const ref = logits([[1, 1 - 1e-5, 0, 0], [0, 2, 0, 0]]);
    const dev = logits([[1 - 2e-5, 1, 0, 0], [0, 2, 0, 0]]);
    expect(compareLogits(dev, ref).top1_agreement).toBe(0.5);
    const tie = compareLogits(dev, ref, undefined, 1e-3);
    expect([tie.top1_agreement, tie.top1_near_ties, tie.top1_agreement_decided, judgedTop1(tie)]).toEqual([0.5, 1, 1, 1]);
    const far = compareLogits(logits([[0.5, 1, 0, 0], [0, 2, 0, 0]]), logits([[1, 0.5, 0, 0], [0, 2, 0, 0]]), undefined, 1e-3);
    expect([far.top1_near_ties, far.top1_agreement_decided, judgedTop1(far)]).toEqual([0, 0.5, 0.5]);
    // every judged token a near-tie: nothing is left to disagree on
    expect(judgedTop1(compareLogits(logits([[1 - 2e-5, 1, 0, 0]]), logits([[1, 1 - 1e-5, 0, 0]]), undefined, 1e-3))).toBe(1);
    // with benign expert flips measured, the near-ties come out of the unflipped tokens' figure
    const both = compareLogits(dev, ref, new Set([1]), 1e-3);
    expect([both.top1_agreement_unflipped, both.top1_near_ties, judgedTop1(both)]).toEqual([0, 1, 1]);
  });

  it('a token with a benign flip is left out of the judged p99 KL, but counts in the mean', () => {
    // 3 tokens × vocab 2: token 1's device distribution moved (its expert set flipped), the others agree
    const ref = act([3, 2], Float32Array.of(0, 0, 2, 0, 0, 1));
    const dev = act([3, 2], Float32Array.of(0, 0, 0, 2, 0, 1));
    // KL(p‖q) of token 1, exactly: p = (σ(2), σ(−2)), q = (σ(−2), σ(2)), log p₀/q₀ = 2, log p₁/q₁ = −2 → 2·(p₀ − p₁)
    const s2 = 1 / (1 + Math.exp(-2));
    const kl1 = 2 * (s2 - (1 - s2));
    const all = compareLogits(dev, ref);
    expect(all.kl_p99).toBeCloseTo(kl1, 12);
    expect(all.kl_p99_unflipped).toBeUndefined();
    const judged = compareLogits(dev, ref, new Set([1]));
    expect(judged).toMatchObject({ flipped_tokens: 1, kl_p99_unflipped: 0 });
    expect(judged.kl_mean).toBeCloseTo(kl1 / 3, 12);
    expect(judgedKlP99(judged)).toBe(0);
    expect(judgedKlP99(all)).toBe(all.kl_p99);
  });
});

describe('the three questions on deepseek-v4-tiny, 200 tokens', () => {
  it('a correct device path passes all three; flips happen, every one judged benign', async () => {
    const { code, report } = await quietDiff(args({ json: path.join(tmp, 'clean.json') }));
    expect(code).toBe(0);
    const q = report.questions!;
    expect([q.own_error.status, q.drift.status, q.behaviour.status]).toEqual(['pass', 'pass', 'pass']);
    expect(q.behaviour.flips.count).toBeGreaterThan(0);
    expect(q.behaviour.flips.scoring_bug).toBe(0);
    expect(q.behaviour.flips.unjudged).toBe(0);
    expect(q.behaviour.first_flip).toMatch(/^layer\.\d$/);
    expect(q.behaviour.logits!.kl_p99).toBeLessThan(DEFAULT_POLICY.behaviour.kl_p99_max);
    // the near-tie bound: twice floor_excuse × the head's own FP16 floor (max_abs), not the drift-grown one
    const lg = report.stages.find((s) => s.name === 'logits')!;
    expect(q.behaviour.logits!.tie_bound).toBe(2 * DEFAULT_POLICY.floor_excuse * lg.floor!.isolated!.max_abs);
    for (const s of report.stages) {
      expect(s.floor, s.name).toBeDefined();
      for (const f of s.flips?.accumulated?.list ?? []) expect(f.margin, `${s.name} token ${f.token}`).toBeLessThanOrEqual(4 * Math.max(f.score_error, f.layer_score_error ?? 0));
    }
    const json = JSON.parse(fs.readFileSync(path.join(tmp, 'clean.json'), 'utf8'));
    expect(Object.keys(json.questions)).toEqual(['own_error', 'drift', 'behaviour']);
    expect(json.policy).toMatchObject({ rule: 'floor', source: 'default' });
  });

  it('--mode accumulated alone: its free run is judged as drift on the rows where it is the forced run, the rest by the flips and the logits', async () => {
    // the free run flips a near-tie of token 73 at layer.3 (benign): that token's rows compute other experts (max_abs
    // 34 there), which failed a correct path in this mode although the full run and the behaviour question pass
    const { code, report } = await quietDiff(args({ mode: 'accumulated' }));
    expect(code).toBe(0);
    const q = report.questions!;
    expect(q.behaviour).toMatchObject({ status: 'pass', first_flip: 'layer.3' });
    expect(q.behaviour.flips.scoring_bug).toBe(0);
    const flipAt = report.stages.findIndex((s) => s.name === q.behaviour.first_flip);
    const flipped = report.stages[flipAt].flips!.accumulated!.tokens;
    expect(flipped).toEqual([73]);
    // the flip moved the stage beyond the user's number: its whole-stage figure stays in the report, as information
    expect(report.stages[flipAt].accumulated!.max_abs).toBeGreaterThan(1);
    expect(report.stages[flipAt].statuses?.accumulated).toBe('fail');
    expect(report.stages[flipAt].status).not.toBe('fail');
    // judged: at the flip's layer every token but the flipped one; after it, through attention, the tokens before it
    expect(report.stages[flipAt].accumulated_judged_tokens).toBe(LONG.length - 1);
    for (const s of report.stages.slice(flipAt + 1)) expect(s.accumulated_judged_tokens, s.name).toBe(73);
    // before the flip the free run is the forced run on every token: judged as drift, and a bug there still fails
    for (const s of report.stages.slice(0, flipAt)) {
      expect(s.status, s.name).toBe(s.statuses?.accumulated);
      expect(s.accumulated_judged_tokens, s.name).toBeUndefined();
    }
    const bug = await quietDiff(args({ mode: 'accumulated', inject: 'rope-angle-fp16' }));
    expect(bug.code).toBe(1);
    expect(bug.report.first_failure).toBe('layer.0');
  });

  it('the rows where the free run is the forced run: before the first token flipped earlier, not flipped here; picked row by row', () => {
    expect(forcedRows(6, Infinity, [])).toEqual([0, 1, 2, 3, 4, 5]);
    expect(forcedRows(6, Infinity, [4, 1])).toEqual([0, 2, 3, 5]);
    expect(forcedRows(6, 3, [1])).toEqual([0, 2]);
    expect(forcedRows(6, 0, [])).toEqual([]);
    expect([nextPrefixEnd(Infinity, []), nextPrefixEnd(Infinity, [4, 1]), nextPrefixEnd(2, [4])]).toEqual([Infinity, 1, 2]);
    // carried through a run's stages: each stage sees the first token flipped before it
    const flipped: Record<string, number[]> = { 'layer.1': [5, 3], 'layer.2': [1] };
    expect([...prefixesBefore(['embed', 'layer.0', 'layer.1', 'layer.2', 'logits'], (n) => flipped[n] ?? [])]).toEqual([['embed', Infinity], ['layer.0', Infinity], ['layer.1', Infinity], ['layer.2', 3], ['logits', 1]]);
    // [3 tokens, 2, 2]: each token's 4 values, in the order given
    const a = act([3, 2, 2], Float32Array.from({ length: 12 }, (_, i) => i));
    const p = pickRows(a, [2, 0]);
    expect(p.shape).toEqual([2, 2, 2]);
    expect(Array.from(p.data)).toEqual([8, 9, 10, 11, 0, 1, 2, 3]);
  });

  // fp16-accumulate runs a plain TypeScript FP16-accumulating GEMM over every linear of its layer: 96 tokens keep it quick
  for (const [inject, stage, cause, n] of [
    ['fp16-accumulate@1', 'layer.1', 'fp16-accumulate', 96],
    ['rope-angle-fp16', 'layer.0', 'rope-angle-fp16', 59],
    ['rope-angle-fp16', 'layer.0', 'rope-angle-fp16', 200],
    ['router-bias-dropped@2', 'layer.2', 'router-bias-dropped', 200],
  ] as const) {
    it(`--inject ${inject} fails at ${stage} as ${cause} (${n} tokens), judged against the FP16 floor`, async () => {
      const { code, report } = await quietDiff(args({ inject, weights: true, tokens: LONG.slice(0, n).join(',') }));
      expect(code).toBe(1);
      expect(report.first_failure).toBe(stage);
      expect(report.diagnosis[0]).toMatchObject({ stage, cause, source: 'activations' });
      const s = report.stages.find((x) => x.name === stage)!;
      if (cause === 'router-bias-dropped') {
        // the bias enters selection only: with the reference's choices every stage passes
        expect(report.questions!.own_error.status).toBe('pass');
        expect(report.questions!.drift.status).toBe('pass');
        expect(report.questions!.behaviour.first_scoring_bug).toBe(stage);
        expect(report.diagnosis[0].substage).toBe(`${stage}.moe.router`);
      } else {
        expect(report.questions!.own_error).toMatchObject({ status: 'fail', first_failure: stage });
        expect(s.statuses?.isolated).toBe('fail');
      }
    });
  }
});

describe('the new faults on llama-tiny (its default prompt), and the clean path', () => {
  const largs = (over: Partial<DiffArgs> = {}): DiffArgs => ({ model: LLAMA_TINY(), layers: 'all', device: 'emulated', mode: 'both', freeSelection: false, ...over });
  it('clean passes; fp16-accumulate@2 and rope-angle-fp16 fail at their layer, by name; router-bias-dropped is refused', async () => {
    expect((await quietDiff(largs())).code).toBe(0);
    for (const [inject, stage, cause] of [['fp16-accumulate@2', 'layer.2', 'fp16-accumulate'], ['rope-angle-fp16', 'layer.0', 'rope-angle-fp16']] as const) {
      const { code, report } = await quietDiff(largs({ inject }));
      expect(code, inject).toBe(1);
      expect(report.first_failure, inject).toBe(stage);
      expect(report.diagnosis[0], inject).toMatchObject({ stage, cause });
    }
    await expect(quietDiff(largs({ inject: 'router-bias-dropped@1' }))).rejects.toThrow(/not simulated on llama .*selection-only bias/);
  });
});

describe('a router that rescales its scores', () => {
  it('fails as a scoring bug at the layer, not as drift', () => {
    const ck = Checkpoint.open(DSV4());
    try {
      const model = openModel(ck, selectBackend('emulated'), null) as ModelDef<unknown>;
      const L = 2;
      const c = 1.5;
      // the device's selection on c·s + bias (its reported scores are c·s): forced choices hide it from ω
      const device: StagePath<unknown> = {
        ...model.device,
        embed: (t) => model.device.embed(t),
        finalNorm: (x) => model.device.finalNorm(x),
        logits: (x) => model.device.logits(x),
        layer: (l, x, w, ctx) => {
          const free = model.device.layer(l, x, w, { ...ctx, forcedSelections: null });
          if (l !== L) return ctx.forcedSelections === null ? free : model.device.layer(l, x, w, ctx);
          const sc = free.scores!.experts;
          const E = sc.scores.shape[1];
          const k = free.selections!.experts[0].length;
          const scaled = act(sc.scores.shape, Float32Array.from(sc.scores.data, (v) => c * v));
          const own = Array.from({ length: sc.scores.shape[0] }, (_, t) => topkIds(Array.from({ length: E }, (_, e) => scaled.data[t * E + e] + sc.bias![e]), k));
          const sels = { ...free.selections!, ...(ctx.forcedSelections ?? {}), ...(ctx.forcedSelections === null ? { experts: own } : {}) };
          const r = model.device.layer(l, x, w, { ...ctx, forcedSelections: sels });
          return { ...r, selections: ctx.forcedSelections === null ? { ...r.selections!, experts: own } : r.selections, scores: { ...r.scores, experts: { scores: scaled, bias: sc.bias } } };
        },
      };
      const run = runDiff({ ...model, device }, { tokens: LONG.slice(0, 96), mode: 'both', layers: null, policy: DEFAULT_POLICY, freeSelection: false, dumpDir: null });
      expect(run.verdict).toBe('fail');
      expect(run.first_failure).toBe(`layer.${L}`);
      const s = run.stages.find((x) => x.name === `layer.${L}`)!;
      expect(s.substage_status!['moe.scores']).toBe('fail');
      expect(run.questions!.own_error.first_failure).toBe(`layer.${L}`);
      expect(s.drill!.first_failing).toBe(`layer.${L}.moe.scores`);
    } finally {
      ck.close();
    }
  });
});

describe('the head, run once per path for every mode (runner headRows)', () => {
  it('rows stacked into one logits call give each input the bits of its own call, on every architecture and path', () => {
    for (const fx of [LLAMA_TINY(), DSV4(), path.join(packageRoot(), 'fixtures', 'gpt-oss-tiny')]) {
      const ck = Checkpoint.open(fx);
      try {
        const model = openModel(ck, selectBackend('emulated'), null);
        const D = model.reference.embed([1]).shape[1];
        const mk = (S: number, seed: number) => act([S, D], Float32Array.from({ length: S * D }, (_, i) => Math.sin(i * 0.37 + seed) * 2));
        const xs = [mk(37, 1), mk(5, 2), mk(59, 3)];
        for (const p of [model.device, model.reference]) {
          const stacked = p.logits(act([101, D], Float32Array.from(xs.flatMap((x) => Array.from(x.data))))).data;
          let off = 0;
          for (const x of xs) {
            const own = p.logits(x).data;
            expect(Buffer.from(stacked.buffer, stacked.byteOffset + off * 4, own.byteLength).equals(Buffer.from(own.buffer, own.byteOffset, own.byteLength)), fx).toBe(true);
            off += own.length;
          }
        }
      } finally {
        ck.close();
      }
    }
  });
});

describe('the gate refuses every catalog fault on deepseek-v4-tiny (gate --inject)', () => {
  // one 200-token prompt (flips happen, RoPE angles grow): every fault that touches this checkpoint's formats
  const faults = ['e3m0-table', 'nibble-swap@2', 'scale-missing@1', 'scale-axis@2', 'scale-stride@3', 'e8m0-as-int@1', 'fp16-overflow@2', 'fp16-accumulate@1', 'rope-angle-fp16', 'router-bias-dropped@3'];
  it(`writes no record and exits 1 on each of ${faults.length} faults; a fault this checkpoint has no format for is refused as bad input`, async () => {
    const prompts = path.join(tmp, 'inject-prompts.jsonl');
    fs.writeFileSync(prompts, JSON.stringify({ tokens: LONG }) + '\n');
    const sink = { write: () => true } as unknown as NodeJS.WritableStream;
    for (const inject of faults) {
      const record = path.join(tmp, `inject-${inject}.json`);
      const r = await runGate({ model: DSV4(), record, prompts, device: 'emulated', inject }, sink);
      expect(r.code, inject).toBe(1);
      expect(r.record, inject).toBeNull();
      expect(fs.existsSync(record), inject).toBe(false);
      expect(r.reports[0].injected?.fault, inject).toBe(inject.split('@')[0]);
    }
    await expect(runGate({ model: DSV4(), record: path.join(tmp, 'x.json'), prompts, device: 'emulated', inject: 'global-scale-inverted' }, sink)).rejects.toThrow(/touches no quantized tensor of this checkpoint \(its formats there: fp8-block, deepseek-mxfp4\)/);
  }, 600_000);
});

describe('the gate uses the same verdict', () => {
  it('passes on the fixture with the three answers in its record', async () => {
    const record = path.join(tmp, 'acceptance.json');
    const sink = { write: () => true } as unknown as NodeJS.WritableStream;
    // two prompts, one of 200 tokens where top-k flips happen (the built-in set takes ~50 s on two cores)
    const prompts = path.join(tmp, 'prompts.jsonl');
    fs.writeFileSync(prompts, [JSON.stringify({ tokens: LONG }), JSON.stringify({ tokens: LONG.slice(0, 40) })].join('\n') + '\n');
    const r = await runGate({ model: DSV4(), record, prompts, device: 'emulated' }, sink);
    expect(r.code).toBe(0);
    const rec = JSON.parse(fs.readFileSync(record, 'utf8'));
    expect(rec.policy).toMatchObject({ rule: 'floor', metric: 'max_abs' });
    expect(rec.acceptance.prompts[0].questions.behaviour.flips).toBeGreaterThan(0);
    for (const p of rec.acceptance.prompts) {
      expect(p.questions.own_error.status).toBe('pass');
      expect(p.questions.drift.status).toBe('pass');
      expect(p.questions.behaviour.status).toBe('pass');
      expect(typeof p.questions.behaviour.kl_mean).toBe('number');
    }
  });
});
