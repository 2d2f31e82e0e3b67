/**
 * The acceptance gate and the lock on the optimized path: the streamed, cached fingerprint; the record's
 * canonical JSON and HMAC; gate on a good and on a faulty checkpoint; every reason `generate` stays locked
 * (no record, changed weights, tampered record, other policy, other device, bad or missing signature);
 * and gate → convert → generate end to end through the built CLI.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GateArgs, runGate } from '../cli/gate.js';
import { type GenerateArgs, runGenerate } from '../cli/generate.js';
import { ExitCode, LockedError } from '../errors.js';
import { checkpointFingerprint, fingerprintFiles } from '../gate/fingerprint.js';
import { hashFilesInWorkers } from '../gate/hash_workers.js';
import { type AcceptanceRecord, canonicalJson, RecordMismatch, recordHmac } from '../gate/record.js';
import { copyCheckpoint, nanWeight, scaleBf16Tensor } from '../../fixtures/inject.js';
import { shardName, writeLlamaTiny } from '../../fixtures/llama-tiny.js';
import { cli, hashTree, LLAMA_TINY, rewriteInPlace } from './cli.js';

// One OpenMP thread (see generate.test.ts): many tiny kernels, and a loaded runner makes a 2-thread team spin.
process.env.OMP_NUM_THREADS ??= '1';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-gate-'));
const cacheDir = path.join(tmp, 'cache');
const env = { LAYERDIFF_CACHE_DIR: cacheDir, OMP_NUM_THREADS: process.env.OMP_NUM_THREADS! };
const sink = () => new Writable({ write: (_c, _e, cb) => cb() });
const quiet = { stdout: sink(), stderr: sink() };
const model = path.join(tmp, 'llama-tiny');
const record = path.join(tmp, 'records', 'accept.json');

const gateArgs = (over: Partial<GateArgs> = {}): GateArgs => ({ model, record, device: 'auto', metric: 'max_abs', failAbove: 0.1, warnAbove: 0.01, ...over });
const genArgs = (over: Partial<GenerateArgs> = {}): GenerateArgs => ({
  model, prompt: ['The quick brown fox'], tokens: [], record, maxNewTokens: 4, temperature: 0, topP: 0.9, repetitionPenalty: 1.1, seed: 1,
  path: 'device', device: 'auto', metric: 'max_abs', failAbove: 0.1, warnAbove: 0.01, ...over,
});
/** The reasons generate is locked for, or [] when it runs. */
async function lockReasons(over: Partial<GenerateArgs> = {}): Promise<string[]> {
  try {
    await runGenerate(genArgs(over), quiet);
    return [];
  } catch (e) {
    if (e instanceof RecordMismatch) return e.reasons;
    throw e;
  }
}
function withKey<T>(key: string | undefined, f: () => Promise<T>): Promise<T> {
  const before = process.env.LAYERDIFF_SIGNING_KEY;
  if (key === undefined) delete process.env.LAYERDIFF_SIGNING_KEY;
  else process.env.LAYERDIFF_SIGNING_KEY = key;
  return f().finally(() => {
    if (before === undefined) delete process.env.LAYERDIFF_SIGNING_KEY;
    else process.env.LAYERDIFF_SIGNING_KEY = before;
  });
}
const editJson = (file: string, edit: (r: AcceptanceRecord) => void) => {
  const r = JSON.parse(fs.readFileSync(file, 'utf8')) as AcceptanceRecord;
  edit(r);
  fs.writeFileSync(file, JSON.stringify(r, null, 2));
};

beforeAll(() => {
  process.env.LAYERDIFF_CACHE_DIR = cacheDir;
  delete process.env.LAYERDIFF_SIGNING_KEY;
  copyCheckpoint(LLAMA_TINY(), model);
});
afterAll(() => {
  fs.rmSync(tmp, { recursive: true, force: true });
});

