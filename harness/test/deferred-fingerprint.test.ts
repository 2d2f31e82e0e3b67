/**
 * Generation from an FP16 cache the record vouches for hashes no checkpoint data it does not read (harness/gate/
 * deferred.ts): the record binds each shard's header (checked against a SHA-256 of the file's own first bytes, computed
 * here from the safetensors layout), a run reads names and shapes from the shards and weights from the cache, and a
 * shard is hashed only if its data is read after all — where an edit of its data, header untouched, is refused. A
 * header that differs, a record without header digests, or --verify full take the full fingerprint, as before.
 * (A record's signature covers model.headers as every field: gate.test.ts's HMAC tests.)
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GateArgs, runGate } from '../cli/gate.js';
import { runConvert } from '../cli/convert.js';
import { type GenerateArgs, runGenerate } from '../cli/generate.js';
import { InputError } from '../errors.js';
import { deferredFingerprint } from '../gate/deferred.js';
import { openCheckpointFingerprint } from '../gate/fingerprint.js';
import { type AcceptanceRecord, RecordMismatch, recordProblems } from '../gate/record.js';
import { Checkpoint } from '../io/checkpoint.js';
import { copyCheckpoint } from '../../fixtures/inject.js';
import { LLAMA_TINY } from './cli.js';
import { packageRoot } from '../version.js';

process.env.OMP_NUM_THREADS ??= '1';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-deferred-'));
const sink = () => new Writable({ write: (_c, _e, cb) => cb() });
const quiet = { stdout: sink(), stderr: sink() };
const model = path.join(tmp, 'llama-tiny');
const cache16 = path.join(tmp, 'fp16');
const record = path.join(tmp, 'accept.json');
const shards = ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors'];
const dataStart = (file: string) => 8 + Number(fs.readFileSync(file).readBigUInt64LE(0));
let digests = 0;

/** a fresh, empty digest cache: what a host that never hashed this checkpoint has */
function freshDigests(): string {
  const dir = path.join(tmp, `digests-${digests++}`);
  process.env.LAYERDIFF_CACHE_DIR = dir;
  return path.join(dir, 'fingerprints.json');
}
/** the files a run hashed and recorded: whole-file SHA-256 (the checkpoint's), or with `parts` the FP16 cache's BLAKE3 */
function hashedFiles(cacheFile: string, parts = false): string[] {
  if (!fs.existsSync(cacheFile)) return [];
  const entries = (JSON.parse(fs.readFileSync(cacheFile, 'utf8')) as { entries: Record<string, unknown> }).entries;
  return Object.keys(entries).filter((k) => k.includes('\0') === parts).map((k) => path.basename(k.split('\0')[0])).sort();
}
/** SHA-256 of a safetensors file's header as its layout defines it: the u64 LE length N, then N bytes of JSON */
function headerSha(file: string): string {
  const b = fs.readFileSync(file);
  const n = Number(b.readBigUInt64LE(0));
  return createHash('sha256').update(b.subarray(0, 8 + n)).digest('hex');
}
/** where the data's sample windows start: 4 of 64 KiB, the first at the data's first byte, the last ending at its last */
const W = 64 * 1024;
function windows(file: string): number[] {
  const start = dataStart(file);
  const len = fs.statSync(file).size - start;
  return [0, 1, 2, 3].map((i) => start + Math.floor((i * (len - W)) / 3));
}
function sampleSha(file: string): string {
  const b = fs.readFileSync(file);
  return createHash('sha256').update(Buffer.concat(windows(file).map((at) => b.subarray(at, at + W)))).digest('hex');
}
/** a byte of the data outside every sample window (between the first two) */
const unsampled = (file: string) => windows(file)[0] + W + 100;
const genArgs = (over: Partial<GenerateArgs> = {}): GenerateArgs => ({
  model, prompt: ['The quick brown fox'], tokens: [], record, maxNewTokens: 4, temperature: 0, topP: 0.9, repetitionPenalty: 1.1, seed: 1,
  path: 'device', device: 'auto', metric: 'max_abs', failAbove: 0.1, warnAbove: 0.01, fp16Cache: cache16, ...over,
});
const gateArgs = (over: Partial<GateArgs> = {}): GateArgs => ({ model, record, device: 'auto', metric: 'max_abs', failAbove: 0.1, warnAbove: 0.01, fp16Cache: cache16, ...over });
const readRecord = (f = record) => JSON.parse(fs.readFileSync(f, 'utf8')) as AcceptanceRecord;
/** overwrite one byte of a file in place, returning what was there */
function poke(file: string, at: number, value?: number): number {
  const fd = fs.openSync(file, 'r+');
  try {
    const b = Buffer.alloc(1);
    fs.readSync(fd, b, 0, 1, at);
    const old = b[0];
    fs.writeSync(fd, Buffer.from([value ?? old ^ 0x40]), 0, 1, at);
    return old;
  } finally {
    fs.closeSync(fd);
  }
}

