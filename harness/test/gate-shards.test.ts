/**
 * The sharded gate: the prompt assignment (checked against a hand computation of the greedy rule); N = 1, 2
 * and 3 shards of the built-in prompt set merged into a record equal to the single gate's in every field
 * that names neither time nor shard, with per-prompt reports equal but for timings; every inconsistent
 * set refused (missing, duplicated, another checkpoint, policy, tool version or build, prompt set or shard count,
 * an edited row or report, a tampered or unverifiable signature); a failing prompt refused with exit 1;
 * the reference/device split through golden runs; and the scheduler examples' scripts, played locally.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type GateArgs, runGate } from '../cli/gate.js';
import { runGateMerge } from '../cli/gate-merge.js';
import { type GenerateArgs, runGenerate } from '../cli/generate.js';
import { ExitCode, InputError } from '../errors.js';
import { PARTIAL_MANIFEST, type ShardPartial } from '../gate/partial.js';
import { type AcceptanceRecord, recordHmac } from '../gate/record.js';
import { assignShards, parseShard, promptSetEntries } from '../gate/shard.js';
import { packageRoot } from '../version.js';
import { copyCheckpoint, scaleBf16Tensor } from '../../fixtures/inject.js';
import { cli, LLAMA_TINY } from './cli.js';

process.env.OMP_NUM_THREADS ??= '1';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-shards-'));
const cacheDir = path.join(tmp, 'cache');
const model = path.join(tmp, 'llama-tiny');
const sink = () => new Writable({ write: (_c, _e, cb) => cb() });
const text = () => {
  const chunks: string[] = [];
  return { out: new Writable({ write: (c, _e, cb) => (chunks.push(String(c)), cb()) }), text: () => chunks.join('') };
};
const base = (over: Partial<GateArgs> = {}): GateArgs => ({ model, device: 'auto', metric: 'max_abs', failAbove: 0.1, warnAbove: 0.01, ...over });
const readJson = <T>(f: string) => JSON.parse(fs.readFileSync(f, 'utf8')) as T;
const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

function withKey<T>(key: string | undefined, f: () => Promise<T>): Promise<T> {
  const before = process.env.LAYERDIFF_SIGNING_KEY;
  if (key === undefined) delete process.env.LAYERDIFF_SIGNING_KEY;
  else process.env.LAYERDIFF_SIGNING_KEY = key;
  return f().finally(() => {
    if (before === undefined) delete process.env.LAYERDIFF_SIGNING_KEY;
    else process.env.LAYERDIFF_SIGNING_KEY = before;
  });
}

/** Every field that names a time (timings, start times) or the merge (report digests cover timings) removed. */
function timeless(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(timeless);
  if (v === null || typeof v !== 'object') return v;
  const o: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) if (!['time_ms', 'started', 'elapsed_s', 'created', 'report_sha256', 'report_digest', 'hmac'].includes(k)) o[k] = timeless(x);
  return o;
}

/** Run shards 1..n into root/shard-I (as run-shard.sh names them); the folders. */
async function shards(n: number, root: string, over: Partial<GateArgs> = {}, only?: number[]): Promise<string[]> {
  const dirs: string[] = [];
  for (let i = 1; i <= n; i++) {
    if (only !== undefined && !only.includes(i)) continue;
    const out = path.join(root, `shard-${i}`);
    await runGate(base({ shard: `${i}/${n}`, out, ...over }), sink());
    dirs.push(out);
  }
  return dirs;
}
/** The unsigned shards of the built-in set for N, run once and shared by the tests that need them. */
const runs = new Map<number, Promise<string[]>>();
const built = (n: number) => {
  if (!runs.has(n)) runs.set(n, shards(n, path.join(tmp, `n${n}`)));
  return runs.get(n)!;
};
const merge = (dirs: string[], record: string) => runGateMerge({ dirs, record }, sink());
const mergeError = (dirs: string[]) => {
  try {
    merge(dirs, path.join(tmp, 'never.json'));
  } catch (e) {
    expect(e).toBeInstanceOf(InputError);
    expect(fs.existsSync(path.join(tmp, 'never.json'))).toBe(false);
    return (e as Error).message;
  }
  throw new Error('the merge was not refused');
};
const copyDir = (src: string, dst: string) => fs.cpSync(src, dst, { recursive: true });
const editPartial = (dir: string, edit: (p: ShardPartial) => void) => {
  const f = path.join(dir, PARTIAL_MANIFEST);
  const p = readJson<ShardPartial>(f);
  edit(p);
  fs.writeFileSync(f, JSON.stringify(p, null, 2));
};

