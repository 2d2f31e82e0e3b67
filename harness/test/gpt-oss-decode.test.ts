/**
 * gpt-oss KV-cache decoding (issue 13 point 3): the device decoder's logits equal the device path's full
 * recompute (RecomputeDecoder over GptOssDevice, the diff's own stage path) bit for bit, through prefill and
 * steps of a ragged batch that runs past the sliding window and across both layer types; a sequence decodes
 * to the same bits alone or in a batch; and the device stays near the FP32 reference. Then `generate` on the
 * committed fixture, greedy, device against reference.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sameBytes } from './same-bytes.js';
import { loadDecodeNative, loadDeepseekNative, loadDeviceNative, loadGptOssNative } from '../../device-hip/binding.js';
import { GptOssDevice } from '../../device-hip/gpt_oss.js';
import { GptOssDeviceDecoder } from '../../device-hip/gpt_oss_decode.js';
import { GptOssReference } from '../../reference-cpu/gpt_oss.js';
import type { Decoder } from '../contracts/decoder.js';
import { RecomputeDecoder } from '../generate/recompute.js';
import { Checkpoint } from '../io/checkpoint.js';
import { GptOssCheckpoint } from '../models/gpt_oss.js';
import { openCheckpointFingerprint } from '../gate/fingerprint.js';
import { loadGptOssFp16Cache, writeGptOssFp16Cache } from '../generate/fp16cache_gpt_oss.js';
import { packageRoot } from '../version.js';
import { cli } from './cli.js';

process.env.OMP_NUM_THREADS ??= '1';

const MODEL = () => path.join(packageRoot(), 'fixtures', 'gpt-oss-tiny');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-oss-decode-'));
let ck: Checkpoint;
let m: GptOssCheckpoint;
let device: GptOssDevice;

beforeAll(() => {
  ck = Checkpoint.open(MODEL());
  m = new GptOssCheckpoint(ck);
  device = new GptOssDevice(m, loadDeviceNative(), loadGptOssNative(), loadDeepseekNative(), null);
});
afterAll(() => {
  ck.close();
  fs.rmSync(tmp, { recursive: true, force: true });
});

const maxAbs = (a: Float32Array, b: Float32Array) => a.reduce((mx, v, i) => Math.max(mx, Math.abs(v - b[i])), 0);
const layers = () => ({ numLayers: m.cfg.layers, vocab: m.cfg.vocab, loadLayer: (L: number) => m.loadLayer(L) });
const decoder = () => new GptOssDeviceDecoder(m, loadDeviceNative(), loadDecodeNative(), device);

/** prompts longer than the window (the sliding layers mask), of different lengths (a ragged batch) */
const prompts = [Array.from({ length: 13 }, (_, i) => (i * 29 + 5) % 384), Array.from({ length: 6 }, (_, i) => (i * 11 + 2) % 384)];
const STEPS: Array<[number[], number[]]> = [[[0, 1], [42, 7]], [[0, 1], [300, 300]], [[1], [5]], [[0, 1], [17, 211]], [[0], [99]]];

function schedule(d: Decoder): Float32Array[][] {
  const out = [d.prefill(prompts, 32)];
  for (const [seqs, toks] of STEPS) out.push(d.step(seqs, toks));
  return out;
}