beforeAll(async () => {
  delete process.env.LAYERDIFF_SIGNING_KEY;
  freshDigests();
  copyCheckpoint(LLAMA_TINY(), model);
  await runConvert({ model, fp16Cache: cache16, device: 'auto' }, sink());
  expect((await runGate(gateArgs(), sink())).code).toBe(0);
  // files changed in the last 3 s are hashed but not recorded (the digest cache's racy rule): wait them out, so that
  // what a run hashed shows in its digest cache
  await new Promise((r) => setTimeout(r, 3100));
}, 300_000);
afterAll(() => {
  fs.rmSync(tmp, { recursive: true, force: true });
});

describe('the record binds each shard header', () => {
  it('model.headers is the SHA-256 of each shard\'s length prefix and JSON header, and a malformed entry is invalid', () => {
    const r = readRecord();
    expect(r.model.headers).toEqual(Object.fromEntries(shards.map((s) => [s, headerSha(path.join(model, s))])));
    // the shards are longer than the 4 windows (so the sample is a sample, and an unsampled byte exists)
    for (const s of shards) expect(fs.statSync(path.join(model, s)).size - dataStart(path.join(model, s))).toBeGreaterThan(4 * W);
    expect(r.model.data_samples).toEqual(Object.fromEntries(shards.map((s) => [s, sampleSha(path.join(model, s))])));
    expect(recordProblems(r)).toEqual([]);
    const bad = (headers: unknown) => recordProblems({ ...r, model: { ...r.model, headers } });
    expect(bad({ 'other.safetensors': 'a'.repeat(64) })).toEqual(['model.headers is not {shard in model.files: 64 lowercase hex}']);
    expect(bad({ [shards[0]]: 'A'.repeat(64) })).toHaveLength(1);
    expect(bad({})).toHaveLength(1);
  });
});

describe('generate from the FP16 cache', () => {
  it('hashes no shard of the checkpoint and generates what the full fingerprint\'s run generates', async () => {
    const full = await runGenerate(genArgs({ verify: 'full' }), quiet);
    const fresh = freshDigests();
    const r = await runGenerate(genArgs(), quiet);
    expect(r.weights).toBe('fp16-cache');
    expect(r.result.tokens).toEqual(full.result.tokens);
    // the cache's files were hashed (verify what is read), the checkpoint's shards were not (never read)
    expect(hashedFiles(fresh)).toEqual([]);
    expect(hashedFiles(fresh, true)).toEqual(expect.arrayContaining(['head.safetensors', 'layer.00000.safetensors']));
    // --verify full hashes them all
    const fresh2 = freshDigests();
    await runGenerate(genArgs({ verify: 'full' }), quiet);
    expect(hashedFiles(fresh2)).toEqual(expect.arrayContaining(shards));
    // an earlier version's record (no headers; unsigned, as this one is): every shard hashed, and the run goes on
    const old = path.join(tmp, 'old.json');
    const earlier = readRecord();
    delete earlier.model.headers;
    fs.writeFileSync(old, JSON.stringify(earlier));
    const fresh3 = freshDigests();
    const o = await runGenerate(genArgs({ record: old }), quiet);
    expect(o.weights).toBe('fp16-cache');
    expect(o.result.tokens).toEqual(full.result.tokens);
    expect(hashedFiles(fresh3)).toEqual(expect.arrayContaining(shards));    // a cache whose manifest names another checkpoint is not used (dequantized at load): the full fingerprint first
    const mf = path.join(cache16, 'manifest.json');
    const kept = fs.readFileSync(mf, 'utf8');
    fs.writeFileSync(mf, JSON.stringify({ ...JSON.parse(kept), checkpoint: { ...JSON.parse(kept).checkpoint, fingerprint: `sha256:${'0'.repeat(64)}` } }));
    try {
      const fresh4 = freshDigests();
      const stale = await runGenerate(genArgs(), quiet);
      expect(stale.weights).toBe('dequant-at-load');
      expect(stale.result.tokens).toEqual(full.result.tokens);
      expect(hashedFiles(fresh4)).toEqual(expect.arrayContaining(shards));
    } finally {
      fs.writeFileSync(mf, kept);
    }
  });

  it('a shard whose data changed outside the sample is not read, so the run is the gated one; a read of it is refused', async () => {
    const file = path.join(model, shards[1]);
    const at = unsampled(file);
    const before = await runGenerate(genArgs(), quiet);
    const old = poke(file, at);
    try {
      freshDigests();
      const r = await runGenerate(genArgs(), quiet);
      expect(r.result.tokens).toEqual(before.result.tokens);
      // the guard: reading data of the edited shard hashes it and refuses; the untouched shard reads
      const ck = Checkpoint.open(model);
      try {
        expect(deferredFingerprint(ck, readRecord().model)?.value).toBe(readRecord().model.fingerprint);
        const inShard = (s: string) => ck.names().find((n) => ck.weightMap.get(n) === s)!;
        expect(ck.read(inShard(shards[0])).length).toBeGreaterThan(0);
        expect(() => ck.read(inShard(shards[1]))).toThrow(InputError);
        expect(() => ck.read(inShard(shards[1]))).toThrow(/model-00002-of-00002\.safetensors.*differs from the checkpoint the acceptance record vouches for/);
      } finally {
        ck.close();
      }
      // without the cache the run dequantizes the checkpoint: the full fingerprint names the shard
      await expect(runGenerate(genArgs({ fp16Cache: undefined }), quiet)).rejects.toThrow(/changed: model-00002-of-00002\.safetensors/);
    } finally {
      poke(file, at, old);
    }
  });

  it('a shard whose sampled data differs (another checkpoint of this layout) takes the full fingerprint, which names it', async () => {
    const file = path.join(model, shards[1]);
    for (const at of [windows(file)[0] + 5, windows(file)[3] + W - 1]) {
      const old = poke(file, at);
      try {
        await expect(runGenerate(genArgs(), quiet)).rejects.toThrow(/weights differ .*changed: model-00002-of-00002\.safetensors/);
      } finally {
        poke(file, at, old);
      }
    }
  });

  it('config.json, read and hashed as always, still locks the run when it changed', async () => {
    const file = path.join(model, 'config.json');
    const kept = fs.readFileSync(file);
    fs.writeFileSync(file, Buffer.concat([kept, Buffer.from('\n')]));
    try {
      await expect(runGenerate(genArgs(), quiet)).rejects.toThrow(/weights differ .*changed: config\.json/);
    } finally {
      fs.writeFileSync(file, kept);
    }
  });

  it('a shard whose header differs takes the full fingerprint, which names it', async () => {
    const file = path.join(model, shards[0]);
    // a byte inside the JSON header's "__metadata__" value: the header still parses, its digest differs
    const text = fs.readFileSync(file).subarray(8, dataStart(file)).toString('latin1');
    const at = 8 + text.indexOf('"format"') + 3; // "f" of format → "F": another metadata key, still valid JSON
    expect(at).toBeGreaterThan(10);
    const old = poke(file, at, 'F'.charCodeAt(0));
    try {
      freshDigests();
      const e = await runGenerate(genArgs(), quiet).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(RecordMismatch);
      expect((e as RecordMismatch).reasons).toEqual(['weights']);
      expect(String((e as Error).message)).toMatch(/changed: model-00001-of-00002\.safetensors/);
    } finally {
      poke(file, at, old);
    }
  });

  it('the fingerprint made from the record equals the full one on the unchanged checkpoint', async () => {
    const ck = Checkpoint.open(model);
    try {
      const full = await openCheckpointFingerprint(ck, { useCache: false });
      const d = deferredFingerprint(ck, readRecord().model);
      expect(d).toEqual(full);
      // a shard of another size than the record's: no deferral
      const m = readRecord().model;
      expect(deferredFingerprint(ck, { ...m, files: m.files.map((f) => (f.name === shards[0] ? { ...f, size: f.size + 1 } : f)) })).toBeNull();
      expect(deferredFingerprint(ck, { ...m, headers: undefined })).toBeNull();
      expect(deferredFingerprint(ck, { ...m, data_samples: undefined })).toBeNull();
      expect(deferredFingerprint(ck, { ...m, data_samples: { ...m.data_samples, [shards[1]]: '0'.repeat(64) } })).toBeNull();
    } finally {
      ck.close();
    }
  });
});