let single: AcceptanceRecord;
const singleReports = path.join(tmp, 'single-reports');
let three: string[]; // N = 3, unsigned
let threeSigned: string[];
const small = path.join(tmp, 'small.jsonl');

beforeAll(async () => {
  process.env.LAYERDIFF_CACHE_DIR = cacheDir;
  delete process.env.LAYERDIFF_SIGNING_KEY;
  copyCheckpoint(LLAMA_TINY(), model);
  const r = await runGate(base({ record: path.join(tmp, 'single.json'), reports: singleReports }), sink());
  expect(r.code).toBe(ExitCode.pass);
  single = readJson<AcceptanceRecord>(path.join(tmp, 'single.json'));
  three = await built(3);
  // signed: a small set of id prompts (the signature, not the prompts, is what those tests are about)
  fs.writeFileSync(small, '{"name": "ids", "tokens": [5, 6, 7, 8]}\n{"tokens": [9, 10]}\n{"tokens": [1, 2, 3]}\n');
  threeSigned = await withKey('k1', () => shards(3, path.join(tmp, 'n3-signed'), { prompts: small }));
});
afterAll(() => {
  fs.rmSync(tmp, { recursive: true, force: true });
});

describe('the assignment of prompts to shards', () => {
  it('parses I/N counted from 1 and refuses anything else, naming the option', () => {
    expect(parseShard('2/3')).toEqual({ index: 2, count: 3 });
    expect(parseShard('1/1')).toEqual({ index: 1, count: 1 });
    for (const bad of ['0/3', '4/3', '3', '1/0', '-1/2', 'a/b']) expect(() => parseShard(bad)).toThrow(/--shard/);
  });

  it('is the greedy longest-first rule, worked by hand for the built-in prompt lengths', () => {
    // token counts of short, english, chinese, code, numbers, long on llama-tiny's tokenizer (the gate's table)
    const lengths = single.acceptance.prompts.map((p) => p.tokens);
    expect(lengths).toEqual([3, 51, 28, 77, 64, 256]);
    const entries = single.acceptance.prompts.map((p) => ({ name: p.name, tokens: p.tokens, digest: p.name }));
    // N = 3: 256 → 1 | 77 → 2 | 64 → 3 | 51 → 3 (64 < 77) | 28 → 2 (77 < 115) | 3 → 2 (105 < 115)
    expect(assignShards(entries, 3)).toEqual([2, 3, 2, 2, 3, 1]);
    // N = 2: 256 → 1, then everything else (223 tokens in all) fits beside it on 2
    expect(assignShards(entries, 2)).toEqual([2, 2, 2, 2, 2, 1]);
    expect(assignShards(entries, 1)).toEqual([1, 1, 1, 1, 1, 1]);
  });

  it('depends on what a prompt is, not where it is in the file: equal lengths are ordered by digest', () => {
    const prompts = ['a', 'b', 'c', 'd', 'e'].map((name, i) => ({ name, tokens: [i, i, i, i] }));
    const byName = (ps: typeof prompts) => {
      const s = assignShards(promptSetEntries(ps), 2);
      return Object.fromEntries(ps.map((p, i) => [p.name, s[i]]));
    };
    const want = byName(prompts);
    expect(byName([...prompts].reverse())).toEqual(want);
    expect(byName([prompts[2], prompts[0], prompts[4], prompts[1], prompts[3]])).toEqual(want);
    expect(Object.values(want).filter((s) => s === 1)).toHaveLength(3); // 5 equal prompts: 3 + 2
  });
});

