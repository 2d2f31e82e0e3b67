/**
 * `layerdiff convert <model> --fp16-cache DIR`: write the optimized path's pre-dequantized FP16 weights once,
 * so `generate --fp16-cache DIR` starts without dequantizing (harness/generate/fp16cache.ts; each
 * architecture's layout is named by its registry entry, harness/arch/). The cache is bound to the checkpoint's full
 * fingerprint; it never goes inside the model directory, and a convert that fails leaves no files behind.
 */
import { ExitCode } from '../errors.js';
import { openCheckpointFingerprint } from '../gate/fingerprint.js';
import { Checkpoint } from '../io/checkpoint.js';
import { selectBackend } from '../runner/backend.js';
import { openModel } from '../runner/model.js';
import { assertNoNanCodes, checkWeights } from '../weights/check.js';
import { assertFiniteFloats } from '../weights/finite.js';
import { checkOutputDir } from '../io/writer.js';
import { architectureFor } from '../arch/registry.js';
import { assertOutsideModel } from './gate.js';

export async function runConvert(a: { model: string; fp16Cache: string; device: string }, out: NodeJS.WritableStream = process.stdout): Promise<ExitCode> {
  assertOutsideModel(a.fp16Cache, a.model);
  checkOutputDir(a.fp16Cache, '--fp16-cache');
  const ck = Checkpoint.open(a.model);
  try {
    const entry = architectureFor(ck);
    const backend = selectBackend(a.device);
    // One rule for NaN codes in every command: what diff and gate refuse (an E8M0 0xFF scale, an E4M3 NaN)
    // is never converted into NaN FP16 weights either.
    const model = openModel(ck, backend, null);
    model.conformance(); // shapes first, so a wrong shape is named as such, not as a scale it then contradicts
    assertNoNanCodes(ck, checkWeights(ck, backend.native, { layers: null, faults: null, numLayers: model.numLayers, fused: model.fusedLinears }));
    // and a NaN/Inf stored in a plain tensor, which the reference refuses when it reads it (weights/finite.ts)
    assertFiniteFloats(ck);
    const fp = await openCheckpointFingerprint(ck);
    const tty = process.stderr.isTTY === true;
    let n = 0;
    const onFile = (total: number) => (f: string) => {
      n++;
      if (tty) process.stderr.write(`\r\x1b[Kconvert: ${f} (${n}/${total})`);
    };
    const man = await entry.writeFp16Cache(ck, backend.native, a.fp16Cache, fp.value, onFile);
    if (tty) process.stderr.write('\r\x1b[K');
    const files = [...man.files, ...man.chunked, ...(man.experts ?? [])];
    const bytes = files.reduce((s, f) => s + f.size, 0);
    out.write(`wrote the FP16 cache of ${a.model} to ${a.fp16Cache}: ${files.length} files, ${(bytes / 2 ** 20).toFixed(1)} MiB, bound to ${fp.value}\n`);
    return ExitCode.pass;
  } finally {
    ck.close();
  }
}
