/**
 * The HTML report: one self-contained file (inline CSS, SVG and script; a Content-Security-Policy that
 * forbids every network fetch), readable offline and attachable to a CI run. It shows what the terminal
 * table shows and what a table cannot: per-stage error plots, |d − r| histograms of failing stages, the
 * drill-down, the weights check, the diagnosis, and the environment — with the backend stated plainly
 * ("emulated — not hardware") and an injected fault impossible to miss.
 *
 * The script is progressive: everything is in the markup; the script only adds toggles (all weights
 * tensors, chart series) and marks <html data-ready="1">, which the headless-browser test checks.
 */
import type { Report } from '../harness/runner/report.js';
import type { StageResult } from '../harness/runner/run.js';
import { backendLine, cos, describeWeights, faultText, flipsText, logitsText, modesRun, nonFiniteText, policyText, sci, verdictLine } from './format.js';
import { esc, histogramChart, logLineChart } from './svg.js';

const C = { accIso: '#1f77b4', iso: '#d62728', accRel: '#2ca02c', isoRel: '#9467bd', fail: '#c62828', warn: '#b26a00' };

const CSS = `
:root{--fail:#c62828;--warn:#b26a00;--pass:#2e7d32;--ink:#1b1b1b;--mute:#5f6368;--line:#dadce0}
*{box-sizing:border-box}body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--ink);margin:0;padding:0 24px 48px;max-width:1240px}
h1{font-size:22px;margin:18px 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
.sub{color:var(--mute)}code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
.banner{padding:12px 16px;border-radius:6px;margin:10px 0;font-weight:600}
.banner.fail{background:#fdecea;border:2px solid var(--fail);color:var(--fail);font-size:20px}
.banner.pass{background:#e8f5e9;border:2px solid var(--pass);color:var(--pass);font-size:20px}
.banner.inject{background:#fff3e0;border:2px dashed #e65100;color:#e65100}
.banner.emulated{background:#e3f2fd;border:2px solid #1565c0;color:#0d47a1}
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid var(--line);padding:3px 8px;text-align:right;vertical-align:top}
th{background:#f5f5f5}td.l,th.l{text-align:left}tr.fail td{background:#fdecea}tr.warn td{background:#fff8e1}
.st-fail{color:var(--fail);font-weight:700}.st-warn{color:var(--warn);font-weight:700}.st-pass{color:var(--pass)}
.cause{display:inline-block;font:700 15px ui-monospace,monospace;background:#263238;color:#fff;border-radius:4px;padding:1px 8px}
.diag{border-left:4px solid var(--fail);background:#fafafa;padding:8px 12px;margin:8px 0}.diag .hint{color:var(--mute)}
svg.chart{display:block;margin:8px 0;max-width:100%;height:auto}
svg .grid{stroke:#eee}svg .frame{fill:none;stroke:#bbb}svg .ylab,svg .xlab,svg .leg,svg .thrlab,svg .axlab{font:11px system-ui,sans-serif;fill:#444}
svg .ctitle{font:600 13px system-ui,sans-serif}svg .bg-fail{fill:#fdecea}svg .bg-warn{fill:#fff8e1}svg .legend{cursor:pointer}svg .series.off{display:none}svg .legend.off{opacity:.35}
.kv td:first-child{text-align:left;color:var(--mute)}.kv td{text-align:left}
.hidden-row{display:none}.carried{color:var(--mute);font-weight:400}button{font:inherit;padding:2px 10px;margin:4px 0}
`;