describe('fingerprint', () => {
  it('is the SHA-256 of every file, streamed, combined over sorted (name, size, digest) lines', async () => {
    const dir = path.join(tmp, 'fp');
    fs.mkdirSync(dir);
    const big = Buffer.alloc(9 << 20, 7); // more than two 4 MiB read chunks
    big[5 << 20] = 1;
    fs.writeFileSync(path.join(dir, 'b.bin'), big);
    fs.writeFileSync(path.join(dir, 'a.json'), '{}');
    const fp = await fingerprintFiles(dir, ['b.bin', 'a.json']);
    const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');
    expect(fp.files).toEqual([{ name: 'b.bin', size: big.length, sha256: sha(big) }, { name: 'a.json', size: 2, sha256: sha('{}') }]);
    expect(fp.value).toBe(`sha256:${sha(`a.json\t2\t${sha('{}')}\nb.bin\t${big.length}\t${sha(big)}\n`)}`);
  });

  it('hashed side by side on worker threads gives the same digests, through paths and open descriptors, and names an unreadable file', async () => {
    const dir = path.join(tmp, 'fp-threads');
    fs.mkdirSync(dir);
    const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    const files = [0, 1, 2, 3, 4].map((i) => {
      const b = Buffer.alloc((i * 3 + 1) << 20, i); // 1–13 MiB: several 4 MiB reads, files done out of order
      b[b.length - 1] = 0xa5 ^ i;
      fs.writeFileSync(path.join(dir, `s${i}.bin`), b);
      return b;
    });
    const names = files.map((_, i) => `s${i}.bin`);
    const want = files.map((b, i) => ({ name: names[i], size: b.length, sha256: sha(b) }));
    const threaded = await fingerprintFiles(dir, names, { useCache: false, hashThreads: 2 });
    expect(threaded.files).toEqual(want);
    expect(threaded.value).toBe((await fingerprintFiles(dir, names, { useCache: false, hashThreads: 1 })).value);
    // through descriptors the caller holds open: read from byte 0, the descriptors left open at their offset
    const fds = names.map((n) => fs.openSync(path.join(dir, n), 'r'));
    try {
      fs.readSync(fds[2], Buffer.alloc(10), 0, 10, null);
      const sources = new Map(names.map((n, i) => [n, fds[i]]));
      expect((await fingerprintFiles(dir, names, { useCache: false, hashThreads: 2, sources })).files).toEqual(want);
      const tail = Buffer.alloc(1);
      fs.readSync(fds[2], tail, 0, 1, null);
      expect(tail[0]).toBe(files[2][10]);
    } finally {
      for (const fd of fds) fs.closeSync(fd);
    }
    // a file gone between the stat and its worker's open comes back as its error code, in job order
    const got = await hashFilesInWorkers([{ file: path.join(dir, 's0.bin') }, { file: path.join(dir, 'gone.bin') }, { file: path.join(dir, 's1.bin') }], 2, () => undefined);
    expect(got).toEqual([{ sha256: want[0].sha256, bytes: files[0].length }, { error: 'ENOENT' }, { sha256: want[1].sha256, bytes: files[1].length }]);
  });

  it('caches digests by (path, size, mtime, ctime, inode) outside the model dir; an edit with the mtime restored is rehashed', async () => {
    const dir = path.join(tmp, 'fp-cache');
    fs.mkdirSync(dir);
    const f = path.join(dir, 'w.bin');
    fs.writeFileSync(f, Buffer.alloc(1024, 1));
    const t = 1_700_000_000; // whole seconds: utimes can set exactly this again later
    fs.utimesSync(f, t, t);
    const first = await fingerprintFiles(dir, ['w.bin'], { racyMs: 0 });
    const cacheFile = path.join(cacheDir, 'fingerprints.json');
    const cache = JSON.parse(fs.readFileSync(cacheFile, 'utf8'));
    const key = fs.realpathSync(f);
    expect(cache.entries[key].sha256).toBe(first.files[0].sha256);
    // A hit is served from the cache without reading: plant a marker digest and see it come back.
    cache.entries[key].sha256 = 'f'.repeat(64);
    fs.writeFileSync(cacheFile, JSON.stringify(cache));
    expect((await fingerprintFiles(dir, ['w.bin'], { racyMs: 0 })).files[0].sha256).toBe('f'.repeat(64));
    // Edit in place and set the mtime back: size, mtime and inode are equal, ctime is not.
    const st = fs.statSync(f, { bigint: true });
    const bytes = fs.readFileSync(f);
    bytes[100] ^= 1;
    await new Promise((r) => setTimeout(r, 20)); // past the filesystem's timestamp tick
    fs.writeFileSync(f, bytes);
    fs.utimesSync(f, t, t);
    const now = fs.statSync(f, { bigint: true });
    expect([now.mtimeNs, now.size, now.ino]).toEqual([st.mtimeNs, st.size, st.ino]);
    expect(now.ctimeNs).not.toBe(st.ctimeNs);
    const second = await fingerprintFiles(dir, ['w.bin'], { racyMs: 0 });
    expect(second.files[0].sha256).toBe(createHash('sha256').update(bytes).digest('hex'));
    // By default a file changed seconds ago is not cached ("racily clean"), so the next run rehashes it.
    fs.writeFileSync(path.join(dir, 'new.bin'), 'x');
    await fingerprintFiles(dir, ['new.bin']);
    expect(Object.keys(JSON.parse(fs.readFileSync(cacheFile, 'utf8')).entries)).not.toContain(fs.realpathSync(path.join(dir, 'new.bin')));
    expect(fs.readdirSync(dir).sort()).toEqual(['new.bin', 'w.bin']); // nothing written beside the files
  });

  it('never puts its cache inside the model dir, and draws a progress bar when asked', async () => {
    const dir = path.join(tmp, 'fp-inside');
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, 'x.bin'), Buffer.alloc(8 << 20));
    const before = process.env.LAYERDIFF_CACHE_DIR;
    process.env.LAYERDIFF_CACHE_DIR = path.join(dir, '.cache');
    let err = '';
    const stderr = new Writable({ write: (c, _e, cb) => ((err += String(c)), cb()) });
    try {
      await fingerprintFiles(dir, ['x.bin'], { stderr, progress: true, progressAfterMs: 0 });
    } finally {
      process.env.LAYERDIFF_CACHE_DIR = before;
    }
    expect(fs.readdirSync(dir)).toEqual(['x.bin']);
    expect(err).toMatch(/hashing without it/);
    expect(err).toMatch(/fingerprint \[#*\.*\] \d+%/);
    expect(err.endsWith('\r\x1b[K')).toBe(true);
  });
});

