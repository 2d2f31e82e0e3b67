/**
 * Row access to vocab × hidden tables (embeddings, heads): only the rows a run needs are read, and a head is
 * visited in chunks, so a real 129,280 × 4096 table is never held whole.
 */
import { InputError } from '../errors.js';
import type { StoredTensor } from '../formats/linear.js';
import type { Checkpoint } from '../io/checkpoint.js';

/** Where rows come from: a checkpoint, or an FP16 cache file (harness/generate/fp16cache.ts). */
export type RowSource = Pick<Checkpoint, 'info' | 'readRange'>;

export function readRows(ck: RowSource, name: string, vocab: number, hidden: number, tokens: number[]): StoredTensor {
  const i = ck.info(name);
  const rowBytes = (i.end - i.begin) / vocab;
  const bytes = new Uint8Array(tokens.length * rowBytes);
  tokens.forEach((t, r) => {
    if (!Number.isInteger(t) || t < 0 || t >= vocab) throw new InputError(`token id ${t} is outside the vocabulary [0, ${vocab})`);
    bytes.set(ck.readRange(name, t * rowBytes, rowBytes), r * rowBytes);
  });
  return { name, dtype: i.dtype, shape: [tokens.length, hidden], bytes, file: i.file };
}

export function forEachRowChunk(
  ck: RowSource, name: string, vocab: number, hidden: number, rowsPerChunk: number,
  fn: (rowStart: number, chunk: StoredTensor) => void,
): void {
  const i = ck.info(name);
  const rowBytes = (i.end - i.begin) / vocab;
  for (let r = 0; r < vocab; r += rowsPerChunk) {
    const n = Math.min(rowsPerChunk, vocab - r);
    const bytes = ck.readRange(name, r * rowBytes, n * rowBytes);
    fn(r, { name, dtype: i.dtype, shape: [n, hidden], bytes, file: i.file });
  }
}