describe('N shards merge into the single gate\'s record', () => {
  for (const n of [1, 2, 3]) {
    it(`N = ${n}: every field but times equal, every report equal but for timings`, async () => {
      const dirs = await built(n);
      // the partials name each prompt once, by its place in the set, with its report
      const held = dirs.flatMap((d) => readJson<ShardPartial>(path.join(d, PARTIAL_MANIFEST)).prompts.map((q) => q.index)).sort();
      expect(held).toEqual([0, 1, 2, 3, 4, 5]);
      const record = path.join(tmp, `merged-${n}.json`);
      expect(merge([...dirs].reverse(), record).code).toBe(ExitCode.pass);
      const merged = readJson<AcceptanceRecord>(record);
      expect(timeless(merged)).toEqual(timeless(single));
      expect(Object.keys(merged).sort()).toEqual(Object.keys(single).sort());
      // the shards' header and data-sample digests a generation from an FP16 cache checks (harness/gate/deferred.ts)
      expect(Object.keys(merged.model.headers!).sort()).toEqual(['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']);
      expect([merged.model.headers, merged.model.data_samples]).toEqual([single.model.headers, single.model.data_samples]);
      for (const d of dirs) {
        for (const q of readJson<ShardPartial>(path.join(d, PARTIAL_MANIFEST)).prompts) {
          const bytes = fs.readFileSync(path.join(d, q.report));
          expect(merged.acceptance.prompts[q.index].report_sha256).toBe(sha(bytes));
          const label = `prompt-${String(q.index + 1).padStart(2, '0')}.json`;
          expect(timeless(JSON.parse(bytes.toString()))).toEqual(timeless(readJson(path.join(singleReports, label))));
        }
      }
      if (n === 2) {
        const gen: GenerateArgs = {
          model, prompt: ['The quick brown fox'], tokens: [], record, maxNewTokens: 3, temperature: 0, topP: 0.9, repetitionPenalty: 1.1, seed: 1,
          path: 'device', device: 'auto', metric: 'max_abs', failAbove: 0.1, warnAbove: 0.01,
        };
        expect((await runGenerate(gen, { stdout: sink(), stderr: sink() })).code).toBe(ExitCode.pass);
      }
    });
  }

  it('signed partials merge into a signed record that generate accepts under the key', async () => {
    const record = path.join(tmp, 'merged-signed.json');
    await withKey('k1', async () => {
      expect(merge(threeSigned, record).code).toBe(ExitCode.pass);
      const gen: GenerateArgs = {
        model, prompt: [], tokens: ['1,2,3'], record, maxNewTokens: 2, temperature: 0, topP: 0.9, repetitionPenalty: 1.1, seed: 1,
        path: 'device', device: 'auto', metric: 'max_abs', failAbove: 0.1, warnAbove: 0.01,
      };
      expect((await runGenerate(gen, { stdout: sink(), stderr: sink() })).code).toBe(ExitCode.pass);
    });
    const merged = readJson<AcceptanceRecord>(record);
    expect(merged.hmac?.value).toBe(recordHmac(merged, 'k1'));
    expect(merged.acceptance.prompts.map((p) => p.tokens)).toEqual([4, 2, 3]);
  });
});