describe('the record', () => {
  it('canonical JSON sorts keys at every level; the HMAC covers everything but itself', () => {
    expect(canonicalJson({ b: 1, a: { d: [1, { z: 0, y: null }], c: 'x' } })).toBe('{"a":{"c":"x","d":[1,{"y":null,"z":0}]},"b":1}');
    const r = { schema: 'layerdiff.record/1', policy: { metric: 'max_abs', fail_above: 0.1, warn_above: 0.01 } } as unknown as AcceptanceRecord;
    const h = recordHmac(r, 'k');
    expect(recordHmac({ ...r, hmac: { alg: 'HMAC-SHA256', value: 'whatever' } }, 'k')).toBe(h);
    expect(recordHmac({ ...r, policy: { ...r.policy, fail_above: 0.2 } }, 'k')).not.toBe(h);
    expect(recordHmac(r, 'other')).not.toBe(h);
  });
});

describe('layerdiff gate', () => {
  it('passes llama-tiny over the built-in prompts and writes a complete record, atomically, outside the model', async () => {
    const before = hashTree(model);
    let out = '';
    const r = await runGate(gateArgs({ reports: path.join(tmp, 'reports') }), new Writable({ write: (c, _e, cb) => ((out += String(c)), cb()) }));
    expect(r.code).toBe(ExitCode.pass);
    expect(r.summaries.map((s) => s.name)).toEqual(['short', 'english', 'chinese', 'code', 'numbers', 'long']);
    expect(out).toMatch(/chinese/);
    expect(out).toMatch(/PASS — all 6 acceptance prompts passed/);
    const rec = JSON.parse(fs.readFileSync(record, 'utf8')) as AcceptanceRecord;
    expect(rec.schema).toBe('layerdiff.record/1');
    expect(rec.model.files.map((f) => f.name)).toEqual(['config.json', shardName(1), shardName(2), 'model.safetensors.index.json', 'tokenizer.json', 'tokenizer_config.json']);
    expect(rec.model.fingerprint).toBe((await checkpointFingerprint(model, [shardName(1), shardName(2)])).value);
    expect(rec.device.name).toBe('emulated');
    expect(rec.policy).toMatchObject({ rule: 'fixed', metric: 'max_abs', fail_above: 0.1, warn_above: 0.01 });
    expect(rec.hmac).toBeUndefined();
    expect(Date.parse(rec.created)).toBeGreaterThan(Date.now() - 600_000);
    // the report digest covers the per-prompt reports written with --reports
    const files = fs.readdirSync(path.join(tmp, 'reports')).sort();
    expect(files).toHaveLength(6);
    const digest = createHash('sha256');
    files.forEach((f, i) => {
      const sha = createHash('sha256').update(fs.readFileSync(path.join(tmp, 'reports', f))).digest('hex');
      expect(sha).toBe(rec.acceptance.prompts[i].report_sha256);
      digest.update(`${i}\t${sha}\n`);
    });
    expect(rec.report_digest).toBe(`sha256:${digest.digest('hex')}`);
    expect(fs.readdirSync(path.dirname(record))).toEqual(['accept.json']);
    expect(hashTree(model)).toBe(before);
  });

  it('writes no record on a checkpoint whose device path overflows FP16, leaves an existing record as it was, exits 1', async () => {
    const bad = path.join(tmp, 'overflow');
    writeLlamaTiny(bad, { variant: 'overflow' });
    const rec = path.join(tmp, 'records', 'overflow.json');
    fs.writeFileSync(rec, 'an older record\n');
    const old = Math.floor(Date.now() / 1000) - 3600;
    fs.utimesSync(rec, old, old);
    const r = await runGate(gateArgs({ model: bad, record: rec }), sink());
    expect(r.code).toBe(ExitCode.stageFailed);
    expect(r.record).toBeNull();
    expect(r.summaries.every((s) => s.verdict === 'fail')).toBe(true);
    expect(fs.readFileSync(rec, 'utf8')).toBe('an older record\n');
    expect(fs.statSync(rec).mtimeMs).toBe(old * 1000);
    const fresh = path.join(tmp, 'records', 'never.json');
    expect((await runGate(gateArgs({ model: bad, record: fresh }), sink())).code).toBe(ExitCode.stageFailed);
    expect(fs.existsSync(fresh)).toBe(false);
  });

  it('writes no record for a DeepSeek-V4 checkpoint whose device path overflows FP16 (exit 1, cause named)', async () => {
    const bad = path.join(tmp, 'ds-overflow');
    // layer 2's ffn_norm ×10⁴: the normalized MoE input reaches ~10⁵, past FP16's 65504 (the FP32 reference stays finite)
    scaleBf16Tensor(path.join(path.dirname(LLAMA_TINY()), 'deepseek-v4-tiny'), bad, 'layers.2.ffn_norm.weight', 1e4);
    const rec = path.join(tmp, 'records', 'ds-overflow.json');
    let out = '';
    const r = await runGate(gateArgs({ model: bad, record: rec }), new Writable({ write: (c, _e, cb) => ((out += String(c)), cb()) }));
    expect(r.code).toBe(ExitCode.stageFailed);
    expect(r.record).toBeNull();
    expect(fs.existsSync(rec)).toBe(false);
    expect(r.summaries.every((s) => s.verdict === 'fail' && s.worst.stage === 'layer.2')).toBe(true);
    expect(out).toMatch(/layer\.2.*fp16-overflow/);
  });

  it('takes a JSONL prompt set with text and token prompts, and names the line of a bad one', async () => {
    const jsonl = path.join(tmp, 'prompts.jsonl');
    fs.writeFileSync(jsonl, '{"prompt": "解释一下 CDNA2 架构的特点"}\n\n{"name": "ids", "tokens": [0, 5, 17, 300]}\n');
    const r = await runGate(gateArgs({ prompts: jsonl, record: path.join(tmp, 'records', 'jsonl.json') }), sink());
    expect(r.code).toBe(ExitCode.pass);
    expect(r.summaries.map((s) => [s.name, s.tokens])).toEqual([['line 1', 28], ['ids', 4]]);
    fs.writeFileSync(jsonl, '{"prompt": "ok"}\n{"prompt": 3}\n');
    await expect(runGate(gateArgs({ prompts: jsonl }), sink())).rejects.toThrow(/prompts\.jsonl:2: "prompt" must be a string/);
  });

  it('refuses to write the record inside the model directory', async () => {
    await expect(runGate(gateArgs({ record: path.join(model, 'accept.json') }), sink())).rejects.toThrow(/never modifies/);
  });
});