describe('gpt-oss KV-cache decoding', () => {
  it('the window and both layer types are exercised', () => {
    expect(m.cfg.sliding).toContain(true);
    expect(m.cfg.sliding).toContain(false);
    expect(prompts[0].length + STEPS.length).toBeGreaterThan(m.cfg.slidingWindow);
  });

  it('equals the device path\'s full recompute bit for bit, and stays near the FP32 reference', () => {
    const cached = schedule(decoder());
    const full = schedule(new RecomputeDecoder(layers(), device));
    const ref = schedule(new RecomputeDecoder(layers(), new GptOssReference(m)));
    cached.forEach((step, i) => step.forEach((l, j) => {
      expect(sameBytes(l, full[i][j]), `step ${i} entry ${j}`).toBe(true);
      expect(maxAbs(l, ref[i][j]), `step ${i} entry ${j} vs reference`).toBeLessThan(0.5);
      expect(maxAbs(l, ref[i][j])).toBeGreaterThan(0); // FP16 leaves a footprint
    }));
  });

  it('sliding layers in a ring of window + chunk − 1 rows (chunk 3: 10 rows, wrapping, the 13-token prefill in chunks): the same bits', () => {
    const ringed = new GptOssDeviceDecoder(m, loadDeviceNative(), loadDecodeNative(), device, (L) => m.loadLayer(L), 3);
    const cached = schedule(ringed);
    const full = schedule(new RecomputeDecoder(layers(), device));
    cached.forEach((step, i) => step.forEach((l, j) => expect(sameBytes(l, full[i][j]), `step ${i} entry ${j}`).toBe(true)));
    const held = (ringed as unknown as { cache: { rowsHeld(L: number): number } }).cache;
    m.cfg.sliding.forEach((s, L) => expect(held.rowsHeld(L), `layer ${L}`).toBe(s ? m.cfg.slidingWindow + 2 : 32));
    expect(Math.max(...ringed.lengths())).toBeGreaterThan(m.cfg.slidingWindow + 2); // the ring wrapped
  });

  it('a sequence decodes to the same bits alone or in a batch', () => {
    const together = decoder();
    const alone = decoder();
    expect(sameBytes(together.prefill(prompts, 24)[1], alone.prefill([prompts[1]], 24)[0])).toBe(true);
    expect(sameBytes(together.step([0, 1], [3, 4])[1], alone.step([0], [4])[0])).toBe(true);
    expect(together.lengths()).toEqual([prompts[0].length + 1, prompts[1].length + 1]);
  });

  it('from the FP16 cache: the same logits bit for bit, and a cache edit is refused by the gate', async () => {
    const dir = path.join(tmp, 'fp16');
    const fp = (await openCheckpointFingerprint(ck, { useCache: false })).value;
    await writeGptOssFp16Cache(m, loadDeviceNative(), dir, fp);
    const c = await loadGptOssFp16Cache(dir, m, fp, { useCache: false });
    if (!c.ok) throw new Error(c.why);
    try {
      const fromCache = schedule(new GptOssDeviceDecoder(m, loadDeviceNative(), loadDecodeNative(), device, c.layer));
      const plain = schedule(decoder());
      fromCache.forEach((step, i) => step.forEach((l, j) => expect(sameBytes(l, plain[i][j]), `step ${i} entry ${j}`).toBe(true)));
      expect(c.layer(0).q_proj.format).toBe('plain'); // FP16 in the cache: not dequantized again
    } finally {
      c.close();
    }
    // verify mode (gate --fp16-cache) accepts it as written, and names an edited byte
    await expect(writeGptOssFp16Cache(m, loadDeviceNative(), dir, fp, undefined, true)).resolves.toBeDefined();
    const f = path.join(dir, 'layer.00001.safetensors');
    const b = fs.readFileSync(f);
    b[b.length - 7] ^= 0x40;
    fs.writeFileSync(f, b);
    await expect(writeGptOssFp16Cache(m, loadDeviceNative(), dir, fp, undefined, true)).rejects.toThrow(/layer\.00001\.safetensors: differs from what the checkpoint converts to/);
  });

  it('generate: the optimized path after a gate, greedy, token for token with the reference path', () => {
    const env = { LAYERDIFF_CACHE_DIR: path.join(tmp, 'digests'), OMP_NUM_THREADS: '1' };
    const rec = path.join(tmp, 'accept.json');
    const prompt = path.join(tmp, 'prompts.jsonl');
    fs.writeFileSync(prompt, JSON.stringify({ tokens: prompts[0] }) + '\n');
    const g = cli(['gate', MODEL(), '--record', rec, '--prompts', prompt], env);
    expect(g.code, g.stderr).toBe(0);
    const run = (extra: string[], json: string) => {
      const r = cli(['generate', MODEL(), '--tokens', prompts[0].join(','), '--max-new-tokens', '6', '--temperature', '0', '--json', json, ...extra], env);
      expect(r.code, r.stderr).toBe(0);
      return JSON.parse(fs.readFileSync(json, 'utf8')) as { weights: string; outputs: Array<{ tokens: number[] }> };
    };
    const dev = run(['--record', rec], path.join(tmp, 'dev.json'));
    const ref = run(['--path', 'reference'], path.join(tmp, 'ref.json'));
    expect(dev.weights).toBe('dequant-at-load');
    expect(ref.weights).toBe('fp32-reference');
    expect(dev.outputs[0].tokens).toHaveLength(6);
    expect(dev.outputs[0].tokens).toEqual(ref.outputs[0].tokens);
  });
});
