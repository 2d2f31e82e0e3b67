/**
 * DeepSeek-V4 incremental decoding on the device path (device-hip/deepseek_v4_decode.ts): cached logits equal
 * a DeepseekV4Device full recompute bit for bit over enough positions that the window ring wraps (window 20),
 * ratio-4 and ratio-16 blocks are emitted and the indexer ranks more entries than index_topk (4); ragged
 * batching; a prefill of long ragged prompts in one pass; greedy generation deterministic and equal to full-recompute generation; `layerdiff generate
 * --path device` on DeepSeek-V4 through the built CLI.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sameBytes } from './same-bytes.js';
import type { Decoder } from '../contracts/decoder.js';
import { generate } from '../generate/engine.js';
import { RecomputeDecoder } from '../generate/recompute.js';
import { argmax } from '../generate/sampler.js';
import { Checkpoint } from '../io/checkpoint.js';
import { DeepseekV4Checkpoint } from '../models/deepseek_v4.js';
import { type DeepseekNative, type DeviceNative, loadDeepseekNative, loadDeviceNative } from '../../device-hip/binding.js';
import { DeepseekV4Device } from '../../device-hip/deepseek_v4.js';
import { DeepseekV4DeviceDecoder } from '../../device-hip/deepseek_v4_decode.js';
import { DeepseekV4Reference } from '../../reference-cpu/deepseek_v4.js';
import { cli, LLAMA_TINY } from './cli.js';

process.env.OMP_NUM_THREADS ??= '1';

let ck: Checkpoint;
let m: DeepseekV4Checkpoint;
let N: DeviceNative;
let K: DeepseekNative;

beforeAll(() => {
  ck = Checkpoint.open(path.join(path.dirname(LLAMA_TINY()), 'deepseek-v4-tiny'));
  m = new DeepseekV4Checkpoint(ck);
  N = loadDeviceNative();
  K = loadDeepseekNative();
});
afterAll(() => ck.close());

const recompute = (ref = false) =>
  new RecomputeDecoder({ numLayers: m.cfg.layers, vocab: m.cfg.vocab, loadLayer: (L) => m.loadLayer(L) }, ref ? new DeepseekV4Reference(m) : new DeepseekV4Device(m, N, null, K));
const maxAbs = (a: Float32Array, b: Float32Array) => a.reduce((mx, v, i) => Math.max(mx, Math.abs(v - b[i])), 0);

describe('DeepSeek-V4 device incremental decoding', () => {
  it('the fixture exercises the window, ratio-4 and ratio-16 emission and the indexer ranking', () => {
    expect(m.cfg.window).toBe(20);
    expect(m.cfg.compressRatios.slice(0, m.cfg.layers)).toEqual([0, 4, 16, 4]);
    expect(m.cfg.indexTopk).toBe(4);
  });

  it('cached logits equal the device full recompute bit for bit over 44 generated positions (ragged batch, a sequence leaving)', () => {
    const prompts = [[0, 5, 17, 42, 9], [0, 300, 7]];
    const cached = new DeepseekV4DeviceDecoder(m, N, K);
    const full = recompute();
    let a = cached.prefill(prompts, 64);
    let b = full.prefill(prompts, 64);
    let seqs = [0, 1];
    const check = (step: number) =>
      a.forEach((l, j) => {
        expect(sameBytes(l, b[j]), `step ${step} seq ${seqs[j]}`).toBe(true);
      });
    check(0);
    for (let step = 1; step <= 44; step++) {
      const toks = a.map((l) => argmax(l));
      if (step === 30) {
        // sequence 1 finishes: 0 goes on alone
        seqs = [0];
        toks.length = 1;
      }
      a = cached.step(seqs, toks);
      b = full.step(seqs, toks);
      check(step);
    }
    expect(cached.lengths()).toEqual([prompts[0].length + 44, prompts[1].length + 29]);
  });

  it('a long ragged prefill in one pass (window wrap, ratio-4/16 blocks and the indexer ranking inside the prompts) equals full recompute bit for bit, and so does decoding on', () => {
    const long = Array.from({ length: 45 }, (_, i) => (i * 37 + 11) % m.cfg.vocab);
    const prompts = [long, long.slice(7, 33), [0, 9]];
    const cached = new DeepseekV4DeviceDecoder(m, N, K);
    const full = recompute();
    let a = cached.prefill(prompts, 64);
    let b = full.prefill(prompts, 64);
    expect(cached.lengths()).toEqual(prompts.map((p) => p.length));
    for (let step = 0; step <= 6; step++) {
      a.forEach((l, j) => expect(sameBytes(l, b[j]), `step ${step} seq ${j}`).toBe(true));
      const toks = a.map((l) => argmax(l));
      a = cached.step([0, 1, 2], toks);
      b = full.step([0, 1, 2], toks);
    }
  });

  it('prefill in passes of a few rows (a pass ending mid-prompt, mid-block) gives the same bits as one pass', () => {
    const long = Array.from({ length: 45 }, (_, i) => (i * 37 + 11) % m.cfg.vocab);
    const prompts = [long, long.slice(7, 33), [0, 9]];
    const one = new DeepseekV4DeviceDecoder(m, N, K);
    const seven = new DeepseekV4DeviceDecoder(m, N, K, true, 7);
    const a = one.prefill(prompts, 64);
    const b = seven.prefill(prompts, 64);
    expect(b).toHaveLength(3);
    a.forEach((l, j) => expect(sameBytes(l, b[j]), `seq ${j}`).toBe(true));
    expect(seven.lengths()).toEqual(one.lengths());
    const toks = a.map((l) => argmax(l));
    one.step([0, 1, 2], toks).forEach((l, j) => expect(sameBytes(l, seven.step([j], [toks[j]])[0]), `step seq ${j}`).toBe(true));
    expect(() => new DeepseekV4DeviceDecoder(m, N, K, true, 0)).toThrow(/prefillRows/);
  });

  it('is within max_abs 0.1 of the FP32 reference (full recompute) at the end of a long decode', () => {
    const prompt = [[0, 5, 17, 42, 9]];
    const cached = new DeepseekV4DeviceDecoder(m, N, K);
    let l = cached.prefill(prompt, 64)[0];
    const toks: number[] = [];
    for (let i = 0; i < 40; i++) {
      toks.push(argmax(l));
      l = cached.step([0], [toks[i]])[0];
    }
    const ref = recompute(true).forward([...prompt[0], ...toks]);
    const d = maxAbs(l, ref);
    expect(d).toBeLessThan(0.1);
    expect(d).toBeGreaterThan(0);
  });

  it('greedy generation is deterministic and equals full-recompute generation token for token', () => {
    const opts = (seed: number) => ({ maxNewTokens: 42, sampling: { temperature: 0, topP: 1, topK: 0, repetitionPenalty: 1 }, seed, eos: new Set<number>() });
    const run = (d: Decoder, seed: number) => generate(d, [[0, 5, 17, 42, 9]], opts(seed));
    const x = run(new DeepseekV4DeviceDecoder(m, N, K), 1);
    const y = run(new DeepseekV4DeviceDecoder(m, N, K), 2);
    expect(x.tokens[0]).toHaveLength(42);
    expect(y.tokens).toEqual(x.tokens);
    expect(run(recompute(), 1).tokens).toEqual(x.tokens);
  });

  it('layerdiff generate --path device runs it under a DeepSeek-V4 acceptance record (CLI, end to end)', () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-gen-ds-'));
    try {
      const env = { LAYERDIFF_CACHE_DIR: path.join(tmp, 'cache'), OMP_NUM_THREADS: process.env.OMP_NUM_THREADS! };
      const rec = path.join(tmp, 'accept.json');
      // the default policy (max_abs 0.1) over the built-in acceptance prompts: the fixture's margins hold on all of them
      const g = cli(['gate', ck.dir, '--record', rec], env);
      expect(g.code, g.stderr).toBe(0);
      expect(g.stdout).toMatch(/PASS — all 6 acceptance prompts passed/);
      const out = path.join(tmp, 'gen.json');
      const r = cli(['generate', ck.dir, '--record', rec, '--tokens', '0,5,17,42,9', '--max-new-tokens', '24', '--temperature', '0', '--top-p', '1', '--repetition-penalty', '1', '--seed', '1', '--json', out], env);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).toMatch(/KV cache \(window ring \+ compressed entries\)/);
      const j = JSON.parse(fs.readFileSync(out, 'utf8')) as { path: string; outputs: Array<{ tokens: number[] }>; sequence_tokens: number; gated_tokens: number };
      expect(j.path).toBe('device');
      // the built-in prompts' longest (498 tokens) covers this run's 28 (5 prompt tokens and 24 new ones)
      const longest = (file: string) => Math.max(...(JSON.parse(fs.readFileSync(file, 'utf8')) as { acceptance: { prompts: Array<{ tokens: number }> } }).acceptance.prompts.map((p) => p.tokens));
      expect([j.sequence_tokens, j.gated_tokens]).toEqual([28, longest(rec)]);
      expect(r.stderr).not.toMatch(/note: this run feeds/);
      // gated over prompts of 6 and 10 tokens, the same run goes past the gate; the lengths at which this config's
      // attention changes (from config.json, by the spec's rules: the window drops its oldest raw entry at window + 1
      // tokens, a ratio-r layer sees its first compressed entry at r, the ratio-4 indexer starts to choose at
      // 4 · (index_topk + 1), the ratio-4 overlap's first use at 8) between 10 and 28 are each named
      const jsonl = path.join(tmp, 'short.jsonl');
      fs.writeFileSync(jsonl, '{"tokens": [0, 5, 17, 42, 9, 3]}\n{"tokens": [7, 5, 17, 42, 9, 3, 11, 2, 8, 4]}\n');
      const shortRec = path.join(tmp, 'short.json');
      expect(cli(['gate', ck.dir, '--record', shortRec, '--prompts', jsonl], env).code).toBe(0);
      expect(longest(shortRec)).toBe(10);
      const c = JSON.parse(fs.readFileSync(path.join(ck.dir, 'config.json'), 'utf8')) as { sliding_window: number; compress_ratios: number[]; index_topk: number; num_hidden_layers: number };
      const ratios = c.compress_ratios.slice(0, c.num_hidden_layers).filter((x) => x > 0);
      const lengths = [c.sliding_window + 1, ...new Set(ratios), ...(ratios.includes(4) ? [8, 4 * (c.index_topk + 1)] : [])];
      const crossed = lengths.filter((t) => t > 10 && t <= 28).sort((a, b) => a - b);
      expect(crossed.length).toBeGreaterThan(0);
      const past = cli(['generate', ck.dir, '--record', shortRec, '--tokens', '0,5,17,42,9', '--max-new-tokens', '24', '--temperature', '0', '--seed', '1'], env);
      expect(past.code, past.stderr).toBe(0);
      const note = past.stderr.split('\n').find((l) => l.startsWith('layerdiff: note:'));
      expect(note).toMatch(/^layerdiff: note: this run feeds sequences of up to 28 tokens and the gate compared up to 10 \(its longest prompt\); past 10, at \d+ /);
      expect([...note!.matchAll(/(?:, |; )at (\d+) /g)].map((m) => Number(m[1]))).toEqual(crossed);
      const refused = cli(['generate', ck.dir, '--record', shortRec, '--tokens', '0,5,17,42,9', '--max-new-tokens', '24', '--within-gated'], env);
      expect(refused.code).toBe(3);
      expect(refused.stderr).toMatch(/the record does not cover this run: .*Give --max-new-tokens 6 or fewer, or gate a prompt of 28 tokens or more/);
      const want = generate(new DeepseekV4DeviceDecoder(m, N, K), [[0, 5, 17, 42, 9]], { maxNewTokens: 24, sampling: { temperature: 0, topP: 1, topK: 0, repetitionPenalty: 1 }, seed: 1, eos: new Set([1]) });
      expect(j.outputs[0].tokens).toEqual(want.tokens[0]);
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });
});
