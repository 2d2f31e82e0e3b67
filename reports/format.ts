/** Formatting shared by the printers, so every output says the same thing in the same words. */
import type { Policy } from '../harness/compare/policy.js';
import type { Report } from '../harness/runner/report.js';
import type { Drill } from '../harness/runner/run.js';
import type { TensorCheck, WeightsReport } from '../harness/weights/check.js';

/** Three significant digits, exponent form for small values. */
export function sci(x: number | null | undefined): string {
  if (x === null || x === undefined) return '–';
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? 'Inf' : '-Inf';
  if (x === 0) return '0';
  const a = Math.abs(x);
  return a >= 1e-2 && a < 1e4 ? x.toPrecision(3) : x.toExponential(2);
}

export function cos(x: number | null | undefined): string {
  if (x === null || x === undefined) return '–';
  return Number.isFinite(x) ? x.toFixed(6) : sci(x);
}

export function faultText(f: NonNullable<Report['injected']>): string {
  return `INJECTED FAULT ${f.fault}${f.layer !== null ? `@${f.layer}` : ''} (simulated bug, not the real device path)`;
}

export function layerRange(w: WeightsReport): string {
  return w.layers[0] === w.layers[1] ? `layer ${w.layers[0]}` : `layers ${w.layers[0]}–${w.layers[1]}`;
}

export function describeWeights(w: WeightsReport): string {
  if (w.checked === 0) return 'no quantized tensors in the range: nothing to check';
  const extras = [
    w.nan_codes > 0 ? `${w.nan_codes} NaN codes` : null,
    w.overflow_blocks > 0 ? `${w.overflow_blocks} blocks overflow FP16` : null,
    w.underflow_blocks > 0 ? `${w.underflow_blocks} blocks underflow FP16 (non-zero weights become 0)` : null,
  ].filter((x) => x !== null);
  // per format when the checkpoint mixes several, or when any loses FP16 range (which format is the evidence)
  const formats = Object.entries(w.by_format ?? {});
  const perFormat =
    formats.length > 1 || w.overflow_blocks + w.underflow_blocks > 0
      ? ` [${formats.map(([id, f]) => `${id} ${f!.tensors}${f!.overflow_blocks + f!.underflow_blocks > 0 ? ` (${f!.overflow_blocks} of ${f!.blocks} blocks overflow, ${f!.underflow_blocks} underflow)` : ''}`).join(', ')}]`
      : '';
  const reused = w.reused !== undefined ? `, reused from the check of ${w.reused.at} (${w.reused.tool}, same fingerprint ${w.reused.fingerprint.slice(0, 19)}…, same numerics build; --recheck-weights to run it again)` : '';
  return (
    `${w.checked} quantized tensors (${layerRange(w)})${perFormat} checked before any activation${reused}: ` +
    (w.mismatched === 0 ? 'every device FP16 weight equals the reference\'s exact dequantization' : `${w.exact} exact, ${w.mismatched} differ from the reference's exact dequantization`) +
    (extras.length > 0 ? `; ${extras.join(', ')}` : '')
  );
}

export function mismatchedTensors(w: WeightsReport): TensorCheck[] {
  return w.tensors.filter((t) => !t.exact);
}

export function describeDrill(d: Drill): string {
  if (d.substages.length === 0) return 'the paths record no sub-stages for this layer';
  const parts = d.substages.map((s) => `${s.name.split('.').slice(2).join('.')} ${s.status} (max_abs ${sci(s.metrics.max_abs)}${s.metrics.nan.device + s.metrics.inf.device > 0 ? `, ${s.metrics.inf.device} Inf, ${s.metrics.nan.device} NaN` : ''})`);
  return `${parts.join(' · ')} → ${d.first_failing !== null ? `first failing sub-stage: ${d.first_failing}` : 'no sub-stage fails on the reference\'s input (the failure is carried in from earlier stages, or builds up across sub-stages)'}`;
}

/** Short human line for the backend, saying plainly when the numbers do not come from GPU hardware. */
export function backendLine(r: Report): string {
  const d = r.backends.device;
  return d.name === 'emulated' ? `emulated — not hardware: ${d.description}` : `${d.name}${d.device_name ? ` on ${d.device_name}` : ''}${d.arch ? ` (${d.arch})` : ''}`;
}

/** The failure message of a stage (JUnit, Markdown): the metric that failed, in both modes (only the deciding one when `short`). */
export function stageFailure(r: Report, name: string, short = false): string {
  const s = r.stages.find((x) => x.name === name)!;
  const p = r.policy;
  if (short) {
    // isolated decides when it fails (the stage's own error), else the accumulated run
    const isoFails = s.isolated !== null && (s.isolated[p.metric] > p.fail_above || !Number.isFinite(s.isolated[p.metric]));
    const mode = isoFails || s.accumulated === null ? 'isolated' : 'accumulated';
    const m = s[mode]!;
    const nf = m.nan.device + m.inf.device > m.nan.reference + m.inf.reference;
    if (!nf && m.nan.reference + m.inf.reference > 0) return `the FP32 reference itself is non-finite (${m.nan.reference} NaN, ${m.inf.reference} Inf)`;
    return nf
      ? `${mode} ${[m.nan.device > 0 ? `${m.nan.device} NaN` : '', m.inf.device > 0 ? `${m.inf.device} Inf` : ''].filter((x) => x !== '').join(' and ')} on the device (reference ${m.nan.reference + m.inf.reference})`
      : `${mode} ${p.metric} ${sci(m[p.metric])} > ${p.fail_above}`;
  }
  const part = (mode: 'accumulated' | 'isolated') => {
    const m = s[mode];
    if (m === null) return null;
    const nf = m.nan.device + m.inf.device > m.nan.reference + m.inf.reference ? `, ${m.inf.device} Inf / ${m.nan.device} NaN on the device (reference ${m.inf.reference} / ${m.nan.reference})` : '';
    return `${mode} ${p.metric} ${sci(m[p.metric])}${m[p.metric] > p.fail_above ? ` > ${p.fail_above}` : ''}${nf}`;
  };
  return [part('isolated'), part('accumulated')].filter((x) => x !== null).join('; ');
}

