/**
 * `layerdiff inspect <model> --check`: the weights-first check on its own — no activation runs. Prints one
 * row per quantized tensor and the diagnosis the weights support. Exit 0 when every device FP16 weight
 * equals the reference's exact dequantization, 1 when any differs (a decode bug), 2 for NaN codes in the
 * checkpoint (bad input).
 */
import Table from 'cli-table3';
import { diagnoseWeights } from '../compare/diagnose.js';
import { ExitCode } from '../errors.js';
import { Checkpoint } from '../io/checkpoint.js';
import { checkOutputs, writeFileAtomic } from '../io/writer.js';
import { selectBackend } from '../runner/backend.js';
import { parseLayers } from '../cli/diff.js';
import { openModel } from '../runner/model.js';
import { parseInject } from '../faults/plan.js';
import { describeWeights, faultText, sci } from '../../reports/format.js';
import { assertInjectApplies } from './inject_applies.js';
import { assertNoNanCodes, checkWeights, type WeightsReport } from './check.js';

export interface CheckArgs {
  model: string;
  device: string;
  inject?: string;
  layers: string;
  json?: string;
}

export function renderWeights(w: WeightsReport, all: boolean): string {
  const t = new Table({
    head: ['tensor', 'format', '[out×in]', 'exact', 'blocks differ', 'max |Δw|', 'NaN', 'ovf/unf blocks', 'reproduced by'],
    style: { head: [], border: [], compact: true },
    colAligns: ['left', 'left', 'left', 'left', 'right', 'right', 'right', 'right', 'left'],
  });
  for (const x of w.tensors) {
    if (!all && x.exact && x.overflow_blocks + x.underflow_blocks === 0) continue;
    t.push([x.name, x.format, x.shape.join('×'), x.exact ? 'yes' : 'NO', `${x.bad_blocks}/${x.blocks}`, sci(x.max_abs), String(x.nan_codes), `${x.overflow_blocks}/${x.underflow_blocks}`, x.matches.join(', ') || (x.exact ? '' : 'none')]);
  }
  return t.toString();
}

export function runWeightsCheckCommand(a: CheckArgs): ExitCode {
  const ck = Checkpoint.open(a.model);
  try {
    const backend = selectBackend(a.device);
    const model = openModel(ck, backend, null);
    const faults = a.inject !== undefined ? parseInject(a.inject, model.numLayers) : null;
    const layers = parseLayers(a.layers, model.numLayers);
    checkOutputs(ck.dir, [{ option: '--json', path: a.json, kind: 'file' }]);
    model.conformance();
    const w = checkWeights(ck, backend.native, { layers, faults, numLayers: model.numLayers, fused: model.fusedLinears });
    // a weight fault no tensor of this checkpoint carries would simulate nothing and pass (diff refuses it too)
    assertInjectApplies(a.inject, faults, w);
    const lines = [`weights check (device ${backend.identity.name}${faults ? `, ${faultText(faults)}` : ''}): ${describeWeights(w)}`];
    if (w.tensors.length > 0) lines.push(renderWeights(w, true));
    for (const d of diagnoseWeights(w, null)) lines.push(`likely cause at ${d.stage}: ${d.cause} — ${d.evidence}`);
    lines.push(w.mismatched > 0 ? 'FAIL — the device dequantizes some weights differently from the reference' : w.nan_codes > 0 ? 'FAIL — NaN codes in the checkpoint' : 'PASS — every device FP16 weight is the reference\'s, bit for bit');
    process.stdout.write(lines.join('\n') + '\n');
    // NaN codes are bad input (exit 2): the table above shows where, and no report file is written, as diff writes none
    assertNoNanCodes(ck, w);
    if (a.json !== undefined) writeFileAtomic(a.json, JSON.stringify({ schema: 'layerdiff.weights/1', weights: w, diagnosis: diagnoseWeights(w, null) }, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v), 2) + '\n', '--json');
    return w.mismatched > 0 ? ExitCode.stageFailed : ExitCode.pass;
  } finally {
    ck.close();
  }
}
