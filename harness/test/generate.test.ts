/**
 * The optimized generation path, in process: the decode attention kernel against attentionF16, cached
 * decoding against full recompute (device: bit for bit against LlamaDevice and within the FP16 policy of
 * the reference; reference: 1e-5 relative), batching invariance, the FP16 cache against dequant at load,
 * sampling semantics and reproducibility, streaming detokenization, DeepSeek-V4 reference generation.
 */
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sameBytes } from './same-bytes.js';
import { InputError } from '../errors.js';
import { checkpointFingerprint } from '../gate/fingerprint.js';
import type { Decoder } from '../contracts/decoder.js';
import { generate, TextStream } from '../generate/engine.js';
import { eosIds, resolveSampling, unappliedDecoding } from '../generate/generation_config.js';
import { cacheListDigest, MANIFEST, readManifestText } from '../generate/fp16cache.js';
import { loadLlamaFp16Cache, writeLlamaFp16Cache } from '../generate/fp16cache_llama.js';
import { RecomputeDecoder } from '../generate/recompute.js';
import { argmax, penalize, Sampler, topPDistribution } from '../generate/sampler.js';
import { Checkpoint } from '../io/checkpoint.js';
import { loadTokenizer } from '../io/tokenizer.js';
import { DeepseekV4Checkpoint } from '../models/deepseek_v4.js';
import { LlamaCheckpoint } from '../models/llama.js';
import { type DecodeNative, type DeviceNative, loadDecodeNative, loadDeviceNative } from '../../device-hip/binding.js';
import { LlamaDevice } from '../../device-hip/llama.js';
import { buildLlamaF16, LlamaDeviceDecoder, type LlamaF16Weights } from '../../device-hip/llama_decode.js';
import { DeepseekV4Reference } from '../../reference-cpu/deepseek_v4.js';
import { LlamaReference } from '../../reference-cpu/llama.js';
import { LlamaReferenceDecoder } from '../../reference-cpu/llama_decode.js';
import { Rng } from '../rng.js';
import { flipBits, LLAMA_TINY } from './cli.js';
import { copyCheckpoint } from '../../fixtures/inject.js';

// One OpenMP thread: decoding issues many tiny kernels, and on a loaded 2-core runner a 2-thread team
// spin-waits at every fork (10× slower). Numerics do not depend on the thread count. libgomp reads this
// when the addon is loaded (in beforeAll), and vitest's forks pool gives this file its own process.
process.env.OMP_NUM_THREADS ??= '1';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-generate-'));
let ck: Checkpoint;
let m: LlamaCheckpoint;
let N: DeviceNative;
let K: DecodeNative;
let w16: LlamaF16Weights;
let prompts: number[][];

beforeAll(() => {
  process.env.LAYERDIFF_CACHE_DIR = path.join(tmp, 'cache');
  ck = Checkpoint.open(LLAMA_TINY());
  m = new LlamaCheckpoint(ck);
  N = loadDeviceNative();
  K = loadDecodeNative();
  w16 = buildLlamaF16(m, N);
  const tk = loadTokenizer(LLAMA_TINY());
  // Different lengths: the batch is ragged (no padding), and prefill takes the per-sequence attention path.
  prompts = [tk.encode('The quick brown fox checks every layer'), tk.encode('解释一下 CDNA2 架构的特点')];
});
afterAll(() => {
  ck.close();
  fs.rmSync(tmp, { recursive: true, force: true });
});

const deviceRecompute = () => new RecomputeDecoder({ numLayers: m.cfg.layers, vocab: m.cfg.vocab, loadLayer: (L) => m.loadLayer(L) }, new LlamaDevice(m, N, null));
const referenceRecompute = () => new RecomputeDecoder({ numLayers: m.cfg.layers, vocab: m.cfg.vocab, loadLayer: (L) => m.loadLayer(L) }, new LlamaReference(m));
const maxAbs = (a: Float32Array, b: Float32Array) => a.reduce((mx, v, i) => Math.max(mx, Math.abs(v - b[i])), 0);
const maxRef = (a: Float32Array) => a.reduce((mx, v) => Math.max(mx, Math.abs(v)), 0);

