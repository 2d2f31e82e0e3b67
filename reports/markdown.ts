/**
 * Markdown for CI job summaries (e.g. GitHub's $GITHUB_STEP_SUMMARY): the verdict and the cause first, then
 * the stage table, the drill-down and the weights check. GitHub-flavoured tables; no raw HTML, no images.
 */
import type { Report } from '../harness/runner/report.js';
import { backendLine, cos, describeDrill, describeWeights, faultText, flipsText, logitsText, mismatchedTensors, modesRun, nonFiniteText, sci, verdictLine } from './format.js';

/** Cell text: pipes and newlines would break the table row; backslash-escape the characters Markdown reads. */
export function mdCell(s: string): string {
  return s.replace(/\\/g, '\\\\').replace(/\|/g, '\\|').replace(/[\r\n]+/g, ' ').replace(/([*_`[\]<>])/g, '\\$1');
}

const STATUS = { pass: '✅ pass', warn: '⚠️ warn', fail: '❌ fail' } as const;

export function renderMarkdown(r: Report): string {
  const out: string[] = [];
  const head = r.verdict === 'pass' ? '✅ PASS' : `❌ FAIL — first failure: \`${r.first_failure}\``;
  out.push(`## layerdiff: ${head}`, '', `**${mdCell(verdictLine(r))}**`, '');
  out.push(`**${mdCell(r.model.architecture)}**, ${r.model.num_layers} layers, ${r.input.tokens.length} tokens — \`${r.model.path}\``, '');
  out.push(`- device: **${mdCell(backendLine(r))}**`);
  out.push(`- policy: \`${r.policy.metric}\` fail > ${r.policy.fail_above}, warn > ${r.policy.warn_above}; mode ${r.mode}`);
  const lt = logitsText(r);
  if (lt !== null) out.push(`- logits: ${mdCell(lt)}`);
  if (r.injected) out.push(`- ⚠️ **${mdCell(faultText(r.injected))}**`);
  if (r.golden) out.push(`- golden: ${r.golden.action} \`${r.golden.dir}\``);
  if (r.repro) out.push(`- repro bundle: \`${r.repro.dir}\` (\`layerdiff replay ${r.repro.dir}\`)`);
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
