/**
 * The DeepSeek-V4 FP16 cache (harness/generate/fp16cache_deepseek_v4.ts): every tensor the device path holds,
 * bit for bit, under the checkpoint's names; generation from it equal to generation from the checkpoint; stale
 * and corrupt caches; routed experts read (and verified) only when asked for; the writer streams one layer and
 * one expert at a time and leaves nothing behind when it fails; `layerdiff convert` / `generate --fp16-cache`
 * through the built CLI. Nothing here depends on the fixture's weight values.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { InputError } from '../errors.js';
import type { LinearWeight, StoredTensor } from '../formats/linear.js';
import { act } from '../formats/tensor.js';
import { checkpointFingerprint, fingerprintFiles, PartDigests } from '../gate/fingerprint.js';
import { type DeepseekV4Fp16Weights, loadDeepseekV4Fp16Cache, writeDeepseekV4Fp16Cache } from '../generate/fp16cache_deepseek_v4.js';
import { Checkpoint } from '../io/checkpoint.js';
import { SafetensorsFile } from '../io/safetensors.js';
import { dropCached } from '../io/prefetch.js';
import { SafetensorsStreamWriter } from '../io/stream_writer.js';
import { type DeepseekV4LayerWeights, DeepseekV4Checkpoint, isNormKey, mapLayerTensors } from '../models/deepseek_v4.js';
import { type DeepseekNative, type DeviceNative, loadDeepseekNative, loadDeviceNative } from '../../device-hip/binding.js';
import { DeepseekV4Device } from '../../device-hip/deepseek_v4.js';
import { DeepseekV4DeviceDecoder } from '../../device-hip/deepseek_v4_decode.js';
import { Kit } from '../../device-hip/deepseek_v4/kit.js';
import { LinearCache } from '../../device-hip/linear.js';
import { wrongShape } from '../../fixtures/inject.js';
import { Rng } from '../rng.js';
import { cli, flipBits, hashTree, LLAMA_TINY, rewriteInPlace } from './cli.js';
import { Blake3 } from '../io/blake3.js';
import { residentKiB } from './smaps.js';

process.env.OMP_NUM_THREADS ??= '1';

const DS = () => path.join(path.dirname(LLAMA_TINY()), 'deepseek-v4-tiny');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-fp16-ds-'));
const cacheDir = path.join(tmp, 'fp16');
let ck: Checkpoint;
let m: DeepseekV4Checkpoint;
let N: DeviceNative;
let K: DeepseekNative;
let fp: string;
let cached: DeepseekV4Fp16Weights;

beforeAll(async () => {
  process.env.LAYERDIFF_CACHE_DIR = path.join(tmp, 'digests');
  ck = Checkpoint.open(DS());
  m = new DeepseekV4Checkpoint(ck);
  N = loadDeviceNative();
  K = loadDeepseekNative();
  fp = (await checkpointFingerprint(ck.dir, ck.shardFiles)).value;
  await writeDeepseekV4Fp16Cache(m, N, cacheDir, fp);
  const c = await loadDeepseekV4Fp16Cache(cacheDir, m, fp);
  if (!c.ok) throw new Error(c.why);
  cached = c.weights;
});
afterAll(() => {
  cached?.close();
  ck.close();
  fs.rmSync(tmp, { recursive: true, force: true });
});

const bits = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
const same = (a: ArrayBufferView, b: ArrayBufferView) => bits(a).equals(bits(b));

/** Every bound tensor of a layer in binding order, with its field name. */
function tensorsOf(w: DeepseekV4LayerWeights): Array<{ key: string; t: StoredTensor | null; lw: LinearWeight | null }> {
  const out: Array<{ key: string; t: StoredTensor | null; lw: LinearWeight | null }> = [];
  mapLayerTensors(w, {
    stored: (key, t) => (out.push({ key, t, lw: null }), t),
    linear: (key, lw) => (out.push({ key, t: null, lw }), lw),
  });
  return out;
}

