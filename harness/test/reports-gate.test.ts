/**
 * The gate's reports (one report over every prompt, a line per prompt as it finishes, causes merged and
 * naming their prompts), a record of another checkpoint, the committed independent golden with --golden, and
 * the HTML in headless Chromium: legend labels never overlap, a NaN stage renders as NaN.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { GateReport } from '../gate/report.js';
import type { Report } from '../runner/report.js';
import { packageRoot } from '../version.js';
import { writeLlamaTiny } from '../../fixtures/llama-tiny.js';
import { cliAsync, limit } from './async-cli.js';
import { dumpDom } from './browser.js';
import { cli, LLAMA_TINY } from './cli.js';
import { children, parseXml } from './xml.js';

process.env.OMP_NUM_THREADS ??= '1';
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-reports-gate-'));
const env = { LAYERDIFF_CACHE_DIR: path.join(tmp, 'cache'), OMP_NUM_THREADS: process.env.OMP_NUM_THREADS };
const out = (name: string) => path.join(tmp, name);
const DS_TINY = () => path.join(packageRoot(), 'fixtures', 'deepseek-v4-tiny');
const DS_GOLDEN = () => path.join(packageRoot(), 'fixtures', 'deepseek-v4-tiny-golden');
// two short prompts keep each gate run to a few seconds
const prompts = out('prompts.jsonl');
fs.writeFileSync(prompts, '{"name": "hello", "prompt": "Hello there"}\n{"name": "ids", "tokens": [1, 5, 9, 14, 200, 3]}\n');

describe('gate reports', () => {
  it('a failing gate: verdict line first, a line per prompt on stderr, merged causes naming the prompts, four reports', async () => {
    const bad = out('overflow');
    writeLlamaTiny(bad, { variant: 'overflow' });
    const rec = out('overflow.json');
    const r = await cliAsync(['gate', bad, '--record', rec, '--prompts', prompts, '--json', out('g.json'), '--junit', out('g.xml'), '--summary', out('g.md'), '--html', out('g.html')], env);
    expect(r.code, r.stderr).toBe(1);
    expect(fs.existsSync(rec)).toBe(false);
    // off a TTY: one line per prompt, as each finishes, each naming the prompt
    const perPrompt = r.stderr.split('\n').filter((l) => l.startsWith('gate: prompt '));
    expect(perPrompt).toHaveLength(2);
    expect(perPrompt[0]).toMatch(/^gate: prompt 1\/2 hello: FAIL layer\.2 fp16-overflow: .* · worst max_abs NaN\/Inf at layer\.2 · \d+\.\d s$/);
    expect(r.stdout.split('\n')[0]).toMatch(/^FAIL layer\.2 fp16-overflow \(all 2 prompts\): /);
    // one cause, not one per prompt, naming both
    const causes = r.stdout.split('\n').filter((l) => l.includes('likely cause at'));
    expect(causes).toHaveLength(1);
    expect(causes[0]).toMatch(/likely cause at layer\.2 \(layer\.2\.mlp\) in all 2 prompts: fp16-overflow — /);
    const g = JSON.parse(fs.readFileSync(out('g.json'), 'utf8')) as GateReport;
    expect(g.schema).toBe('layerdiff.gate-report/1');
    expect(g.verdict).toBe('fail');
    expect(g.record.written).toBe(false);
    expect(g.prompts.map((p) => [p.name, p.verdict, p.report.schema])).toEqual([['hello', 'fail', 'layerdiff.report/1'], ['ids', 'fail', 'layerdiff.report/1']]);
    expect(g.causes).toEqual([expect.objectContaining({ stage: 'layer.2', cause: 'fp16-overflow', prompts: ['hello', 'ids'] })]);
    const suites = children(parseXml(fs.readFileSync(out('g.xml'), 'utf8')), 'testsuite');
    expect(suites.map((s) => s.attrs.name)).toEqual(['layerdiff.llama.hello', 'layerdiff.llama.ids']);
    for (const [k, s] of suites.entries()) {
      // one <failure> per stage failing on its own (this fixture's activations leave FP16 for real, so more
      // than one may), the carried ones skipped
      const own = g.prompts[k].report.stages.filter((x) => x.status === 'fail' && x.carried_from === undefined).length;
      const carried = g.prompts[k].report.stages.filter((x) => x.carried_from !== undefined).length;
      expect([s.attrs.failures, s.attrs.skipped]).toEqual([String(own), String(carried)]);
      const f = children(children(s, 'testcase').find((t) => t.attrs.name === 'layer.2')!, 'failure')[0];
      expect(f.attrs.message).toMatch(/^prompt (hello|ids): fp16-overflow: /);
    }
    const md = fs.readFileSync(out('g.md'), 'utf8');
    expect(md).toMatch(/^## layerdiff gate: ❌ FAIL/);
    expect(md.match(/<details><summary>prompt (hello|ids): fail<\/summary>/g)).toHaveLength(2);
    const html = fs.readFileSync(out('g.html'), 'utf8');
    expect(html).toContain('id="p1-section"');
    expect(html).toContain('id="p2-plot-max-abs"');
    expect(new Set(html.match(/ id="[^"]+"/g)).size).toBe(html.match(/ id="[^"]+"/g)!.length); // ids unique on the page
  });

  it('a passing gate writes the record and its reports; --json - puts the gate report on stdout', async () => {
    const rec = out('pass.json');
    const r = await cliAsync(['gate', LLAMA_TINY(), '--record', rec, '--prompts', prompts, '--json', '-', '--junit', out('p.xml')], env);
    expect(r.code, r.stderr).toBe(0);
    const g = JSON.parse(r.stdout) as GateReport;
    expect([g.verdict, g.record.written, g.prompts.length, g.causes.length]).toEqual(['pass', true, 2, 0]);
    expect(r.stderr).toMatch(/^PASS — all 2 acceptance prompts passed; record written to /m);
    expect(fs.existsSync(rec)).toBe(true);
    const root = parseXml(fs.readFileSync(out('p.xml'), 'utf8'));
    expect([root.attrs.tests, root.attrs.failures]).toEqual(['14', '0']);

    // that record, given to another checkpoint: says so, and suggests a record path of its own
    const other = cli(['generate', DS_TINY(), '--record', rec, '--tokens', '1,2,3', '--max-new-tokens', '1'], env);
    expect(other.code).toBe(3);
    expect(other.stderr.trim().split('\n')).toHaveLength(1);
    expect(other.stderr).toMatch(/pass\.json is the record of another checkpoint \(.*llama-tiny, llama\), not of .*deepseek-v4-tiny/);
    expect(other.stderr).toMatch(/run: layerdiff gate \S*deepseek-v4-tiny --record \S*deepseek-v4-tiny\.pass\.json$/m);
  });
});

describe('the committed golden (fixtures/deepseek-v4-tiny-golden) with --golden', () => {
  it('diff --golden reads the independent float64 reference and passes against the committed fixture', () => {
    const r = cli(['diff', DS_TINY(), '--golden', DS_GOLDEN(), '--json', out('golden.json')], env);
    expect(r.code, r.stderr).toBe(0);
    const rep = JSON.parse(fs.readFileSync(out('golden.json'), 'utf8')) as Report;
    expect(rep.golden).toEqual({ dir: DS_GOLDEN(), action: 'compared' });
    const manifest = JSON.parse(fs.readFileSync(path.join(DS_GOLDEN(), 'golden.json'), 'utf8')) as { tokens: number[] };
    expect(rep.input.tokens).toEqual(manifest.tokens);
    expect(rep.stages.map((s) => s.name)).toEqual(['embed', 'layer.0', 'layer.1', 'layer.2', 'layer.3', 'final_norm', 'logits']);
    // the reference's own choices are the golden's: the isolated device run takes them, no flips
    for (const s of rep.stages) expect(s.isolated!.selection_flips, s.name).toBe(0);
    expect(rep.stages.find((s) => s.name === 'logits')!.logits!.isolated!.top1_agreement).toBe(1);
  });

  it('refuses it for another checkpoint (exit 2, naming the file that differs)', () => {
    const r = cli(['diff', LLAMA_TINY(), '--golden', DS_GOLDEN()], env);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/golden\.json: --golden was computed from another checkpoint \(fixtures\/deepseek-v4-tiny\): model-00001-of-00003\.safetensors is missing here/);
  });
});

/** A script run in the page after load: per chart, legend/threshold/axis labels whose boxes intersect. */
const OVERLAP_PROBE = `<script>
(function(){
  var bad = [];
  document.querySelectorAll('svg.chart').forEach(function(svg){
    var boxes = [];
    svg.querySelectorAll('text.leg, text.thrlab, text.ylab').forEach(function(t){ var b = t.getBBox(); boxes.push({ t: t.textContent, x: b.x, y: b.y, w: b.width, h: b.height }); });
    var W = svg.viewBox.baseVal.width;
    boxes.forEach(function(a, i){
      if (a.x + a.w > W + 0.5) bad.push(svg.id + ': ' + a.t + ' runs past the edge');
      boxes.slice(i + 1).forEach(function(b){
        if (a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h) bad.push(svg.id + ': ' + a.t + ' / ' + b.t);
      });
    });
  });
  document.documentElement.setAttribute('data-overlaps', bad.length === 0 ? 'none' : bad.join(' | '));
})();
</script>`;

