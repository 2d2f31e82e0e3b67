/**
 * Reports people can trust at a glance, through the real CLI (issue #14): NaN shown as NaN in every output,
 * the root cause first (carried marker, verdict line, one JUnit failure per bug), the same facts in every
 * output with one column group per mode run, -q/-v/--color/NO_COLOR/FORCE_COLOR, `--json -`, messages for
 * the commonest mistakes with a did-you-mean, help for every option, `layerdiff faults`, `compare RUN_A
 * RUN_B` and --fail-fast.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { FAULT_IDS } from '../faults/plan.js';
import { FIXTURE_KINDS } from '../../fixtures/generate.js';
import type { Report } from '../runner/report.js';
import { clipToWidth, useColour } from '../cli/terminal.js';
import { closest, editDistance } from '../cli/suggest.js';
import { carriedFrom } from '../compare/carried.js';
import { DEFAULT_POLICY } from '../compare/policy.js';
import type { StageMetrics } from '../compare/metrics.js';
import { cliAsync, limit } from './async-cli.js';
import { cli, hashTree, LLAMA_TINY } from './cli.js';
import { children, parseXml } from './xml.js';
import { readActs, tensorNames } from '../repro/files.js';
import { writeSafetensors } from '../io/safetensors.js';
import { packageRoot } from '../version.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-reports-cli-'));
const out = (name: string) => path.join(tmp, name);
const readJson = <T = Report>(f: string) => JSON.parse(fs.readFileSync(f, 'utf8')) as T;
/** The table row of a stage, split into cells. */
const row = (stdout: string, stage: string) => {
  const line = stdout.split('\n').find((l) => l.startsWith(`│ ${stage} `));
  if (line === undefined) throw new Error(`no row for ${stage} in:\n${stdout}`);
  return line.split('│').slice(1, -1).map((c) => c.trim());
};
const header = (stdout: string) => row(stdout, 'stage');

describe('a stage with NaN/Inf on the device shows NaN/Inf, never 0 or cosine 1', () => {
  it('diff --inject fp16-overflow@2: table, JSON, Markdown and JUnit', async () => {
    const r = await cliAsync(['diff', '--inject', 'fp16-overflow@2', '--json', out('nan.json'), '--summary', out('nan.md'), '--junit', out('nan.xml'), '--html', out('nan.html')]);
    expect(r.code, r.stderr).toBe(1);
    const head = header(r.stdout);
    const at = (k: string) => head.indexOf(k);
    for (const stage of ['layer.3', 'final_norm', 'logits']) {
      const c = row(r.stdout, stage);
      expect(c[at('max_abs')], stage).toBe('NaN');
      expect(c[at('cosine')], stage).toBe('NaN');
      expect(c[at('nan/inf')], stage).toMatch(/^\d+ NaN$/);
    }
    expect(row(r.stdout, 'layer.2')[at('max_abs')]).toBe('Inf'); // Inf without NaN in layer.2's output
    const rep = readJson(out('nan.json'));
    const l3 = rep.stages.find((s) => s.name === 'layer.3')!;
    // JSON keeps the strings: "NaN" in the metric, the count beside it, the finite part where stated
    expect(l3.accumulated!.max_abs).toBe('NaN');
    expect(l3.accumulated!.cosine).toBe('NaN');
    expect(l3.accumulated!.nan.device).toBe(11328);
    expect(l3.accumulated!.finite!.count).toBe(0); // every element of layer.3 is NaN on the device
    expect(rep.stages.find((s) => s.name === 'layer.2')!.isolated!.max_abs).toBe('Infinity');
    const md = fs.readFileSync(out('nan.md'), 'utf8');
    expect(md).toMatch(/\| `layer\.3` \| ❌ fail \(carried from `layer\.2`\) \| NaN \| NaN \| NaN \|/);
    const suite = children(parseXml(fs.readFileSync(out('nan.xml'), 'utf8')), 'testsuite')[0];
    const l2 = children(suite, 'testcase').find((t) => t.attrs.name === 'layer.2')!;
    expect(children(l2, 'failure')[0].attrs.message).toMatch(/^fp16-overflow: isolated max_abs Inf > 0\.1, 457 Inf \/ 0 NaN on the device/);
    const l3case = children(suite, 'testcase').find((t) => t.attrs.name === 'layer.3')!;
    expect(children(l3case, 'system-out')[0].text).toMatch(/accumulated: max_abs NaN .* cosine NaN/);
  });
});

