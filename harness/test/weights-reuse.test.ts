/**
 * Reusing a passed weights-first check (harness/weights/reuse.ts, issue 15): a second diff of the same bytes
 * with the same numerics build reuses the stored check and says so; any change to the checkpoint's bytes, the
 * layers, the kernel level, the backend's files or the modules that run, an injected fault or --recheck-weights
 * runs it again; a failed check is never stored and removes its key's pass; with a signing key a tampered or
 * unsigned entry is ignored; an entry that is not a passed check's in every field is ignored, not a crash; a
 * cache folder inside the model directory is neither written nor read.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import type { DiffArgs } from '../cli/diff.js';
import { numericsKey, recordCheck, reusedCheck, weightsCacheDir, type WeightsCheckKey } from '../weights/reuse.js';
import { buildOf, moduleDigest } from '../runner/build.js';
import { loadDeviceNative } from '../../device-hip/binding.js';
import { copyCheckpoint } from '../../fixtures/inject.js';
import { describeWeights } from '../../reports/format.js';
import { LLAMA_TINY, quietDiff } from './cli.js';
import { packageRoot } from '../version.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-wreuse-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
beforeEach(() => {
  process.env.LAYERDIFF_CACHE_DIR = fs.mkdtempSync(path.join(tmp, 'cache-'));
  delete process.env.LAYERDIFF_SIGNING_KEY;
});

const args = (over: Partial<DiffArgs> = {}): DiffArgs => ({ model: LLAMA_TINY(), layers: 'all', device: 'emulated', mode: 'isolated', freeSelection: false, drill: false, ...over });
const weightsOf = async (over: Partial<DiffArgs> = {}) => (await quietDiff(args(over))).report.weights!;

describe('weights check reuse', () => {
  it('the second diff of the same checkpoint reuses the passed check and says which run did it', async () => {
    const first = await weightsOf();
    expect(first.reused).toBeUndefined();
    expect(first.exact).toBe(first.checked);
    const second = await weightsOf();
    expect(second.reused).toBeDefined();
    expect(second.reused!.fingerprint).toMatch(/^blake3:[0-9a-f]{64}$/);
    expect(Date.parse(second.reused!.at)).toBeLessThanOrEqual(Date.now());
    expect([second.checked, second.exact, second.tensors.length]).toEqual([first.checked, first.exact, first.tensors.length]);
    expect(describeWeights(second)).toMatch(/reused from the check of .* same numerics build/);
    expect((await weightsOf({ recheckWeights: true })).reused).toBeUndefined();
  });

  it('reuses every architecture\'s passed check, gpt-oss\'s fused MXFP4 experts and DeepSeek-V4\'s formats included', async () => {
    for (const dir of ['gpt-oss-tiny', 'deepseek-v4-tiny']) {
      const model = path.join(packageRoot(), 'fixtures', dir);
      const first = await weightsOf({ model, layers: '0-0' });
      expect(first.reused, dir).toBeUndefined();
      expect(first.checked, dir).toBeGreaterThan(0);
      const second = await weightsOf({ model, layers: '0-0' });
      expect(second.reused, dir).toBeDefined();
      expect(second.tensors.map((t) => t.encoding)).toEqual(first.tensors.map((t) => t.encoding));
    }
  });

  it('another layer range, an injected fault or a changed byte of the checkpoint runs the check again', async () => {
    await weightsOf();
    expect((await weightsOf({ layers: '1-2' })).reused).toBeUndefined();
    const faulted = await quietDiff(args({ inject: 'nibble-swap' }));
    expect(faulted.report.weights!.reused).toBeUndefined();
    expect(faulted.report.weights!.mismatched).toBeGreaterThan(0);
    // a copy whose last shard has one byte changed in the last tensor (a BF16 head value)
    const dir = path.join(tmp, 'edited');
    copyCheckpoint(LLAMA_TINY(), dir);
    const shard = path.join(dir, 'model-00002-of-00002.safetensors');
    const b = fs.readFileSync(shard);
    b[b.length - 3] ^= 1;
    fs.writeFileSync(shard, b);
    expect((await weightsOf({ model: dir })).reused).toBeUndefined();
    expect((await weightsOf()).reused).toBeDefined();
  });

  it('a failed check is never stored', async () => {
    await quietDiff(args({ inject: 'scale-axis' }));
    expect(fs.existsSync(weightsCacheDir()) ? fs.readdirSync(weightsCacheDir()) : []).toEqual([]);
  });

  it('with LAYERDIFF_SIGNING_KEY: an entry without a valid MAC (unsigned, or edited) is ignored', async () => {
    await weightsOf(); // stored unsigned
    process.env.LAYERDIFF_SIGNING_KEY = 'k1';
    expect((await weightsOf()).reused).toBeUndefined(); // unsigned: ignored, and now stored signed
    expect((await weightsOf()).reused).toBeDefined();
    const [file] = fs.readdirSync(weightsCacheDir());
    const f = path.join(weightsCacheDir(), file);
    const j = JSON.parse(fs.readFileSync(f, 'utf8')) as { run: { at: string } };
    j.run.at = '2000-01-01T00:00:00.000Z';
    fs.writeFileSync(f, JSON.stringify(j));
    expect((await weightsOf()).reused).toBeUndefined();
  });

  it('another kernel level (LAYERDIFF_SIMD, or another CPU sharing the cache) runs the check again', async () => {
    await weightsOf();
    const N = loadDeviceNative();
    N.setSimd('scalar');
    try {
      expect((await weightsOf()).reused).toBeUndefined();
      expect((await weightsOf()).reused).toBeDefined(); // and is stored under its own key
    } finally {
      N.setSimd('auto');
    }
    expect((await weightsOf()).reused).toBeDefined();
  });

  it('the build changes with the backend, its GPU and files, and the modules (not tests or dependencies); the key with the kernel level', () => {
    const dir = fs.mkdtempSync(path.join(tmp, 'numerics-'));
    const co = path.join(dir, 'ld_kernels_gfx90a.co');
    fs.writeFileSync(co, 'code object 1');
    const hip = { name: 'hip', arch: 'gfx90a:sramecc+:xnack-', versions: { hip_runtime: '6.2' }, files: [co] };
    const base = buildOf(hip);
    expect(base).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(buildOf({ ...hip })).toBe(base);
    expect(buildOf({ ...hip, arch: 'gfx942:sramecc+:xnack-' })).not.toBe(base);
    expect(buildOf({ ...hip, versions: { hip_runtime: '6.3' } })).not.toBe(base);
    expect(buildOf({ ...hip, name: 'emulated' })).not.toBe(base);
    expect(numericsKey(base, 'avx2')).not.toBe(numericsKey(base, 'avx512+vbmi'));
    expect(numericsKey(base, 'avx2')).not.toBe(numericsKey(buildOf({ ...hip, arch: 'gfx942' }), 'avx2'));
    fs.writeFileSync(co, 'code object 2, rebuilt');
    expect(buildOf(hip)).not.toBe(base);
    // the modules: a decoder's line changes the digest; a test, a dependency or a declaration file does not
    const root = path.join(dir, 'tree');
    const put = (rel: string, text: string) => (fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true }), fs.writeFileSync(path.join(root, rel), text));
    put('device-hip/linear.js', 'const faultCode = (f) => 0;');
    put('harness/weights/check.js', 'export {}');
    const before = moduleDigest(root);
    put('device-hip/test/x.test.js', 'it()');
    put('device-hip/node_modules/a/index.js', 'x');
    put('harness/weights/check.d.ts', 'export {}');
    put('fixtures/gen.js', 'x');
    expect(moduleDigest(root)).toBe(before);
    put('device-hip/linear.js', 'const faultCode = (f) => 2;');
    expect(moduleDigest(root)).not.toBe(before);
  });

  it('a stored entry that is not a passed check in every field is ignored (the check runs), never a crash', async () => {
    type Fields = Record<string, unknown>;
    type Entry = { run?: Fields; report: Fields & { tensors: Fields[] } };
    const edits: Array<(j: Entry) => void> = [
      (j) => delete j.run,
      (j) => (j.run!.at = 5),
      (j) => ((j.report as Fields).tensors = null),
      (j) => (j.report.tensors = j.report.tensors.slice(1)),
      (j) => (j.report.tensors[0].exact = false),
      (j) => (j.report.tensors[0].matches = null),
      (j) => (j.report.tensors[0].scale = null),
      (j) => (j.report.checked = String(j.report.checked)),
      (j) => (j.report.by_format = { 'deepseek-mxfp4': null }),
      (j) => ((j as Fields).report = [j.report]),
      (j) => (j.report.reused = { at: 'x' }),
    ];
    for (const edit of edits) {
      process.env.LAYERDIFF_CACHE_DIR = fs.mkdtempSync(path.join(tmp, 'cache-'));
      await weightsOf();
      const [file] = fs.readdirSync(weightsCacheDir());
      const f = path.join(weightsCacheDir(), file);
      const j = JSON.parse(fs.readFileSync(f, 'utf8')) as Entry;
      edit(j);
      fs.writeFileSync(f, JSON.stringify(j));
      const again = await weightsOf();
      expect(again.reused, String(edit)).toBeUndefined();
      expect(again.exact).toBe(again.checked);
    }
  });

  it('a check that runs and fails removes the pass its key stored; a pass stores it again', async () => {
    const pass = await weightsOf();
    const [file] = fs.readdirSync(weightsCacheDir());
    const key = (JSON.parse(fs.readFileSync(path.join(weightsCacheDir(), file), 'utf8')) as { key: WeightsCheckKey }).key;
    const dir = LLAMA_TINY();
    expect(reusedCheck(key, dir)).not.toBeNull();
    const failed = { ...pass, exact: pass.checked - 1, mismatched: 1, tensors: pass.tensors.map((t, i) => (i === 0 ? { ...t, exact: false, bad_blocks: 1 } : t)) };
    recordCheck(key, failed, false, dir);
    expect(fs.readdirSync(weightsCacheDir())).toEqual([]);
    expect(reusedCheck(key, dir)).toBeNull();
    recordCheck(key, pass, false, dir);
    expect(reusedCheck(key, dir)?.checked).toBe(pass.checked);
    recordCheck(key, failed, true, dir); // a faulted run neither stores nor removes
    expect(reusedCheck(key, dir)).not.toBeNull();
  });

  it('a cache folder inside the model directory is neither written nor read', async () => {
    const dir = path.join(tmp, 'inside');
    copyCheckpoint(LLAMA_TINY(), dir);
    const before = fs.readdirSync(dir).sort();
    process.env.LAYERDIFF_CACHE_DIR = path.join(dir, '.cache');
    expect((await weightsOf({ model: dir })).reused).toBeUndefined();
    expect((await weightsOf({ model: dir })).reused).toBeUndefined();
    expect(fs.readdirSync(dir).sort()).toEqual(before);
  });
});
