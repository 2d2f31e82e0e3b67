/**
 * Checkpoint identity. The quick fingerprint (for diff reports) hashes config.json, the index and every
 * shard's name, size and header — it changes when any tensor's layout changes, and costs milliseconds.
 * The full fingerprint (acceptance records) hashes every byte; see harness/gate.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Checkpoint } from './checkpoint.js';

export function quickFingerprint(ck: Checkpoint): string {
  const h = createHash('sha256');
  for (const f of ['config.json', 'model.safetensors.index.json']) {
    const p = path.join(ck.dir, f);
    if (fs.existsSync(p)) h.update(f).update(fs.readFileSync(p));
  }
  for (const shard of ck.shardFiles) {
    const p = path.join(ck.dir, shard);
    const fd = fs.openSync(p, 'r');
    try {
      const size = fs.fstatSync(fd).size;
      const lenBuf = Buffer.alloc(8);
      fs.readSync(fd, lenBuf, 0, 8, 0);
      const n = Number(lenBuf.readBigUInt64LE(0));
      const header = Buffer.alloc(n);
      fs.readSync(fd, header, 0, n, 8);
      h.update(shard).update(String(size)).update(header);
    } finally {
      fs.closeSync(fd);
    }
  }
  return `sha256:${h.digest('hex')}`;
}