describe('gpt-oss, whose FP16 cache holds its layers and not its embedding or head', () => {
  it('hashes the shard of its embedding before reading it, and refuses it with data edited outside the sample', async () => {
    const gm = path.join(tmp, 'gpt-oss-tiny');
    const g16 = path.join(tmp, 'gpt-oss-fp16');
    const grec = path.join(tmp, 'gpt-oss.json');
    copyCheckpoint(path.join(packageRoot(), 'fixtures', 'gpt-oss-tiny'), gm);
    await runConvert({ model: gm, fp16Cache: g16, device: 'auto' }, sink());
    expect((await runGate(gateArgs({ model: gm, record: grec, fp16Cache: g16 }), sink())).code).toBe(0);
    const args = genArgs({ model: gm, record: grec, fp16Cache: g16, prompt: [], tokens: ['5,6,7'] });
    const lines: string[] = [];
    const notes = { stdout: sink(), stderr: new Writable({ write: (c, _e, cb) => (lines.push(String(c)), cb()) }) };
    const good = await runGenerate(args, notes);
    expect(good.weights).toBe('fp16-cache');
    // the embedding's shard (and the head's) hashed whole before the first read, said on stderr
    expect(lines.join('')).toMatch(/reads tensor data from model-00001-of-00002\.safetensors: hashing it whole first/);
    const file = path.join(gm, 'model-00001-of-00002.safetensors'); // model.embed_tokens.weight's, by its index
    const at = unsampled(file);
    const old = poke(file, at);
    try {
      const e = await runGenerate(args, quiet).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(InputError);
      expect(String((e as Error).message)).toMatch(/model-00001-of-00002\.safetensors.*differs from the checkpoint the acceptance record vouches for/);
    } finally {
      poke(file, at, old);
    }
  }, 120_000);
});