/** Drive two decoders through the same schedule (prefill, steps of both, a step of one) and collect logits. */
function schedule(d: Decoder, steps: Array<[number[], number[]]>): Float32Array[][] {
  const out = [d.prefill(prompts, 64)];
  for (const [seqs, toks] of steps) out.push(d.step(seqs, toks));
  return out;
}
const STEPS: Array<[number[], number[]]> = [
  [[0, 1], [42, 7]],
  [[0, 1], [300, 300]],
  [[1], [5]], // one sequence finished: the other goes on alone
  [[1], [99]],
  [[0, 1], [17, 211]],
];

describe('attentionDecodeF16 (device-hip/src/decode.cc)', () => {
  afterEach(() => {
    N.setSimd('auto');
  });
  const rnd = (seed: number, n: number) => {
    const r = new Rng(seed);
    return N.f32ToF16(Float32Array.from({ length: n }, () => r.normal() * 2));
  };
  for (const [window, sinks] of [[0, false], [3, false], [0, true], [4, true]] as const) {
    it(`equals attentionF16's rows at a position offset, bit for bit (window ${window}, sinks ${sinks})`, () => {
      const T = 11, Hq = 4, Hkv = 2, D = 16, Dv = 16, scale = 0.25;
      const q = rnd(1, T * Hq * D), k = rnd(2, T * Hkv * D), v = rnd(3, T * Hkv * Dv);
      const s = sinks ? Float32Array.from({ length: Hq }, (_, h) => h - 1.5) : null;
      for (const simd of ['auto', 'scalar'] as const) {
        N.setSimd(simd);
        const full = N.attentionF16(q, k, v, T, Hq, Hkv, D, Dv, scale, window, s);
        for (const start of [0, 1, 6, T - 1]) {
          const Tq = T - start;
          const got = K.attentionDecodeF16(q.subarray(start * Hq * D), k, v, 1, Tq, 1, T, Int32Array.of(0), Int32Array.of(start), Hq, Hkv, D, Dv, scale, window, s);
          expect(Buffer.from(got.buffer).equals(Buffer.from(full.subarray(start * Hq * Dv).slice().buffer)), `${simd} start ${start}`).toBe(true);
        }
      }
    });
  }

  it('reads each query group from its own cache slot at its own offset', () => {
    const T = 7, Hq = 2, Hkv = 1, D = 8;
    const qa = rnd(4, T * Hq * D), ka = rnd(5, T * D), va = rnd(6, T * D);
    const qb = rnd(7, T * Hq * D), kb = rnd(8, T * D), vb = rnd(9, T * D);
    const fa = N.attentionF16(qa, ka, va, T, Hq, Hkv, D, D, 0.3, 0, null);
    const fb = N.attentionF16(qb, kb, vb, T, Hq, Hkv, D, D, 0.3, 0, null);
    // cache: slot 0 holds sequence b, slot 1 sequence a (capacity 9, two slots unused at the end)
    const cap = 9;
    const kc = new Uint16Array(2 * cap * D), vc = new Uint16Array(2 * cap * D);
    kc.set(kb, 0);
    vc.set(vb, 0);
    kc.set(ka, cap * D);
    vc.set(va, cap * D);
    const q = new Uint16Array(2 * Hq * D);
    q.set(qa.subarray(4 * Hq * D, 5 * Hq * D), 0); // a's query at position 4
    q.set(qb.subarray(6 * Hq * D, 7 * Hq * D), Hq * D); // b's query at position 6
    const got = K.attentionDecodeF16(q, kc, vc, 2, 1, 2, cap, Int32Array.of(1, 0), Int32Array.of(4, 6), Hq, Hkv, D, D, 0.3, 0, null);
    expect([...got.subarray(0, Hq * D)]).toEqual([...fa.subarray(4 * Hq * D, 5 * Hq * D)]);
    expect([...got.subarray(Hq * D)]).toEqual([...fb.subarray(6 * Hq * D, 7 * Hq * D)]);
  });

  it('rejects a query past the cache capacity or a slot outside the cache', () => {
    const q = new Uint16Array(8), kc = new Uint16Array(4 * 8);
    expect(() => K.attentionDecodeF16(q, kc, kc, 1, 1, 1, 4, Int32Array.of(0), Int32Array.of(4), 1, 1, 8, 8, 1, 0, null)).toThrow(RangeError);
    expect(() => K.attentionDecodeF16(q, kc, kc, 1, 1, 1, 4, Int32Array.of(1), Int32Array.of(0), 1, 1, 8, 8, 1, 0, null)).toThrow(/slot/);
  });
});