describe('root cause first', () => {
  it('carriedFrom: a stage failing only in accumulated mode is carried from the nearest earlier root', () => {
    const m = (v: number): StageMetrics => ({ max_abs: v, max_at: [0], mean_abs: v, rms: v, rel_l2: v, cosine: 1, max_ref: 1, nan: { reference: 0, device: 0 }, inf: { reference: 0, device: 0 }, selection_flips: 0 });
    const st = (name: string, status: 'pass' | 'fail', iso: number | null) => ({ name, status, isolated: iso === null ? null : m(iso) });
    const got = carriedFrom([st('embed', 'pass', 0), st('layer.0', 'fail', 1), st('layer.1', 'fail', 0.01), st('layer.2', 'fail', 5), st('layer.3', 'fail', 0), st('final_norm', 'fail', null)], DEFAULT_POLICY);
    // layer.2 fails on the reference's input: a root of its own; final_norm ran accumulated only: undecided
    expect([...got]).toEqual([['layer.1', 'layer.0'], ['layer.3', 'layer.2']]);
    // a scoring-bug flip is the stage's own failure even where its isolated run passes (router-bias-dropped at a later layer)
    const bug = { ...st('layer.1', 'fail', 0.01), flips: { accumulated: { scoring_bug: 2 }, isolated: null } };
    expect([...carriedFrom([st('layer.0', 'fail', 1), bug, st('layer.2', 'fail', 0.01)], DEFAULT_POLICY)]).toEqual([['layer.2', 'layer.1']]);
  });

  it('diff --inject scale-axis@1: one root, four carried stages, in the table, JSON, JUnit and the verdict line', async () => {
    const r = await cliAsync(['diff', '--inject', 'scale-axis@1', '--json', out('carried.json'), '--junit', out('carried.xml')]);
    expect(r.code).toBe(1);
    expect(r.stdout.split('\n')[0]).toBe('FAIL layer.1 scale-axis: isolated max_abs 26.8 > 0.1 · 4 later stages carried from it');
    const st = header(r.stdout).indexOf('status');
    expect(row(r.stdout, 'layer.1')[st]).toBe('fail');
    for (const s of ['layer.2', 'layer.3', 'final_norm', 'logits']) expect(row(r.stdout, s)[st]).toBe('fail (carried from layer.1)');
    const rep = readJson(out('carried.json'));
    expect(rep.stages.map((s) => s.carried_from ?? null)).toEqual([null, null, null, 'layer.1', 'layer.1', 'layer.1', 'layer.1']);
    const suite = children(parseXml(fs.readFileSync(out('carried.xml'), 'utf8')), 'testsuite')[0];
    expect([suite.attrs.failures, suite.attrs.skipped]).toEqual(['1', '4']);
    const cases = children(suite, 'testcase');
    expect(children(cases.find((t) => t.attrs.name === 'layer.1')!, 'failure')[0].attrs.message).toMatch(/^scale-axis: isolated max_abs 26\.8 > 0\.1/);
    expect(children(cases.find((t) => t.attrs.name === 'logits')!, 'skipped')[0].attrs.message).toMatch(/^carried from layer\.1: /);
  });

  it('the verdict line is coloured with --color always or FORCE_COLOR, never with --color never or NO_COLOR; -q prints it alone', async () => {
    const [always, force, never, noColor, quiet, verbose] = await limit(2, [
      () => cliAsync(['diff', '--inject', 'scale-axis@1', '--color', 'always']),
      () => cliAsync(['diff', '--inject', 'scale-axis@1'], { FORCE_COLOR: '1' }),
      () => cliAsync(['diff', '--inject', 'scale-axis@1', '--color', 'never'], { FORCE_COLOR: '1' }),
      () => cliAsync(['diff', '--inject', 'scale-axis@1'], { NO_COLOR: '1', FORCE_COLOR: '' }),
      () => cliAsync(['diff', '--inject', 'scale-axis@1', '-q']),
      () => cliAsync(['diff', '-v']),
    ]);
    expect(always.stdout.startsWith('\x1b[1m\x1b[31mFAIL layer.1 scale-axis: ')).toBe(true);
    expect(force.stdout).toContain('\x1b[31mfail (carried from layer.1)\x1b[0m');
    for (const r of [never, noColor]) expect(r.stdout.includes('\x1b[')).toBe(false);
    expect(quiet.code).toBe(1);
    expect(quiet.stdout).toBe('FAIL layer.1 scale-axis: isolated max_abs 26.8 > 0.1 · 4 later stages carried from it\n');
    expect(quiet.stderr).toBe('');
    expect(verbose.code).toBe(0);
    expect(verbose.stdout).toMatch(/^time per stage \(reference \/ device, ms\): embed \d+\/\d+, layer\.0/m);
    expect(verbose.stdout).toMatch(/^environment: node v/m);
  });

  it('colour rules, clipping the progress line', () => {
    expect(useColour({ isTTY: true }, {}, 'auto')).toBe(true);
    expect(useColour({ isTTY: true }, { NO_COLOR: '1' }, 'auto')).toBe(false);
    expect(useColour({ isTTY: true }, { NO_COLOR: '' }, 'auto')).toBe(true); // no-color.org: set and non-empty
    expect(useColour({ isTTY: false }, { FORCE_COLOR: '1' }, 'auto')).toBe(true);
    expect(useColour({ isTTY: true }, { FORCE_COLOR: '0' }, 'auto')).toBe(false);
    expect(useColour({ isTTY: false }, { NO_COLOR: '1' }, 'always')).toBe(true);
    expect(useColour({ isTTY: true }, {}, 'never')).toBe(false);
    const line = 'layer.12 (14/47) · 1234.5 MiB read · 12.3 s · ~40 s left — and more text past any narrow terminal';
    expect([...clipToWidth(line, 40)]).toHaveLength(39); // one column spare: the cursor never wraps
    expect(clipToWidth(line, 40).endsWith('…')).toBe(true);
    expect(clipToWidth('short', 80)).toBe('short');
  });
});

