/**
 * The report writers and the run options around them: JUnit stays well formed whatever text it carries,
 * Markdown tables survive pipes, a passing HTML report renders in Chromium, nothing is written by a run that
 * fails on bad input or is killed, --repeat proves the device path deterministic (also across OpenMP thread
 * counts), the drill-down follows --no-drill and accumulated-only mode, and the activation rules name
 * fp16-resolution, fp16-overflow and drift.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawn } from 'node:child_process';
import { inflateSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import type { DiffArgs } from '../cli/diff.js';
import { diagnose, f16Ulp } from '../compare/diagnose.js';
import { DEFAULT_POLICY } from '../compare/policy.js';
import type { Report } from '../runner/report.js';
import type { RunResult, StageResult } from '../runner/run.js';
import { packageRoot } from '../version.js';
import { writeLlamaTiny } from '../../fixtures/llama-tiny.js';
import { renderJunit } from '../../reports/junit.js';
import { mdCell, mdCode, renderMarkdown } from '../../reports/markdown.js';
import { policyText } from '../../reports/format.js';
import { gateMarkdown } from '../../reports/gate.js';
import { buildGateReport, type GateReport } from '../gate/report.js';
import { printable } from '../io/printable.js';
import { addTensor } from '../../fixtures/inject.js';
import { cliAsync } from './async-cli.js';
import { dumpDom, screenshot } from './browser.js';
import { cli, LLAMA_TINY, quietDiff } from './cli.js';
import { children, parseXml } from './xml.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-reports-'));
const base = (over: Partial<DiffArgs> = {}): DiffArgs => ({
  model: LLAMA_TINY(), layers: 'all', device: 'auto', mode: 'both', metric: 'max_abs', failAbove: 0.1, warnAbove: 0.01, freeSelection: false, ...over,
});
const quiet = quietDiff;

describe('JUnit and Markdown writers', () => {
  it('JUnit stays well formed with hostile text, and carries it back unchanged (non-XML characters shown as codes)', async () => {
    const { report } = await quiet(base({ inject: 'nibble-swap@3' }));
    const nasty = 'dir <&> "quoted" \'single\' ]]> \u0001ctl \uFFFE end';
    const r: Report = { ...report, model: { ...report.model, path: nasty } };
    const root = parseXml(renderJunit(r));
    const suite = children(root, 'testsuite')[0];
    const model = children(children(suite, 'properties')[0], 'property').find((p) => p.attrs.name === 'model')!;
    expect(model.attrs.value).toBe('dir <&> "quoted" \'single\' ]]> \\u0001ctl \\ufffe end');
    // a line break in an attribute survives as one (a parser turns a raw one into a space)
    const lines = parseXml(renderJunit({ ...report, model: { ...report.model, path: 'a\nb' } }));
    expect(children(children(children(lines, 'testsuite')[0], 'properties')[0], 'property').find((p) => p.attrs.name === 'model')!.attrs.value).toBe('a\nb');
    expect(children(suite, 'testcase')).toHaveLength(7);
    // one failure for the root (layer.3, the cause first in its message); final_norm and logits fail only on
    // the input layer.3 handed them, so they are skipped with a message naming the root
    expect(suite.attrs.failures).toBe('1');
    expect(suite.attrs.skipped).toBe('2');
    const f = children(children(suite, 'testcase').find((t) => t.attrs.name === 'layer.3')!, 'failure')[0];
    expect(f.attrs.message).toMatch(/^nibble-swap: isolated max_abs \S+ > 0\.1; accumulated max_abs \S+ > 0\.1$/);
    for (const name of ['final_norm', 'logits']) {
      const skip = children(children(suite, 'testcase').find((t) => t.attrs.name === name)!, 'skipped')[0];
      expect(skip.attrs.message).toMatch(/^carried from layer\.3: /);
    }
    expect(f.text).toMatch(/isolated: max_abs \S+ at \[\d+, \d+\], mean_abs/);
  });

  it('the strict parser rejects what a JUnit reader would', () => {
    for (const bad of ['<a><b></a></b>', '<a x="1" x="2"/>', '<a>&nbsp;</a>', '<a>1 & 2</a>', '<a/><b/>', '<a x=1/>', '<a>\u0001</a>']) expect(() => parseXml(bad), bad).toThrow();
    expect(parseXml('<?xml version="1.0" encoding="UTF-8"?>\n<a x="&lt;&#65;&#x42;"><!-- c --><b/>t</a>\n').attrs.x).toBe('<AB');
  });

  it('Markdown cells escape pipes and line breaks', async () => {
    expect(mdCell('a|b\nc_d')).toBe('a\\|b c\\_d');
    expect(mdCell('x &amp; y')).toBe('x &amp;amp; y');
    const { report } = await quiet(base({ inject: 'scale-axis@2' }));
    const md = renderMarkdown(report);
    // every row of a table has as many cells as its header: no pipe in a cell leaked through
    const lines = md.split('\n');
    const cells = (l: string) => l.split(/(?<!\\)\|/).length;
    lines.forEach((l, k) => {
      if (l.startsWith('|') && k > 0 && lines[k - 1].startsWith('|')) expect(cells(l), l).toBe(cells(lines[k - 1]));
    });
    expect(md).toContain('### Drill-down');
    expect(md).toContain('| `model.layers.2.mlp.down_proj.weight` | mxfp4 |');
  });
});

describe('text from the checkpoint, the user or a saved run, in every report', () => {
  /** CommonMark's inline code span: a fence of n backticks, then content holding no run of exactly n, then the fence */
  function codeSpanContent(span: string): string {
    const n = /^`+/.exec(span)![0].length;
    expect(span.endsWith('`'.repeat(n)) && !span.endsWith('`'.repeat(n + 1))).toBe(true);
    const inner = span.slice(n, -n);
    expect((inner.match(/`+/g) ?? []).every((run) => run.length !== n)).toBe(true);
    return inner.startsWith(' ') && inner.endsWith(' ') && inner.trim() !== '' ? inner.slice(1, -1) : inner;
  }

  it('printable shows control characters and bidi overrides as codes, on one line, and leaves text alone', () => {
    expect(printable('a\x1b[2J\x07b\r\nc\u202ed\x9b')).toBe('a\\x1b[2J\\x07b\\x0d\\x0ac\\u202ed\\x9b');
    expect(printable('line 1\n\tline 2\r', true)).toBe('line 1\n\tline 2\\x0d');
    expect(printable('Grüße, 你好, ｜begin▁of▁sentence｜ 🙂')).toBe('Grüße, 你好, ｜begin▁of▁sentence｜ 🙂');
  });

  it('a path in Markdown is one code span whatever it holds: backticks, a line break, HTML, control characters', async () => {
    for (const p of ['/m/plain', '/m/a`b``c', '`edge`', '/m/x`<img src=x onerror=alert(1)>|a&b\n# H1 [l](https:e.x) \x1b[31m']) {
      const span = mdCode(p);
      expect(span.includes('\n') || span.includes('\x1b')).toBe(false);
      expect(codeSpanContent(span)).toBe(printable(p));
    }
    const { report } = await quiet(base({ inject: 'nibble-swap@3' }));
    const md = renderMarkdown({ ...report, model: { ...report.model, path: '/m/x`<img src=x>\n# Approved' } });
    const line = md.split('\n').find((l) => l.includes('tokens —'))!;
    expect(codeSpanContent(line.slice(line.indexOf('tokens — ') + 9))).toBe('/m/x`<img src=x>\\x0a# Approved');
    expect(md).not.toMatch(/^# Approved/m);
  });

  it("a gate prompt's name is HTML-escaped inside the summary's raw HTML block, its control characters shown as codes", async () => {
    const { report } = await quiet(base({ inject: 'nibble-swap@3' }));
    const hostile = '<img src=https://evil.example/x.png onerror=alert(1)>\x1b[2J';
    const g: GateReport = {
      ...buildGateReport({ prompts: [{ name: hostile, verdict: report.verdict, report }], device: report.backends.device, policy: report.policy, record: null, written: false, elapsedMs: 1 }),
    };
    const md = gateMarkdown(g);
    expect(md).toContain('<summary>prompt &lt;img src=https://evil.example/x.png onerror=alert(1)&gt;\\x1b[2J: fail</summary>');
    expect(md).not.toMatch(/(?<!\\)<img/); // elsewhere Markdown-escaped (\<img), inert
    expect(md).not.toContain('\x1b');
  });

  it('compare keeps the injected-fault marker of a dump made with --inject; replay and errors print a bundle\'s or a tensor\'s escape sequences as codes', async () => {
    const A = path.join(tmp, 'cmp-A'), B = path.join(tmp, 'cmp-B');
    await quiet(base({ dump: A }));
    await quiet(base({ dump: B, inject: 'nibble-swap@1' }));
    const r = cli(['compare', A, B, '--summary', path.join(tmp, 'cmp.md')]);
    expect(r.code).toBe(1);
    expect(fs.readFileSync(path.join(tmp, 'cmp.md'), 'utf8')).toMatch(/INJECTED FAULT nibble-swap@1/);
    // a tensor whose name carries an escape sequence: one error line, the sequence shown, not obeyed
    const dir = path.join(tmp, 'esc-tensor');
    addTensor(LLAMA_TINY(), dir, 'model.layers.1.mlp.up_proj.weight', { name: 'model.layers.1.x\x1b]0;PWNED\x07\nFAKE', dtype: 'F32', shape: [1], data: new Uint8Array(4) });
    const e = cli(['diff', dir]);
    expect(e.code).toBe(2);
    expect(e.stderr.trim().split('\n')).toHaveLength(1);
    expect(e.stderr).toContain("tensor 'model.layers.1.x\\x1b]0;PWNED\\x07\\x0aFAKE'");
  });

  it('the policy the reports state is the one that judged: the FP16 floor named where it excused a stage', async () => {
    const { report } = await quiet(base({ metric: undefined, failAbove: undefined, warnAbove: undefined }));
    expect(report.policy.rule).toBe('floor');
    expect(renderMarkdown(report)).toContain(`- policy: ${mdCell(policyText(report.policy))}`);
    const xml = parseXml(renderJunit(report));
    const prop = children(children(children(xml, 'testsuite')[0], 'properties')[0], 'property').find((p) => p.attrs.name === 'policy')!;
    expect(prop.attrs.value).toBe(policyText(report.policy));
    expect(policyText(report.policy)).toMatch(/FP16 floor/);
  });
});

