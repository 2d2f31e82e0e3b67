/** Small file helpers shared by golden runs and repro bundles: streamed SHA-256, F32 activations in safetensors. */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { InputError } from '../errors.js';
import { type Act, act } from '../formats/tensor.js';
import { SafetensorsFile, type TensorToWrite } from '../io/safetensors.js';
import { makeDirs } from '../io/writer.js';

const CHUNK = 16 << 20;

/** SHA-256 of a file, read in 16 MiB pieces (a golden logits stage or a layer shard is never held whole). */
export function sha256File(file: string): string {
  const h = createHash('sha256');
  const fd = fs.openSync(file, 'r');
  try {
    const buf = Buffer.alloc(CHUNK);
    for (;;) {
      const n = fs.readSync(fd, buf, 0, CHUNK, null);
      if (n === 0) break;
      h.update(buf.subarray(0, n));
    }
  } finally {
    fs.closeSync(fd);
  }
  return h.digest('hex');
}

export function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

export function f32Tensor(name: string, a: Act): TensorToWrite {
  return { name, dtype: 'F32', shape: a.shape, data: new Uint8Array(a.data.buffer, a.data.byteOffset, a.data.byteLength) };
}

/** Read F32 tensors back as activations (a fresh aligned copy each, so the Float32Array view is valid). */
export function readActs(file: string, names: string[]): Map<string, Act> {
  const f = SafetensorsFile.open(file);
  try {
    const out = new Map<string, Act>();
    for (const name of names) {
      const info = f.get(name);
      if (info === undefined) continue;
      if (info.dtype !== 'F32') throw new InputError(`expected F32, found ${info.dtype}`, { file, tensor: name });
      const bytes = f.read(info);
      out.set(name, act(info.shape, new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4)));
    }
    return out;
  } finally {
    f.close();
  }
}

export function tensorNames(file: string): string[] {
  const f = SafetensorsFile.open(file);
  try {
    return [...f.tensors.keys()];
  } finally {
    f.close();
  }
}

/** Check a file against the digest a manifest recorded for it; a mismatch is bad input naming the file. */
export function verifyDigest(file: string, want: string, what: string): void {
  if (!fs.existsSync(file)) throw new InputError(`${what} is missing`, { file });
  const got = sha256File(file);
  if (got !== want) throw new InputError(`${what} does not match its SHA-256 in the manifest (${got.slice(0, 12)}… ≠ ${want.slice(0, 12)}…): the file changed after it was written`, { file });
}

/**
 * A folder that appears complete or not at all: everything is written into a sibling staging folder,
 * which `commit` renames into place (an existing empty folder is replaced); `abort` removes it.
 */
export class StagedDir {
  readonly staging: string;
  constructor(readonly target: string) {
    const parent = path.dirname(path.resolve(target));
    makeDirs(parent);
    this.staging = path.join(parent, `.${path.basename(target)}.layerdiff-partial-${process.pid}`);
    fs.rmSync(this.staging, { recursive: true, force: true });
    fs.mkdirSync(this.staging);
  }

  file(rel: string): string {
    const p = path.join(this.staging, rel);
    makeDirs(path.dirname(p));
    return p;
  }

  commit(): void {
    if (fs.existsSync(this.target)) fs.rmdirSync(this.target); // only an empty folder: checked before the run
    fs.renameSync(this.staging, this.target);
  }

  abort(): void {
    fs.rmSync(this.staging, { recursive: true, force: true });
  }
}

/** Output folders for bundles must be new or empty: nothing of a user's is ever overwritten or mixed in. */
export function assertNewOrEmptyDir(dir: string, option: string): void {
  if (!fs.existsSync(dir)) return;
  if (!fs.statSync(dir).isDirectory()) throw new InputError(`${option}: exists and is not a directory`, { file: dir });
  if (fs.readdirSync(dir).length > 0) throw new InputError(`${option}: the folder is not empty; give a new or empty folder`, { file: dir });
}