describe('incremental decoding equals full recompute', () => {
  it('device: KV-cache logits are LlamaDevice full-recompute logits bit for bit, and within max_abs 0.1 of the reference', () => {
    const cached = schedule(new LlamaDeviceDecoder(m, N, K, w16), STEPS);
    const full = schedule(deviceRecompute(), STEPS);
    const ref = schedule(referenceRecompute(), STEPS);
    cached.forEach((step, i) =>
      step.forEach((l, j) => {
        expect(sameBytes(l, full[i][j]), `step ${i} entry ${j}`).toBe(true);
        expect(maxAbs(l, ref[i][j]), `step ${i} entry ${j} vs reference`).toBeLessThan(0.1);
        expect(maxAbs(l, ref[i][j])).toBeGreaterThan(0); // FP16 leaves a footprint: it is not the reference
      }),
    );
  });

  it('reference: KV-cache logits equal full recompute within 1e-5 relative', () => {
    const cached = schedule(new LlamaReferenceDecoder(m), STEPS);
    const full = schedule(referenceRecompute(), STEPS);
    cached.forEach((step, i) => step.forEach((l, j) => expect(maxAbs(l, full[i][j]) / maxRef(full[i][j]), `step ${i} entry ${j}`).toBeLessThan(1e-5)));
  });

  it('a sequence decodes to the same bits alone or in a batch', () => {
    const together = new LlamaDeviceDecoder(m, N, K, w16);
    const alone = new LlamaDeviceDecoder(m, N, K, w16);
    const a = together.prefill(prompts, 32)[1];
    const b = alone.prefill([prompts[1]], 32)[0];
    expect(sameBytes(a, b)).toBe(true);
    expect(sameBytes(together.step([0, 1], [3, 4])[1], alone.step([0], [4])[0])).toBe(true);
    expect(together.lengths()).toEqual([prompts[0].length + 1, prompts[1].length + 1]);
  });
});

