/**
 * The terminal table: one row per stage, the numbers a numerics engineer reads first. Colour only on a TTY.
 */
import Table from 'cli-table3';
import type { Report } from '../harness/runner/report.js';
import { cos, sci } from './format.js';

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
    `reference: reference-cpu fp32 · device: ${dev.name} (${dev.description})`,
    `policy: ${r.policy.metric} fail > ${r.policy.fail_above}, warn > ${r.policy.warn_above} · mode ${r.mode}${r.injected ? ` · INJECTED FAULT ${r.injected.fault}${r.injected.layer !== null ? `@${r.injected.layer}` : ''} (simulated bug, not the real device path)` : ''}`,
    t.toString(),
  ];
  const logits = r.stages.find((s) => s.logits)?.logits;
  const lm = logits?.accumulated ?? logits?.isolated;
  if (lm) lines.push(`logits: top-1 agreement ${(lm.top1_agreement * 100).toFixed(1)}%, KL mean ${sci(lm.kl_mean)}, KL max ${sci(lm.kl_max)}`);
  const verdict = r.verdict === 'pass' ? 'PASS' : `FAIL — first failure: ${r.first_failure}`;
  lines.push(colour ? `${r.verdict === 'pass' ? COLOURS.pass : COLOURS.fail}${verdict}${RESET}` : verdict);
  for (const d of r.diagnosis) lines.push(`  likely cause at ${d.stage}: ${d.cause} — ${d.evidence}`);
  return lines.join('\n');
}
