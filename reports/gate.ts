/**
 * The gate's reports over every acceptance prompt, from one record (harness/gate/report.ts): JSON, JUnit (one
 * suite per prompt), Markdown and HTML (the gate's verdict, the prompt table and the merged causes first, then
 * one section per prompt). Every cause names the prompts it showed in.
 */
import type { GateReport } from '../harness/gate/report.js';
import { policyText, sci, verdictLine } from './format.js';
import { htmlPage, htmlSections } from './html.js';
import { reportJson } from './json.js';
import { junitDocument, junitSuite } from './junit.js';
import { mdCell, mdCode, renderMarkdown } from './markdown.js';
import { esc } from './svg.js';
import { printable } from '../harness/io/printable.js';

type Prompt = GateReport['prompts'][number];

/** "prompt greeting" / "prompts greeting, code (2 of 6)" / "all 6 prompts". */
export function promptsText(names: string[], total: number): string {
  if (names.length === total && total > 1) return `all ${total} prompts`;
  return names.length === 1 ? `prompt ${names[0]}` : `prompts ${names.join(', ')} (${names.length} of ${total})`;
}

/** The worst value of the policy metric of a prompt, and where (NaN/Inf outrank every number). */
export function worstOf(g: GateReport, p: Prompt): { stage: string; text: string } {
  let best = { stage: p.report.stages[0]?.name ?? '-', rank: -Infinity, text: '–' };
  for (const s of p.report.stages) {
    for (const m of [s.accumulated, s.isolated]) {
      if (m === null) continue;
      const v = m[g.policy.metric];
      const rank = Number.isFinite(v) && m.nan.device + m.inf.device === 0 ? v : Infinity;
      if (rank > best.rank) best = { stage: s.name, rank, text: sci(v) };
    }
  }
  return { stage: best.stage, text: best.text };
}

/** `FAIL layer.1 scale-axis (all 6 prompts): …` — the verdict line of the first failing prompt, with the prompts it holds for. */
export function gateVerdictLine(g: GateReport): string {
  const n = g.prompts.length;
  if (g.verdict === 'pass') return `PASS: all ${n} acceptance prompts within ${g.policy.metric} ≤ ${g.policy.fail_above}${g.policy.rule === 'floor' ? ' or their FP16 floor' : ''}`;
  const failed = g.prompts.filter((p) => p.verdict === 'fail');
  const first = failed[0];
  const line = verdictLine(first.report);
  const root = line.split(':')[0]; // FAIL <stage> <cause>
  const same = failed.filter((p) => verdictLine(p.report).split(':')[0] === root).map((p) => p.name);
  return `${root} (${promptsText(same, n)}):${line.slice(root.length + 1)}${failed.length > same.length ? ` · ${failed.length - same.length} more failing prompt${failed.length - same.length === 1 ? '' : 's'} with other causes` : ''}`;
}

