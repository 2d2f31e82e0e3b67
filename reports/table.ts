/**
 * The terminal table: one row per stage, the numbers a numerics engineer reads first, then the weights
 * check, the drill-down of failing layers, the determinism probe and the diagnosis. Colour only on a TTY.
 */
import Table from 'cli-table3';
import type { Report } from '../harness/runner/report.js';
import type { Questions } from '../harness/compare/questions.js';
import { cos, describeDrill, describeWeights, faultText, flipsText, logitsText, mismatchedTensors, modesRun, nonFiniteText, policyText, sci, statusText, verdictLine } from './format.js';
import { printable } from '../harness/io/printable.js';

const COLOURS = { pass: '\x1b[32m', warn: '\x1b[33m', fail: '\x1b[31m' } as const;
const RESET = '\x1b[0m';
const BOLD = '\x1b[1m';

/**
 * One column group per mode actually run: max_abs, rel_l2 and cosine of the first mode, max_abs and rel_l2 of
 * isolated beside accumulated (a cosine per mode would push the table past 80 columns; it is in every report).
 */
function metricColumns(r: Report): { head: string[]; cells: (s: Report['stages'][number]) => string[] } {
  const modes = modesRun(r);
  const prefix = (mode: string) => (modes.length > 1 && mode === 'isolated' ? 'iso ' : '');
  return {
    head: modes.flatMap((mode, k) => [`${prefix(mode)}max_abs`, `${prefix(mode)}rel_l2`, ...(k === 0 ? [`${prefix(mode)}cosine`] : [])]),
    cells: (s) => modes.flatMap((mode, k) => [sci(s[mode]?.max_abs), sci(s[mode]?.rel_l2), ...(k === 0 ? [cos(s[mode]?.cosine)] : [])]),
  };
}

/** The verdict line alone (-q), coloured on request. */
export function renderVerdict(r: Report, colour: boolean): string {
  const vl = verdictLine(r);
  return colour ? `${BOLD}${r.verdict === 'pass' ? COLOURS.pass : COLOURS.fail}${vl}${RESET}` : vl;
}

