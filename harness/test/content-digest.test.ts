/**
 * The checkpoint's content digest (openCheckpointContentDigest, harness/gate/fingerprint.ts), the key of a reused
 * weights check: BLAKE3 of every file the acceptance fingerprint covers, through what the checkpoint reads with,
 * cached by file identity. Checked against the TypeScript hasher (harness/io/blake3.ts, itself held to the
 * specification's test vectors) over the files read whole, and for what its cache may and may not change.
 */
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { checkpointFiles, openCheckpointContentDigest } from '../gate/fingerprint.js';
import { loadAddon } from '../io/addon.js';
import { blake3PartsTs } from '../io/blake3.js';
import { Checkpoint } from '../io/checkpoint.js';
import { copyCheckpoint } from '../../fixtures/inject.js';
import { LLAMA_TINY } from './cli.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-content-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
beforeEach(() => {
  process.env.LAYERDIFF_CACHE_DIR = fs.mkdtempSync(path.join(tmp, 'cache-'));
});

/** The digest as the definition gives it, with the TypeScript hasher over each file read whole. */
function expected(dir: string, shardFiles: readonly string[]): string {
  const lines = checkpointFiles(dir, shardFiles).map((name) => {
    const bytes = fs.readFileSync(path.join(dir, name));
    return `${name}\t${bytes.length}\tblake3:${blake3PartsTs([[bytes]])[0]}\n`;
  });
  return `blake3:${blake3PartsTs([[Buffer.from(lines.sort().join(''))]])[0]}`;
}

function digestOf(dir: string, o: Parameters<typeof openCheckpointContentDigest>[1] = {}): ReturnType<typeof openCheckpointContentDigest> {
  const ck = Checkpoint.open(dir);
  try {
    return openCheckpointContentDigest(ck, { racyMs: 0, progress: false, ...o });
  } finally {
    ck.close();
  }
}

const cacheFile = () => path.join(process.env.LAYERDIFF_CACHE_DIR!, 'fingerprints.json');

/** The cache with every checkpoint file's entry claiming the digest of other bytes. */
function forgeEntries(dir: string): void {
  const c = JSON.parse(fs.readFileSync(cacheFile(), 'utf8')) as { entries: Record<string, { sha256: string; mac?: string }> };
  const forged = `blake3:${'ab'.repeat(32)}`;
  let n = 0;
  for (const [at, e] of Object.entries(c.entries)) {
    if (!at.startsWith(fs.realpathSync(dir))) continue;
    e.sha256 = forged;
    delete e.mac;
    n++;
  }
  expect(n).toBeGreaterThan(0);
  fs.writeFileSync(cacheFile(), JSON.stringify(c));
}

describe('the content digest of a checkpoint', () => {
  it('is BLAKE3 of every covered file (native, on every core) combined as the definition says, with or without its cache', () => {
    expect(typeof (loadAddon('ld_reference') as { blake3File?: unknown }).blake3File).toBe('function'); // else the TypeScript hasher hashes both sides
    const dir = LLAMA_TINY();
    const ck = Checkpoint.open(dir);
    const shards = [...ck.shardFiles];
    ck.close();
    const want = expected(dir, shards);
    const first = digestOf(dir, { hashThreads: 2 });
    expect(first.value).toBe(want);
    expect(first.files.map((f) => f.name)).toEqual(checkpointFiles(dir, shards));
    expect(first.files.every((f) => /^blake3:[0-9a-f]{64}$/.test(f.blake3))).toBe(true);
    // the shards' digests are now cached by identity; the second run reads them and agrees
    expect(fs.existsSync(cacheFile())).toBe(true);
    expect(digestOf(dir).value).toBe(want);
    expect(digestOf(dir, { hashThreads: 1, useCache: false }).value).toBe(want);
  });

  it('its cache is a hint: a forged entry is believed without a key, ignored with one (or with --verify full), and an edited file is hashed again', () => {
    const dir = path.join(tmp, 'copy');
    copyCheckpoint(LLAMA_TINY(), dir);
    const ck = Checkpoint.open(dir);
    const shards = [...ck.shardFiles];
    ck.close();
    const want = expected(dir, shards);
    expect(digestOf(dir).value).toBe(want);
    forgeEntries(dir);
    // unsigned: the cache is what it says (the weights check it keys is a hint too: harness/weights/reuse.ts)
    expect(digestOf(dir, { macKey: null }).value).not.toBe(want);
    expect(digestOf(dir, { macKey: null, useCache: 'write' }).value).toBe(want);
    forgeEntries(dir);
    expect(digestOf(dir, { macKey: 'k1' }).value).toBe(want);
    // a byte of the last shard changed in place, its size kept and its mtime set back to the nanosecond (touch -r):
    // only the ctime moved, and that is enough for it to be hashed again
    const shard = path.join(dir, shards.at(-1)!);
    const ref = path.join(tmp, 'mtime-ref');
    fs.writeFileSync(ref, '');
    execFileSync('touch', ['-r', shard, ref]);
    const before = fs.statSync(shard, { bigint: true });
    const fd = fs.openSync(shard, 'r+');
    const one = Buffer.alloc(1);
    fs.readSync(fd, one, 0, 1, before.size - 3n);
    one[0] ^= 1;
    fs.writeSync(fd, one, 0, 1, Number(before.size - 3n));
    fs.closeSync(fd);
    execFileSync('touch', ['-r', ref, shard]);
    const after = fs.statSync(shard, { bigint: true });
    expect([after.mtimeNs, after.size, after.ino]).toEqual([before.mtimeNs, before.size, before.ino]);
    expect(after.ctimeNs).not.toBe(before.ctimeNs);
    const edited = digestOf(dir, { macKey: null });
    expect(edited.value).toBe(expected(dir, shards));
    expect(edited.value).not.toBe(want);
  });

  it('records no digest for a file changed too recently to trust its timestamps (racily clean)', () => {
    const dir = path.join(tmp, 'fresh');
    copyCheckpoint(LLAMA_TINY(), dir);
    const ck = Checkpoint.open(dir);
    const shards = [...ck.shardFiles];
    // every covered file but the bytes already parsed (config, index), which are hashed as read and never cached
    const onDisk = checkpointFiles(dir, shards).filter((n) => !Buffer.isBuffer(ck.hashSources().get(n)));
    ck.close();
    expect(shards.every((n) => onDisk.includes(n))).toBe(true);
    // the copy is seconds old: inside a minute's window, nothing of it is recorded, and the digest is still right
    expect(digestOf(dir, { racyMs: 60_000 }).value).toBe(expected(dir, shards));
    const c = fs.existsSync(cacheFile()) ? (JSON.parse(fs.readFileSync(cacheFile(), 'utf8')) as { entries: Record<string, unknown> }) : { entries: {} };
    expect(Object.keys(c.entries).filter((k) => k.startsWith(fs.realpathSync(dir)))).toEqual([]);
    digestOf(dir, { racyMs: 0 });
    const after = JSON.parse(fs.readFileSync(cacheFile(), 'utf8')) as { entries: Record<string, unknown> };
    expect(Object.keys(after.entries).filter((k) => k.startsWith(fs.realpathSync(dir))).length).toBe(onDisk.length);
  });
});