describe('the DeepSeek-V4 FP16 cache', () => {
  it('holds exactly what the device path holds after dequant, for every tensor kind, under the checkpoint names', () => {
    const kit = new Kit(N, K, m.cfg, new LinearCache(N), null);
    const kinds = new Set<string>();
    const names = new Set<string>();
    const lin = (a: LinearWeight, b: LinearWeight, what: string) => {
      expect(b.name, what).toBe(a.name);
      expect([b.format, b.weight.dtype, b.out, b.in], what).toEqual(['plain', 'F16', a.out, a.in]);
      expect(same(kit.w16(b), kit.w16(a)), what).toBe(true);
      kinds.add(a.format === 'plain' ? `plain ${a.weight.dtype}` : a.format);
      names.add(a.name);
    };
    const stored = (key: string, a: StoredTensor, b: StoredTensor, what: string) => {
      expect(b.name, what).toBe(a.name);
      if (isNormKey(key)) {
        expect(b.dtype, what).toBe('F16');
        expect(same(kit.vec16(b), kit.vec16(a)), what).toBe(true);
        kinds.add(`norm ${a.dtype}`);
      } else {
        expect(b.dtype, what).toBe(a.dtype);
        expect(same(b.bytes, a.bytes), what).toBe(true);
        kinds.add(a.dtype);
      }
      names.add(a.name);
    };
    for (let L = 0; L < m.cfg.layers; L++) {
      const a = m.loadLayer(L);
      const b = cached.loadLayer(L);
      const ta = tensorsOf(a);
      const tb = tensorsOf(b);
      expect(tb.map((x) => x.key)).toEqual(ta.map((x) => x.key));
      ta.forEach((x, i) => (x.lw !== null ? lin(x.lw, tb[i].lw!, `layer ${L} ${x.key}`) : stored(x.key, x.t!, tb[i].t!, `layer ${L} ${x.key}`)));
      for (let e = 0; e < m.cfg.experts; e++) {
        const ea = a.expert(e);
        const eb = b.expert(e);
        for (const k of ['w1', 'w2', 'w3'] as const) lin(ea[k], eb[k], `layer ${L} expert ${e} ${k}`);
      }
    }
    const ha = m.head();
    const hb = cached.head();
    for (const k of Object.keys(ha) as Array<keyof typeof ha>) stored(k, ha[k], hb[k], `head ${k}`);

    // Each kind the device path converts: FP8-block and MXFP4 linears, BF16 linears, norms, F32 parameters, ids.
    for (const k of ['fp8-block', 'mxfp4', 'plain BF16', 'norm BF16', 'F32', 'I64']) expect(kinds, k).toContain(k);

    // Embedding and head, through the device path itself: every token's row, and logits of random streams.
    const devCk = new DeepseekV4Device(m, N, null, K);
    const devFp = new DeepseekV4Device(cached, N, null, K);
    const every = Array.from({ length: m.cfg.vocab }, (_, t) => t);
    expect(same(devFp.embed(every).data, devCk.embed(every).data)).toBe(true);
    const rng = new Rng(7);
    const { hcMult: hc, hidden: D } = m.cfg;
    const x = act([3, hc, D], Float32Array.from({ length: 3 * hc * D }, () => rng.normal()));
    const fa = devCk.finalNorm(x);
    expect(same(devFp.finalNorm(x).data, fa.data)).toBe(true);
    expect(same(devFp.logits(fa).data, devCk.logits(fa).data)).toBe(true);

    // Every checkpoint tensor but the scales (folded into the F16 weights) and mtp.* is in the cache, under its name.
    names.add(m.embedName).add(m.headName);
    const inCache = new Set<string>();
    for (const f of fs.readdirSync(cacheDir).filter((n) => n.endsWith('.safetensors'))) {
      const sf = SafetensorsFile.open(path.join(cacheDir, f));
      for (const n of sf.tensors.keys()) inCache.add(n);
      sf.close();
    }
    const wanted = ck.names().filter((n) => !n.startsWith('mtp.') && !n.endsWith('.scale') && !n.endsWith('.weight_scale_inv'));
    expect([...inCache].sort()).toEqual(wanted.sort());
    expect([...names].sort()).toEqual(wanted.sort());
  });

  it('generates the same logits, bit for bit, as dequantizing the checkpoint (ragged batch, 30 steps)', () => {
    const prompts = [[0, 5, 17, 42, 9], [0, 300, 7]];
    const a = new DeepseekV4DeviceDecoder(m, N, K);
    const b = new DeepseekV4DeviceDecoder(cached, N, K);
    let la = a.prefill(prompts, 48);
    let lb = b.prefill(prompts, 48);
    for (let step = 0; step <= 30; step++) {
      la.forEach((l, i) => expect(same(lb[i], l), `step ${step} seq ${i}`).toBe(true));
      const toks = la.map((l, i) => (l.indexOf(Math.max(...l)) + i) % m.cfg.vocab);
      la = a.step([0, 1], toks);
      lb = b.step([0, 1], toks);
    }
  });

  it('reads a routed expert only when asked for, and checks it against its own digest then', async () => {
    const dir = path.join(tmp, 'lazy');
    fs.cpSync(cacheDir, dir, { recursive: true });
    // Corrupt one byte of expert 5 of layer 2 (w2, in the middle of the file).
    const file = path.join(dir, 'layer.00002.experts.safetensors');
    const sf = SafetensorsFile.open(file);
    const at = sf.get('layers.2.ffn.experts.5.w2.weight')!.begin + 11;
    sf.close();
    flipBits(file, at);
    const c = await loadDeepseekV4Fp16Cache(dir, m, fp);
    if (!c.ok) throw new Error(c.why);
    try {
      const w = c.weights.loadLayer(2);
      expect(w.expertsLoaded()).toEqual([]);
      w.expert(4);
      w.expert(6);
      expect(w.expertsLoaded()).toEqual([4, 6]);
      expect(() => w.expert(5)).toThrow(InputError);
      expect(() => w.expert(5)).toThrow(/layer\.00002\.experts\.safetensors.*layers\.2\.ffn\.experts\.5.*digest/);
      // kept on the layer by default; with keepExperts = false (layers not kept) each use reads it again
      expect(w.expert(4)).toBe(w.expert(4));
      c.weights.keepExperts = false;
      const lean = c.weights.loadLayer(2);
      const [a, b] = [lean.expert(4), lean.expert(4)];
      expect(a).not.toBe(b);
      expect(Buffer.compare(a.w2.weight.bytes, b.w2.weight.bytes)).toBe(0);
      expect(lean.expertsLoaded()).toEqual([4]);
    } finally {
      c.weights.close();
    }
  });

  // A layer's weights and a routed expert are read whole as soon as they are bound, so their pages are mapped in one
  // call (CacheStore.read's `whole`): a fault a page cost the wide start-up ~0.14 core-s on the VMs this runs on.
  it.runIf(process.platform === 'linux')('maps a bound layer\'s weights and a routed expert with their pages in (populated), before any product reads them', async () => {
    const c = await loadDeepseekV4Fp16Cache(cacheDir, m, fp);
    if (!c.ok) throw new Error(c.why);
    try {
      const layerFile = path.join(cacheDir, 'layer.00001.safetensors');
      const w = c.weights.loadLayer(1);
      const bytes = (lw: LinearWeight) => lw.weight.bytes.byteLength;
      expect(residentKiB(layerFile) * 1024, 'the bound attention weights, mapped in').toBeGreaterThanOrEqual(bytes(w.attn.wq_a) + bytes(w.attn.wo_b));
      const expertsFile = path.join(cacheDir, 'layer.00001.experts.safetensors');
      const before = residentKiB(expertsFile);
      const e = w.expert(3);
      expect(residentKiB(expertsFile) - before, 'the routed expert, mapped in').toBeGreaterThanOrEqual(Math.floor((bytes(e.w1) + bytes(e.w2) + bytes(e.w3)) / 4096) * 4);
    } finally {
      c.weights.close();
    }
  });

  it('verifies the experts a pass announces side by side, and still names the one that does not match', async () => {
    const dir = path.join(tmp, 'ahead');
    fs.cpSync(cacheDir, dir, { recursive: true });
    const file = path.join(dir, 'layer.00002.experts.safetensors');
    const sf = SafetensorsFile.open(file);
    const at = sf.get('layers.2.ffn.experts.6.w3.weight')!.begin + 7;
    sf.close();
    flipBits(file, at);
    const named = /layer\.00002\.experts\.safetensors.*layers\.2\.ffn\.experts\.6.*digest/;
    for (const hashThreads of [2, 1]) {
      const c = await loadDeepseekV4Fp16Cache(dir, m, fp, { hashThreads, useCache: false });
      if (!c.ok) throw new Error(c.why);
      try {
        const w = c.weights.loadLayer(2);
        w.expertsAhead!([1, 3, 5, 6]);
        w.expert(1);
        expect(w.expert(3).w1.weight.bytes.length).toBeGreaterThan(0);
        if (hashThreads === 2) {
          // 1 with 3, then 5 with 6: asking for 5 checks 6 beside it, and the error names 6
          expect(() => w.expert(5)).toThrow(named);
          expect(w.expertsLoaded()).toEqual([1, 3]);
        } else {
          // one at a time: 5 loads, 6 fails when asked for
          w.expert(5);
          expect(() => w.expert(6)).toThrow(named);
          expect(w.expertsLoaded()).toEqual([1, 3, 5]);
        }
      } finally {
        c.weights.close();
      }
    }
  });

  it('trusts a routed expert an earlier load checked while its file is unchanged, as whole files are trusted', async () => {
    const dir = path.join(tmp, 'parts');
    fs.cpSync(cacheDir, dir, { recursive: true });
    const file = path.join(dir, 'layer.00001.experts.safetensors');
    const want = (JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8')) as { experts: Array<{ blake3: string[] }> }).experts[1].blake3[3];
    // the manifest's digest of expert 3, recomputed here from the file (the TypeScript BLAKE3): its w1, w2, w3 bytes in that order
    const sf = SafetensorsFile.open(file);
    const h = new Blake3();
    for (const w of ['w1', 'w2', 'w3']) h.update(sf.read(sf.get(`layers.1.ffn.experts.3.${w}.weight`)!));
    sf.close();
    expect(h.hex()).toBe(want);
    const saved = process.env.LAYERDIFF_CACHE_DIR;
    process.env.LAYERDIFF_CACHE_DIR = path.join(tmp, 'parts-digests');
    const entries = () => (JSON.parse(fs.readFileSync(path.join(tmp, 'parts-digests', 'fingerprints.json'), 'utf8')) as { entries: Record<string, Record<string, string | number>> }).entries;
    const label = `${fs.realpathSync(file)}\0layers.1.ffn.experts.3`;
    const use = async (o: Parameters<typeof loadDeepseekV4Fp16Cache>[3]) => {
      const c = await loadDeepseekV4Fp16Cache(dir, m, fp, o);
      if (!c.ok) throw new Error(c.why);
      try {
        c.weights.loadLayer(1).expert(3);
      } finally {
        c.weights.close();
      }
    };
    try {
      // a first load hashes it and records it under the file's stat key (the copy is seconds old: racyMs 0)
      await use({ racyMs: 0 });
      const st = fs.statSync(file, { bigint: true });
      expect(entries()[label]).toEqual({ size: Number(st.size), mtime_ns: String(st.mtimeNs), ctime_ns: String(st.ctimeNs), ino: String(st.ino), dev: String(st.dev), sha256: `blake3:${want}` });
      // edited in place: the entry no longer matches the file, so the expert is hashed again and refused
      const sf2 = SafetensorsFile.open(file);
      const at = sf2.get('layers.1.ffn.experts.3.w1.weight')!.begin + 5;
      sf2.close();
      flipBits(file, at);
      await expect(use({ racyMs: 0 })).rejects.toThrow(/layer\.00001\.experts\.safetensors.*layers\.1\.ffn\.experts\.3.*digest/);
      // an entry forged for the edited file (someone who can write the cache): a hint without a signing key, as
      // whole files' entries are; with a key it has no valid MAC, and --verify full hashes every expert it uses
      const now = fs.statSync(file, { bigint: true });
      const forged = JSON.parse(fs.readFileSync(path.join(tmp, 'parts-digests', 'fingerprints.json'), 'utf8')) as { entries: Record<string, unknown> };
      forged.entries[label] = { size: Number(now.size), mtime_ns: String(now.mtimeNs), ctime_ns: String(now.ctimeNs), ino: String(now.ino), dev: String(now.dev), sha256: `blake3:${want}` };
      fs.writeFileSync(path.join(tmp, 'parts-digests', 'fingerprints.json'), JSON.stringify(forged));
      await use({ racyMs: 0 });
      await expect(use({ racyMs: 0, macKey: 'k' })).rejects.toThrow(/layers\.1\.ffn\.experts\.3.*digest/);
      await expect(use({ racyMs: 0, useCache: 'write' })).rejects.toThrow(/layers\.1\.ffn\.experts\.3.*digest/);
      // with a key, what a load records is MACed
      fs.cpSync(cacheDir, dir, { recursive: true });
      await use({ racyMs: 0, macKey: 'k' });
      expect(entries()[label].mac).toMatch(/^[0-9a-f]{64}$/);
      // a later write of the cache (a checkpoint hashed) keeps the parts of files that exist, forgets those gone
      await fingerprintFiles(ck.dir, ck.shardFiles, { useCache: 'write', racyMs: 0 });
      expect(entries()[label]).toBeDefined();
      fs.rmSync(dir, { recursive: true });
      await fingerprintFiles(ck.dir, ck.shardFiles, { useCache: 'write', racyMs: 0 });
      expect(entries()[label]).toBeUndefined();
      expect(Object.keys(entries()).length).toBeGreaterThan(0);
    } finally {
      process.env.LAYERDIFF_CACHE_DIR = saved;
    }
  });

  it('vouches for the embedding chunk by chunk: a row read hashes its own chunk only, a corrupt chunk is named when first read', async () => {
    // The manifest's chunk digests, recomputed here from the file and the layout's definition: the header
    // (8-byte length + JSON), then 64 rows of F16 a chunk, every byte of the file covered.
    const embed = path.join(cacheDir, 'embed.safetensors');
    const file = fs.readFileSync(embed);
    const headerBytes = 8 + Number(file.readBigUInt64LE(0));
    const chunkBytes = 64 * m.cfg.hidden * 2;
    const digest = (b: Buffer) => new Blake3().update(b).hex();
    const want = [digest(file.subarray(0, headerBytes))];
    for (let at = headerBytes; at < file.length; at += chunkBytes) want.push(digest(file.subarray(at, Math.min(file.length, at + chunkBytes))));
    expect(want.length).toBe(1 + Math.ceil(m.cfg.vocab / 64));
    expect(cached.manifest.chunked).toEqual([{ name: 'embed.safetensors', size: file.length, header_bytes: headerBytes, chunk_bytes: chunkBytes, blake3: want }]);
    expect(cached.manifest.files.map((f) => f.name)).not.toContain('embed.safetensors');

    // One bit of token 200's row flipped (chunk 1 + 200/64 = 4): loading hashes nothing of the embedding, rows
    // elsewhere are read (their chunks checked), and token 200 is refused naming the file and the tensor.
    const dir = path.join(tmp, 'embed-chunk');
    fs.cpSync(cacheDir, dir, { recursive: true });
    const rowBytes = m.cfg.hidden * 2;
    flipBits(path.join(dir, 'embed.safetensors'), headerBytes + 200 * rowBytes + 7, 0x10);
    const c = await loadDeepseekV4Fp16Cache(dir, m, fp);
    if (!c.ok) throw new Error(c.why);
    try {
      expect(c.weights.embedChunks.checkedChunks()).toBe(0);
      const rows = c.weights.embedRows([0, 63, 64, 383]);
      expect(same(rows.bytes, cached.embedRows([0, 63, 64, 383]).bytes)).toBe(true);
      expect(c.weights.embedChunks.checkedChunks()).toBe(4); // the header, chunks 1, 2 and 6
      expect(() => c.weights.embedRows([5, 200])).toThrow(InputError);
      expect(() => c.weights.embedRows([200])).toThrow(/embed\.safetensors.*embed\.weight.*bytes \d+–\d+ of embed\.weight do not match the digest/);
      expect(c.weights.embedChunks.checkedChunks()).toBe(4);
    } finally {
      c.weights.close();
    }

    // The header is checked before it is parsed: a changed byte of its JSON (a digit of the fingerprint in its
    // metadata, so the header still parses with the right dtype and shape) is refused at the first read.
    const hdr = path.join(tmp, 'embed-header');
    fs.cpSync(cacheDir, hdr, { recursive: true });
    const hb = fs.readFileSync(path.join(hdr, 'embed.safetensors'));
    const at = hb.indexOf('sha256:', 8);
    expect(at).toBeGreaterThan(8);
    expect(at).toBeLessThan(headerBytes);
    hb[at + 7] = hb[at + 7] === 0x30 ? 0x31 : 0x30;
    fs.writeFileSync(path.join(hdr, 'embed.safetensors'), hb);
    const h = await loadDeepseekV4Fp16Cache(hdr, m, fp);
    if (!h.ok) throw new Error(h.why);
    try {
      expect(() => h.weights.embedRows([1])).toThrow(/embed\.safetensors.*its header does not match the digest/);
    } finally {
      h.weights.close();
    }

    // Truncated, or a manifest entry that does not fit the file: refused at load, naming the file.
    const cut = path.join(tmp, 'embed-cut');
    fs.cpSync(cacheDir, cut, { recursive: true });
    fs.truncateSync(path.join(cut, 'embed.safetensors'), file.length - rowBytes);
    await expect(loadDeepseekV4Fp16Cache(cut, m, fp)).rejects.toThrow(/embed\.safetensors.*truncated/);
    const edited = path.join(tmp, 'embed-manifest');
    fs.cpSync(cacheDir, edited, { recursive: true });
    const mf = path.join(edited, 'manifest.json');
    const man = JSON.parse(fs.readFileSync(mf, 'utf8')) as { chunked: Array<{ blake3: string[] }> };
    man.chunked[0].blake3.pop();
    fs.writeFileSync(mf, JSON.stringify(man));
    await expect(loadDeepseekV4Fp16Cache(edited, m, fp)).rejects.toThrow(/manifest\.json.*embed\.safetensors is not a well-formed chunked digest/);
    // an absurd chunk size with a digest count to match: well formed, so the first read hashes what the file
    // holds (never more than its size) and refuses it
    const huge = JSON.parse(fs.readFileSync(path.join(cacheDir, 'manifest.json'), 'utf8')) as { chunked: Array<{ chunk_bytes: number; blake3: string[] }> };
    huge.chunked[0].chunk_bytes = 2 ** 52;
    huge.chunked[0].blake3 = [huge.chunked[0].blake3[0], 'a'.repeat(64)];
    fs.writeFileSync(mf, JSON.stringify(huge));
    const hc = await loadDeepseekV4Fp16Cache(edited, m, fp);
    if (!hc.ok) throw new Error(hc.why);
    try {
      expect(() => hc.weights.embedRows([3])).toThrow(/embed\.safetensors.*do not match the digest/);
    } finally {
      hc.weights.close();
    }
  });

  it('takes a cache in the earlier layout (every file hashed whole) as stale, and convert replaces it', async () => {
    const old = path.join(tmp, 'schema-1');
    fs.cpSync(cacheDir, old, { recursive: true });
    const mf = path.join(old, 'manifest.json');
    // as that layout wrote it: the embedding among the files hashed whole, no chunked list
    const man = JSON.parse(fs.readFileSync(mf, 'utf8')) as { files: Array<{ name: string; size: number; sha256: string }> };
    const embed = fs.readFileSync(path.join(old, 'embed.safetensors'));
    const files = [{ name: 'embed.safetensors', size: embed.length, sha256: createHash('sha256').update(embed).digest('hex') }, ...man.files];
    fs.writeFileSync(mf, JSON.stringify({ ...man, schema: 'layerdiff.fp16-cache/1', files, chunked: undefined }));
    const c = await loadDeepseekV4Fp16Cache(old, m, fp);
    expect(c.ok).toBe(false);
    if (!c.ok) expect(c.why).toMatch(/earlier layout \(layerdiff\.fp16-cache\/1\)/);
    // the layout before BLAKE3 (schema /2: the same files, SHA-256 digests) is stale too
    fs.writeFileSync(mf, JSON.stringify({ ...man, schema: 'layerdiff.fp16-cache/2' }));
    const c2 = await loadDeepseekV4Fp16Cache(old, m, fp);
    expect(c2.ok).toBe(false);
    if (!c2.ok) expect(c2.why).toMatch(/earlier layout \(layerdiff\.fp16-cache\/2\)/);
    await writeDeepseekV4Fp16Cache(m, N, old, fp);
    const again = await loadDeepseekV4Fp16Cache(old, m, fp);
    expect(again.ok).toBe(true);
    if (again.ok) again.weights.close();
  });

  it('is refused when stale, and rejected naming the file when a whole file is corrupt or an experts file truncated', async () => {
    const stale = await loadDeepseekV4Fp16Cache(cacheDir, m, 'sha256:' + '0'.repeat(64));
    expect(stale.ok).toBe(false);
    if (!stale.ok) expect(stale.why).toMatch(/another checkpoint/);
    const none = await loadDeepseekV4Fp16Cache(path.join(tmp, 'nowhere'), m, fp);
    expect(none.ok).toBe(false);

    const dense = path.join(tmp, 'corrupt-dense');
    fs.cpSync(cacheDir, dense, { recursive: true });
    flipBits(path.join(dense, 'layer.00001.safetensors'), -3, 0x40);
    await expect(loadDeepseekV4Fp16Cache(dense, m, fp)).rejects.toThrow(/layer\.00001\.safetensors.*digest/);

    const cut = path.join(tmp, 'truncated');
    fs.cpSync(cacheDir, cut, { recursive: true });
    const ex = path.join(cut, 'layer.00003.experts.safetensors');
    fs.truncateSync(ex, fs.statSync(ex).size - 8);
    await expect(loadDeepseekV4Fp16Cache(cut, m, fp)).rejects.toThrow(/layer\.00003\.experts\.safetensors.*truncated/);

    // a whole file's entry without its BLAKE3 (a SHA-256 where the digest should be), or the file a symlink
    const edited = path.join(tmp, 'sha-entry');
    fs.cpSync(cacheDir, edited, { recursive: true });
    const mf = path.join(edited, 'manifest.json');
    const man = JSON.parse(fs.readFileSync(mf, 'utf8')) as { files: Array<Record<string, unknown>> };
    const { blake3, ...rest } = man.files[0];
    man.files[0] = { ...rest, sha256: blake3 };
    fs.writeFileSync(mf, JSON.stringify(man));
    await expect(loadDeepseekV4Fp16Cache(edited, m, fp)).rejects.toThrow(/manifest\.json.*not \{name, size, blake3\}/);
    const linked = path.join(tmp, 'symlinked');
    fs.cpSync(cacheDir, linked, { recursive: true });
    const head = path.join(linked, 'head.safetensors');
    fs.renameSync(head, path.join(tmp, 'head-elsewhere.safetensors'));
    fs.symlinkSync(path.join(tmp, 'head-elsewhere.safetensors'), head);
    await expect(loadDeepseekV4Fp16Cache(linked, m, fp)).rejects.toThrow(/head\.safetensors.*cannot be read as part of the FP16 cache/);
  });
});

describe('writing the DeepSeek-V4 FP16 cache', () => {
  it('streams one layer at a time and one routed expert at a time, keeping none on the layer', async () => {
    const events: string[] = [];
    const layers: DeepseekV4LayerWeights[] = [];
    const spy = Object.create(m) as DeepseekV4Checkpoint;
    spy.loadLayer = (L: number, read = true) => {
      const w = m.loadLayer(L, read);
      if (read) {
        events.push(`load ${L}`);
        layers.push(w);
      }
      return w;
    };
    spy.readExpert = (L: number, e: number) => (events.push(`expert ${L}.${e}`), m.readExpert(L, e));
    // every routed-expert tensor written to disk, in order: an expert must be on disk before the next is read
    const write = SafetensorsStreamWriter.prototype.write;
    const spyWrite = vi.spyOn(SafetensorsStreamWriter.prototype, 'write').mockImplementation(function (this: SafetensorsStreamWriter, name, chunk) {
      if (/\.ffn\.experts\./.test(name) && events.at(-1) !== `write ${name}`) events.push(`write ${name}`);
      write.call(this, name, chunk);
    });
    try {
      await writeDeepseekV4Fp16Cache(spy, N, path.join(tmp, 'order'), fp, (f) => events.push(`file ${f}`));
    } finally {
      spyWrite.mockRestore();
    }
    const E = m.cfg.experts;
    const want = ['file embed.safetensors'];
    for (let L = 0; L < m.cfg.layers; L++) {
      const f = `layer.${String(L).padStart(5, '0')}`;
      const expert = (e: number) => [`expert ${L}.${e}`, ...['w1', 'w2', 'w3'].map((x) => `write layers.${L}.ffn.experts.${e}.${x}.weight`)];
      want.push(`load ${L}`, `file ${f}.safetensors`, ...Array.from({ length: E }, (_, e) => expert(e)).flat(), `file ${f}.experts.safetensors`);
    }
    want.push('file head.safetensors');
    expect(events).toEqual(want);
    // the layer objects the writer bound never cached a routed expert (readExpert does not keep them)
    for (const w of layers) expect(w.expertsLoaded()).toEqual([]);
  });

  // fp16cache.ts (dropFolderFromPageCache after syncFolder): the written files, once on the disk, leave the page cache, so that the first run
  // reads them back in 2 MiB folios. fincore (util-linux) counts a file's pages in the page cache; a filesystem
  // that keeps clean pages against the advice (tmpfs) is found with a probe file first, and the test then says so.
  const fincore = spawnSync('fincore', ['--version']).status === 0;
  it.runIf(process.platform === 'linux' && fincore)('leaves none of its files in the page cache once they are on the disk', async () => {
    const resident = (f: string): number => {
      const r = spawnSync('fincore', ['--bytes', '--noheadings', '--output', 'RES', f], { encoding: 'utf8' });
      expect(r.status === 0 && /^\d+$/.test(r.stdout.trim()), `fincore ${f}: ${r.stderr}`).toBe(true);
      return Number(r.stdout.trim());
    };
    const probe = path.join(tmp, 'probe.bin');
    fs.writeFileSync(probe, Buffer.alloc(1 << 20, 7));
    const fd = fs.openSync(probe, 'r');
    fs.fsyncSync(fd);
    const dropped = dropCached(fd);
    fs.closeSync(fd);
    if (!dropped || resident(probe) !== 0) {
      console.warn(`${tmp}: this filesystem keeps clean pages against POSIX_FADV_DONTNEED; not checked here`);
      return;
    }
    const dir = path.join(tmp, 'dropped');
    await writeDeepseekV4Fp16Cache(m, N, dir, fp);
    const files = fs.readdirSync(dir);
    expect(files.length).toBeGreaterThan(2);
    for (const f of files) expect(resident(path.join(dir, f)), f).toBe(0);
    // and they are whole: the cache loads, its files hashed against the manifest
    const c = await loadDeepseekV4Fp16Cache(dir, m, fp);
    expect(c.ok ? 'loaded' : c.why).toBe('loaded');
    if (c.ok) c.weights.close();
  });

  it('leaves nothing behind when it fails half way (and keeps what was in the folder before)', async () => {
    const failing = Object.create(m) as DeepseekV4Checkpoint;
    failing.readExpert = (L: number, e: number) => {
      if (L === 2) throw new InputError('unreadable', { file: 'x', tensor: `layers.${L}.ffn.experts.${e}.w1.weight` });
      return m.readExpert(L, e);
    };
    const fresh = path.join(tmp, 'failed-fresh');
    await expect(writeDeepseekV4Fp16Cache(failing, N, path.join(fresh, 'a', 'b'), fp)).rejects.toThrow(InputError);
    expect(fs.existsSync(fresh), 'the parents it made go too').toBe(false);
    const existing = path.join(tmp, 'failed-existing');
    fs.mkdirSync(existing);
    fs.writeFileSync(path.join(existing, 'notes.txt'), 'mine');
    await expect(writeDeepseekV4Fp16Cache(failing, N, existing, fp)).rejects.toThrow(InputError);
    expect(fs.readdirSync(existing)).toEqual(['notes.txt']);
    // a killed convert's staging folder next to the target (its process is gone) goes with the next convert;
    // a live process's stays
    const dead = spawnSync(process.execPath, ['-e', '']).pid!;
    const orphan = `.cache.layerdiff-partial-${dead}.0`;
    const live = `.cache.layerdiff-partial-${process.ppid}.0`;
    for (const f of [orphan, live]) fs.mkdirSync(path.join(existing, f));
    await expect(writeDeepseekV4Fp16Cache(failing, N, path.join(existing, 'cache'), fp)).rejects.toThrow(InputError);
    expect(fs.readdirSync(existing).sort()).toEqual([live, 'notes.txt'].sort());
  });
});

describe('layerdiff convert / generate --fp16-cache on DeepSeek-V4 (CLI)', () => {
  it('converts, generates the same tokens with the cache as without, and exits 2 on bad input with no output', () => {
    const env = { LAYERDIFF_CACHE_DIR: path.join(tmp, 'cli-digests'), OMP_NUM_THREADS: process.env.OMP_NUM_THREADS! };
    const out16 = path.join(tmp, 'cli', 'fp16');
    const c = cli(['convert', DS(), '--fp16-cache', out16], env);
    expect(c.code, c.stderr).toBe(0);
    expect(c.stdout).toMatch(/wrote the FP16 cache .* 10 files/);
    expect(JSON.parse(fs.readFileSync(path.join(out16, 'manifest.json'), 'utf8')).architecture).toBe('deepseek_v4');

    const rec = path.join(tmp, 'cli', 'accept.json');
    const g = cli(['gate', DS(), '--record', rec, '--fp16-cache', out16], env);
    expect(g.code, g.stderr).toBe(0);
    expect(g.stdout).toMatch(/FP16 cache .*bound into the record/);
    const run = (extra: string[], json: string) => {
      const r = cli(['generate', DS(), '--record', rec, '--tokens', '0,5,17,42,9', '--max-new-tokens', '16', '--temperature', '0.6', '--seed', '3', '--json', json, ...extra], env);
      expect(r.code, r.stderr).toBe(0);
      return { stderr: r.stderr, j: JSON.parse(fs.readFileSync(json, 'utf8')) as { weights: string; outputs: Array<{ tokens: number[] }> } };
    };
    const plain = run([], path.join(tmp, 'cli', 'a.json'));
    const fromCache = run(['--fp16-cache', out16], path.join(tmp, 'cli', 'b.json'));
    expect(plain.j.weights).toBe('dequant-at-load');
    expect(fromCache.j.weights).toBe('fp16-cache');
    expect(fromCache.stderr).toMatch(/FP16 weights from the cache/);
    expect(fromCache.j.outputs).toEqual(plain.j.outputs);

    // A cache of another checkpoint (llama-tiny's) is not used: a note, then dequant at load.
    const llama16 = path.join(tmp, 'cli', 'llama16');
    expect(cli(['convert', LLAMA_TINY(), '--fp16-cache', llama16], env).code).toBe(0);
    const other = run(['--fp16-cache', llama16], path.join(tmp, 'cli', 'c.json'));
    expect(other.stderr).toMatch(/note: not using the FP16 cache .*another checkpoint/);
    expect(other.j.weights).toBe('dequant-at-load');
    expect(other.j.outputs).toEqual(plain.j.outputs);

    const bad = path.join(tmp, 'cli', 'bad-model');
    const defect = wrongShape(DS(), bad, 'layers.3.ffn.experts.6.w2.weight');
    const before = hashTree(bad);
    const badOut = path.join(tmp, 'cli', 'bad16');
    const r = cli(['convert', bad, '--fp16-cache', badOut], env);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(defect.tensor!);
    expect(fs.existsSync(badOut)).toBe(false);
    expect(hashTree(bad)).toBe(before);
  });
  it('maps only the files it verified: a file swapped after the load checked it is refused when first used', async () => {
    // a whole file (a layer's) replaced by a modified copy between the load and the layer's first use
    const dir = path.join(tmp, 'swapped');
    fs.cpSync(cacheDir, dir, { recursive: true });
    const c = await loadDeepseekV4Fp16Cache(dir, m, fp, { racyMs: 0 });
    if (!c.ok) throw new Error(c.why);
    try {
      c.weights.loadLayer(0); // opened and used before the swap: fine
      const layer1 = path.join(dir, 'layer.00001.safetensors');
      const copy = path.join(dir, 'copy.tmp');
      fs.copyFileSync(layer1, copy);
      flipBits(copy, -3, 0x40);
      fs.renameSync(copy, layer1);
      expect(() => c.weights.loadLayer(1)).toThrow(/layer\.00001\.safetensors.*not the file that was verified/);
    } finally {
      c.weights.close();
    }
    // the embedding: its chunk reader opened (and pinned) the file, then the file is replaced before the store maps it
    const e = path.join(tmp, 'swapped-embed');
    fs.cpSync(cacheDir, e, { recursive: true });
    const ce = await loadDeepseekV4Fp16Cache(e, m, fp);
    if (!ce.ok) throw new Error(ce.why);
    try {
      ce.weights.embedChunks.header();
      const embed = path.join(e, 'embed.safetensors');
      fs.copyFileSync(embed, `${embed}.tmp`);
      fs.renameSync(`${embed}.tmp`, embed);
      expect(() => ce.weights.embedRows([1])).toThrow(/embed\.safetensors.*not the file that was verified/);
    } finally {
      ce.weights.close();
    }
  });

  it('a file in use edited in place (a layer file, an experts file after an expert was read): unchanged() names it', async () => {
    for (const [name, use] of [['layer.00000.safetensors', (w: DeepseekV4Fp16Weights) => w.loadLayer(0)], ['layer.00001.experts.safetensors', (w: DeepseekV4Fp16Weights) => w.loadLayer(1).expert(2)]] as const) {
      const dir = path.join(tmp, `in-use-${name}`);
      fs.cpSync(cacheDir, dir, { recursive: true });
      const c = await loadDeepseekV4Fp16Cache(dir, m, fp, { racyMs: 0 });
      if (!c.ok) throw new Error(c.why);
      try {
        use(c.weights);
        c.weights.unchanged();
        // the same bytes written back in place: the file's ctime changes, whatever its mtime is set back to
        rewriteInPlace(path.join(dir, name));
        expect(() => c.weights.unchanged()).toThrow(new RegExp(`${name.replace(/\./g, '\\.')}.*changed while in use`));
      } finally {
        c.weights.close();
      }
    }
  });

  it('gate --fp16-cache records what it compared in the digest cache, so the next load verifies by stat', async () => {
    const dir = path.join(tmp, 'gate-records');
    fs.cpSync(cacheDir, dir, { recursive: true });
    await new Promise((r) => setTimeout(r, 3100)); // past the racy window: a file changed just now is never recorded
    const saved = process.env.LAYERDIFF_CACHE_DIR;
    const savedKey = process.env.LAYERDIFF_SIGNING_KEY;
    delete process.env.LAYERDIFF_SIGNING_KEY;
    process.env.LAYERDIFF_CACHE_DIR = path.join(tmp, 'gate-records-digests');
    try {
      await writeDeepseekV4Fp16Cache(m, N, dir, fp, undefined, true);
      const entries = (JSON.parse(fs.readFileSync(path.join(tmp, 'gate-records-digests', 'fingerprints.json'), 'utf8')) as { entries: Record<string, { sha256: string; ino: string }> }).entries;
      const man = cached.manifest;
      for (const f of man.files) {
        const abs = fs.realpathSync(path.join(dir, f.name));
        expect(entries[`${abs}\0(whole file)`]?.sha256, f.name).toBe(`blake3:${f.blake3}`);
        expect(entries[`${abs}\0(whole file)`].ino).toBe(String(fs.statSync(abs, { bigint: true }).ino));
      }
      man.experts.forEach((x, L) => {
        const abs = fs.realpathSync(path.join(dir, x.name));
        x.blake3.forEach((d, e) => expect(entries[`${abs}\0layers.${L}.ffn.experts.${e}`]?.sha256).toBe(`blake3:${d}`));
      });
      // each entry is one a load accepts for the file as it is (stat key and, with a key, MAC)
      const vouched = (o: { macKey?: string | null }, dir = path.join(tmp, 'gate-records')) => {
        const parts = new PartDigests({ racyMs: 0, ...o });
        const ok = (name: string, label: string, digest: string) => {
          const fd = fs.openSync(path.join(dir, name), 'r');
          try {
            return parts.vouches(path.join(dir, name), fd, label, digest);
          } finally {
            fs.closeSync(fd);
          }
        };
        return man.files.every((f) => ok(f.name, '(whole file)', `blake3:${f.blake3}`)) && man.experts.every((x, L) => x.blake3.every((d, e) => ok(x.name, `layers.${L}.ffn.experts.${e}`, `blake3:${d}`)));
      };
      expect(vouched({ macKey: null })).toBe(true);
      expect(vouched({ macKey: 'k' })).toBe(false); // recorded without a key: no MAC a keyed load would accept
      const c = await loadDeepseekV4Fp16Cache(dir, m, fp);
      if (!c.ok) throw new Error(c.why);
      c.weights.loadLayer(1).expert(2);
      // an experts file edited in place after its first expert was used: a later expert is refused, not trusted by
      // the entry recorded for the file as it was
      const sf = SafetensorsFile.open(path.join(dir, 'layer.00001.experts.safetensors'));
      const at = sf.get('layers.1.ffn.experts.5.w2.weight')!.begin + 3;
      sf.close();
      flipBits(path.join(dir, 'layer.00001.experts.safetensors'), at);
      expect(() => c.weights.loadLayer(1).expert(5)).toThrow(/layer\.00001\.experts\.safetensors.*changed while in use/);
      c.weights.close();

      // a gate on files written just now records nothing (racy); past the window, with the signing key, it records
      // entries MACed under that key
      process.env.LAYERDIFF_CACHE_DIR = path.join(tmp, 'gate-records-keyed');
      const keyed = path.join(tmp, 'gate-records-2');
      fs.cpSync(cacheDir, keyed, { recursive: true });
      await writeDeepseekV4Fp16Cache(m, N, keyed, fp, undefined, true);
      const db = path.join(tmp, 'gate-records-keyed', 'fingerprints.json');
      const recorded = () => (fs.existsSync(db) ? Object.keys((JSON.parse(fs.readFileSync(db, 'utf8')) as { entries: object }).entries).filter((k) => k.startsWith(fs.realpathSync(keyed))) : []);
      expect(recorded()).toEqual([]);
      await new Promise((r) => setTimeout(r, 3100));
      process.env.LAYERDIFF_SIGNING_KEY = 'k';
      await writeDeepseekV4Fp16Cache(m, N, keyed, fp, undefined, true);
      expect(recorded().length).toBe(man.files.length + man.experts.reduce((n, x) => n + x.blake3.length, 0));
      expect(vouched({ macKey: 'k' }, keyed)).toBe(true);
      expect(vouched({ macKey: 'other' }, keyed)).toBe(false);
    } finally {
      process.env.LAYERDIFF_CACHE_DIR = saved;
      if (savedKey === undefined) delete process.env.LAYERDIFF_SIGNING_KEY;
      else process.env.LAYERDIFF_SIGNING_KEY = savedKey;
    }
  });

  it('gate --fp16-cache vouches only for the bytes it compared: a file replaced after its compare is refused', async () => {
    const dir = path.join(tmp, 'swap-after-compare');
    fs.cpSync(cacheDir, dir, { recursive: true });
    // each file is replaced by an identical copy (another inode) right after it was compared, before it is hashed
    const swap = (name: string) => {
      const f = path.join(dir, name);
      fs.copyFileSync(f, `${f}.tmp`);
      fs.renameSync(`${f}.tmp`, f);
    };
    await expect(writeDeepseekV4Fp16Cache(m, N, dir, fp, swap, true)).rejects.toThrow(/changed after it was compared/);
    // untouched, the same verify passes and gives the manifest's digests
    const again = path.join(tmp, 'verify-untouched');
    fs.cpSync(cacheDir, again, { recursive: true });
    const man = await writeDeepseekV4Fp16Cache(m, N, again, fp, undefined, true);
    expect(man.files).toEqual(cached.manifest.files);
  });
});
