/**
 * JUnit XML for CI test tabs: one testcase per stage (classname layerdiff.<architecture>), a <failure> with
 * the metrics for a failing stage, warnings and the drill-down in <system-out>, the diagnosis in the suite's
 * <system-out>. Text is escaped for XML 1.0, and characters XML 1.0 cannot carry at all are dropped.
 * Attribute forms follow the common JUnit XSD (Ant/Jenkins): a timestamp without zone or fraction, the
 * properties before the testcases, the suite's output last.
 */
import * as os from 'node:os';
import type { Report } from '../harness/runner/report.js';
import { backendLine, cos, describeDrill, describeWeights, faultText, policyText, sci, stageFailure, verdictLine } from './format.js';

/** XML 1.0 Char production: tab, LF, CR, and U+0020.. except surrogates and U+FFFE/FFFF. */
const NOT_XML_CHAR = /[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu;

/** A character XML cannot hold, shown as its code (was dropped: two prompt names could become one suite name). */
const shownCode = (c: string) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;

export function xmlEscape(s: string): string {
  return s.replace(NOT_XML_CHAR, shownCode).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&apos;');
}

// in an attribute a parser turns tab, LF and CR into spaces unless they are character references
const attrs = (a: Record<string, string | number>) =>
  Object.entries(a)
    .map(([k, v]) => ` ${k}="${xmlEscape(String(v)).replace(/\t/g, '&#9;').replace(/\n/g, '&#10;').replace(/\r/g, '&#13;')}"`)
    .join('');

export function renderJunit(r: Report): string {
  const suite = junitSuite(r, `layerdiff.${r.model.architecture}`);
  return junitDocument([suite]);
}

export interface JunitSuite {
  lines: string[];
  tests: number;
  failures: number;
  skipped: number;
  time: number;
}

/** Several suites (the gate: one per prompt) under one <testsuites> root. */
export function junitDocument(suites: JunitSuite[]): string {
  const sum = (k: 'tests' | 'failures' | 'skipped' | 'time') => suites.reduce((t, s) => t + s[k], 0);
  const out: string[] = ['<?xml version="1.0" encoding="UTF-8"?>'];
  out.push(`<testsuites${attrs({ name: 'layerdiff', tests: sum('tests'), failures: sum('failures'), errors: 0, skipped: sum('skipped'), time: sum('time').toFixed(3) })}>`);
  for (const s of suites) out.push(...s.lines);
  out.push('</testsuites>');
  return out.join('\n') + '\n';
}

/** One <testsuite> for one report: a testcase per stage; `label` prefixes every message (the gate's prompt name). */
export function junitSuite(r: Report, name: string, label = ''): JunitSuite {
  const classname = name;
  // a carried stage is <skipped>, not a <failure>: the failure count is then the number of stages that fail
  // on their own (one bug, one red test), and the skip message names the root it waits on
  const failures = r.stages.filter((s) => s.status === 'fail' && s.carried_from === undefined).length;
  const skipped = r.stages.filter((s) => s.carried_from !== undefined).length;
  const time = (s: Report['stages'][number]) => ((s.time_ms.reference + s.time_ms.device) / 1000).toFixed(3);
  const total = r.stages.reduce((t, s) => t + (s.time_ms.reference + s.time_ms.device) / 1000, 0);
  const totalTime = total.toFixed(3);
  const out: string[] = [];
  out.push(
    `  <testsuite${attrs({ name, tests: r.stages.length, failures, errors: 0, skipped, time: totalTime, timestamp: String(r.environment.started ?? '').replace(/\.\d+Z$|Z$/, ''), hostname: os.hostname() || 'localhost' })}>`,
  );
  out.push('    <properties>');
  const props: Record<string, string> = {
    model: r.model.path,
    fingerprint: r.model.fingerprint,
    device: backendLine(r),
    policy: policyText(r.policy),
    mode: r.mode,
    verdict: r.verdict,
    verdict_line: verdictLine(r),
    tokens: String(r.input.tokens.length),
  };
  if (r.injected) props.injected = faultText(r.injected);
  for (const [name, value] of Object.entries(props)) out.push(`      <property${attrs({ name, value })}/>`);
  out.push('    </properties>');
  for (const s of r.stages) {
    out.push(`    <testcase${attrs({ classname, name: s.name, time: time(s) })}>`);
    const notes: string[] = [];
    if (s.carried_from !== undefined) {
      const msg = `${label}carried from ${s.carried_from}: fails only on the device's own accumulated input; on the reference's input (isolated) it passes — fix ${s.carried_from} first`;
      out.push(`      <skipped${attrs({ message: msg })}/>`);
      notes.push(`FAIL (carried from ${s.carried_from}): ${stageFailure(r, s.name)}`, ...metricLines(s));
    } else if (s.status === 'fail') {
      const cause = r.diagnosis.find((x) => x.stage === s.name);
      const msg = `${label}${cause !== undefined ? `${cause.cause}: ` : ''}${stageFailure(r, s.name)}`;
      const detail = [msg, ...metricLines(s), ...(s.drill ? [`drill-down: ${describeDrill(s.drill)}`] : [])];
      for (const d of r.diagnosis.filter((x) => x.stage === s.name)) detail.push(`likely cause: ${d.cause} — ${d.evidence}`);
      out.push(`      <failure${attrs({ message: msg, type: 'layerdiff.stage-failed' })}>${xmlEscape(detail.join('\n'))}</failure>`);
    } else {
      notes.push(...metricLines(s));
      if (s.status === 'warn') {
        // over fail-above yet a warning: the FP16 floor excused it, which the note says rather than "> warn-above"
        const excused = (['isolated', 'accumulated'] as const).some((m) => (s[m]?.[r.policy.metric] ?? 0) > r.policy.fail_above);
        notes.unshift(`WARN: ${stageFailure(r, s.name)}${excused ? ', within its FP16 floor' : ` > warn-above ${r.policy.warn_above}`}`);
      }
    }
    if (notes.length > 0) out.push(`      <system-out>${xmlEscape(notes.join('\n'))}</system-out>`);
    out.push('    </testcase>');
  }
  const summary = [
    verdictLine(r),
    `${r.verdict.toUpperCase()}${r.first_failure ? ` — first failure: ${r.first_failure}` : ''}`,
    `device: ${backendLine(r)}`,
    ...(r.injected ? [faultText(r.injected)] : []),
    ...(r.weights ? [`weights: ${describeWeights(r.weights)}`] : []),
    ...r.diagnosis.map((d) => `likely cause at ${d.stage}: ${d.cause} — ${d.evidence}`),
  ];
  out.push(`    <system-out>${xmlEscape(summary.join('\n'))}</system-out>`);
  out.push('  </testsuite>');
  return { lines: out, tests: r.stages.length, failures, skipped, time: total };
}

function metricLines(s: Report['stages'][number]): string[] {
  const out: string[] = [];
  for (const mode of ['accumulated', 'isolated'] as const) {
    const m = s[mode];
    if (m === null) continue;
    out.push(
      `${mode}: max_abs ${sci(m.max_abs)} at [${m.max_at.join(', ')}], mean_abs ${sci(m.mean_abs)}, rms ${sci(m.rms)}, rel_l2 ${sci(m.rel_l2)}, cosine ${cos(m.cosine)}, max |r| ${sci(m.max_ref)}, nan ${m.nan.device}/${m.nan.reference}, inf ${m.inf.device}/${m.inf.reference}, selection flips ${m.selection_flips}${m.finite ? `; finite part (${m.finite.count} elements): max_abs ${sci(m.finite.max_abs)}, rel_l2 ${sci(m.finite.rel_l2)}, cosine ${cos(m.finite.cosine)}` : ''}`,
    );
  }
  for (const mode of ['accumulated', 'isolated'] as const) {
    const lm = s.logits?.[mode];
    if (lm) out.push(`${mode} logits: top-1 agreement ${(lm.top1_agreement * 100).toFixed(1)}%, KL mean ${sci(lm.kl_mean)}, KL max ${sci(lm.kl_max)}`);
  }
  return out;
}
