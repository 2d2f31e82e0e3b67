/**
 * `layerdiff inspect <model-dir>`: the config, every tensor group with its storage format, and a check of
 * every shape against the config (weights-first conformance). Exit 0 when everything conforms, 2 otherwise.
 */
import Table from 'cli-table3';
import { ExitCode } from '../errors.js';
import { Checkpoint } from '../io/checkpoint.js';
import { parseQuantConfig } from '../formats/linear.js';
import { selectBackend } from '../runner/backend.js';
import { architectureOf, openModel } from '../runner/model.js';

interface Group {
  pattern: string;
  count: number;
  dtype: string;
  shape: string;
  format: string;
}

/** Group tensors by name with layer/expert indices replaced by N, so 43 layers read as one row. */
export function tensorGroups(ck: Checkpoint): Group[] {
  const groups = new Map<string, Group>();
  for (const name of ck.names().sort()) {
    const info = ck.info(name);
    const pattern = name.replace(/\.\d+\./g, '.N.');
    const base = name.replace(/\.weight$/, '');
    let format = 'plain';
    if (info.dtype === 'F8_E4M3') format = 'fp8-block';
    else if ((info.dtype === 'I8' || info.dtype === 'U8') && ck.has(`${base}.scale`)) format = 'mxfp4 (packed)';
    else if (/\.(scale|weight_scale_inv)$/.test(name)) format = 'scale';
    // gpt-oss's fused experts: <base>_blocks U8 [E, rows, in/32, 16] beside <base>_scales (harness/models/gpt_oss.ts)
    else if (info.dtype === 'U8' && name.endsWith('_blocks') && ck.has(name.replace(/_blocks$/, '_scales'))) format = 'mxfp4 (blocks)';
    else if (name.endsWith('_scales') && ck.has(name.replace(/_scales$/, '_blocks'))) format = 'scale';
    const key = `${pattern}|${info.dtype}|${JSON.stringify(info.shape)}`;
    const g = groups.get(key);
    if (g) g.count++;
    else groups.set(key, { pattern, count: 1, dtype: info.dtype, shape: JSON.stringify(info.shape), format });
  }
  return [...groups.values()];
}

export function runInspect(dir: string): ExitCode {
  const ck = Checkpoint.open(dir);
  try {
    const arch = architectureOf(ck);
    const qc = parseQuantConfig(ck.config, ck.configFile);
    const t = new Table({ head: ['tensor', 'count', 'dtype', 'shape', 'format'], style: { head: [], border: [] } });
    for (const g of tensorGroups(ck)) t.push([g.pattern, g.count, g.dtype, g.shape, g.format]);
    const model = openModel(ck, selectBackend('auto'), null);
    model.conformance();
    const lines = [
      `${dir}: ${arch}, ${model.numLayers} layers, vocab ${model.vocab}, ${ck.shardFiles.length} shard(s), ${(ck.totalBytes() / 2 ** 20).toFixed(1)} MiB of tensors`,
      `quantization_config: ${qc.declared ? JSON.stringify(qc.declared) : 'none'}`,
      t.toString(),
      `conformance: every tensor's dtype and shape matches the config (quantized layers: ${model.quantizedLayers().join(', ') || 'none'})`,
    ];
    process.stdout.write(lines.join('\n') + '\n');
    return ExitCode.pass;
  } finally {
    ck.close();
  }
}