describe('an inconsistent set of shards is refused, naming the shard (exit 2)', () => {
  it('a missing and a duplicated shard', () => {
    expect(mergeError([three[0], three[2]])).toMatch(/shard 2\/3 missing/);
    expect(mergeError([three[0], three[1], three[1], three[2]])).toMatch(/shard 2\/3 is given twice/);
  });

  it('a shard from another checkpoint', async () => {
    const other = path.join(tmp, 'other-ck');
    scaleBf16Tensor(model, other, 'model.norm.weight', 2);
    const [foreign] = await shards(3, path.join(tmp, 'n3-other-ck'), { model: other }, [2]);
    const msg = mergeError([three[0], foreign, three[2]]);
    expect(msg).toContain(foreign);
    expect(msg).toMatch(/another gate .* the checkpoint \(fingerprint/);
  });

  it('a shard whose header or data-sample digests differ from the others\', or are malformed', () => {
    const other = path.join(tmp, 'n3-headers');
    copyDir(three[1], other);
    const shard = 'model-00002-of-00002.safetensors';
    editPartial(other, (p) => {
      p.model.data_samples![shard] = '0'.repeat(64);
    });
    expect(mergeError([three[0], other, three[2]])).toMatch(/another gate .*header and data-sample digests/);
    editPartial(other, (p) => {
      p.model.data_samples![shard] = 'not hex';
    });
    expect(mergeError([three[0], other, three[2]])).toMatch(/model\.data_samples is not \{shard in model\.files: 64 lowercase hex\} \(edited\?\)/);
  });

  it('a shard run under another policy, and one of another prompt set', async () => {
    const [pol] = await shards(3, path.join(tmp, 'n3-policy'), { warnAbove: 0.02 }, [2]);
    expect(mergeError([three[0], pol, three[2]])).toMatch(/the policy \(warn_above 0.02 ≠ 0.01\)/);
    // the same three numbers, but one stage judged looser and the floor rule: every judging field is compared
    const loose = path.join(tmp, 'loose-policy.json');
    fs.writeFileSync(loose, JSON.stringify({ rule: 'fixed', metric: 'max_abs', fail_above: 0.1, warn_above: 0.01, stages: { 'layer.1': { fail_above: 1e9 } } }));
    const [st] = await shards(3, path.join(tmp, 'n3-stage-override'), { metric: undefined, failAbove: undefined, warnAbove: undefined, policy: loose }, [2]);
    expect(mergeError([three[0], st, three[2]])).toMatch(/the policy \(stages \{"layer\.1":\{"fail_above":1000000000\}\} ≠ null\)/);
    const [fl] = await shards(3, path.join(tmp, 'n3-floor-rule'), { metric: undefined, failAbove: undefined, warnAbove: undefined }, [2]);
    expect(mergeError([three[0], fl, three[2]])).toMatch(/the policy \(rule "floor" ≠ "fixed"/);
    const file = path.join(tmp, 'prompts.jsonl');
    fs.writeFileSync(file, '{"name": "short", "prompt": "Hi"}\n{"tokens": [5, 6, 7]}\n{"tokens": [9]}\n');
    const [ps] = await shards(3, path.join(tmp, 'n3-prompts'), { prompts: file }, [2]);
    expect(mergeError([three[0], ps, three[2]])).toMatch(/the prompt set/);
  });

  it('a shard of another tool version or device, and shards of another N', async () => {
    const old = path.join(tmp, 'old-tool');
    copyDir(three[1], old);
    editPartial(old, (p) => (p.tool.version = '0.0.9'));
    expect(mergeError([three[0], old, three[2]])).toMatch(/ran layerdiff 0\.0\.9, this is/);
    const dev = path.join(tmp, 'other-device');
    copyDir(three[1], dev);
    editPartial(dev, (p) => (p.device.versions = { ...p.device.versions, compiler: 'clang 17' }));
    expect(mergeError([three[0], dev, three[2]])).toMatch(/the device \(versions: /);
    // another build of the same version (its modules, addons or the backend's files): the record carries one build
    const build = path.join(tmp, 'other-build');
    copyDir(three[1], build);
    editPartial(build, (p) => (p.tool.build = `sha256:${'0'.repeat(64)}`));
    expect(mergeError([three[0], build, three[2]])).toMatch(/the build \(000000000000… ≠ [0-9a-f]{12}…\)/);
    const none = path.join(tmp, 'no-build');
    copyDir(three[1], none);
    editPartial(none, (p) => delete (p.tool as { build?: string }).build);
    expect(mergeError([three[0], none, three[2]])).toMatch(/names no build of layerdiff \(run before builds were recorded\)/);
    const bad = path.join(tmp, 'bad-build');
    copyDir(three[1], bad);
    editPartial(bad, (p) => (p.tool.build = 'sha256:x'));
    expect(mergeError([three[0], bad, three[2]])).toMatch(/not a layerdiff\.partial\/1 partial result/);
    // an empty prompt set would merge into "all 0 passed" and a record generate refuses
    const empty = path.join(tmp, 'empty-set');
    copyDir(three[1], empty);
    editPartial(empty, (p) => ((p.prompt_set.prompts = []), (p.prompts = [])));
    expect(mergeError([empty])).toMatch(/not a layerdiff\.partial\/1 partial result/);
    const two = (await built(2))[1];
    expect(mergeError([three[0], two])).toMatch(/the shard count \(2 ≠ 3\)/);
  });

  it('an unsigned partial whose row or report was edited', () => {
    const row = path.join(tmp, 'edited-row');
    copyDir(three[1], row);
    editPartial(row, (p) => (p.prompts[0].summary.worst.value = 1e-9));
    expect(mergeError([three[0], row, three[2]])).toMatch(/summary of prompt \d \(\w+\) is not what its report says/);
    const rep = path.join(tmp, 'edited-report');
    copyDir(three[1], rep);
    const f = path.join(rep, readJson<ShardPartial>(path.join(rep, PARTIAL_MANIFEST)).prompts[0].report);
    fs.writeFileSync(f, fs.readFileSync(f, 'utf8').replace('"verdict": "pass"', '"verdict": "fail"'));
    expect(mergeError([three[0], rep, three[2]])).toMatch(/does not match its SHA-256/);
  });

  it('a tampered signed partial, one signed with another key, an unsigned one under a key, a signed one without', async () => {
    const t = path.join(tmp, 'tampered');
    copyDir(threeSigned[1], t);
    editPartial(t, (p) => (p.policy.warn_above = 0.02)); // consistent edits elsewhere would pass the unsigned checks
    await withKey('k1', async () => {
      expect(mergeError([threeSigned[0], t, threeSigned[2]])).toMatch(new RegExp(`${t}.*HMAC does not match`));
      expect(mergeError([threeSigned[0], three[1], threeSigned[2]])).toMatch(/not signed but LAYERDIFF_SIGNING_KEY is set/);
    });
    await withKey('k2', async () => expect(mergeError(threeSigned)).toMatch(/HMAC does not match/));
    await withKey(undefined, async () => expect(mergeError(threeSigned)).toMatch(/signed and LAYERDIFF_SIGNING_KEY is not set/));
  });
});

describe('usage', () => {
  it('refuses outputs that make no sense together before anything runs (exit 2, one line)', async () => {
    const out = path.join(tmp, 'usage-out');
    await expect(runGate(base({ shard: '1/2' }), sink())).rejects.toThrow(/--shard I\/N needs --out DIR/);
    await expect(runGate(base({ shard: '1/2', out, record: path.join(tmp, 'r.json') }), sink())).rejects.toThrow(/writes no record/);
    await expect(runGate(base({}), sink())).rejects.toThrow(/give --record FILE, or --shard I\/N --out DIR, or --save-golden DIR/);
    await expect(runGate(base({ shard: '3/2', out }), sink())).rejects.toThrow(/--shard 3\/2: I must be from 1 to 2/);
    await expect(runGate(base({ shard: '1/2', out: three[0] }), sink())).rejects.toThrow(/--out: the folder is not empty/);
    expect(fs.existsSync(out)).toBe(false);
    const r = cli(['gate', model, '--merge', three[0], '--record', path.join(tmp, 'r.json')], { LAYERDIFF_CACHE_DIR: cacheDir });
    expect(r.code).toBe(ExitCode.badInput);
    expect(r.stderr.trim().split('\n')).toEqual(['layerdiff: error: gate --merge reads only the shards\' folders and --record; drop the model']);
  });
});

describe('a failing prompt', () => {
  it('fails its shard (exit 1, partial still written); the merge writes no record, names prompt and shard, exit 1', async () => {
    const tight = { failAbove: 0.005, warnAbove: 0.001 }; // the worst stage of every built-in prompt is above 0.005
    const file = path.join(tmp, 'two.jsonl');
    fs.writeFileSync(file, '{"name": "short", "prompt": "Hi"}\n{"name": "ids", "tokens": [5, 6, 7, 8]}\n');
    const r = await runGate(base({ ...tight, prompts: file, shard: '1/2', out: path.join(tmp, 'fail', 'shard-1') }), sink());
    expect(r.code).toBe(ExitCode.stageFailed);
    const dirs = [path.join(tmp, 'fail', 'shard-1'), ...(await shards(2, path.join(tmp, 'fail'), { ...tight, prompts: file }, [2]))];
    const record = path.join(tmp, 'existing.json');
    fs.writeFileSync(record, 'an earlier record');
    const o = text();
    expect(runGateMerge({ dirs, record }, o.out).code).toBe(ExitCode.stageFailed);
    expect(fs.readFileSync(record, 'utf8')).toBe('an earlier record');
    const failed = r.summaries.filter((s) => s.verdict === 'fail').map((s) => s.name);
    expect(failed.length).toBeGreaterThan(0);
    for (const name of failed) expect(o.text()).toContain(`${name} (shard 1/2, ${dirs[0]})`);
    // the causes the shard named, read back from its reports
    for (const rep of r.reports) for (const d of rep.diagnosis) expect(o.text()).toContain(`likely cause at ${d.stage}: ${d.cause} — ${d.evidence}`);
  });
});

describe('reference and device sides on different machines (golden runs)', () => {
  it('reference shards save golden runs, device shards (another N) compare to them, the merge gives the single gate\'s verdict', async () => {
    const golden = path.join(tmp, 'golden');
    for (const i of [1, 2]) expect((await runGate(base({ shard: `${i}/2`, saveGolden: golden }), sink())).code).toBe(ExitCode.pass);
    expect(fs.readdirSync(golden).sort()).toEqual(['prompt-01', 'prompt-02', 'prompt-03', 'prompt-04', 'prompt-05', 'prompt-06']);
    const dirs = await shards(3, path.join(tmp, 'device-side'), { golden });
    const record = path.join(tmp, 'merged-golden.json');
    expect(merge(dirs, record).code).toBe(ExitCode.pass);
    expect(timeless(readJson(record))).toEqual(timeless(single));
    // the device side's numbers are the single gate's bit for bit: the reference read back is the one computed
    for (const d of dirs) {
      for (const q of readJson<ShardPartial>(path.join(d, PARTIAL_MANIFEST)).prompts) {
        const rep = readJson<Record<string, unknown>>(path.join(d, q.report));
        expect(rep.golden).toEqual({ dir: path.join(golden, `prompt-${String(q.index + 1).padStart(2, '0')}`), action: 'compared' });
        const one = readJson<Record<string, unknown>>(path.join(singleReports, `prompt-${String(q.index + 1).padStart(2, '0')}.json`));
        expect(timeless(rep.stages)).toEqual(timeless(one.stages));
      }
    }
  });

  it('a device shard takes only a gate\'s golden of this checkpoint\'s bytes and this build, signed when a key is set', async () => {
    const golden = path.join(tmp, 'golden'); // the unsigned reference side of the test above
    const device = (g: string, key?: string) => withKey(key, () => runGate(base({ shard: '1/3', golden: g, out: path.join(tmp, 'never-out') }), sink()));
    const edited = (name: string, edit: (m: Record<string, unknown>) => void) => {
      const d = path.join(tmp, name);
      copyDir(golden, d);
      for (const p of fs.readdirSync(d)) {
        const f = path.join(d, p, 'golden.json');
        const m = readJson<Record<string, unknown>>(f);
        edit(m);
        fs.writeFileSync(f, JSON.stringify(m));
      }
      return d;
    };
    // diff --save-golden's kind (no checkpoint content, no build), another build's reference, another checkpoint's bytes
    await expect(device(edited('golden-diff', (m) => delete m.gate))).rejects.toThrow(/names no checkpoint content or reference build .*save the reference side again with `layerdiff gate MODEL --save-golden DIR`/);
    await expect(device(edited('golden-build', (m) => ((m.gate as { build: string }).build = `sha256:${'0'.repeat(64)}`)))).rejects.toThrow(/computed by another build of layerdiff/);
    const other = path.join(tmp, 'golden-other-ck');
    scaleBf16Tensor(model, other, 'model.norm.weight', 2); // the same headers: the quick fingerprint cannot tell
    const otherGolden = path.join(tmp, 'golden-of-other');
    expect((await runGate(base({ model: other, shard: '1/1', saveGolden: otherGolden }), sink())).code).toBe(ExitCode.pass);
    await expect(device(otherGolden)).rejects.toThrow(/saved from other checkpoint bytes/);
    // signed: an unsigned golden under a key is refused; a signed one verifies, and an edit of it does not
    await expect(device(golden, 'k1')).rejects.toThrow(/the golden run is not signed but LAYERDIFF_SIGNING_KEY is set/);
    await expect(device(edited('golden-null-hmac', (m) => (m.hmac = null)), 'k1')).rejects.toThrow(/the golden run is not signed/);
    const signed = path.join(tmp, 'golden-signed');
    expect((await withKey('k1', () => runGate(base({ shard: '1/1', saveGolden: signed }), sink()))).code).toBe(ExitCode.pass);
    const ok = path.join(tmp, 'signed-device');
    expect((await withKey('k1', () => runGate(base({ shard: '1/3', golden: signed, out: ok }), sink()))).code).toBe(ExitCode.pass);
    await expect(device(signed)).rejects.toThrow(/signed and LAYERDIFF_SIGNING_KEY is not set/);
    const forged = path.join(tmp, 'golden-forged');
    copyDir(signed, forged);
    for (const p of fs.readdirSync(forged)) {
      const f = path.join(forged, p, 'golden.json');
      const m = readJson<{ stages: Array<{ sha256: string }> }>(f);
      m.stages[1].sha256 = '0'.repeat(64); // a rewritten reference's digest
      fs.writeFileSync(f, JSON.stringify(m));
    }
    await expect(device(forged, 'k1')).rejects.toThrow(/its HMAC does not match its contents/);
    expect(fs.existsSync(path.join(tmp, 'never-out'))).toBe(false);
  });

  it('a device shard without the golden run of one of its prompts is refused before it runs, naming the prompt', async () => {
    const empty = path.join(tmp, 'no-golden');
    fs.mkdirSync(empty);
    await expect(runGate(base({ shard: '1/3', golden: empty, out: path.join(tmp, 'never-out') }), sink())).rejects.toThrow(/no golden run for prompt 6 \(long\)/);
    expect(fs.existsSync(path.join(tmp, 'never-out'))).toBe(false);
  });
});

describe('the scheduler examples', () => {
  const scripts = path.join(packageRoot(), 'scripts', 'shards');
  const bin = path.join(packageRoot(), 'dist', 'harness', 'cli', 'main.js');
  const play = (n: number, work: string, env: Record<string, string>, extra: string[] = []) =>
    spawnSync('bash', [path.join(scripts, 'play-matrix.sh'), model, String(n), work, ...extra], {
      encoding: 'utf8', env: { ...process.env, LAYERDIFF_BIN: bin, LAYERDIFF_CACHE_DIR: cacheDir, ...env }, timeout: 300_000,
    });

  it('play-matrix.sh runs N shard processes as the CI matrix does and merges them into the single gate\'s record', () => {
    const work = path.join(tmp, 'play');
    // the same fixed-rule policy as the single gate of base() (the shards pass it through to each gate)
    const r = play(2, work, {}, ['--metric', 'max_abs', '--fail-above', '0.1', '--warn-above', '0.01']);
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/shard 1\/2: exit 0[\s\S]*shard 2\/2: exit 0[\s\S]*record written/);
    const made = readJson<AcceptanceRecord>(path.join(work, 'acceptance.json'));
    expect(made.tool.build).toMatch(/^sha256:[0-9a-f]{64}$/);
    // the shards ran the compiled modules and the single gate this test's TypeScript ones: two builds of one source
    const unbuilt = (x: AcceptanceRecord) => timeless({ ...x, tool: { ...x.tool, build: null } });
    expect(unbuilt(made)).toEqual(unbuilt(single));
  });

  it('as a Kubernetes Indexed Job does (JOB_COMPLETION_INDEX from 0), and as a Slurm array a failing set exits 1 without a record', () => {
    const file = path.join(tmp, 'k8s.jsonl');
    fs.writeFileSync(file, '{"name": "short", "prompt": "Hi"}\n{"name": "ids", "tokens": [5, 6, 7, 8]}\n{"tokens": [9, 10]}\n');
    const ok = play(3, path.join(tmp, 'play-k8s'), { PLAY_AS: 'k8s' }, ['--prompts', file]); // one prompt a shard
    expect(ok.status, ok.stdout + ok.stderr).toBe(0);
    expect(fs.readdirSync(path.join(tmp, 'play-k8s', 'shards')).sort()).toEqual(['shard-1', 'shard-2', 'shard-3']);
    const bad = play(2, path.join(tmp, 'play-slurm-fail'), { PLAY_AS: 'slurm' }, ['--prompts', file, '--fail-above', '0.005', '--warn-above', '0.001']);
    expect(bad.status, bad.stdout + bad.stderr).toBe(1);
    expect(fs.existsSync(path.join(tmp, 'play-slurm-fail', 'acceptance.json'))).toBe(false);
    expect(fs.readdirSync(path.join(tmp, 'play-slurm-fail', 'shards')).sort()).toEqual(['shard-1', 'shard-2']); // failing shards still write partials
  });

  it('a run id (LAYERDIFF_RUN_ID, gate --run-id): a re-run into the same folders never merges the previous run\'s partials', async () => {
    const file = path.join(tmp, 'runs.jsonl');
    fs.writeFileSync(file, '{"name": "ids", "tokens": [5, 6, 7, 8]}\n{"tokens": [9, 10]}\n');
    const work = path.join(tmp, 'play-runs');
    for (const run of ['r1', 'r2']) {
      const r = play(2, work, { LAYERDIFF_RUN_ID: run }, ['--prompts', file]);
      expect(r.status, r.stdout + r.stderr).toBe(0);
      expect(readJson<ShardPartial>(path.join(work, 'shards', run, 'shard-1', PARTIAL_MANIFEST)).run_id).toBe(run);
    }
    expect(fs.readdirSync(path.join(work, 'shards')).sort()).toEqual(['r1', 'r2']);
    expect(fs.existsSync(path.join(work, 'acceptance-r2.json'))).toBe(true);
    // the same run id again (a Job re-applied unchanged): its shards find their folders taken, the merge its record
    const again = play(2, work, { LAYERDIFF_RUN_ID: 'r2' }, ['--prompts', file]);
    expect(again.status).toBe(2);
    expect(again.stderr).toMatch(/acceptance-r2\.json exists: run r2 was merged before/);
    // the previous run's partials under this run's id, or one of each run: refused, naming the run
    const r1 = [1, 2].map((i) => path.join(work, 'shards', 'r1', `shard-${i}`));
    expect(() => runGateMerge({ dirs: r1, record: path.join(tmp, 'never.json'), runId: 'r2' }, sink())).toThrow(/the partial is of run "r1", not --run-id "r2"/);
    expect(mergeError([r1[0], path.join(work, 'shards', 'r2', 'shard-2')])).toMatch(/the run \("r2" ≠ "r1"\)/);
    expect(fs.existsSync(path.join(tmp, 'never.json'))).toBe(false);
    // a run id is one name: empty, given twice (an array) or a path is refused before anything runs
    for (const runId of ['', ['a', 'b'], 'x/y']) {
      await expect(runGate(base({ shard: '1/2', out: path.join(tmp, 'never-run'), runId: runId as string }), sink())).rejects.toThrow(/--run-id .*: expected one name/);
    }
    expect(fs.existsSync(path.join(tmp, 'never-run'))).toBe(false);
  });

  it('the workflow, the manifest and the Slurm script use these scripts with one shard count throughout', () => {
    const gh = fs.readFileSync(path.join(scripts, 'github-actions-gate.yml'), 'utf8');
    const n = Number(/^\s+SHARDS: (\d+)/m.exec(gh)![1]);
    expect(/shard: \[([\d, ]+)\]/.exec(gh)![1].split(',').map(Number)).toEqual(Array.from({ length: n }, (_v, i) => i + 1));
    expect(gh).toContain('scripts/shards/run-shard.sh "$MODEL_DIR" ${{ matrix.shard }} "$SHARDS" gate-shards');
    expect(gh).toContain('scripts/shards/merge.sh acceptance.json gate-shards "$SHARDS"');
    const k8s = fs.readFileSync(path.join(scripts, 'k8s-indexed-job.yaml'), 'utf8');
    const completions = Number(/completions: (\d+)/.exec(k8s)![1]);
    expect(Number(/parallelism: (\d+)/.exec(k8s)![1])).toBe(completions);
    expect(k8s).toContain(`"scripts/shards/run-shard.sh", "/models/DeepSeek-V4-Flash", "-", "${completions}", "/results"`);
    expect(k8s).toContain(`merge.sh "/results/$LAYERDIFF_RUN_ID/acceptance.json" /results ${completions}`);
    // both Jobs name the same run
    const runs = [...k8s.matchAll(/name: LAYERDIFF_RUN_ID\n\s+value: "([^"]+)"/g)].map((m) => m[1]);
    expect(runs).toHaveLength(2);
    expect(new Set(runs).size).toBe(1);
    expect(k8s).toContain('completionMode: Indexed');
    const slurm = fs.readFileSync(path.join(scripts, 'slurm-array.sbatch'), 'utf8');
    const tasks = Number(/#SBATCH --array=1-(\d+)/.exec(slurm)![1]);
    expect(slurm).toContain(`run-shard.sh "\${MODEL_DIR:-/models/DeepSeek-V4-Flash}" - ${tasks} gate-shards`);
    expect(slurm).toContain(`merge.sh gate-shards/$jid/acceptance.json gate-shards ${tasks}`);
    expect(slurm).toContain('LAYERDIFF_RUN_ID=$jid');
    expect(slurm).toContain('export LAYERDIFF_RUN_ID=$SLURM_ARRAY_JOB_ID');
  });
});