describe('the FP16 cache', () => {
  it('holds exactly the bits of dequant at load, is refused when stale and rejected when corrupt', async () => {
    const dir = path.join(tmp, 'fp16');
    const fp = await checkpointFingerprint(ck.dir, ck.shardFiles);
    const man = await writeLlamaFp16Cache(m, N, dir, fp.value);
    expect(man.files.map((f) => f.name).sort()).toEqual(['embed.safetensors', 'head.safetensors', 'layer.00000.safetensors', 'layer.00001.safetensors', 'layer.00002.safetensors', 'layer.00003.safetensors']);
    const got = await loadLlamaFp16Cache(dir, m, fp.value);
    if (!got.ok) throw new Error(got.why);
    const bits = (a: Uint16Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
    expect(bits(got.weights.embed).equals(bits(w16.embed))).toBe(true);
    expect(bits(got.weights.head).equals(bits(w16.head))).toBe(true);
    expect(bits(got.weights.norm).equals(bits(w16.norm))).toBe(true);
    let arrays = 0;
    w16.layers.forEach((layer, L) => {
      const { bias, ...arraysOf } = layer;
      expect(Object.keys(bias), 'llama-tiny has no biases').toEqual([]);
      for (const [k, a] of Object.entries(arraysOf)) {
        expect(bits(got.weights.layers[L][k as keyof typeof arraysOf]).equals(bits(a)), `layer ${L} ${k}`).toBe(true);
        arrays++;
      }
    });
    expect(arrays).toBe(4 * 9);

    const stale = await loadLlamaFp16Cache(dir, m, 'sha256:' + '0'.repeat(64));
    expect(stale.ok).toBe(false);
    if (!stale.ok) expect(stale.why).toMatch(/another checkpoint/);

    // the manifest is not digested: a tied_head that disagrees with the checkpoint is refused, not obeyed
    const mf = path.join(dir, 'manifest.json');
    const original = fs.readFileSync(mf, 'utf8');
    fs.writeFileSync(mf, JSON.stringify({ ...man, tied_head: !man.tied_head }));
    await expect(loadLlamaFp16Cache(dir, m, fp.value)).rejects.toThrow(/manifest\.json.*tied_head/);
    fs.writeFileSync(mf, original);

    flipBits(path.join(dir, 'layer.00002.safetensors'), -3, 0x40);
    await expect(loadLlamaFp16Cache(dir, m, fp.value)).rejects.toThrow(InputError);
    await expect(loadLlamaFp16Cache(dir, m, fp.value)).rejects.toThrow(/layer\.00002\.safetensors.*digest/);
  });

  it('binds the manifest the record checked: a current one where the record bound none is refused; a FIFO, a symlink or an edited list is one clear error', async () => {
    const dir = path.join(tmp, 'fp16-bound');
    const fp = await checkpointFingerprint(ck.dir, ck.shardFiles);
    const man = await writeLlamaFp16Cache(m, N, dir, fp.value);
    const mf = path.join(dir, MANIFEST);
    const digest = cacheListDigest(man, mf);
    // generate found no manifest the record binds (null) or another list: a current manifest now was swapped in
    await expect(loadLlamaFp16Cache(dir, m, fp.value, {}, null)).rejects.toThrow(/manifest\.json.*changed after the acceptance record was checked/);
    await expect(loadLlamaFp16Cache(dir, m, fp.value, {}, `sha256:${'0'.repeat(64)}`)).rejects.toThrow(/changed after the acceptance record/);
    const bound = await loadLlamaFp16Cache(dir, m, fp.value, {}, digest);
    expect(bound.ok).toBe(true);
    if (bound.ok) bound.close();
    // an edited list is bad input, not an internal error
    for (const edit of [{ chunked: {} }, { experts: {} }, { files: 'x' }]) {
      expect(() => cacheListDigest({ ...man, ...edit } as unknown as typeof man, mf)).toThrow(InputError);
      expect(() => cacheListDigest({ ...man, ...edit } as unknown as typeof man, mf)).toThrow(/manifest\.json.*entry is not a list/);
    }
    // a FIFO manifest is never opened for reading (it would hang, and could serve each reader other text); a symlink neither
    const kept = path.join(tmp, 'manifest.kept.json');
    fs.renameSync(mf, kept);
    try {
      execFileSync('mkfifo', [mf]);
      expect(() => readManifestText(dir)).toThrow(/manifest\.json.*cannot be read as the FP16 cache's manifest \(not a regular file\)/);
      await expect(loadLlamaFp16Cache(dir, m, fp.value, {}, digest)).rejects.toThrow(InputError);
      fs.rmSync(mf);
      fs.symlinkSync(kept, mf);
      expect(() => readManifestText(dir)).toThrow(/\(a symbolic link\)/);
      fs.rmSync(mf);
      expect(readManifestText(dir)).toBeNull();
    } finally {
      fs.rmSync(mf, { force: true });
      fs.renameSync(kept, mf);
    }
  });

  it('a cache file edited in place while generating stops generation before a token is chosen from what it computed', async () => {
    const dir = path.join(tmp, 'fp16-in-use');
    const fp = await checkpointFingerprint(ck.dir, ck.shardFiles);
    await writeLlamaFp16Cache(m, N, dir, fp.value);
    const opts = { maxNewTokens: 6, sampling: { temperature: 0, topP: 0.9, topK: 0, repetitionPenalty: 1.1 }, seed: 1, eos: new Set<number>() };
    const run = async (onToken?: (n: number) => void) => {
      const got = await loadLlamaFp16Cache(dir, m, fp.value);
      if (!got.ok) throw new Error(got.why);
      let n = 0;
      try {
        return generate(new LlamaDeviceDecoder(m, N, K, got.weights), [prompts[0]], { ...opts, afterForward: got.unchanged, onToken: () => onToken?.(++n) });
      } finally {
        got.close();
      }
    };
    const clean = await run();
    expect(clean.tokens[0]).toHaveLength(6);
    // after the second token, one layer's bytes are rewritten in place (the same length; the mtime set back)
    const layer = path.join(dir, 'layer.00001.safetensors');
    const before = fs.statSync(layer);
    const emitted: number[] = [];
    await expect(run((n) => {
      emitted.push(n);
      if (n !== 2) return;
      const fd = fs.openSync(layer, 'r+');
      const b = Buffer.alloc(4096);
      fs.readSync(fd, b, 0, b.length, before.size - b.length);
      fs.writeSync(fd, b.map((x) => x ^ 0x40), 0, b.length, before.size - b.length);
      fs.closeSync(fd);
      fs.utimesSync(layer, before.atime, before.mtime);
    })).rejects.toThrow(/layer\.00001\.safetensors.*changed while in use/);
    expect(emitted).toEqual([1, 2]);
  });
});

describe('sampling', () => {
  it('repetition penalty divides positive and multiplies negative logits of seen tokens (HF)', () => {
    const z = penalize(Float32Array.of(2, -2, 1, 4), [0, 1, 1], 2);
    expect([...z]).toEqual([1, -4, 1, 4]);
    expect(argmax(Float64Array.of(1, 3, 3))).toBe(1); // ties: lowest id
  });

  it('top-p keeps the smallest set reaching p, and always the most likely token', () => {
    const z = Float64Array.from([0.5, 0.3, 0.15, 0.05].map(Math.log));
    expect(topPDistribution(z, 1, 0.7).ids).toEqual([0, 1]);
    expect(topPDistribution(z, 1, 0.79).ids).toEqual([0, 1]);
    expect(topPDistribution(z, 1, 0.81).ids).toEqual([0, 1, 2]);
    expect(topPDistribution(z, 1, 0.1).ids).toEqual([0]);
    const d = topPDistribution(z, 1, 1);
    expect(d.probs.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 12);
  });

  it('top-k keeps the tokens at or above the k-th largest logit (ties at it stay), before top-p, as TopKLogitsWarper', () => {
    const z = Float64Array.from([0.4, 0.25, 0.2, 0.1, 0.05].map(Math.log));
    expect(topPDistribution(z, 1, 1, 2).ids).toEqual([0, 1]);
    // renormalised over what top-k kept: 0.4 / 0.65, 0.25 / 0.65
    const d = topPDistribution(z, 1, 1, 2);
    expect(d.probs[0]).toBeCloseTo(0.4 / 0.65, 12);
    expect(d.probs[1]).toBeCloseTo(0.25 / 0.65, 12);
    // top-p then runs over the kept tokens' renormalised mass: 0.4 / 0.65 = 0.615 reaches 0.6 with one token (the
    // raw mass 0.4 would keep a second)
    expect(topPDistribution(z, 1, 0.6, 2).ids).toEqual([0]);
    // a temperature so small that logits / T overflow: still the argmax, never NaN
    expect(topPDistribution(z, 1e-308, 1, 0)).toEqual({ ids: [0], probs: [1] });
    // a tie at the k-th value keeps both (transformers removes only scores < the k-th)
    const tie = Float64Array.from([3, 2, 2, 1]);
    expect(topPDistribution(tie, 1, 1, 2).ids).toEqual([0, 1, 2]);
    expect(topPDistribution(z, 1, 1, 0).ids).toEqual([0, 1, 2, 3, 4]);
  });

  it('the defaults are the checkpoint\'s generation_config.json over transformers\' GenerationConfig defaults; a flag overrides both', () => {
    const at = (name: string, gc: Record<string, unknown> | null, config: (c: Record<string, unknown>) => void = () => undefined) => {
      const d = path.join(tmp, `gc-${name}`);
      copyCheckpoint(LLAMA_TINY(), d);
      const gf = path.join(d, 'generation_config.json');
      if (gc === null) fs.rmSync(gf);
      else fs.writeFileSync(gf, JSON.stringify(gc));
      const cf = path.join(d, 'config.json');
      const c = JSON.parse(fs.readFileSync(cf, 'utf8')) as Record<string, unknown>;
      config(c);
      fs.writeFileSync(cf, JSON.stringify(c));
      return Checkpoint.open(d);
    };
    const llama = Checkpoint.open(LLAMA_TINY()); // do_sample true, temperature 0.6, top_p 0.9 (Llama 3's)
    try {
      expect(resolveSampling({}, llama)).toEqual({ sampling: { temperature: 0.6, topP: 0.9, topK: 50, repetitionPenalty: 1 }, source: 'generation_config.json' });
      expect(resolveSampling({ temperature: 0, topK: 0 }, llama).sampling).toMatchObject({ temperature: 0, topK: 0, topP: 1 }); // greedy: the file's top_p unused
    } finally {
      llama.close();
    }
    const cases: Array<[string, Record<string, unknown> | null, object]> = [
      // do_sample false (or absent): greedy, whatever temperature says, as transformers ignores the warpers
      ['greedy', { do_sample: false, temperature: 0, top_k: -1 }, { temperature: 0, topK: 50, topP: 1, repetitionPenalty: 1 }],
      ['absent', null, { temperature: 0, topK: 50, topP: 1, repetitionPenalty: 1 }],
      ['sample', { do_sample: true, top_k: 0, repetition_penalty: 1.3 }, { temperature: 1, topK: 0, topP: 1, repetitionPenalty: 1.3 }],
    ];
    for (const [name, gc, want] of cases) {
      const ck = at(name, gc);
      try {
        expect(resolveSampling({}, ck).sampling, name).toEqual(want);
      } finally {
        ck.close();
      }
    }
    // decoding fields transformers would apply and generate does not are named, each at a value other than its default;
    // the sampling-only warpers only when the run samples
    const other = at('other', { do_sample: true, num_beams: 4, no_repeat_ngram_size: 0, min_p: 0.05, typical_p: 1, suppress_tokens: [], bad_words_ids: [[5]], min_new_tokens: 2, guidance_scale: 1, penalty_alpha: 0 });
    try {
      expect(unappliedDecoding(other, true)).toEqual(['num_beams 4', 'bad_words_ids [[5]]', 'min_new_tokens 2', 'min_p 0.05']);
      expect(unappliedDecoding(other, false)).toEqual(['num_beams 4', 'bad_words_ids [[5]]', 'min_new_tokens 2']);
    } finally {
      other.close();
    }
    // read once per open checkpoint: an edit after the first read changes nothing this run decides
    const once = at('once', { do_sample: true, num_beams: 4 });
    try {
      expect(unappliedDecoding(once, true)).toEqual(['num_beams 4']);
      fs.writeFileSync(path.join(once.dir, 'generation_config.json'), JSON.stringify({ do_sample: false, eos_token_id: 3 }));
      expect([unappliedDecoding(once, true), resolveSampling({}, once).sampling.temperature, [...eosIds(once, 7)]]).toEqual([['num_beams 4'], 1, [1]]);
    } finally {
      once.close();
    }
    for (const name of ['greedy', 'absent', 'sample']) {
      const ck = Checkpoint.open(path.join(tmp, `gc-${name}`));
      try {
        expect(unappliedDecoding(ck, true), name).toEqual([]);
      } finally {
        ck.close();
      }
    }
    const bad = at('bad', { do_sample: true, top_k: -1 });
    try {
      expect(() => resolveSampling({}, bad)).toThrow(/generation_config\.json: top_k must be an integer >= 0, got -1/);
    } finally {
      bad.close();
    }
    // EOS: generation_config.json's when it names one (a list), else config.json's, else the tokenizer's
    const eos = (name: string, gc: Record<string, unknown> | null, config: (c: Record<string, unknown>) => void) => {
      const ck = at(name, gc, config);
      try {
        return [...eosIds(ck, 7)].sort((x, y) => x - y);
      } finally {
        ck.close();
      }
    };
    expect(eos('eos-gc', { eos_token_id: [2, 3] }, (c) => (c.eos_token_id = 5))).toEqual([2, 3]);
    expect(eos('eos-config', {}, (c) => (c.eos_token_id = 5))).toEqual([5]);
    expect(eos('eos-tokenizer', null, (c) => delete c.eos_token_id)).toEqual([7]);
    // not token ids: bad input naming the file and field, not a silent fall-back to the next source
    expect(() => eos('eos-bad', { eos_token_id: [2, 'x'] }, () => undefined)).toThrow(/generation_config\.json: eos_token_id must be a token id or a list of them/);
  });

  it('a seed reproduces the draws; temperature 0 is greedy', () => {
    const logits = Float32Array.from({ length: 50 }, (_, i) => Math.sin(i));
    const draw = (seed: number) => {
      const s = new Sampler({ temperature: 1.5, topP: 0.95, topK: 0, repetitionPenalty: 1 }, seed, 1);
      return Array.from({ length: 40 }, () => s.next(0, logits, []));
    };
    expect(draw(7)).toEqual(draw(7));
    expect(draw(7)).not.toEqual(draw(8));
    expect(new Set(draw(7)).size).toBeGreaterThan(3);
    expect(new Sampler({ temperature: 0, topP: 0.9, topK: 0, repetitionPenalty: 1 }, 1, 1).next(0, logits, [])).toBe(argmax(logits));
  });

  it('non-finite logits stop generation with an error, not a garbage token', () => {
    const s = new Sampler({ temperature: 0, topP: 1, topK: 0, repetitionPenalty: 1 }, 1, 1);
    expect(() => s.next(0, Float32Array.of(1, NaN), [])).toThrow(/NaN/);
  });
});

describe('generation on the optimized path', () => {
  const opts = (temperature: number, seed: number) => ({ maxNewTokens: 12, sampling: { temperature, topP: 0.9, topK: 0, repetitionPenalty: 1.1 }, seed, eos: new Set<number>() });

  it('greedy generation is deterministic and agrees with the reference path token for token', () => {
    const a = generate(new LlamaDeviceDecoder(m, N, K, w16), prompts, opts(0, 1));
    const b = generate(new LlamaDeviceDecoder(m, N, K, w16), prompts, opts(0, 2));
    expect(a.tokens).toEqual(b.tokens);
    expect(a.tokens.map((t) => t.length)).toEqual([12, 12]);
    expect(a.finish).toEqual(['length', 'length']);
    const r = generate(new LlamaReferenceDecoder(m), prompts, opts(0, 1));
    expect(r.tokens).toEqual(a.tokens);
  });

  it('sampling with a seed is reproducible, independent of the batch, and changes with the seed', () => {
    const a = generate(new LlamaDeviceDecoder(m, N, K, w16), prompts, opts(0.8, 1234));
    const b = generate(new LlamaDeviceDecoder(m, N, K, w16), prompts, opts(0.8, 1234));
    const alone = generate(new LlamaDeviceDecoder(m, N, K, w16), [prompts[0]], opts(0.8, 1234));
    const other = generate(new LlamaDeviceDecoder(m, N, K, w16), prompts, opts(0.8, 99));
    expect(a.tokens).toEqual(b.tokens);
    expect(alone.tokens[0]).toEqual(a.tokens[0]);
    expect(other.tokens).not.toEqual(a.tokens);
  });

  it('stops a sequence at EOS (the EOS token is its last) while the others go on', () => {
    const first = generate(new LlamaDeviceDecoder(m, N, K, w16), prompts, opts(0, 1));
    const eos = first.tokens[0][3];
    const cut = first.tokens[0].indexOf(eos);
    const r = generate(new LlamaDeviceDecoder(m, N, K, w16), prompts, { ...opts(0, 1), eos: new Set([eos]) });
    expect(r.tokens[0]).toEqual(first.tokens[0].slice(0, cut + 1));
    expect(r.finish[0]).toBe('eos');
    const cut1 = first.tokens[1].indexOf(eos);
    expect(r.tokens[1]).toEqual(cut1 >= 0 ? first.tokens[1].slice(0, cut1 + 1) : first.tokens[1]);
  });

  it('streamed text holds back a character whose UTF-8 bytes are split over tokens', () => {
    const tk = loadTokenizer(LLAMA_TINY());
    const ids = tk.encode('架构的特点 ok', { addSpecialTokens: false });
    const s = new TextStream((x) => tk.decode(x, { skipSpecialTokens: true }));
    const parts = ids.map((t) => s.push(t));
    expect(parts.join('') + s.flush()).toBe('架构的特点 ok');
    expect(parts.some((p) => p.includes('\uFFFD'))).toBe(false);
  });
});

describe('DeepSeek-V4 reference generation (full recompute)', () => {
  it('generates greedily and deterministically on deepseek-v4-tiny', () => {
    const dck = Checkpoint.open(path.join(path.dirname(LLAMA_TINY()), 'deepseek-v4-tiny'));
    try {
      const dm = new DeepseekV4Checkpoint(dck);
      const run = () => {
        const d = new RecomputeDecoder({ numLayers: dm.cfg.layers, vocab: dm.cfg.vocab, loadLayer: (L) => dm.loadLayer(L) }, new DeepseekV4Reference(dm));
        return generate(d, [[0, 5, 17, 42, 9]], { maxNewTokens: 3, sampling: { temperature: 0, topP: 1, topK: 0, repetitionPenalty: 1 }, seed: 1, eos: new Set() });
      };
      const a = run();
      expect(a.tokens[0]).toHaveLength(3);
      expect(run().tokens).toEqual(a.tokens);
    } finally {
      dck.close();
    }
  });
});
