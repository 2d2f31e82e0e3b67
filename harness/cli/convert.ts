/**
 * `layerdiff convert <model> --fp16-cache DIR`: write the optimized path's pre-dequantized FP16 weights once,
 * so `generate --fp16-cache DIR` starts without dequantizing (harness/generate/fp16cache.ts). The cache is
 * bound to the checkpoint's full fingerprint; it never goes inside the model directory.
 */
import { ExitCode, InputError } from '../errors.js';
import { checkpointFingerprint } from '../gate/fingerprint.js';
import { writeLlamaFp16Cache } from '../generate/fp16cache_llama.js';
import { Checkpoint } from '../io/checkpoint.js';
import { LlamaCheckpoint } from '../models/llama.js';
import { selectBackend } from '../runner/backend.js';
import { architectureOf } from '../runner/model.js';
import { assertOutsideModel } from './gate.js';

export async function runConvert(a: { model: string; fp16Cache: string; device: string }, out: NodeJS.WritableStream = process.stdout): Promise<ExitCode> {
  assertOutsideModel(a.fp16Cache, a.model);
  const ck = Checkpoint.open(a.model);
  try {
    const arch = architectureOf(ck);
    if (arch !== 'LlamaForCausalLM' && arch !== 'llama') throw new InputError(`convert supports Llama checkpoints only so far (this one is ${arch})`, { file: ck.configFile });
    const backend = selectBackend(a.device);
    const m = new LlamaCheckpoint(ck);
    const fp = await checkpointFingerprint(ck.dir, ck.shardFiles);
    const tty = process.stderr.isTTY === true;
    let n = 0;
    const man = await writeLlamaFp16Cache(m, backend.native, a.fp16Cache, fp.value, (f) => {
      n++;
      if (tty) process.stderr.write(`\r\x1b[Kconvert: ${f} (${n}/${m.cfg.layers + 2})`);
    });
    if (tty) process.stderr.write('\r\x1b[K');
    const bytes = man.files.reduce((s, f) => s + f.size, 0);
    out.write(`wrote the FP16 cache of ${a.model} to ${a.fp16Cache}: ${man.files.length} files, ${(bytes / 2 ** 20).toFixed(1)} MiB, bound to ${fp.value}\n`);
    return ExitCode.pass;
  } finally {
    ck.close();
  }
}
