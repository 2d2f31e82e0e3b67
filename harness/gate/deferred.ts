/**
 * The checkpoint's side of the trust chain when generation reads its weights from an FP16 cache (issue 15: "map
 * the cache, verify what is read, never hash what is not used").
 *
 * An acceptance record binds the checkpoint by a SHA-256 of every file (fingerprint.ts) and, in records of gates
 * from this version on, by each shard's header (`model.headers`: SafetensorsFile.headerSha256). Generating from an
 * FP16 cache the record vouches for, the run takes names and shapes from the shards' headers and every weight byte
 * from the cache, each file checked against the cache's manifest as it is read; the manifest is bound to the record
 * by `gate --fp16-cache`, which compared every byte with the device path's dequantization of this checkpoint.
 * Hashing the shards' data would vouch for bytes the run never reads: the released model's ~160 GB, ~40 s at two
 * cores' SHA-256 or the disk's speed, on every host that has not hashed them before (a deployment's first start).
 *
 * So: config.json, the index and the tokenizer's files are hashed as always; each shard's size, header digest and
 * data sample (4 × 64 KiB spread over its data: SafetensorsFile.dataSampleSha256, which tells apart another
 * checkpoint of the same layout, such as a fine-tune or a later revision put in the same folder) must be the
 * record's, and its content digest is taken from the record. The fingerprint made so equals the
 * record's exactly when those hold (verifyRecord then checks it, the record's signature included). A shard whose
 * tensor data the run does read after all (a cache that turned stale between the checks and fell back to
 * dequantizing, or a tensor an architecture reads from the checkpoint) is hashed in full before its first read
 * (Checkpoint.guardData) and must have the record's digest. A record without header and sample digests, or any
 * shard whose size, header or sample differs, gets the full fingerprint instead, with its diagnosis of what changed.
 */
import { createHash } from 'node:crypto';
import * as path from 'node:path';
import { InputError } from '../errors.js';
import type { Checkpoint } from '../io/checkpoint.js';
import { readRegularBytes } from '../io/regular.js';
import { checkpointFiles, combineDigests, type FileDigest, fileSha256Sync, type Fingerprint, type FingerprintOptions } from './fingerprint.js';

/** The record's model section as parsed from its file (not yet verified: verifyRecord checks it against the result). */
export interface RecordedModel {
  fingerprint?: unknown;
  files?: unknown;
  headers?: unknown;
  data_samples?: unknown;
}

const HEX64 = /^[0-9a-f]{64}$/;

/**
 * The fingerprint of `ck` with its shards' contents taken from `recorded` (above), and a guard that hashes a shard
 * before any of its data is read; null where the full fingerprint is needed (nothing is guarded then).
 */
export function deferredFingerprint(ck: Checkpoint, recorded: RecordedModel, o: FingerprintOptions & { note?: (line: string) => void } = {}): Fingerprint | null {
  const { files } = recorded;
  const isMap = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
  const { headers, data_samples: samples } = recorded;
  if (!Array.isArray(files) || !isMap(headers) || !isMap(samples)) return null;
  const byName = new Map<string, FileDigest>();
  for (const f of files as unknown[]) {
    const d = f as FileDigest;
    if (d === null || typeof d !== 'object' || typeof d.name !== 'string' || !Number.isSafeInteger(d.size) || typeof d.sha256 !== 'string' || !HEX64.test(d.sha256)) return null;
    byName.set(d.name, d);
  }
  const heads = ck.headerDigests();
  const sources = ck.hashSources();
  const out: FileDigest[] = [];
  for (const name of checkpointFiles(ck.dir, ck.shardFiles)) {
    const header = heads.get(name);
    if (header !== undefined) {
      const r = byName.get(name);
      if (r === undefined || r.size !== ck.shardSize(name) || headers[name] !== header || samples[name] !== ck.dataSampleDigest(name)) return null;
      out.push({ name, size: r.size, sha256: r.sha256 });
      continue;
    }
    // metadata: the bytes parsed where they were read (config, index, readMeta files), else the file now
    const src = sources.get(name);
    const bytes = Buffer.isBuffer(src) ? src : readRegularBytes(path.join(ck.dir, name));
    out.push({ name, size: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex') });
  }
  ck.guardData((shard) => {
    const want = byName.get(shard)!.sha256;
    o.note?.(`layerdiff: note: this run reads tensor data from ${shard}: hashing it whole first (${(ck.shardSize(shard) / 2 ** 30).toFixed(2)} GiB)\n`);
    if (fileSha256Sync(ck.dir, shard, sources.get(shard) as number, { protect: ck.dir, ...o }) !== want) {
      throw new InputError('differs from the checkpoint the acceptance record vouches for (its data changed, its header did not); run layerdiff gate again', { file: path.join(ck.dir, shard) });
    }
  });
  return { value: combineDigests(out), files: out };
}