describe('the same facts in every output, one column group per mode run', () => {
  it('--mode isolated has one max_abs column; both modes have the iso columns and a flips column', async () => {
    const [iso, both] = await limit(2, [() => cliAsync(['diff', '--mode', 'isolated', '--summary', out('iso.md')]), () => cliAsync(['diff', '--summary', out('both.md')])]);
    // the default policy measures the FP16 floor (floor + err/floor columns); the forced mode runs only with both
    expect(header(iso.stdout)).toEqual(['stage', 'max_abs', 'rel_l2', 'cosine', 'floor rms', 'err/floor', 'nan/inf', 'flips', 'status']);
    expect(header(both.stdout)).toEqual(['stage', 'max_abs', 'rel_l2', 'cosine', 'iso max_abs', 'iso rel_l2', 'forced max_abs', 'floor rms', 'err/floor', 'nan/inf', 'flips', 'status']);
    expect(fs.readFileSync(out('iso.md'), 'utf8')).toContain('| stage | status | max_abs | rel_l2 | cosine | nan/inf | flips |');
    expect(fs.readFileSync(out('both.md'), 'utf8')).toContain('| stage | status | max_abs | rel_l2 | cosine | iso max_abs | iso rel_l2 | nan/inf | flips |');
    for (const r of [iso, both]) expect(r.stdout).toMatch(/^logits: .*top-1 agreement 100\.0%, KL mean \S+, KL p99 \S+, KL max \S+/m);
    expect(fs.readFileSync(out('both.md'), 'utf8')).toMatch(/^- logits: accumulated: top-1 agreement/m);
  });
});

