/**
 * Reusing a passed weights-first check (harness/weights/reuse.ts, issue 15): a second diff of the same bytes
 * with the same numerics build reuses the stored check and says so; any change to the checkpoint's bytes, the
 * layers, an injected fault or --recheck-weights runs it again; a failed check is never stored; with a signing
 * key a tampered or unsigned entry is ignored.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import type { DiffArgs } from '../cli/diff.js';
import { weightsCacheDir } from '../weights/reuse.js';
import { copyCheckpoint } from '../../fixtures/inject.js';
import { describeWeights } from '../../reports/format.js';
import { LLAMA_TINY, quietDiff } from './cli.js';

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
});
