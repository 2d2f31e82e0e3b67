/**
 * The terminal table: one row per stage, the numbers a numerics engineer reads first, then the weights
 * check, the drill-down of failing layers, the determinism probe and the diagnosis. Colour only on a TTY.
 */
import Table from 'cli-table3';
import type { Report } from '../harness/runner/report.js';
import { cos, describeDrill, describeWeights, faultText, mismatchedTensors, sci } from './format.js';

const COLOURS = { pass: '\x1b[32m', warn: '\x1b[33m', fail: '\x1b[31m' } as const;
const RESET = '\x1b[0m';

export function renderTable(r: Report, colour: boolean): string {
  const t = new Table({
    head: ['stage', 'max_abs', 'rel_l2', 'cosine', 'iso max_abs', 'nan/inf', 'status'],
    style: { head: [], border: [], compact: true },
    colAligns: ['left', 'right', 'right', 'right', 'right', 'right', 'left'],
  });
  for (const s of r.stages) {
    const a = s.accumulated ?? s.isolated;
    const nonFinite = [s.accumulated, s.isolated].reduce((n, m) => n + (m ? m.nan.device + m.inf.device : 0), 0);
    const status = colour ? `${COLOURS[s.status]}${s.status}${RESET}` : s.status;
    t.push([s.name, sci(a?.max_abs), sci(a?.rel_l2), cos(a?.cosine), sci(s.isolated?.max_abs), nonFinite > 0 ? String(nonFinite) : '0', status]);
  }
  const dev = r.backends.device;
  const lines = [
    `layerdiff ${r.tool.version} — ${r.model.architecture}, ${r.model.num_layers} layers, ${r.input.tokens.length} tokens: ${r.model.path}`,
    `reference: ${r.golden?.action === 'compared' ? `golden run ${r.golden.dir} (not recomputed)` : 'reference-cpu fp32'} · device: ${dev.name} (${dev.description})`,
    `policy: ${r.policy.metric} fail > ${r.policy.fail_above}, warn > ${r.policy.warn_above} · mode ${r.mode}${r.injected ? ` · ${faultText(r.injected)}` : ''}`,
  ];
  if (r.weights !== null) {
    lines.push(`weights: ${describeWeights(r.weights)}`);
    const bad = mismatchedTensors(r.weights);
    for (const w of bad.slice(0, 6)) {
      lines.push(`  ${w.name}  ${w.format} [${w.shape.join('×')}]  ${w.bad_blocks}/${w.blocks} blocks differ, max |Δw| ${sci(w.max_abs)}  reproduced by: ${w.matches.length > 0 ? w.matches.join(', ') : 'no catalog reading'}`);
    }
    if (bad.length > 6) lines.push(`  … and ${bad.length - 6} more (see the JSON or HTML report)`);
  }
  lines.push(t.toString());
  const logits = r.stages.find((s) => s.logits)?.logits;
  const lm = logits?.accumulated ?? logits?.isolated;
  if (lm) lines.push(`logits: top-1 agreement ${(lm.top1_agreement * 100).toFixed(1)}%, KL mean ${sci(lm.kl_mean)}, KL max ${sci(lm.kl_max)}`);
  for (const s of r.stages) if (s.drill) lines.push(`drill-down ${s.name}: ${describeDrill(s.drill)}`);
  if (r.determinism !== null) {
    const d = r.determinism;
    lines.push(
      `determinism: ${d.runs} device runs per stage: ${d.stages_with_spread.length === 0 ? 'bit-identical in every stage' : `run-to-run max |Δ| ${sci(d.max_spread)}, differing in ${d.stages_with_spread.join(', ')}`}${d.threads !== null ? ` (OpenMP threads ${d.threads})` : ''}`,
    );
  }
  if (r.golden !== null) lines.push(`golden: ${r.golden.action === 'saved' ? 'reference stage outputs saved to' : 'reference read from'} ${r.golden.dir}`);
  if (r.repro !== null) lines.push(`repro: ${r.repro.stage} exported to ${r.repro.dir} (rerun it with: layerdiff replay ${r.repro.dir})`);
  const verdict = r.verdict === 'pass' ? 'PASS' : `FAIL — first failure: ${r.first_failure}`;
  lines.push(colour ? `${r.verdict === 'pass' ? COLOURS.pass : COLOURS.fail}${verdict}${RESET}` : verdict);
  for (const d of r.diagnosis) {
    lines.push(`  likely cause at ${d.stage}${d.substage ? ` (${d.substage})` : ''}: ${d.cause} — ${d.evidence}`);
    if (d.hint) lines.push(`    hint: ${d.hint}`);
  }
  return lines.join('\n');
}