/** The script adds toggles only; the page is complete without it. */
const SCRIPT = `
(function(){
  document.querySelectorAll('svg.chart .legend').forEach(function(l){
    l.addEventListener('click', function(){
      var svg = l.closest('svg'); var name = l.getAttribute('data-series');
      svg.querySelectorAll('.series').forEach(function(s){ if (s.getAttribute('data-series') === name) s.classList.toggle('off'); });
      l.classList.toggle('off');
    });
  });
  document.querySelectorAll('button.show-all-weights').forEach(function(b){ b.addEventListener('click', function(){
    var rows = document.querySelectorAll('#' + b.getAttribute('data-table') + ' tr.exact');
    var show = b.getAttribute('data-shown') !== '1';
    rows.forEach(function(r){ r.classList.toggle('hidden-row', !show); });
    b.setAttribute('data-shown', show ? '1' : '0');
    b.textContent = show ? 'show differing tensors only' : 'show all ' + b.getAttribute('data-total') + ' tensors';
  }); });
  document.documentElement.setAttribute('data-ready', '1');
})();
`;

const h = (s: string | number) => esc(String(s));
const MAX_WEIGHT_ROWS = 1000;
const stCell = (s: string) => `<span class="st-${s}">${s.toUpperCase()}</span>`;

export function renderHtml(r: Report): string {
  const title = `layerdiff ${r.verdict.toUpperCase()} — ${r.model.architecture} ${r.model.path}`;
  return htmlPage(title, htmlSections(r, ''));
}

/**
 * The sections of one report's page; every id starts with `pre`, so several reports (the gate's prompts) can
 * share one page. `heading` is the level of the section titles (2 on its own page, 3 under a gate prompt).
 */
