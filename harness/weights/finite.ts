/**
 * Every floating-point tensor of a checkpoint is finite, or the command refuses it: a NaN or Inf stored in a
 * plain weight (a BF16 projection, a norm, the embedding) is bad input, as a NaN code in a quantized one is
 * (check.ts assertNoNanCodes). The reference refuses such a value when it reads it (reference-cpu/dequant.ts
 * assertFinite); `convert` writes every tensor into the FP16 cache, so it checks them all first and leaves no
 * cache that a diff of the same checkpoint would have refused. Read in 32 MiB ranges (memory: one range),
 * scanned natively (reference-cpu nonFiniteAt).
 */
import { InputError } from '../errors.js';
import type { Checkpoint } from '../io/checkpoint.js';
import { nonFiniteAt } from '../../reference-cpu/native.js';

const FLOAT_KINDS: Record<string, { kind: 'bf16' | 'f16' | 'f32'; bytes: number }> = {
  BF16: { kind: 'bf16', bytes: 2 },
  F16: { kind: 'f16', bytes: 2 },
  F32: { kind: 'f32', bytes: 4 },
};
const RANGE_BYTES = 32 * 2 ** 20;

/** The first NaN/Inf among the checkpoint's BF16/F16/F32 tensors, in name order: an InputError naming file, tensor and flat index. */
export function assertFiniteFloats(ck: Checkpoint): void {
  for (const name of ck.names().sort()) {
    const info = ck.info(name);
    const f = Object.hasOwn(FLOAT_KINDS, info.dtype) ? FLOAT_KINDS[info.dtype] : undefined;
    if (f === undefined) continue;
    const size = info.end - info.begin;
    const step = RANGE_BYTES - (RANGE_BYTES % f.bytes);
    for (let off = 0; off < size; off += step) {
      const bytes = ck.readRange(name, off, Math.min(step, size - off));
      const i = nonFiniteAt(bytes, f.kind);
      if (i < 0) continue;
      const at = off / f.bytes + i;
      const v = new DataView(bytes.buffer, bytes.byteOffset + i * f.bytes, f.bytes);
      const bits = f.bytes === 4 ? v.getUint32(0, true) : v.getUint16(0, true);
      const nan = f.kind === 'bf16' ? (bits & 0x7f) !== 0 : f.kind === 'f16' ? (bits & 0x3ff) !== 0 : (bits & 0x7fffff) !== 0;
      throw new InputError(`${info.dtype} ${nan ? 'NaN' : 'Inf'} at flat index ${at}: a non-finite weight is bad input, not something to convert`, { file: info.file, tensor: name });
    }
  }
}