describe('HTML report of a passing run', () => {
  it('renders in headless Chromium: PASS banner, plots, no histogram, and a non-blank screenshot', async () => {
    const html = path.join(tmp, 'pass.html');
    const r = await cliAsync(['diff', '--html', html, '--repeat', '2']);
    expect(r.code, r.stderr).toBe(0);
    const dom = await dumpDom(html);
    expect(dom).toMatch(/<html[^>]*data-ready="1"/);
    expect(dom).toContain('PASS — every stage within max_abs ≤ 0.1');
    expect(dom).toContain('device backend: emulated — not hardware');
    expect(dom).not.toContain('INJECTED FAULT');
    expect(dom).not.toMatch(/data-kind="histogram"/);
    expect(dom.match(/data-kind="line"/g)).toHaveLength(2);
    expect(dom).toMatch(/2 device runs per stage: bit-identical in every stage/);
    expect(dom).toMatch(/every device FP16 weight equals the reference's exact dequantization/);
    const png = path.join(tmp, 'pass.png');
    await screenshot(html, png, '1200,1600');
    const img = decodePngStats(fs.readFileSync(png));
    expect(img.width).toBe(1200);
    expect(img.distinctBytes).toBeGreaterThan(64); // text, lines and colours, not a blank page
  });
});

/** PNG: signature, IHDR width, and how varied the inflated pixel stream is (a blank page is nearly constant). */
function decodePngStats(b: Buffer): { width: number; distinctBytes: number } {
  expect(b.subarray(0, 8).toString('hex')).toBe('89504e470d0a1a0a');
  let at = 8;
  let width = 0;
  const idat: Buffer[] = [];
  while (at < b.length) {
    const len = b.readUInt32BE(at);
    const type = b.subarray(at + 4, at + 8).toString('latin1');
    const data = b.subarray(at + 8, at + 8 + len);
    if (type === 'IHDR') width = data.readUInt32BE(0);
    if (type === 'IDAT') idat.push(data);
    at += 12 + len;
  }
  const px = inflateSync(Buffer.concat(idat));
  return { width, distinctBytes: new Set(px).size };
}

describe('outputs appear only after a completed run', () => {
  const outputs = (d: string) => ['--json', `${d}/r.json`, '--html', `${d}/r.html`, '--junit', `${d}/r.xml`, '--summary', `${d}/r.md`, '--repro', `${d}/repro`, '--save-golden', `${d}/golden`, '--dump', `${d}/dump`];
  /** files (not folders: an empty --dump folder may exist) anywhere under d */
  const leftovers = (d: string) => (fs.existsSync(d) ? fs.readdirSync(d, { recursive: true }).map(String) : []).filter((f) => !fs.statSync(path.join(d, f)).isDirectory());

  it('a run that stops on bad input leaves nothing', () => {
    const d = path.join(tmp, 'bad');
    const r = cli(['diff', '--tokens', '1,2,999999', ...outputs(d)]);
    expect(r.code).toBe(2);
    expect(leftovers(d)).toEqual([]);
  });

  it('a killed run leaves no report', async () => {
    const d = path.join(tmp, 'killed');
    const main = path.join(packageRoot(), 'dist', 'harness', 'cli', 'main.js');
    // deepseek-v4-tiny at --repeat 100: ~6 s alone on a 2-core host (llama-tiny's ~1.9 s had come in under the kill
    // below when the host was idle), so the kill lands well into the stages whatever the load
    const model = path.join(packageRoot(), 'fixtures', 'deepseek-v4-tiny');
    const child = spawn(process.execPath, [main, 'diff', model, '--repeat', '100', '--inject', 'nibble-swap', ...outputs(d).slice(0, 8)], { stdio: 'ignore' });
    const done = new Promise<number | null>((res) => child.on('close', (code) => res(code)));
    await new Promise((res) => setTimeout(res, 2500));
    child.kill('SIGKILL');
    const r = { code: (await done) ?? -1 };
    expect(r.code).toBe(-1);
    expect(leftovers(d).filter((f) => /r\.(json|html|xml|md)$/.test(f))).toEqual([]);
  });
});

describe('--repeat: the determinism probe', () => {
  it('every stage is bit-identical over repeated device runs', async () => {
    const { report } = await quiet(base({ repeat: 3, inject: 'fp16-overflow@2' }));
    expect(report.determinism).toMatchObject({ runs: 3, max_spread: 0, stages_with_spread: [] });
    for (const s of report.stages) {
      expect(s.spread, s.name).toEqual({ runs: 3, accumulated: { max_abs: 0, differing: 0 }, isolated: { max_abs: 0, differing: 0 } });
    }
  });

  it('results do not depend on the number of OpenMP threads', async () => {
    const [a, b] = await Promise.all(
      ['1', '2'].map(async (threads) => {
        const out = path.join(tmp, `omp-${threads}.json`);
        const r = await cliAsync(['diff', '--json', out], { OMP_NUM_THREADS: threads });
        expect(r.code, r.stderr).toBe(0);
        return JSON.parse(fs.readFileSync(out, 'utf8')) as Report;
      }),
    );
    expect(a.backends.device.threads).toBe(1);
    expect(b.backends.device.threads).toBe(2);
    expect(b.stages).toEqual(a.stages.map((s, k) => ({ ...s, time_ms: b.stages[k].time_ms })));
  });
});

describe('drill-down options', () => {
  it('--no-drill leaves failing stages without a drill-down', async () => {
    const { report } = await quiet(base({ inject: 'nibble-swap@3', drill: false }));
    expect(report.stages.some((s) => s.drill)).toBe(false);
    expect(report.diagnosis[0]).toMatchObject({ cause: 'nibble-swap', stage: 'layer.3' });
    expect(report.diagnosis[0].substage).toBeUndefined();
  });
  it('in accumulated-only mode the failing layer is rerun on the reference input to drill', async () => {
    const { report } = await quiet(base({ inject: 'fp16-overflow@2', mode: 'accumulated' }));
    const st = report.stages.find((s) => s.name === 'layer.2')!;
    expect(st.isolated).toBeNull();
    expect(st.drill!.first_failing).toBe('layer.2.mlp');
    expect(st.drill!.substages.map((x) => x.name)).toEqual(['layer.2.attn', 'layer.2.mlp']);
  });
});

describe('diagnosis from activations', () => {
  it('fp16-resolution: an absolute threshold below FP16 spacing, with the fix', async () => {
    const { report } = await quiet(base({ failAbove: 0.003, warnAbove: 0.001 }));
    const d = report.diagnosis[0];
    expect(d.stage).toBe(report.first_failure);
    expect(d.cause).toBe('fp16-resolution');
    expect(d.hint).toMatch(/--metric rel_l2/);
    const m = report.stages.find((s) => s.name === d.stage)!.isolated!;
    expect(m.max_abs).toBeLessThanOrEqual(2 * f16Ulp(m.max_ref));
    // the suggested metric passes the same run
    const again = await quiet(base({ metric: 'rel_l2', failAbove: 0.003, warnAbove: 0.001 }));
    expect(again.report.verdict).toBe('pass');
  });

  it('fp16-overflow where the reference itself passes FP16 range', async () => {
    const dir = path.join(tmp, 'overflow');
    writeLlamaTiny(dir, { variant: 'overflow' });
    const { report } = await quiet(base({ model: dir }));
    expect(report.diagnosis[0]).toMatchObject({ stage: 'layer.2', cause: 'fp16-overflow', source: 'activations' });
    expect(report.diagnosis[0].evidence).toMatch(/the reference itself reaches max \|r\| = \S+ > 65504/);
    expect(report.weights!.mismatched).toBe(0);
  });

  it('drift (fails only accumulated), a selection flip, NaN without Inf, and f16Ulp', () => {
    const m = (over: Partial<StageResult['isolated'] & object> = {}) => ({
      max_abs: 0.05, max_at: [0, 0], mean_abs: 0.01, rms: 0.01, rel_l2: 0.01, cosine: 1, max_ref: 4, nan: { reference: 0, device: 0 }, inf: { reference: 0, device: 0 }, selection_flips: 0, ...over,
    });
    const stage = (iso: ReturnType<typeof m>, acc: ReturnType<typeof m>): StageResult => ({ name: 'layer.7', status: 'fail', accumulated: acc, isolated: iso, time_ms: { reference: 0, device: 0 } });
    const run = (s: StageResult): RunResult => ({ stages: [s], first_failure: s.name, verdict: 'fail' });
    const drift = diagnose(run(stage(m(), m({ max_abs: 0.5 }))), DEFAULT_POLICY);
    expect(drift[0]).toMatchObject({ cause: 'unknown' });
    expect(drift[0].evidence).toMatch(/fails only in accumulated mode .* drift/);
    // a top-k choice that went the other way (here two stages before the failure) names the flip, not drift
    const flipAt: StageResult = { ...stage(m({ max_abs: 0.004 }), m({ max_abs: 0.02, selection_flips: 2 })), name: 'layer.5', status: 'warn' };
    const calm: StageResult = { ...stage(m({ max_abs: 0.004 }), m({ max_abs: 0.03 })), name: 'layer.6', status: 'warn' };
    const failing = stage(m(), m({ max_abs: 0.7 }));
    const flip = diagnose({ stages: [flipAt, calm, failing], first_failure: 'layer.7', verdict: 'fail' }, DEFAULT_POLICY);
    expect(flip[0]).toMatchObject({ stage: 'layer.7', cause: 'selection-flip', source: 'activations' });
    expect(flip[0].evidence).toMatch(/accumulated max_abs 0\.7, isolated 0\.05\), and at layer\.5 2 tokens chose another top-k set/);
    expect(flip[0].hint).toMatch(/not a kernel bug/);
    // a flip after the failing stage is not evidence for it
    expect(diagnose({ stages: [failing, { ...flipAt, name: 'layer.8' }], first_failure: 'layer.7', verdict: 'fail' }, DEFAULT_POLICY)[0].cause).toBe('unknown');
    const nan = diagnose(run(stage(m({ nan: { reference: 0, device: 5 } }), m())), DEFAULT_POLICY);
    expect(nan[0].cause).toBe('unknown');
    expect(nan[0].evidence).toMatch(/no Inf before the NaN .* not an overflow/);
    const inf = diagnose(run(stage(m({ inf: { reference: 0, device: 5 } }), m())), DEFAULT_POLICY);
    expect(inf[0].cause).toBe('fp16-overflow');
    expect(f16Ulp(1)).toBe(2 ** -10);
    expect(f16Ulp(6)).toBe(2 ** -8);
    expect(f16Ulp(65504)).toBe(32);
    expect(f16Ulp(1e-6)).toBe(2 ** -24);
  });
});
