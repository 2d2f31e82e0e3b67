/**
 * Issue 6's acceptance: every DESIGN §9 fault, injected into the device path of llama-tiny, is named by its
 * catalog id — in the terminal table, in the JSON `diagnosis`, in the HTML report as headless Chromium
 * renders it, in the JUnit file (parsed strictly) and in the Markdown summary — at the layer where it
 * first fails, with the first failing sub-stage from the drill-down.
 *
 * Global decode bugs show first in layer 1 (layer 0 is BF16 in this fixture); MXFP4 bugs live in the MLP,
 * scale bugs hit the FP8 attention first.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Report } from '../runner/report.js';
import { cliAsync, limit } from './async-cli.js';
import { dumpDom } from './browser.js';
import type { CliResult } from './cli.js';
import { children, parseXml } from './xml.js';

const CATALOG = [
  { inject: 'e3m0-table', cause: 'e3m0-table', stage: 'layer.1', substage: 'layer.1.mlp', source: 'weights' },
  { inject: 'nibble-swap', cause: 'nibble-swap', stage: 'layer.1', substage: 'layer.1.mlp', source: 'weights' },
  { inject: 'scale-missing', cause: 'scale-missing', stage: 'layer.1', substage: 'layer.1.attn', source: 'weights' },
  { inject: 'scale-axis@2', cause: 'scale-axis', stage: 'layer.2', substage: 'layer.2.attn', source: 'weights' },
  { inject: 'scale-stride', cause: 'scale-stride', stage: 'layer.1', substage: 'layer.1.attn', source: 'weights' },
  { inject: 'fp16-overflow@2', cause: 'fp16-overflow', stage: 'layer.2', substage: 'layer.2.mlp', source: 'activations' },
  { inject: 'e8m0-as-int', cause: 'e8m0-as-int', stage: 'layer.1', substage: 'layer.1.attn', source: 'weights' },
] as const;

const STAGES = ['embed', 'layer.0', 'layer.1', 'layer.2', 'layer.3', 'final_norm', 'logits'];

interface Outcome {
  run: CliResult;
  report: Report;
  dom: string;
  junit: string;
  summary: string;
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-catalog-'));
const outcomes = new Map<string, Outcome>();

beforeAll(async () => {
  const runs = await limit(
    2,
    CATALOG.map((c) => async () => {
      const d = path.join(tmp, c.inject);
      // two runs at a time on two cores: one OpenMP thread each, or their barriers spin against each other
      // (results do not depend on the thread count: see the determinism test)
      const run = await cliAsync(['diff', '--inject', c.inject, '--json', `${d}/r.json`, '--html', `${d}/r.html`, '--junit', `${d}/r.xml`, '--summary', `${d}/r.md`], { OMP_NUM_THREADS: '1' });
      return { c, d, run };
    }),
  );
  const doms = await limit(
    2,
    runs.map(({ d }) => () => dumpDom(`${d}/r.html`)),
  );
  runs.forEach(({ c, d, run }, k) => {
    outcomes.set(c.inject, {
      run,
      report: JSON.parse(fs.readFileSync(`${d}/r.json`, 'utf8')) as Report,
      dom: doms[k],
      junit: fs.readFileSync(`${d}/r.xml`, 'utf8'),
      summary: fs.readFileSync(`${d}/r.md`, 'utf8'),
    });
  });
}, 180_000);

describe('each §9 fault is named by its catalog id', () => {
  for (const c of CATALOG) {
    describe(`--inject ${c.inject} → ${c.cause} at ${c.stage}`, () => {
      it('terminal table', () => {
        const { run } = outcomes.get(c.inject)!;
        expect(run.code, run.stderr).toBe(1);
        expect(run.stdout).toContain(`FAIL — first failure: ${c.stage}`);
        expect(run.stdout).toContain(`likely cause at ${c.stage} (${c.substage}): ${c.cause} — `);
        expect(run.stdout).toMatch(new RegExp(`drill-down ${c.stage.replace('.', '\\.')}: .*first failing sub-stage: ${c.substage.replace(/\./g, '\\.')}`));
      });

      it('JSON diagnosis, weights and drill-down', () => {
        const { report } = outcomes.get(c.inject)!;
        expect(report.first_failure).toBe(c.stage);
        const d = report.diagnosis[0];
        expect(d).toMatchObject({ stage: c.stage, cause: c.cause, source: c.source, substage: c.substage });
        // one cause, named once: no second diagnosis competes with it
        expect(report.diagnosis.map((x) => x.cause)).toEqual([c.cause]);
        const w = report.weights!;
        expect(w.checked).toBe(21);
        if (c.source === 'weights') {
          expect(w.mismatched).toBeGreaterThan(0);
          for (const t of w.tensors.filter((x) => !x.exact)) {
            expect(t.matches, t.name).toContain(c.cause);
            if (c.inject.includes('@')) expect(t.layer, t.name).toBe(Number(c.inject.split('@')[1]));
          }
          expect(d.tensors!.length).toBe(w.mismatched);
        } else {
          expect(w.mismatched).toBe(0);
          expect(w.tensors.every((t) => t.exact)).toBe(true);
        }
        const st = report.stages.find((s) => s.name === c.stage)!;
        expect(st.drill!.first_failing).toBe(c.substage);
        expect(st.histogram!.isolated!.counts.length).toBe(28);
      });

      it('HTML rendered by headless Chromium', () => {
        const { dom } = outcomes.get(c.inject)!;
        expect(dom).toMatch(/<html[^>]*data-ready="1"/); // the page's script ran to the end
        expect(dom).toContain(`FAIL — first failure: <span class="mono">${c.stage}</span>`);
        expect(dom).toContain(`likely cause <span class="cause">${c.cause}</span>`); // the FAIL banner
        expect(dom).toContain(`<div class="diag"><div><span class="cause">${c.cause}</span> at <b class="mono">${c.stage}</b> (first failing sub-stage <span class="mono">${c.substage}</span>)`);
        expect(dom).toMatch(/device backend: emulated — not hardware/);
        expect(dom).toContain(`INJECTED FAULT ${c.inject}`);
        for (const s of STAGES) expect(dom).toContain(`data-stage="${s}"`);
        // two per-stage plots with their polylines, and one histogram per failing stage
        expect(dom.match(/<svg[^>]*data-kind="line"/g)?.length).toBe(2);
        expect(dom).toMatch(/<polyline points=/);
        const failing = outcomes.get(c.inject)!.report.stages.filter((s) => s.status === 'fail').length;
        expect(dom.match(/<svg[^>]*data-kind="histogram"/g)?.length).toBe(failing);
        expect(dom).toContain(`id="hist-${c.stage}"`);
        expect(dom).toContain(`${c.stage} → first failing sub-stage <b>${c.substage}</b>`);
        // self-contained: nothing to fetch
        expect(dom).not.toMatch(/<(?:link|img|iframe)\b|\ssrc="|url\(/);
      });

      it('JUnit XML parses and has one testcase per stage', () => {
        const { junit, report } = outcomes.get(c.inject)!;
        const root = parseXml(junit);
        expect(root.name).toBe('testsuites');
        const [suite] = children(root, 'testsuite');
        expect(suite.attrs.name).toBe('layerdiff.llama');
        expect(suite.attrs.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$/); // the JUnit XSD's form
        expect(suite.children.map((e) => e.name)).toEqual(['properties', ...STAGES.map(() => 'testcase'), 'system-out']);
        const cases = children(suite, 'testcase');
        expect(cases.map((t) => t.attrs.name)).toEqual(STAGES);
        for (const t of cases) expect(t.attrs.classname).toBe('layerdiff.llama');
        const failed = cases.filter((t) => children(t, 'failure').length === 1);
        // one <failure> per stage failing on its own; a stage carried from an earlier failure is <skipped>, naming it
        expect(failed.map((t) => t.attrs.name)).toEqual(report.stages.filter((s) => s.status === 'fail' && s.carried_from === undefined).map((s) => s.name));
        expect(Number(suite.attrs.failures)).toBe(failed.length);
        for (const s of report.stages.filter((x) => x.carried_from !== undefined)) {
          expect(children(cases.find((t) => t.attrs.name === s.name)!, 'skipped')[0].attrs.message).toMatch(new RegExp(`^carried from ${s.carried_from!.replace('.', '\\.')}: `));
        }
        const first = children(cases.find((t) => t.attrs.name === c.stage)!, 'failure')[0];
        expect(first.attrs.message).toMatch(/isolated max_abs [0-9.e+-]+ > 0\.1|Inf/);
        expect(first.text).toContain(`likely cause: ${c.cause} — `);
        expect(first.text).toContain(`first failing sub-stage: ${c.substage}`);
      });

      it('Markdown summary', () => {
        const { summary } = outcomes.get(c.inject)!;
        expect(summary).toContain(`## layerdiff: ❌ FAIL — first failure: \`${c.stage}\``);
        expect(summary).toContain(`- **\`${c.cause}\`** at \`${c.stage}\``);
        expect(summary).toMatch(/emulated — not hardware/);
      });
    });
  }
});
