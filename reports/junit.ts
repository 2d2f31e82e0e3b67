/**
 * JUnit XML for CI test tabs: one testcase per stage (classname layerdiff.<architecture>), a <failure> with
 * the metrics for a failing stage, warnings and the drill-down in <system-out>, the diagnosis in the suite's
 * <system-out>. Text is escaped for XML 1.0, and characters XML 1.0 cannot carry at all are dropped.
 * Attribute forms follow the common JUnit XSD (Ant/Jenkins): a timestamp without zone or fraction, the
 * properties before the testcases, the suite's output last.
 */
import * as os from 'node:os';
import type { Report } from '../harness/runner/report.js';
import { backendLine, describeDrill, describeWeights, faultText, sci, stageFailure } from './format.js';

/** XML 1.0 Char production: tab, LF, CR, and U+0020.. except surrogates and U+FFFE/FFFF. */
const NOT_XML_CHAR = /[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu;

export function xmlEscape(s: string): string {
  return s.replace(NOT_XML_CHAR, '').replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&apos;');
}

const attrs = (a: Record<string, string | number>) =>
  Object.entries(a)
    .map(([k, v]) => ` ${k}="${xmlEscape(String(v))}"`)
    .join('');

export function renderJunit(r: Report): string {
  const classname = `layerdiff.${r.model.architecture}`;
  const failures = r.stages.filter((s) => s.status === 'fail').length;
  const time = (s: Report['stages'][number]) => ((s.time_ms.reference + s.time_ms.device) / 1000).toFixed(3);
  const totalTime = r.stages.reduce((t, s) => t + (s.time_ms.reference + s.time_ms.device) / 1000, 0).toFixed(3);
  const out: string[] = ['<?xml version="1.0" encoding="UTF-8"?>'];
  out.push(`<testsuites${attrs({ name: 'layerdiff', tests: r.stages.length, failures, errors: 0, time: totalTime })}>`);
  out.push(
    `  <testsuite${attrs({ name: classname, tests: r.stages.length, failures, errors: 0, skipped: 0, time: totalTime, timestamp: String(r.environment.started ?? '').replace(/\.\d+Z$|Z$/, ''), hostname: os.hostname() || 'localhost' })}>`,
  );
  out.push('    <properties>');
  const props: Record<string, string> = {
    model: r.model.path,
    fingerprint: r.model.fingerprint,
    device: backendLine(r),
    policy: `${r.policy.metric} fail > ${r.policy.fail_above}, warn > ${r.policy.warn_above}`,
    mode: r.mode,
    verdict: r.verdict,
    tokens: String(r.input.tokens.length),
  };
  if (r.injected) props.injected = faultText(r.injected);
  for (const [name, value] of Object.entries(props)) out.push(`      <property${attrs({ name, value })}/>`);
  out.push('    </properties>');
  for (const s of r.stages) {
    out.push(`    <testcase${attrs({ classname, name: s.name, time: time(s) })}>`);
    const notes: string[] = [];
    if (s.status === 'fail') {
      const msg = stageFailure(r, s.name);
      const detail = [msg, ...metricLines(s), ...(s.drill ? [`drill-down: ${describeDrill(s.drill)}`] : [])];
      for (const d of r.diagnosis.filter((x) => x.stage === s.name)) detail.push(`likely cause: ${d.cause} — ${d.evidence}`);
      out.push(`      <failure${attrs({ message: msg, type: 'layerdiff.stage-failed' })}>${xmlEscape(detail.join('\n'))}</failure>`);
    } else {
      notes.push(...metricLines(s));
      if (s.status === 'warn') notes.unshift(`WARN: ${stageFailure(r, s.name)} > warn-above ${r.policy.warn_above}`);
    }
    if (notes.length > 0) out.push(`      <system-out>${xmlEscape(notes.join('\n'))}</system-out>`);
    out.push('    </testcase>');
  }
  const summary = [
    `${r.verdict.toUpperCase()}${r.first_failure ? ` — first failure: ${r.first_failure}` : ''}`,
    `device: ${backendLine(r)}`,
    ...(r.injected ? [faultText(r.injected)] : []),
    ...(r.weights ? [`weights: ${describeWeights(r.weights)}`] : []),
    ...r.diagnosis.map((d) => `likely cause at ${d.stage}: ${d.cause} — ${d.evidence}`),
  ];
  out.push(`    <system-out>${xmlEscape(summary.join('\n'))}</system-out>`);
  out.push('  </testsuite>');
  out.push('</testsuites>');
  return out.join('\n') + '\n';
}

function metricLines(s: Report['stages'][number]): string[] {
  const out: string[] = [];
  for (const mode of ['accumulated', 'isolated'] as const) {
    const m = s[mode];
    if (m === null) continue;
    out.push(
      `${mode}: max_abs ${sci(m.max_abs)} at [${m.max_at.join(', ')}], mean_abs ${sci(m.mean_abs)}, rms ${sci(m.rms)}, rel_l2 ${sci(m.rel_l2)}, cosine ${m.cosine.toFixed(6)}, max |r| ${sci(m.max_ref)}, nan ${m.nan.device}/${m.nan.reference}, inf ${m.inf.device}/${m.inf.reference}, selection flips ${m.selection_flips}`,
    );
  }
  return out;
}
