/** Formatting shared by the printers, so every output says the same thing in the same words. */
import type { Policy } from '../harness/compare/policy.js';
import type { Report } from '../harness/runner/report.js';
import type { Drill } from '../harness/runner/run.js';
import type { TensorCheck, WeightsReport } from '../harness/weights/check.js';

/** Three significant digits, exponent form for small values. */
export function sci(x: number | null | undefined): string {
  if (x === null || x === undefined) return '–';
  if (!Number.isFinite(x)) return String(x);
  if (x === 0) return '0';
  const a = Math.abs(x);
  return a >= 1e-2 && a < 1e4 ? x.toPrecision(3) : x.toExponential(2);
}

export function cos(x: number | null | undefined): string {
  if (x === null || x === undefined) return '–';
  return x.toFixed(6);
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
  return (
    `${w.checked} quantized tensors (${layerRange(w)}) checked before any activation: ` +
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

/** The failure message of a stage (JUnit, Markdown): the metric that failed, in both modes. */
export function stageFailure(r: Report, name: string): string {
  const s = r.stages.find((x) => x.name === name)!;
  const p = r.policy;
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