describe('messages for the commonest mistakes, one line each, exit 2', () => {
  const file = path.join(LLAMA_TINY(), 'config.json');
  const cases: Array<[string[], RegExp]> = [
    [['diff', path.join(tmp, 'no-such-model')], /: no such directory$/],
    [['diff', file], /config\.json: not a directory \(give the checkpoint's folder/],
    [['diff', 'meta-llama/Llama-3.1-8B'], /meta-llama\/Llama-3\.1-8B: no such directory; this looks like a Hub id: download it first/],
    [['diff', tmp], /: not a model directory \(no config\.json\)$/],
    [['diff', '--fail-abve', '0.2'], /unknown option --fail-abve \(did you mean --fail-above\?\)/],
    [['dif'], /unknown command "dif" \(did you mean diff\?\)/],
    [['diff', '--mode', 'isolatd'], /--mode "isolatd": expected one of both, accumulated, accumulated-forced, isolated \(did you mean isolated\?\)/],
    [['diff', '--json', '-', '--junit', '-'], /--json and --junit both write to stdout/],
    [['fixture', 'llama-tiy', path.join(tmp, 'fx')], /kind "llama-tiy": expected one of llama-tiny, .* \(did you mean llama-tiny\?\)/],
  ];
  for (const [args, want] of cases) {
    it(args.join(' ').replace(tmp, '$TMP'), () => {
      const r = cli(args);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(/^layerdiff: error: /);
      expect(r.stderr.trim()).toMatch(want);
      expect(r.stdout).toBe('');
    });
  }

  it('edit distance and the nearest option', () => {
    expect(editDistance('fail-abve', 'fail-above')).toBe(1);
    expect(editDistance('isolatde', 'isolated')).toBe(1); // a swap is one typo
    expect(closest('warn-abov', ['fail-above', 'warn-above', 'json'])).toBe('warn-above');
    expect(closest('frobnicate', ['fail-above', 'json'])).toBeNull();
  });

  it('--json - writes the report to stdout (the table to stderr), nothing else on stdout', () => {
    const r = cli(['diff', '--json', '-']);
    expect(r.code).toBe(0);
    const rep = JSON.parse(r.stdout) as Report;
    expect(rep.schema).toBe('layerdiff.report/1');
    expect(r.stderr).toMatch(/^PASS: 7 stages within max_abs ≤ 0\.1/);
  });
});

describe('help', () => {
  it('every option of every command has a description; defaults and choices are shown', () => {
    for (const cmd of ['diff', 'compare', 'gate', 'generate', 'inspect', 'replay', 'fixture', 'convert', 'faults']) {
      const r = cli([cmd, '-h']);
      expect(r.code, cmd).toBe(0);
      const lines = r.stdout.split('\n');
      // an option line without a description is the name, then straight away its [type]
      const bare = lines.filter((l) => /^\s+(-\w, )?--[\w-]+\s+\[(string|number|boolean)\]/.test(l));
      expect(bare, `${cmd}: options without a description`).toEqual([]);
      if (cmd === 'diff') {
        for (const o of ['--metric', '--mode', '--device', '--fail-above', '--fail-fast', '--color']) expect(r.stdout, o).toMatch(new RegExp(`${o}\\s+\\S`));
        // the fixed-rule flags have no yargs default (giving one selects the fixed rule); their descriptions state it
        expect(r.stdout).toMatch(/\[choices: "max_abs", "mean_abs", "rms", "rel_l2"\]/);
        expect(r.stdout).toMatch(/--fail-above\s+fixed rule: .*default 0\.1/);
      }
    }
  });

  it('layerdiff faults lists the catalog, one line each; fixture --help lists the kinds', () => {
    const f = cli(['faults']);
    expect(f.code).toBe(0);
    const lines = f.stdout.trim().split('\n');
    expect(lines.map((l) => l.split(/\s+/)[0])).toEqual([...FAULT_IDS]);
    for (const l of lines) expect(l).toMatch(/^\S+\s+\S.* · \S/);
    const k = cli(['fixture', '--help']);
    for (const kind of Object.keys(FIXTURE_KINDS)) expect(k.stdout).toMatch(new RegExp(`^\\s+${kind}\\s+\\S`, 'm'));
  });
});

describe('compare RUN_A RUN_B: two saved runs, nothing recomputed', () => {
  it('a dump against its own reference and against a golden run gives the diff\'s numbers, verdict and carried markers', async () => {
    const dump = out('dump');
    const golden = out('golden');
    const [d, g] = await limit(2, [
      // compare has no FP16 floor (a saved run holds none), so both sides are judged by the same fixed rule
      () => cliAsync(['diff', '--inject', 'scale-axis@1', '--metric', 'max_abs', '--dump', dump, '--json', out('dump.json'), '-q']),
      () => cliAsync(['diff', '--save-golden', golden, '-q']),
    ]);
    expect([d.code, g.code]).toEqual([1, 0]);
    expect(readJson<{ schema: string }>(path.join(dump, 'run.json')).schema).toBe('layerdiff.dump/1');
    const want = readJson(out('dump.json'));
    const [self, vsGolden, fast] = await limit(2, [
      () => cliAsync(['compare', dump, dump, '--json', out('self.json')]),
      () => cliAsync(['compare', golden, dump, '--json', out('golden.json'), '--junit', out('compare.xml')]),
      () => cliAsync(['compare', golden, dump, '--fail-fast', '--json', '-']),
    ]);
    for (const [r, f] of [[self, 'self.json'], [vsGolden, 'golden.json']] as const) {
      expect(r.code, r.stderr).toBe(1);
      const got = readJson(out(f));
      expect(got.first_failure).toBe('layer.1');
      expect(got.stages.map((s) => s.name)).toEqual(want.stages.map((s) => s.name));
      for (const [k, s] of got.stages.entries()) {
        const w = want.stages[k];
        expect(s.status, s.name).toBe(w.status);
        expect(s.carried_from, s.name).toBe(w.carried_from);
        // the same F32 arrays, the same float64 sums: equal to the last bit
        for (const mode of ['accumulated', 'isolated'] as const) for (const m of ['max_abs', 'rel_l2', 'cosine', 'mean_abs'] as const) expect(s[mode]![m], `${s.name} ${mode} ${m}`).toBe(w[mode]![m]);
      }
      expect(got.backends.device.name).toBe('saved');
      expect(got.input.tokens).toEqual(want.input.tokens);
    }
    expect(vsGolden.stdout).toMatch(/^reference: golden run .*golden \(not recomputed\) · device: saved/m);
    expect(children(children(parseXml(fs.readFileSync(out('compare.xml'), 'utf8')), 'testsuite')[0], 'testcase')).toHaveLength(7);
    expect(fast.code).toBe(1);
    expect((JSON.parse(fast.stdout) as Report).stages.map((s) => s.name)).toEqual(['embed', 'layer.0', 'layer.1']);
  });

  it('judges a dump as its diff did: against the FP16 floor it recorded, the free run as drift until its first flip', async () => {
    // deepseek-v4-tiny on 200 tokens: streams at |x| ≈ 160–330 (a correct path 0.1–0.2 off in max_abs) and a benign
    // flip at layer.3; without the dump's floors and first flip, compare failed the dump its diff passed
    const ds = path.join(packageRoot(), 'fixtures', 'deepseek-v4-tiny');
    const long = Array.from({ length: 200 }, (_, i) => (i * 37 + 11) % 384).join(',');
    const clean = out('ds-clean');
    const bug = out('ds-accumulate');
    const [d, b] = await limit(2, [
      () => cliAsync(['diff', ds, '--tokens', long, '--no-weights', '--dump', clean, '--json', out('ds-clean-diff.json'), '-q']),
      // the FP16-accumulating GEMM at layer 1: still the first failure when judged from the dump
      () => cliAsync(['diff', ds, '--tokens', long.split(',').slice(0, 96).join(','), '--no-weights', '--inject', 'fp16-accumulate@1', '--dump', bug, '-q']),
    ]);
    expect([d.code, b.code]).toEqual([0, 1]);
    const m = readJson<{ floors: Record<string, { isolated: { rms: number } }>; free_flips: Record<string, unknown> }>(path.join(clean, 'run.json'));
    expect(Object.keys(m.floors)).toEqual(['embed', 'layer.0', 'layer.1', 'layer.2', 'layer.3', 'final_norm', 'logits']);
    expect(m.floors['layer.0'].isolated.rms).toBeGreaterThan(0);
    // the free run's flips as the diff judged them: token 73 at layer.3, benign
    expect(m.free_flips).toEqual({ 'layer.3': { tokens: [73], benign: [73], scoring_bug: 0 } });
    // a layer's forced run is a run of its own here (top-k choices): the dump holds it, and compare judges drift by it
    expect(tensorNames(path.join(clean, 'layer.2.safetensors')).sort()).toEqual(['device', 'device_forced', 'device_isolated', 'reference']);
    const [c, cb] = await limit(2, [() => cliAsync(['compare', clean, clean, '--json', out('ds-clean.json')]), () => cliAsync(['compare', bug, bug, '--json', out('ds-bug.json')])]);
    expect(c.code, c.stdout).toBe(0);
    // own error on the stage output and drift: the diff's judgements, stage by stage (the same arrays, floors, policy)
    const viaDiff = readJson<Report>(out('ds-clean-diff.json'));
    for (const s of readJson<Report>(out('ds-clean.json')).stages.filter((x) => x.name !== 'embed')) {
      const w = viaDiff.stages.find((x) => x.name === s.name)!;
      expect(s.statuses?.accumulated_forced, s.name).toBe(w.statuses?.accumulated_forced);
      expect(s.accumulated_forced, s.name).toEqual(w.accumulated_forced);
    }
    expect(readJson<Report>(out('ds-clean.json')).policy).toMatchObject({ rule: 'floor' });
    expect(cb.code).toBe(1);
    expect(readJson<Report>(out('ds-bug.json')).first_failure).toBe('layer.1');
    // a floor figure edited to a negative number is bad input naming it, not a looser verdict
    const edited = out('ds-edited');
    fs.cpSync(bug, edited, { recursive: true });
    const f = path.join(edited, 'run.json');
    const man = JSON.parse(fs.readFileSync(f, 'utf8')) as { floors: Record<string, { isolated: { rms: number } }> };
    man.floors['layer.1'].isolated.rms = -1;
    fs.writeFileSync(f, JSON.stringify(man));
    const e = cli(['compare', edited, edited]);
    expect(e.code).toBe(2);
    expect(e.stderr).toMatch(/run\.json: floors\.layer\.1 must be/);
    // a dump of the free run alone whose router chose without its bias: after the flips the stages are information,
    // but the flips its diff judged scoring bugs fail their stage in compare too
    const router = out('ds-router');
    expect((await cliAsync(['diff', ds, '--tokens', long, '--no-weights', '--mode', 'accumulated', '--inject', 'router-bias-dropped@2', '--dump', router, '-q'])).code).toBe(1);
    const cr = await cliAsync(['compare', router, router, '--json', out('ds-router.json')]);
    expect(cr.code).toBe(1);
    expect(readJson<Report>(out('ds-router.json')).first_failure).toBe('layer.2');
    // flips edited into nonsense (a benign token that did not flip) are bad input naming the field
    const f2 = path.join(router, 'run.json');
    const man2 = JSON.parse(fs.readFileSync(f2, 'utf8')) as { free_flips: Record<string, { benign: number[] }> };
    man2.free_flips['layer.2'].benign = [5000]; // no token of the input
    fs.writeFileSync(f2, JSON.stringify(man2));
    const e2 = cli(['compare', router, router]);
    expect(e2.code).toBe(2);
    expect(e2.stderr).toMatch(/run\.json: free_flips\.layer\.2 must be/);
  });

  it('refuses runs on different inputs, and a folder that is neither (exit 2)', async () => {
    const a = out('dump-a');
    const b = out('dump-b');
    await limit(2, [() => cliAsync(['diff', '--dump', a, '--tokens', '1,2,3', '-q']), () => cliAsync(['diff', '--dump', b, '--tokens', '1,2,4', '-q'])]);
    const r = cli(['compare', a, b]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/RUN_A and RUN_B were made on different inputs/);
    const empty = out('empty');
    fs.mkdirSync(empty);
    const n = cli(['compare', a, empty]);
    expect(n.code).toBe(2);
    expect(n.stderr).toMatch(/RUN_B: neither a golden run \(golden\.json\) nor a --dump folder/);
  });
});

describe('saved runs edited by hand are bad input naming the field', () => {
  it('compare: a run.json field of the wrong type, a stage it lists that is missing, a device output of another shape; diff --golden: golden.json fields', () => {
    const d = out('edit-base');
    expect(cli(['diff', '--dump', d, '--layers', '0-1', '--save-golden', out('edit-golden'), '-q']).code).toBe(0);
    const edited = (name: string, from: string, file: string, edit: (m: Record<string, unknown>) => void, after?: (dir: string) => void) => {
      const x = out(`edit-${name}`);
      fs.cpSync(from, x, { recursive: true });
      const f = path.join(x, file);
      const m = JSON.parse(fs.readFileSync(f, 'utf8')) as Record<string, unknown>;
      edit(m);
      fs.writeFileSync(f, JSON.stringify(m));
      after?.(x);
      return x;
    };
    for (const [args, says] of [
      [['compare', d, edited('tokens', d, 'run.json', (m) => ((m.input as Record<string, unknown>).tokens = 'abc'))], /run\.json: input\.tokens must be a non-empty list of token ids, got "abc"/],
      [['compare', d, edited('fingerprint', d, 'run.json', (m) => ((m.model as Record<string, unknown>).fingerprint = 5))], /run\.json: model\.fingerprint must be a string, got 5/],
      [['compare', d, edited('missing', d, 'run.json', () => undefined, (x) => fs.rmSync(path.join(x, 'layer.1.safetensors')))], /run\.json lists stage layer\.1 but the folder has no layer\.1\.safetensors/],
      [['compare', d, edited('shape', d, 'run.json', () => undefined, (x) => {
        // layer.0's device output stored [hidden, tokens] where the reference is [tokens, hidden]: same bytes, another tensor
        const f = path.join(x, 'layer.0.safetensors');
        const acts = readActs(f, tensorNames(f));
        writeSafetensors(f, [...acts].map(([name, a]) => ({ name, dtype: 'F32' as const, shape: name === 'device' ? [...a.shape].reverse() : a.shape, data: new Uint8Array(a.data.buffer, a.data.byteOffset, a.data.byteLength) })));
      })], /layer\.0: RUN_B's output has shape \[192, 59\], RUN_A's \[59, 192\]/],
      [['diff', '--layers', '0-1', '--golden', edited('g-sha', out('edit-golden'), 'golden.json', (m) => ((m.stages as Array<Record<string, unknown>>)[1].sha256 = 5))], /golden\.json: stages\[1\]\.sha256 must be a SHA-256 digest, got 5/],
      [['diff', '--layers', '0-1', '--golden', edited('g-file', out('edit-golden'), 'golden.json', (m) => ((m.stages as Array<Record<string, unknown>>)[1].file = '.'))], /golden\.json: stages\[1\]\.file must be a \.safetensors file name in this folder, got "\."/],
      [['diff', '--layers', '0-1', '--golden', edited('g-tokens', out('edit-golden'), 'golden.json', (m) => (m.tokens = []))], /golden\.json: tokens must be a non-empty list of token ids/],
    ] as const) {
      const r = cli([...args]);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(says);
    }
  });
});

describe('--dump DIR: a new or empty folder, or a previous dump it replaces whole', () => {
  it('a second dump with fewer stages removes the first one\'s other stages; a folder holding anything else is refused before the run', () => {
    const d = out('dump-replace');
    expect(cli(['diff', '--dump', d, '--tokens', '1,2,3', '-q']).code).toBe(0);
    const first = fs.readdirSync(d).sort();
    expect(first).toContain('layer.3.safetensors');
    expect(cli(['diff', '--dump', d, '--tokens', '1,2,3', '--layers', '0-1', '-q']).code).toBe(0);
    const second = fs.readdirSync(d).sort();
    expect(second).toEqual(['embed.safetensors', 'layer.0.safetensors', 'layer.1.safetensors', 'run.json']);
    expect((JSON.parse(fs.readFileSync(path.join(d, 'run.json'), 'utf8')) as { stages: string[] }).stages).toEqual(['embed', 'layer.0', 'layer.1']);
    // the user's own files: refused, and left as they were
    for (const [name, text, says] of [
      ['notes.txt', 'mine', /--dump: the folder is not empty and is not a previous dump \(it also holds notes\.txt\)/],
      ['run.json', '{"schema":"something/else"}', /is not a layerdiff\.dump\/1 manifest/],
    ] as const) {
      const f = out(`dump-foreign-${name}`);
      fs.mkdirSync(f);
      if (name === 'notes.txt') fs.cpSync(d, f, { recursive: true });
      fs.writeFileSync(path.join(f, name), text);
      const before = hashTree(f);
      const r = cli(['diff', '--dump', f, '--tokens', '1,2,3', '-q']);
      expect(r.code).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(says);
      expect(hashTree(f)).toBe(before);
    }
  });
});

describe('--fail-fast', () => {
  it('stops after the first failing stage, its drill-down included', () => {
    const r = cli(['diff', '--inject', 'nibble-swap@2', '--fail-fast', '--json', '-']);
    expect(r.code).toBe(1);
    const rep = JSON.parse(r.stdout) as Report;
    expect(rep.stages.map((s) => s.name)).toEqual(['embed', 'layer.0', 'layer.1', 'layer.2']);
    expect(rep.stages.at(-1)!.drill).toBeDefined();
  });
});
