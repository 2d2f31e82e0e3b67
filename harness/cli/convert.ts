/**
 * `layerdiff convert <model> --fp16-cache DIR`: write the optimized path's pre-dequantized FP16 weights once,
 * so `generate --fp16-cache DIR` starts without dequantizing (harness/generate/fp16cache.ts: Llama in
 * fp16cache_llama.ts, DeepSeek-V4 in fp16cache_deepseek_v4.ts). The cache is bound to the checkpoint's full
 * fingerprint; it never goes inside the model directory, and a convert that fails leaves no files behind.
 */
import { ExitCode } from '../errors.js';
import { checkpointFingerprint } from '../gate/fingerprint.js';
import type { Fp16ManifestBase } from '../generate/fp16cache.js';
import { writeDeepseekV4Fp16Cache } from '../generate/fp16cache_deepseek_v4.js';
import { writeLlamaFp16Cache } from '../generate/fp16cache_llama.js';
import { Checkpoint } from '../io/checkpoint.js';
import { DeepseekV4Checkpoint } from '../models/deepseek_v4.js';
import { LlamaCheckpoint } from '../models/llama.js';
import { selectBackend } from '../runner/backend.js';
import { architectureKind, openModel } from '../runner/model.js';
import { assertNoNanCodes, checkWeights } from '../weights/check.js';
import { checkOutputDir } from '../io/output.js';
import { assertOutsideModel } from './gate.js';

export async function runConvert(a: { model: string; fp16Cache: string; device: string }, out: NodeJS.WritableStream = process.stdout): Promise<ExitCode> {
  assertOutsideModel(a.fp16Cache, a.model);
  checkOutputDir(a.fp16Cache, '--fp16-cache');
  const ck = Checkpoint.open(a.model);
  try {
    const arch = architectureKind(ck);
    const backend = selectBackend(a.device);
    // One rule for NaN codes in every command: what diff and gate refuse (an E8M0 0xFF scale, an E4M3 NaN)
    // is never converted into NaN FP16 weights either.
    const model = openModel(ck, backend, null);
    model.conformance(); // shapes first, so a wrong shape is named as such, not as a scale it then contradicts
    assertNoNanCodes(ck, checkWeights(ck, backend.native, { layers: null, faults: null, numLayers: model.numLayers }));
    const fp = await checkpointFingerprint(ck.dir, ck.shardFiles);
    const tty = process.stderr.isTTY === true;
    let n = 0;
    const onFile = (total: number) => (f: string) => {
      n++;
      if (tty) process.stderr.write(`\r\x1b[Kconvert: ${f} (${n}/${total})`);
    };
    let man: Fp16ManifestBase & { experts?: Array<{ size: number }> };
    if (arch === 'llama') {
      const m = new LlamaCheckpoint(ck);
      man = await writeLlamaFp16Cache(m, backend.native, a.fp16Cache, fp.value, onFile(m.cfg.layers + 2));
    } else {
      // embed, head, and per layer its file and its routed experts' file
      const m = new DeepseekV4Checkpoint(ck);
      man = await writeDeepseekV4Fp16Cache(m, backend.native, a.fp16Cache, fp.value, onFile(2 * m.cfg.layers + 2));
    }
    if (tty) process.stderr.write('\r\x1b[K');
    const files = [...man.files, ...(man.experts ?? [])];
    const bytes = files.reduce((s, f) => s + f.size, 0);
    out.write(`wrote the FP16 cache of ${a.model} to ${a.fp16Cache}: ${files.length} files, ${(bytes / 2 ** 20).toFixed(1)} MiB, bound to ${fp.value}\n`);
    return ExitCode.pass;
  } finally {
    ck.close();
  }
}