describe('HTML report in headless Chromium', () => {
  it('legend labels do not overlap (thresholds at every height), and a NaN stage renders as NaN', async () => {
    // thresholds swept across the plot's height, so one meets the legend's rows wherever they are
    const runs = [['--inject', 'fp16-overflow@2'], ['--fail-above', '0.005', '--warn-above', '0.004'], ['--fail-above', '1e-3', '--warn-above', '1e-4'], ['--metric', 'rel_l2', '--fail-above', '30', '--warn-above', '3']];
    const files = runs.map((_, k) => out(`chart-${k}.html`));
    await limit(2, runs.map((args, k) => () => cliAsync(['diff', ...args, '--html', files[k]])));
    for (const f of files) {
      const probe = f.replace(/\.html$/, '.probe.html');
      fs.writeFileSync(probe, fs.readFileSync(f, 'utf8').replace('</body>', `${OVERLAP_PROBE}</body>`));
      const dom = await dumpDom(probe);
      expect(/data-overlaps="([^"]*)"/.exec(dom)?.[1], f).toBe('none');
    }
    const dom = await dumpDom(files[0]);
    const row = /<tr class="fail" data-stage="layer\.3"[^>]*>(.*?)<\/tr>/.exec(dom)![1];
    const cells = [...row.matchAll(/<td[^>]*>(.*?)<\/td>/g)].map((m) => m[1].replace(/<[^>]+>/g, ''));
    // stage, status, then max_abs, at, rel_l2, cosine of the accumulated run
    expect(cells[1]).toBe('FAIL (carried from layer.2)');
    expect(cells.slice(2, 6)).toEqual(['NaN', '[0,0]', 'NaN', 'NaN']); // max_at: the first element the paths disagree on
    expect(cells).toContain('11328 NaN');
    expect(dom).toMatch(/id="verdict-line"><b>FAIL layer\.2 fp16-overflow: isolated 457 Inf on the device/);
  });
});