export function htmlSections(r: Report, pre: string, heading: 2 | 3 = 2): string[] {
  const body: string[] = [];
  if (heading === 2) body.push(`<h1>layerdiff report</h1><div class="sub">${h(r.model.architecture)}, ${r.model.num_layers} layers, ${r.input.tokens.length} tokens — <span class="mono">${h(r.model.path)}</span></div>`);
  body.push(
    r.verdict === 'pass'
      ? `<div class="banner pass" id="${pre}verdict">PASS — every stage within ${h(r.policy.metric)} ≤ ${r.policy.fail_above}${r.policy.rule === 'floor' ? ' or its FP16 floor' : ''}</div>`
      : `<div class="banner fail" id="${pre}verdict">FAIL — first failure: <span class="mono">${h(r.first_failure ?? '')}</span>${r.diagnosis[0] ? ` · likely cause <span class="cause">${h(r.diagnosis[0].cause)}</span>` : ''}</div>`,
  );
  body.push(`<p class="mono" id="${pre}verdict-line"><b>${h(verdictLine(r))}</b></p>`);
  if (r.injected) body.push(`<div class="banner inject" id="${pre}injected">${h(faultText(r.injected))}: this run tests the harness, not the device path.</div>`);
  const dev = r.backends.device;
  body.push(
    dev.name === 'emulated'
      ? `<div class="banner emulated" id="${pre}backend">device backend: emulated — not hardware. ${h(dev.description)}</div>`
      : `<div class="banner" id="${pre}backend">device backend: ${h(backendLine(r))}</div>`,
  );
  if (r.golden?.action === 'compared') body.push(`<div class="banner" id="${pre}golden">reference read from golden run <span class="mono">${h(r.golden.dir)}</span> (not recomputed)</div>`);

  body.push(`<h${heading} id="${pre}diagnosis">Diagnosis</h${heading}>`);
  if (r.diagnosis.length === 0) body.push('<p>No failure to explain.</p>');
  for (const d of r.diagnosis) {
    body.push(
      `<div class="diag"><div><span class="cause">${h(d.cause)}</span> at <b class="mono">${h(d.stage)}</b>${d.substage ? ` (first failing sub-stage <span class="mono">${h(d.substage)}</span>)` : ''} · from the ${h(d.source)}</div><div>${h(d.evidence)}</div>${d.hint ? `<div class="hint">hint: ${h(d.hint)}</div>` : ''}</div>`,
    );
  }

  body.push(`<h${heading} id="${pre}plots">Error per stage</h${heading}>`);
  const labels = r.stages.map((s) => s.name);
  const statuses = r.stages.map((s) => s.status);
  const ran = (series: string) => modesRun(r).some((m) => series.startsWith(m));
  const metricOf = (mode: 'accumulated' | 'isolated', k: 'max_abs' | 'rel_l2') => r.stages.map((s) => nonFiniteAware(s, mode, k));
  const thr = (metric: string) =>
    r.policy.metric === metric
      ? [
          { value: r.policy.fail_above, label: `fail > ${r.policy.fail_above}`, color: C.fail },
          ...(r.policy.warn_above > 0 ? [{ value: r.policy.warn_above, label: `warn > ${r.policy.warn_above}`, color: C.warn }] : []),
        ]
      : [];
  body.push(
    logLineChart({
      id: `${pre}plot-max-abs`,
      title: 'max |device − reference| per stage (log scale)',
      labels,
      statuses,
      series: [
        { name: 'accumulated max_abs', color: C.accIso, values: metricOf('accumulated', 'max_abs') },
        { name: 'isolated max_abs', color: C.iso, dash: '5 3', values: metricOf('isolated', 'max_abs') },
      ].filter((x) => ran(x.name)),
      thresholds: thr('max_abs'),
    }),
  );
  body.push(
    logLineChart({
      id: `${pre}plot-rel-l2`,
      title: 'rel_l2 = ‖d − r‖ / ‖r‖ per stage (log scale)',
      labels,
      statuses,
      series: [
        { name: 'accumulated rel_l2', color: C.accRel, values: metricOf('accumulated', 'rel_l2') },
        { name: 'isolated rel_l2', color: C.isoRel, dash: '5 3', values: metricOf('isolated', 'rel_l2') },
      ].filter((x) => ran(x.name)),
      thresholds: thr('rel_l2'),
    }),
  );
  body.push('<p class="sub">A kernel bug is a spike in isolated error; drift is a smooth rise in accumulated error. Hollow points on the "0" row agree exactly; points on the "∞" row have Inf/NaN.</p>');

  body.push(`<h${heading} id="${pre}stages">Stages</h${heading}>`);
  body.push(`<p id="${pre}policy">policy: <span class="mono">${h(policyText(r.policy))}</span> · mode ${h(r.mode)}</p>`);
  body.push(stageTable(r));
  const lt = logitsText(r);
  if (lt !== null) body.push(`<p id="${pre}logits">logits: ${h(lt)}</p>`);

  const drills = r.stages.filter((s) => s.drill);
  if (drills.length > 0) {
    body.push(`<h${heading} id="${pre}drill">Drill-down of failing layers</h${heading}><p class="sub">The device layer run on the reference's input; each sub-stage output compared with the reference's, in forward order.</p>`);
    for (const s of drills) {
      const d = s.drill!;
      body.push(`<h3 class="mono">${h(s.name)} → ${d.first_failing ? `first failing sub-stage <b>${h(d.first_failing)}</b>` : 'no sub-stage fails on its own'}</h3>`);
      body.push('<table><tr><th class="l">sub-stage</th><th>status</th><th>max_abs</th><th>rel_l2</th><th>cosine</th><th>max |r|</th><th>Inf/NaN (device)</th></tr>');
      for (const x of d.substages) {
        body.push(
          `<tr class="${x.status}"><td class="l mono">${h(x.name)}</td><td>${stCell(x.status)}</td><td>${sci(x.metrics.max_abs)}</td><td>${sci(x.metrics.rel_l2)}</td><td>${cos(x.metrics.cosine)}</td><td>${sci(x.metrics.max_ref)}</td><td>${x.metrics.inf.device}/${x.metrics.nan.device}</td></tr>`,
        );
      }
      body.push('</table>');
    }
  }

  const failing = r.stages.filter((s) => s.status === 'fail' && s.histogram);
  if (failing.length > 0) {
    body.push(`<h${heading} id="${pre}histograms">|d − r| histograms of failing stages</h${heading}>`);
    for (const s of failing.slice(0, 12)) {
      const hs = [];
      if (s.histogram!.accumulated) hs.push({ name: 'accumulated', color: C.accIso, h: s.histogram!.accumulated });
      if (s.histogram!.isolated) hs.push({ name: 'isolated', color: C.iso, h: s.histogram!.isolated });
      body.push(histogramChart({ id: `${pre}hist-${s.name}`, title: `${s.name}: distribution of |device − reference|`, hists: hs }));
    }
    if (failing.length > 12) body.push(`<p class="sub">… ${failing.length - 12} more failing stages (histograms in the JSON report).</p>`);
  }

  body.push(`<h${heading} id="${pre}weights">Weights check</h${heading}>`);
  if (r.weights === null) body.push('<p>Not run (--no-weights).</p>');
  else {
    const w = r.weights;
    body.push(`<p>${h(describeWeights(w))}.</p>`);
    if (w.tensors.length > 0) {
      const bad = w.tensors.filter((t) => !t.exact).length;
      body.push(`<button class="show-all-weights" id="${pre}show-all-weights" data-table="${pre}weights-table" data-total="${w.tensors.length}" data-shown="${bad === 0 ? '1' : '0'}">${bad === 0 ? 'show differing tensors only' : `show all ${w.tensors.length} tensors`}</button>`);
      body.push(`<table id="${pre}weights-table"><tr><th class="l">tensor</th><th>layer</th><th class="l">format</th><th class="l">[out×in]</th><th>exact</th><th>blocks differ</th><th>max |Δw|</th><th>NaN codes</th><th>overflow / underflow blocks</th><th class="l">reproduced by</th></tr>`);
      // differing tensors first; a real MoE checkpoint has tens of thousands, so the page shows a bounded number
      const rows = [...w.tensors.filter((t) => !t.exact), ...w.tensors.filter((t) => t.exact)].slice(0, MAX_WEIGHT_ROWS);
      for (const t of rows) {
        const cls = t.exact ? `exact${bad > 0 ? ' hidden-row' : ''}` : 'fail';
        body.push(
          `<tr class="${cls}"><td class="l mono">${h(t.name)}</td><td>${t.layer}</td><td class="l">${h(t.format)}</td><td class="l">${t.shape.join('×')}</td><td>${t.exact ? 'yes' : '<b>no</b>'}</td><td>${t.bad_blocks}/${t.blocks}</td><td>${sci(t.max_abs)}</td><td>${t.nan_codes}</td><td>${t.overflow_blocks} / ${t.underflow_blocks}</td><td class="l">${t.matches.map((m) => `<span class="cause">${h(m)}</span>`).join(' ') || (t.exact ? '' : 'none')}</td></tr>`,
        );
      }
      body.push('</table>');
      if (w.tensors.length > rows.length) body.push(`<p class="sub">${w.tensors.length - rows.length} more tensors (all exact) are listed in the JSON report.</p>`);
    }
  }

  if (r.determinism) {
    const d = r.determinism;
    body.push(`<h${heading} id="${pre}determinism">Determinism</h${heading}>`);
    body.push(`<p>${d.runs} device runs per stage: ${d.stages_with_spread.length === 0 ? 'bit-identical in every stage' : `run-to-run max |Δ| ${sci(d.max_spread)}, in ${h(d.stages_with_spread.join(', '))}`}${d.threads !== null ? ` (OpenMP threads: ${d.threads})` : ''}.</p>`);
  }

  body.push(`<h${heading} id="${pre}environment">Environment and backends</h${heading}>`);
  const kv: Array<[string, string]> = [
    ['device backend', backendLine(r)],
    ...(dev.emulates ? ([['emulates', dev.emulates]] as Array<[string, string]>) : []),
    ...(dev.simd ? ([['SIMD', dev.simd]] as Array<[string, string]>) : []),
    ...(dev.threads !== undefined ? ([['threads', String(dev.threads)]] as Array<[string, string]>) : []),
    ...Object.entries(dev.versions ?? {}).map(([k, v]) => [`version: ${k}`, v] as [string, string]),
    ['reference', r.golden?.action === 'compared' ? `golden run ${r.golden.dir}` : `${r.backends.reference.name} (${r.backends.reference.dtype})`],
    ['policy', policyText(r.policy)],
    ['mode', r.mode],
    ['layers', r.layers],
    ['model fingerprint', `${r.model.fingerprint} (${r.model.fingerprint_kind})`],
    ['input', r.input.prompt !== undefined ? `prompt ${JSON.stringify(r.input.prompt)} → ${r.input.tokens.length} tokens` : `${r.input.tokens.length} tokens`],
    ['tool', `${r.tool.name} ${r.tool.version}`],
    ...Object.entries(r.environment).map(([k, v]) => [k, String(v)] as [string, string]),
  ];
  if (r.repro) kv.push(['repro bundle', `${r.repro.dir} (${r.repro.stage}; layerdiff replay ${r.repro.dir})`]);
  if (r.golden?.action === 'saved') kv.push(['golden run saved to', r.golden.dir]);
  body.push(`<table class="kv">${kv.map(([k, v]) => `<tr><td>${h(k)}</td><td class="mono">${h(v)}</td></tr>`).join('')}</table>`);

  return body;
}