/** The table and what follows it; `verbose` (-v) adds every differing tensor, the finite part of non-finite stages, timings and the environment. */
export function renderTable(r: Report, colour: boolean, verbose = false): string {
  const cols = metricColumns(r);
  // a column only for what this run measured: the forced mode when it ran, the floor when the floor rule measured it
  const hasForced = r.stages.some((s) => s.accumulated_forced != null);
  const hasFloor = r.stages.some((s) => s.floor !== undefined);
  const extraHead = [...(hasForced ? ['forced max_abs'] : []), ...(hasFloor ? [`floor ${r.policy.ratio_metric ?? r.policy.metric}`, 'err/floor'] : [])];
  const t = new Table({
    head: ['stage', ...cols.head, ...extraHead, 'nan/inf', 'flips', 'status'],
    style: { head: [], border: [], compact: true },
    colAligns: ['left', ...cols.head.map(() => 'right' as const), ...extraHead.map(() => 'right' as const), 'right', 'right', 'left'],
  });
  const firstFlip = r.questions?.behaviour.first_flip ?? null;
  for (const s of r.stages) {
    const status = colour ? `${COLOURS[s.status]}${statusText(s)}${RESET}` : statusText(s);
    // floor and ratio of the judged modes: isolated / forced
    const fm = s.ratio_metric ?? r.policy.metric;
    const fl = s.floor ? `${sci(s.floor.isolated?.[fm])}/${sci(s.floor.accumulated_forced?.[fm])}` : '-';
    const ratio = s.floor_ratio ? `${ratioText(s.floor_ratio.isolated)}/${ratioText(s.floor_ratio.accumulated_forced)}` : '-';
    const f = s.flips?.accumulated ?? s.flips?.isolated ?? null;
    const flips = f === null ? flipsText(s) : `${f.count}${f.scoring_bug > 0 ? ` (${f.scoring_bug} bug)` : ''}${s.name === firstFlip ? ' first' : ''}`;
    t.push([s.name, ...cols.cells(s), ...(hasForced ? [sci(s.accumulated_forced?.max_abs)] : []), ...(hasFloor ? [fl, ratio] : []), nonFiniteText(s), flips, status]);
  }
  const dev = r.backends.device;
  const lines = [
    renderVerdict(r, colour),
    // paths and names from a saved run's manifest or the user's folders: shown, never obeyed by the terminal
    `layerdiff ${r.tool.version} — ${printable(r.model.architecture)}, ${r.model.num_layers} layers, ${r.input.tokens.length} tokens: ${printable(r.model.path)}`,
    `reference: ${r.golden?.action === 'compared' ? `golden run ${printable(r.golden.dir)} (not recomputed)` : 'reference-cpu fp32'} · device: ${printable(dev.name)} (${printable(dev.description)})`,
    `policy: ${policyText(r.policy)} · mode ${r.mode}${r.injected ? ` · ${faultText(r.injected)}` : ''}`,
  ];
  if (r.weights !== null) {
    lines.push(`weights: ${describeWeights(r.weights)}`);
    const bad = mismatchedTensors(r.weights);
    const shown = verbose ? bad.length : 6;
    for (const w of bad.slice(0, shown)) {
      lines.push(`  ${w.name}  ${w.format} [${w.shape.join('×')}]  ${w.bad_blocks}/${w.blocks} blocks differ, max |Δw| ${sci(w.max_abs)}  reproduced by: ${w.matches.length > 0 ? w.matches.join(', ') : 'no catalog reading'}`);
    }
    if (bad.length > shown) lines.push(`  … and ${bad.length - shown} more (-v lists them; so do the JSON and HTML reports)`);
  }
  lines.push(t.toString());
  const lt = logitsText(r);
  if (lt !== null) lines.push(`logits: ${lt}`);
  if (r.questions !== null && r.questions !== undefined) lines.push(...questionLines(r.questions));
  for (const s of r.stages) if (s.drill) lines.push(`drill-down ${s.name}: ${describeDrill(s.drill)}`);
  if (verbose) {
    for (const s of r.stages) {
      for (const mode of modesRun(r)) {
        const f = s[mode]?.finite;
        if (f) lines.push(`finite part of ${s.name} (${mode}, ${f.count} elements where both paths are finite): max_abs ${sci(f.max_abs)}, rel_l2 ${sci(f.rel_l2)}, cosine ${cos(f.cosine)}`);
      }
    }
    lines.push(`time per stage (reference / device, ms): ${r.stages.map((s) => `${s.name} ${s.time_ms.reference.toFixed(0)}/${s.time_ms.device.toFixed(0)}`).join(', ')}`);
    lines.push(`environment: ${Object.entries(r.environment).map(([k, v]) => `${k} ${v}`).join(' · ')}`);
  }
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

const ratioText = (x: number | null | undefined) => (x === null || x === undefined ? '-' : Number.isFinite(x) ? x.toFixed(2) : 'inf');

/** The three questions, one line each (README "Reading the verdict"). */
export function questionLines(q: Questions): string[] {
  const num = (label: string, a: Questions['own_error']) => {
    if (a.status === 'not-run') return `${label}: not run`;
    const w = a.worst;
    const fig = w === null ? '' : ` — worst ${w.stage}: ${w.metric} ${sci(w.error)}${w.floor !== null ? `, floor ${sci(w.floor)}, ratio ${ratioText(w.ratio)}` : ''}`;
    return `${label}: ${a.status}${a.first_failure !== null ? ` (first failure ${a.first_failure})` : ''}${fig}`;
  };
  const b = q.behaviour;
  const lm = b.logits;
  const beh =
    b.status === 'not-run'
      ? 'behaviour (accumulated): not run'
      : `behaviour (accumulated): ${b.status}${lm ? ` — ${behaviourFigures(lm, b.thresholds)}` : ''}` +
        `; ${b.flips.count} top-k flip${b.flips.count === 1 ? '' : 's'}${b.flips.count > 0 ? ` (${b.flips.benign} benign, ${b.flips.scoring_bug} scoring bug${b.flips.unjudged > 0 ? `, ${b.flips.unjudged} unjudged` : ''}; first at ${b.first_flip})` : ''}` +
        `${b.reasons.length > 0 ? ` — ${b.reasons.join('; ')}` : ''}`;
  return [num('own error (isolated)', q.own_error), num('drift (accumulated-forced)', q.drift), beh];
}

/**
 * The behaviour figures as judged: top-1, mean and p99 KL over the tokens without a benign flip when some
 * flipped (their all-token values in brackets), else over every token.
 */
export function behaviourFigures(lm: NonNullable<Questions['behaviour']['logits']>, t: { top1_min: number; kl_mean_max: number; kl_p99_max: number }): string {
  const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
  const judged = lm.kl_p99_unflipped !== undefined;
  const all = (x: string) => (judged ? ` [all: ${x}]` : '');
  const figures =
    `top-1 ${pct(lm.top1_agreement_decided ?? lm.top1_agreement_unflipped ?? lm.top1_agreement)}${all(pct(lm.top1_agreement))} (≥ ${(t.top1_min * 100).toFixed(0)}%${(lm.top1_near_ties ?? 0) > 0 ? `; ${lm.top1_near_ties} near-tie${lm.top1_near_ties === 1 ? '' : 's'} within ${sci(lm.tie_bound)} left out` : ''}), ` +
    `KL mean ${sci(lm.kl_mean_unflipped ?? lm.kl_mean)}${all(sci(lm.kl_mean))} (≤ ${t.kl_mean_max}), p99 ${sci(lm.kl_p99_unflipped ?? lm.kl_p99)}${all(sci(lm.kl_p99))} (≤ ${t.kl_p99_max})`;
  if (!judged) return figures;
  return `${figures}, over the ${lm.flipped_tokens === 1 ? 'tokens but the one' : `tokens but the ${lm.flipped_tokens}`} with a benign flip`;
}