export function gateCauseLines(g: GateReport): string[] {
  const n = g.prompts.length;
  return g.causes.map(
    (c) => `likely cause at ${c.stage}${c.substage ? ` (${c.substage})` : ''} in ${promptsText(c.prompts, n)}: ${c.cause} — ${c.evidence}${c.same_evidence || c.prompts.length === 1 ? '' : ` (evidence from prompt ${c.prompts[0]}; the other prompts' numbers differ)`}`,
  );
}

export function gateJson(g: GateReport): string {
  return reportJson(g);
}

export function gateJunit(g: GateReport): string {
  return junitDocument(g.prompts.map((p) => junitSuite(p.report, `layerdiff.${g.model.architecture}.${p.name}`, `prompt ${p.name}: `)));
}

export function gateMarkdown(g: GateReport): string {
  const out: string[] = [];
  out.push(`## layerdiff gate: ${g.verdict === 'pass' ? '✅ PASS' : '❌ FAIL'}`, '', `**${mdCell(gateVerdictLine(g))}**`, '');
  out.push(`- model: ${mdCode(g.model.path)} (${mdCell(g.model.architecture)}, ${g.model.num_layers} layers)`);
  out.push(`- policy: ${mdCell(policyText(g.policy))}; both modes, all stages`);
  out.push(g.record.path !== null ? `- record: ${mdCode(g.record.path)} ${g.record.written ? 'written' : 'not written'}` : '- no record (a shard or the reference side)', '');
  out.push(`| # | prompt | tokens | worst ${g.policy.metric} | at stage | verdict |`, '|---:|---|---:|---:|---|---|');
  g.prompts.forEach((p, i) => {
    const w = worstOf(g, p);
    out.push(`| ${i + 1} | ${mdCell(p.name)} | ${p.report.input.tokens.length} | ${w.text} | \`${w.stage}\` | ${p.verdict === 'pass' ? '✅ pass' : '❌ fail'} |`);
  });
  out.push('');
  if (g.causes.length > 0) {
    out.push('### Likely causes', '');
    for (const l of gateCauseLines(g)) out.push(`- ${mdCell(l)}`);
    out.push('');
  }
  for (const p of g.prompts) {
    // inside an HTML block Markdown escapes do nothing: the name is HTML-escaped (it injected live HTML)
    out.push(`<details><summary>prompt ${esc(printable(p.name))}: ${p.verdict}</summary>`, '');
    // the prompt's own summary, its headings one level down
    out.push(renderMarkdown(p.report).replace(/^(#+) /gm, '$1## '), '</details>', '');
  }
  return out.join('\n');
}

export function gateHtml(g: GateReport): string {
  const h = (s: string | number) => esc(String(s));
  const body: string[] = [];
  body.push(`<h1>layerdiff gate</h1><div class="sub">${h(g.model.architecture)}, ${g.model.num_layers} layers, ${g.prompts.length} acceptance prompts — <span class="mono">${h(g.model.path)}</span></div>`);
  body.push(`<div class="banner ${g.verdict}" id="verdict">${h(gateVerdictLine(g))}</div>`);
  body.push(`<p id="policy">policy: <span class="mono">${h(policyText(g.policy))}</span> · both modes, all stages · ${g.record.path !== null ? `record <span class="mono">${h(g.record.path)}</span> ${g.record.written ? 'written' : 'not written'}` : 'no record (a shard or the reference side)'}</p>`);
  const rows = g.prompts.map((p, i) => {
    const w = worstOf(g, p);
    return `<tr class="${p.verdict}"><td>${i + 1}</td><td class="l"><a href="#p${i + 1}-section">${h(p.name)}</a></td><td>${p.report.input.tokens.length}</td><td>${h(w.text)}</td><td class="l mono">${h(w.stage)}</td><td><span class="st-${p.verdict}">${p.verdict.toUpperCase()}</span></td></tr>`;
  });
  body.push(`<table id="prompts"><tr><th>#</th><th class="l">prompt</th><th>tokens</th><th>worst ${h(g.policy.metric)}</th><th class="l">at stage</th><th>verdict</th></tr>${rows.join('')}</table>`);
  if (g.causes.length > 0) {
    body.push('<h2 id="causes">Likely causes</h2>');
    for (const l of gateCauseLines(g)) body.push(`<div class="diag">${h(l)}</div>`);
  }
  g.prompts.forEach((p, i) => {
    body.push(`<section id="p${i + 1}-section"><h2>prompt ${i + 1}: ${h(p.name)} — ${p.verdict.toUpperCase()}</h2>`);
    body.push(...htmlSections(p.report, `p${i + 1}-`, 3), '</section>');
  });
  return htmlPage(`layerdiff gate ${g.verdict.toUpperCase()} — ${g.model.path}`, body);
}

export const GATE_WRITERS = { json: gateJson, junit: gateJunit, html: gateHtml, summary: gateMarkdown } as const satisfies Record<string, (g: GateReport) => string>;
