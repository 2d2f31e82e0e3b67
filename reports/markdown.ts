/**
 * Markdown for CI job summaries (e.g. GitHub's $GITHUB_STEP_SUMMARY): the verdict and the cause first, then
 * the stage table, the drill-down and the weights check. GitHub-flavoured tables; no raw HTML, no images.
 */
import type { Report } from '../harness/runner/report.js';
import { backendLine, cos, describeDrill, describeWeights, faultText, flipsText, logitsText, mismatchedTensors, modesRun, nonFiniteText, policyText, sci, verdictLine } from './format.js';
import { printable } from '../harness/io/printable.js';

/** Cell text: pipes and newlines would break the table row; backslash-escape the characters Markdown reads, `&`
 *  as an entity (else `&amp;` shows as `&`), control characters shown escaped. */
export function mdCell(s: string): string {
  return printable(s.replace(/[\r\n]+/g, ' '))
    .replace(/\\/g, '\\\\')
    .replace(/\|/g, '\\|')
    .replace(/&/g, '&amp;')
    .replace(/([*_`[\]<>])/g, '\\$1');
}

/**
 * An inline code span holding `s` whatever it contains (a model folder named by its user, a manifest's path): line
 * breaks and control characters shown escaped, and a fence of more backticks than any run inside it (CommonMark),
 * padded with a space where `s` starts or ends with a backtick. A path written raw between backticks ended the span
 * at its first backtick, and what followed rendered as Markdown and HTML.
 */
export function mdCode(s: string): string {
  const t = printable(s);
  const fence = '`'.repeat(Math.max(0, ...(t.match(/`+/g) ?? []).map((run) => run.length)) + 1);
  const pad = t.startsWith('`') || t.endsWith('`') ? ' ' : '';
  return `${fence}${pad}${t}${pad}${fence}`;
}

const STATUS = { pass: '✅ pass', warn: '⚠️ warn', fail: '❌ fail' } as const;

export function renderMarkdown(r: Report): string {
  const out: string[] = [];
  const head = r.verdict === 'pass' ? '✅ PASS' : `❌ FAIL — first failure: ${mdCode(r.first_failure ?? '')}`;
  out.push(`## layerdiff: ${head}`, '', `**${mdCell(verdictLine(r))}**`, '');
  out.push(`**${mdCell(r.model.architecture)}**, ${r.model.num_layers} layers, ${r.input.tokens.length} tokens — ${mdCode(r.model.path)}`, '');
  out.push(`- device: **${mdCell(backendLine(r))}**`);
  out.push(`- policy: ${mdCell(policyText(r.policy))}; mode ${r.mode}`);
  const lt = logitsText(r);
  if (lt !== null) out.push(`- logits: ${mdCell(lt)}`);
  if (r.injected) out.push(`- ⚠️ **${mdCell(faultText(r.injected))}**`);
  if (r.golden) out.push(`- golden: ${r.golden.action} ${mdCode(r.golden.dir)}`);
  if (r.repro) out.push(`- repro bundle: ${mdCode(r.repro.dir)} (${mdCode(`layerdiff replay ${r.repro.dir}`)})`);
  out.push('');
  if (r.diagnosis.length > 0) {
    out.push('### Likely cause', '');
    for (const d of r.diagnosis) {
      out.push(`- **\`${d.cause}\`** at \`${d.stage}\`${d.substage ? ` (\`${d.substage}\`)` : ''}: ${mdCell(d.evidence)}${d.hint ? `  \n  _hint:_ ${mdCell(d.hint)}` : ''}`);
    }
    out.push('');
  }
  out.push('### Stages', '');
  const modes = modesRun(r);
  const pre = (mode: string) => (modes.length > 1 && mode === 'isolated' ? 'iso ' : '');
  const cols = modes.flatMap((m, k) => [`${pre(m)}max_abs`, `${pre(m)}rel_l2`, ...(k === 0 ? [`${pre(m)}cosine`] : [])]);
  out.push(`| stage | status | ${cols.join(' | ')} | nan/inf | flips |`);
  out.push(`|---|---|${cols.map(() => '---:|').join('')}---:|---:|`);
  for (const s of r.stages) {
    const cells = modes.flatMap((m, k) => [sci(s[m]?.max_abs), sci(s[m]?.rel_l2), ...(k === 0 ? [cos(s[m]?.cosine)] : [])]);
    const status = s.carried_from !== undefined ? `${STATUS[s.status]} (carried from \`${s.carried_from}\`)` : STATUS[s.status];
    out.push(`| \`${s.name}\` | ${status} | ${cells.join(' | ')} | ${nonFiniteText(s)} | ${flipsText(s)} |`);
  }
  out.push('');
  const drills = r.stages.filter((s) => s.drill);
  if (drills.length > 0) {
    out.push('### Drill-down', '');
    for (const s of drills) out.push(`- \`${s.name}\`: ${mdCell(describeDrill(s.drill!))}`);
    out.push('');
  }
  if (r.weights) {
    out.push('### Weights check', '', mdCell(describeWeights(r.weights)), '');
    const bad = mismatchedTensors(r.weights);
    if (bad.length > 0) {
      out.push('| tensor | format | blocks differ | max abs Δw | reproduced by |', '|---|---|---:|---:|---|');
      for (const t of bad.slice(0, 20)) out.push(`| \`${t.name}\` | ${t.format} | ${t.bad_blocks}/${t.blocks} | ${sci(t.max_abs)} | ${t.matches.length > 0 ? t.matches.map((m) => `\`${m}\``).join(', ') : 'none'} |`);
      if (bad.length > 20) out.push(`| … ${bad.length - 20} more | | | | |`);
      out.push('');
    }
  }
  if (r.determinism) {
    const d = r.determinism;
    out.push(`**Determinism:** ${d.runs} device runs per stage — ${d.stages_with_spread.length === 0 ? 'bit-identical in every stage' : `max run-to-run |Δ| ${sci(d.max_spread)} in ${d.stages_with_spread.join(', ')}`}.`, '');
  }
  out.push(`_layerdiff ${r.tool.version} · ${mdCell(String(r.environment.started ?? ''))} · ${r.environment.elapsed_s} s_`, '');
  return out.join('\n');
}