/** The policy in one line, for tables and summaries. */
export function policyText(p: Policy): string {
  const base = `${p.metric} fail > ${p.fail_above}, warn > ${p.warn_above}`;
  if (p.rule === 'fixed') return `${base} (fixed rule)`;
  return `${base} unless within ${p.floor_excuse}× the FP16 floor; fail when ${p.ratio_metric} error/floor > ${p.floor_ratio}${p.source !== 'default' ? ` · policy ${p.source}` : ''}`;
}

type Stage = Report['stages'][number];

/** The status as every printer shows it: `fail (carried from layer.1)` for a stage that fails only on its carried-in input. */
export function statusText(s: Stage): string {
  return s.carried_from !== undefined ? `${s.status} (carried from ${s.carried_from})` : s.status;
}

/** Device NaN/Inf of a stage, per mode that has any: `0`, `914 Inf`, `11328 NaN`, `iso 457 Inf`. */
export function nonFiniteText(s: Stage): string {
  const one = (m: Stage['accumulated']) => (m === null ? '' : [m.nan.device > 0 ? `${m.nan.device} NaN` : '', m.inf.device > 0 ? `${m.inf.device} Inf` : ''].filter((x) => x !== '').join(' '));
  const acc = one(s.accumulated);
  const iso = one(s.isolated);
  if (s.accumulated === null || s.isolated === null) return acc || iso || '0';
  if (acc === iso) return acc || '0';
  return [acc, iso !== '' ? `iso ${iso}` : ''].filter((x) => x !== '').join(' · ') || '0';
}

/** Selection flips per mode run: `3`, or `5 · iso 0` when the modes differ. */
export function flipsText(s: Stage): string {
  const a = s.accumulated?.selection_flips;
  const i = s.isolated?.selection_flips;
  if (a === undefined || i === undefined || a === i) return String(a ?? i ?? 0);
  return `${a} · iso ${i}`;
}

/** The modes the report ran, in column order. */
export function modesRun(r: Report): Array<'accumulated' | 'isolated'> {
  return r.mode === 'accumulated' ? ['accumulated'] : r.mode === 'isolated' ? ['isolated'] : ['accumulated', 'isolated'];
}

export function logitsText(r: Report): string | null {
  const lg = r.stages.find((s) => s.logits)?.logits;
  if (lg === undefined) return null;
  const parts = (['accumulated', 'isolated'] as const).flatMap((mode) => {
    const m = lg[mode];
    return m ? [`${modesRun(r).length > 1 ? `${mode}: ` : ''}top-1 agreement ${(m.top1_agreement * 100).toFixed(1)}%, KL mean ${sci(m.kl_mean)}${m.kl_p99 !== undefined ? `, KL p99 ${sci(m.kl_p99)}` : ''}, KL max ${sci(m.kl_max)}`] : [];
  });
  return parts.length > 0 ? parts.join(' · ') : null;
}

/**
 * The one-line verdict every output starts with: `FAIL layer.1 scale-axis: isolated max_abs 3.1 > 0.1 · 4 later
 * stages carried from it`, or `PASS: 7 stages within max_abs ≤ 0.1` (fixed rule; under the floor rule: `within
 * max_abs ≤ 0.1 or their FP16 floor`, since a stage above 0.1 passes when a correct FP16 path is as far off).
 * Root stages only; the cause is the diagnosis's.
 */
export function verdictLine(r: Report): string {
  const roots = r.stages.filter((s) => s.status === 'fail' && s.carried_from === undefined);
  if (r.verdict === 'pass' || roots.length === 0) {
    const warns = r.stages.filter((s) => s.status === 'warn').map((s) => s.name);
    const floor = r.policy.rule === 'floor' ? ' or their FP16 floor' : '';
    return `PASS: ${r.stages.length} stages within ${r.policy.metric} ≤ ${r.policy.fail_above}${floor}${warns.length > 0 ? `, ${warns.length} warning${warns.length === 1 ? '' : 's'} (${warns.join(', ')})` : ''}`;
  }
  const root = roots[0];
  const cause = r.diagnosis.find((d) => d.stage === root.name)?.cause ?? 'unknown';
  const carried = r.stages.filter((s) => s.carried_from !== undefined).length;
  const more = [
    carried > 0 ? `${carried} later stage${carried === 1 ? '' : 's'} carried from it` : '',
    roots.length > 1 ? `${roots.length - 1} more failing on ${roots.length === 2 ? 'its' : 'their'} own: ${roots.slice(1).map((s) => s.name).join(', ')}` : '',
  ].filter((x) => x !== '');
  return `FAIL ${root.name} ${cause}: ${stageFailure(r, root.name, true)}${more.length > 0 ? ` · ${more.join(' · ')}` : ''}`;
}