/** A self-contained page around sections (inline CSS and script, a CSP that forbids every fetch). */
export function htmlPage(title: string, body: string[]): string {
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${h(title)}</title>
<style>${CSS}</style>
</head>
<body>
${body.join('\n')}
<script>${SCRIPT}</script>
</body>
</html>
`;
}

/** A stage's metric for the plot: Infinity (the "∞" row) when the paths disagree on a non-finite element. */
function nonFiniteAware(s: StageResult, mode: 'accumulated' | 'isolated', k: 'max_abs' | 'rel_l2'): number | null {
  const m = s[mode];
  if (m === null) return null;
  if (m.nan.device + m.inf.device > m.nan.reference + m.inf.reference || !Number.isFinite(m[k])) return Infinity;
  return m[k];
}

function stageTable(r: Report): string {
  const modes = modesRun(r);
  const pre = (mode: string) => (modes.length > 1 && mode === 'isolated' ? 'iso ' : '');
  const head = modes.flatMap((m) => [`${pre(m)}max_abs`, `${pre(m)}at`, `${pre(m)}rel_l2`, `${pre(m)}cosine`]);
  const rows = [`<table><tr><th class="l">stage</th><th>status</th>${head.map((x) => `<th>${h(x)}</th>`).join('')}<th>max |r|</th><th>NaN/Inf (device)</th><th>flips</th><th>drill-down</th></tr>`];
  for (const s of r.stages) {
    const a = s.accumulated ?? s.isolated;
    const cells = modes.flatMap((mode) => {
      const m = s[mode];
      return [sci(m?.max_abs), m ? h(JSON.stringify(m.max_at)) : '–', sci(m?.rel_l2), cos(m?.cosine)];
    });
    const status = `${stCell(s.status)}${s.carried_from !== undefined ? ` <span class="carried">(carried from <span class="mono">${h(s.carried_from)}</span>)</span>` : ''}`;
    rows.push(
      `<tr class="${s.status}" data-stage="${h(s.name)}"${s.carried_from !== undefined ? ` data-carried-from="${h(s.carried_from)}"` : ''}><td class="l mono">${h(s.name)}</td><td>${status}</td>${cells.map((c, i) => `<td${i % 4 === 1 ? ' class="mono"' : ''}>${c}</td>`).join('')}<td>${sci(a?.max_ref)}</td><td>${h(nonFiniteText(s))}</td><td>${h(flipsText(s))}</td><td class="l mono">${s.drill?.first_failing ? h(s.drill.first_failing) : ''}</td></tr>`,
    );
  }
  rows.push('</table>');
  return rows.join('\n');
}