describe('generate stays locked without a matching record (exit 3)', () => {
  beforeAll(async () => {
    if (!fs.existsSync(record)) expect((await runGate(gateArgs(), sink())).code).toBe(0);
  });

  it('runs with the matching record', async () => {
    expect(await lockReasons()).toEqual([]);
  });

  it('a run longer than the gate\'s longest prompt is noted on stderr, or refused with --within-gated (length)', async () => {
    // a gate over two token prompts of 4 and 6 tokens (the built-in set's longest fills llama-tiny's 256 positions)
    const jsonl = path.join(tmp, 'short.jsonl');
    fs.writeFileSync(jsonl, '{"tokens": [1, 2, 3, 4]}\n{"tokens": [5, 6, 7, 8, 9, 10]}\n');
    const shortRec = path.join(tmp, 'records', 'short.json');
    expect((await runGate(gateArgs({ prompts: jsonl, record: shortRec }), sink())).code).toBe(ExitCode.pass);
    const G = 6;
    const ids = (n: number) => Array.from({ length: n }, (_, i) => String(1 + (i % 50))).join(',');
    const run = async (over: Partial<GenerateArgs>) => {
      let err = '';
      const stderr = new Writable({ write: (c, _e, cb) => ((err += String(c)), cb()) });
      await runGenerate(genArgs({ prompt: [], record: shortRec, ...over }), { stdout: sink(), stderr });
      return err;
    };
    // a G-token prompt and one new token feeds G tokens (the last token is chosen, never fed): within the gate
    expect(await run({ tokens: [ids(G)], maxNewTokens: 1, withinGated: true })).not.toMatch(/note:/);
    const noted = await run({ tokens: [ids(G)], maxNewTokens: 3 });
    expect(noted).toContain(`layerdiff: note: this run feeds sequences of up to ${G + 2} tokens and the gate compared up to ${G} (its longest prompt); positions past ${G} were not compared`);
    expect(await lockReasons({ prompt: [], record: shortRec, tokens: [ids(G - 1), ids(G)], maxNewTokens: 2, withinGated: true })).toEqual(['length']);
    await expect(runGenerate(genArgs({ prompt: [], record: shortRec, tokens: [ids(G)], maxNewTokens: 3, withinGated: true }), quiet)).rejects.toThrow(`Give --max-new-tokens 1 or fewer, or gate a prompt of ${G + 2} tokens or more`);
    await expect(runGenerate(genArgs({ prompt: [], record: shortRec, tokens: [ids(G + 1)], maxNewTokens: 1, withinGated: true }), quiet)).rejects.toThrow(/Give a shorter prompt/);
    // a record whose prompt lengths are not counts is not a record
    const rec = path.join(tmp, 'records', 'lengths.json');
    fs.copyFileSync(shortRec, rec);
    editJson(rec, (x) => {
      x.acceptance.prompts[0].tokens = 0;
    });
    expect(await lockReasons({ record: rec })).toEqual(['invalid']);
    await expect(runGenerate(genArgs({ record: rec }), quiet)).rejects.toThrow(/acceptance\.prompts\[0\]\.tokens is not a positive integer/);
    await expect(runGenerate(genArgs({ record: shortRec, path: 'reference', withinGated: true }), quiet)).rejects.toThrow(/--within-gated is for --path device/);
  });

  it('no record', async () => {
    expect(await lockReasons({ record: path.join(tmp, 'none.json') })).toEqual(['no-record']);
    expect(await lockReasons({ record: undefined })).toEqual(['no-record']);
  });

  it('another policy', async () => {
    expect(await lockReasons({ failAbove: 0.2 })).toEqual(['policy']);
    expect(await lockReasons({ metric: 'rel_l2' })).toEqual(['policy']);
    // the same top-level thresholds with a looser per-kind override, or the floor rule instead of the fixed one
    const loose = path.join(tmp, 'loose-policy.json');
    fs.writeFileSync(loose, JSON.stringify({ rule: 'fixed', kinds: { moe: { fail_above: 5, warn_above: 1 } } }));
    expect(await lockReasons({ metric: undefined, failAbove: undefined, warnAbove: undefined, policy: loose })).toEqual(['policy']);
    expect(await lockReasons({ metric: undefined, failAbove: undefined, warnAbove: undefined })).toEqual(['policy']);
  });

  it('another device, and a record that is not a record', async () => {
    const rec = path.join(tmp, 'records', 'device.json');
    fs.copyFileSync(record, rec);
    editJson(rec, (r) => {
      r.device = { ...r.device, name: 'hip', device_name: 'AMD Instinct MI250X', arch: 'gfx90a' };
    });
    expect(await lockReasons({ record: rec })).toEqual(['device']);
    fs.writeFileSync(rec, '{"schema": "something else"}');
    expect(await lockReasons({ record: rec })).toEqual(['invalid']);
  });

  it('another build of the same version (modules, addons or the backend\'s files), or a record that names none (tool)', async () => {
    const rec = path.join(tmp, 'records', 'build.json');
    fs.copyFileSync(record, rec);
    expect(JSON.parse(fs.readFileSync(rec, 'utf8')).tool.build).toMatch(/^sha256:[0-9a-f]{64}$/);
    editJson(rec, (r) => (r.tool.build = `sha256:${'0'.repeat(64)}`));
    expect(await lockReasons({ record: rec })).toEqual(['tool']);
    await expect(runGenerate(genArgs({ record: rec }), quiet)).rejects.toThrow(/another build of layerdiff .*000000000000… ≠ this [0-9a-f]{12}…/);
    editJson(rec, (r) => delete r.tool.build);
    expect(await lockReasons({ record: rec })).toEqual(['tool']);
    await expect(runGenerate(genArgs({ record: rec }), quiet)).rejects.toThrow(/names no build of layerdiff/);
    editJson(rec, (r) => ((r.tool as { build?: unknown }).build = 5));
    expect(await lockReasons({ record: rec })).toEqual(['invalid']);
  });

  it('a shard written in place while generate runs stops it before a token is chosen from what it computed', async () => {
    const shard = path.join(model, 'model-00002-of-00002.safetensors');
    const chunks: string[] = [];
    // the first streamed text rewrites the shard's last bytes with what they were (content unchanged, mtime set back)
    const out = new Writable({
      write: (c, _e, cb) => {
        if (chunks.push(String(c)) === 1) rewriteInPlace(shard);
        cb();
      },
    });
    await expect(runGenerate(genArgs({ maxNewTokens: 8, temperature: 0 }), { stdout: out, stderr: sink() })).rejects.toThrow(/model-00002-of-00002\.safetensors.*changed while in use/);
    // no text after the first, but the newline that ends its line before the error's
    expect(chunks.slice(1)).toEqual(['\n']);
    expect(await lockReasons()).toEqual([]); // the same bytes: the record still vouches for them
  });

  it('a changed shard byte (weights), naming the shard, even when the edit keeps the mtime', async () => {
    const changed = path.join(tmp, 'changed');
    copyCheckpoint(model, changed);
    const rec = path.join(tmp, 'records', 'changed.json');
    expect((await runGate(gateArgs({ model: changed, record: rec }), sink())).code).toBe(0);
    const shard = path.join(changed, shardName(2));
    const st = fs.statSync(shard);
    const bytes = fs.readFileSync(shard);
    bytes[bytes.length - 10] ^= 0x01; // a weight byte: the checkpoint still loads
    fs.writeFileSync(shard, bytes);
    fs.utimesSync(shard, st.atime, st.mtime); // a sneaky edit keeps the mtime
    let err: unknown;
    try {
      await runGenerate(genArgs({ model: changed, record: rec }), quiet);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(LockedError);
    expect((err as RecordMismatch).reasons).toEqual(['weights']);
    expect((err as Error).message).toMatch(new RegExp(`changed: ${shardName(2).replace(/\./g, '\\.')}`));
    expect((err as Error).message).toMatch(/layerdiff gate .*changed --record .*changed\.json/);
  });

  it('a tampered, a wrongly keyed, an unsigned and an unverifiable record (signature)', async () => {
    const rec = path.join(tmp, 'records', 'signed.json');
    await withKey('key-one', async () => {
      expect((await runGate(gateArgs({ record: rec }), sink())).code).toBe(0);
      expect(JSON.parse(fs.readFileSync(rec, 'utf8')).hmac.alg).toBe('HMAC-SHA256');
      expect(await lockReasons({ record: rec })).toEqual([]);
    });
    expect(await withKey('key-two', () => lockReasons({ record: rec }))).toEqual(['signature']);
    expect(await withKey(undefined, () => lockReasons({ record: rec }))).toEqual(['signature']);
    expect(await withKey('key-one', () => lockReasons({ record }))).toEqual(['signature']); // unsigned record, key set
    // Loosen the recorded policy to match a laxer generate: the HMAC catches the edit.
    editJson(rec, (r) => {
      r.policy.fail_above = 0.2;
    });
    expect(await withKey('key-one', () => lockReasons({ record: rec, failAbove: 0.2 }))).toEqual(['signature']);
  });
});

describe('the CLI, end to end', () => {
  it('gate, then generate on the device path, with and without the FP16 cache, and --path reference', () => {
    const rec = path.join(tmp, 'cli', 'accept.json');
    const g = cli(['gate', model, '--record', rec], env);
    // off a TTY, one line per prompt as it finishes, and nothing else
    // (the gate's own output in the message: one CI run saw this gate exit with none of its prompt lines, not seen again)
    expect(g.stderr.trim().split('\n').map((l) => /^gate: prompt (\d)\/6 \S+: pass · worst max_abs \S+ at \S+ · \d+\.\d s$/.exec(l)?.[1]), `exit ${g.code}, stderr ${JSON.stringify(g.stderr)}`).toEqual(['1', '2', '3', '4', '5', '6']);
    expect(g.code).toBe(0);
    expect(g.stdout).toMatch(/│ 3 │ chinese/);
    const run = (extra: string[], json: string) => {
      const r = cli(['generate', model, '--prompt', 'The quick brown fox', '--record', rec, '--max-new-tokens', '8', '--temperature', '0', '--json', json, ...extra], env);
      expect(r.stderr).toMatch(/tokens for 1 prompt/);
      expect(r.code).toBe(0);
      expect(r.stdout.length).toBeGreaterThan(1);
      return JSON.parse(fs.readFileSync(json, 'utf8')) as { weights: string; outputs: Array<{ tokens: number[]; text: string }> };
    };
    const plain = run([], path.join(tmp, 'cli', 'a.json'));
    expect(plain.weights).toBe('dequant-at-load');
    expect(plain.outputs[0].tokens).toHaveLength(8);
    const cacheDir16 = path.join(tmp, 'cli', 'fp16');
    const c = cli(['convert', model, '--fp16-cache', cacheDir16], env);
    expect(c.code).toBe(0);
    // a record written without --fp16-cache vouches for no cache: locked, with the gate that fixes it
    const unbound = cli(['generate', model, '--prompt', 'The quick brown fox', '--record', rec, '--max-new-tokens', '2', '--fp16-cache', cacheDir16], env);
    expect(unbound.code).toBe(3);
    expect(unbound.stderr).toMatch(/does not vouch for the FP16 cache .*without gate --fp16-cache.*run: layerdiff gate .* --fp16-cache /);
    const g2 = cli(['gate', model, '--record', rec, '--fp16-cache', cacheDir16], env);
    expect(g2.code).toBe(0);
    expect(g2.stdout).toMatch(/FP16 cache .*every byte equals the device path's dequantization/);
    expect(JSON.parse(fs.readFileSync(rec, 'utf8')).fp16_cache.files_digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    const cached = run(['--fp16-cache', cacheDir16], path.join(tmp, 'cli', 'b.json'));
    expect(cached.weights).toBe('fp16-cache');
    expect(cached.outputs).toEqual(plain.outputs);
    // a hand-edited manifest list is one line naming the manifest (exit 2), not an internal error
    const mf = path.join(cacheDir16, 'manifest.json');
    const kept = fs.readFileSync(mf, 'utf8');
    fs.writeFileSync(mf, JSON.stringify({ ...JSON.parse(kept), chunked: {} }));
    const edited = cli(['generate', model, '--prompt', 'Hi', '--record', rec, '--max-new-tokens', '2', '--fp16-cache', cacheDir16], env);
    expect(edited.code).toBe(2);
    expect(edited.stderr.trim().split('\n')).toHaveLength(1);
    expect(edited.stderr).toMatch(/manifest\.json.*"chunked" entry is not a list/);
    fs.writeFileSync(mf, kept);
    const ref = run(['--path', 'reference'], path.join(tmp, 'cli', 'c.json'));
    expect(ref.weights).toBe('fp32-reference');

    const batch = cli(['generate', model, '--prompt', 'Hi', '--prompt', '解释一下 CDNA2 架构的特点', '--record', rec, '--max-new-tokens', '3', '--seed', '5'], env);
    expect(batch.code).toBe(0);
    expect(batch.stdout).toMatch(/^\[1\] "/m);
    expect(batch.stdout).toMatch(/^=== \[2\] "解释一下 CDNA2 架构的特点"/m);
  });

  it('exits 3 with what differs and the fixing command, for DeepSeek-V4 too', () => {
    const rec = path.join(tmp, 'cli', 'accept.json');
    const r = cli(['generate', model, '--prompt', 'x', '--record', rec, '--fail-above', '0.5'], env);
    expect(r.code).toBe(3);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/policy differs .*fail_above 0\.5 ≠ recorded 0\.1.*run: layerdiff gate .* --record .*accept\.json --fail-above 0\.5/);
    const none = cli(['generate', model, '--prompt', 'x', '--record', path.join(tmp, 'nope.json')], env);
    expect(none.code).toBe(3);
    expect(none.stderr).toMatch(/no acceptance record at .*nope\.json/);
    const ds = path.join(path.dirname(LLAMA_TINY()), 'deepseek-v4-tiny');
    // DeepSeek-V4 has a cached device decoder (device-hip/deepseek_v4_decode.ts): locked by Llama's record
    const d = cli(['generate', ds, '--prompt', 'x', '--record', rec], env);
    expect(d.code).toBe(3);
    expect(d.stderr).toMatch(/locked.*run: layerdiff gate .*deepseek-v4-tiny --record .*accept\.json/);
  });

  it('a NaN weight is bad input for gate (exit 2), not a pass', () => {
    const bad = path.join(tmp, 'nan');
    nanWeight(LLAMA_TINY(), bad, 'model.layers.1.self_attn.q_proj.weight');
    const r = cli(['gate', bad, '--record', path.join(tmp, 'cli', 'nan.json')], env);
    expect(r.code).toBe(2);
    expect(fs.existsSync(path.join(tmp, 'cli', 'nan.json'))).toBe(false);
  });
});
