/**
 * `layerdiff inspect <model-dir>`: the config, every tensor group with its storage format, and a check of
 * every shape against the config (weights-first conformance). Exit 0 when everything conforms, 2 otherwise.
 */
import Table from 'cli-table3';
import { ExitCode } from '../errors.js';
import { Checkpoint } from '../io/checkpoint.js';
import { InputError } from '../errors.js';
import { moduleOf, parseQuantConfig, recognise } from '../formats/linear.js';
import { declaredFor, type QuantConfig } from '../formats/quant_config.js';
import { FORMATS, SIDE_SUFFIXES, WEIGHT_SUFFIXES } from '../formats/registry.js';
import { selectBackend } from '../runner/backend.js';
import { architectureOf, openModel } from '../runner/model.js';
import { printable } from '../io/printable.js';

interface Group {
  pattern: string;
  count: number;
  dtype: string;
  shape: string;
  format: string;
}

/** The registry's name for what a tensor is: a weight's format id, or the role of a scale beside one. */
function formatOf(ck: Checkpoint, name: string): string {
  // gpt-oss's fused experts: <base>_blocks U8 [E, rows, in/32, 16] beside <base>_scales (harness/models/gpt_oss.ts)
  if (name.endsWith('_blocks') && ck.info(name).dtype === 'U8' && ck.has(name.replace(/_blocks$/, '_scales'))) return 'mxfp4 (blocks)';
  if (name.endsWith('_scales') && ck.has(name.replace(/_scales$/, '_blocks'))) return 'scale';
  const weightSuffix = WEIGHT_SUFFIXES.find((x) => name.endsWith('.' + x));
  if (weightSuffix !== undefined) {
    try {
      const f = recognise(ck, moduleOf(name)).entry;
      return f.id === 'plain' ? 'plain' : `${f.id} (${f.family})`;
    } catch (e) {
      if (e instanceof InputError) return `unrecognised: ${e.message}`;
      throw e;
    }
  }
  const side = SIDE_SUFFIXES.find((x) => name.endsWith('.' + x));
  if (side !== undefined) {
    const role = FORMATS.flatMap((f) => f.extra ?? []).find((x) => x.suffix === side)?.role;
    if (role !== undefined) return role;
    return FORMATS.some((f) => f.global?.suffix === side) ? 'global scale' : side === 'weight.absmax' ? 'absmax (block scale)' : 'scale';
  }
  // NVFP4 producers record the activations' static scale beside the weight; it does not change W
  if (/\.(input_scale|input_global_scale)$/.test(name)) return 'activation scale (recorded, unused)';
  return 'plain';
}

/** Group tensors by name with layer/expert indices replaced by N, so 43 layers read as one row. */
export function tensorGroups(ck: Checkpoint): Group[] {
  const groups = new Map<string, Group>();
  for (const name of ck.names().sort()) {
    const info = ck.info(name);
    const pattern = name.replace(/\.\d+\./g, '.N.');
    const format = formatOf(ck, name);
    const key = `${pattern}|${info.dtype}|${JSON.stringify(info.shape)}|${format}`;
    const g = groups.get(key);
    if (g) g.count++;
    else groups.set(key, { pattern, count: 1, dtype: info.dtype, shape: JSON.stringify(info.shape), format });
  }
  return [...groups.values()];
}

/**
 * Linear weights whose stored form contradicts the producer's lists: quantized though an ignore/exclude
 * entry names it, plain though a group targets it, or stored as another FP4 family than declared.
 * Embeddings are not linears (no producer quantizes them as one) and are left out.
 */
export function contradictions(ck: Checkpoint, qc: QuantConfig): string[] {
  const out: string[] = [];
  for (const name of ck.names().sort()) {
    const suffix = WEIGHT_SUFFIXES.find((x) => name.endsWith('.' + x));
    if (suffix === undefined || /embed/.test(name)) continue;
    const info = ck.info(name);
    if (info.shape.length !== 2) continue;
    const module = moduleOf(name);
    const declared = declaredFor(qc, module);
    if (declared === null) continue;
    let family: string;
    try {
      family = recognise(ck, module).entry.family;
    } catch {
      continue; // the conformance check names it
    }
    if (declared === 'plain' && family !== 'plain') out.push(`${name}: stored ${family} but ${qc.method}${whyPlain(qc, module)}`);
    else if (declared !== 'plain' && family === 'plain') out.push(`${name}: stored plain (${info.dtype}) but ${qc.method} declares ${module} ${declared}`);
    else if (declared !== 'plain' && family !== declared) out.push(`${name}: stored ${family} but ${qc.method} declares ${module} ${declared}`);
  }
  return out;
}

/** Why the config declares a module plain, for a contradiction's message (declaredFor's order). */
function whyPlain(qc: QuantConfig, module: string): string {
  if (qc.ignore.some((p) => p.test(module))) return `'s ignore list excludes ${module}`;
  if (qc.groups.some((g) => g.form === 'plain' && g.targets.some((p) => p.test(module)))) return `'s config_groups declare ${module}'s weights unquantized`;
  return `'s config_groups do not target ${module}`;
}

/** `before`: checks of the options that depend on the model (--layers, --inject), run before anything is printed */
export function runInspect(dir: string, before?: (numLayers: number) => void): ExitCode {
  const ck = Checkpoint.open(dir);
  try {
    const arch = architectureOf(ck);
    const qc = parseQuantConfig(ck.config, ck.configFile);
    const t = new Table({ head: ['tensor', 'count', 'dtype', 'shape', 'format'], style: { head: [], border: [] } });
    for (const g of tensorGroups(ck)) t.push([g.pattern, g.count, g.dtype, g.shape, g.format]);
    const model = openModel(ck, selectBackend('auto'), null);
    before?.(model.numLayers);
    model.conformance();
    const contra = contradictions(ck, qc);
    const lines = [
      `${dir}: ${arch}, ${model.numLayers} layers, vocab ${model.vocab}, ${ck.shardFiles.length} shard(s), ${(ck.totalBytes() / 2 ** 20).toFixed(1)} MiB of tensors`,
      `quantization_config: ${qc.declared ? JSON.stringify(qc.declared) : 'none'}`,
      t.toString(),
      `conformance: every tensor's dtype and shape matches the config (quantized layers: ${model.quantizedLayers().join(', ') || 'none'})`,
      ...(contra.length === 0 ? [] : [`contradictions with ${qc.file} (${contra.length}):`, ...contra.map((c) => '  ' + c)]),
    ];
    process.stdout.write(lines.join('\n') + '\n');
    if (contra.length === 0) return ExitCode.pass;
    // exit 2 says why on stderr too, in the one line every bad input gets (the full list is on stdout above)
    process.stderr.write(`layerdiff: error: ${printable(`${qc.file}: the declared quantization contradicts what is stored in ${contra.length} place${contra.length === 1 ? '' : 's'} (first: ${contra[0]})`)}\n`);
    return ExitCode.badInput;
  } finally {
    ck.close();
  }
}
