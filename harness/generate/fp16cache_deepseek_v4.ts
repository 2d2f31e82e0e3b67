/**
 * The DeepSeek-V4 FP16 cache (fp16cache.ts): what the device path (device-hip/deepseek_v4.ts) holds after
 * dequantization, under the checkpoint's own tensor names:
 *   - every linear — FP8-block attention and shared experts, MXFP4 routed experts, the BF16 compressor, indexer
 *     and router projections — F16 [out, in], made by LinearCache.dequant, the code the device runs;
 *   - norm weights F16 (what Kit.vec16 makes of them); hc_* mixing parameters, attn_sink, compressor ape and the
 *     gate bias F32 and tid2eid I64, as stored (the device reads them through Kit.f32, or as ids);
 *   - embed.weight and head.weight F16 [vocab, hidden], converted in row chunks as the device converts the rows
 *     it reads.
 * Files: embed.safetensors; per layer layer.L.safetensors (all but the routed experts) and
 * layer.L.experts.safetensors (the routed experts); head.safetensors (head.weight, norm.weight, hc_head_*).
 *
 * Memory: converted one layer at a time and written tensor by tensor (a layer's packed non-expert bytes plus one
 * F16 tensor); routed experts one at a time, read without being kept (DeepseekV4Checkpoint.readExpert). A real
 * layer's routed experts are 256 × 3 × 2048×4096 F16 ≈ 12 GiB: never held.
 *
 * Verification (every digest BLAKE3, harness/io/blake3.ts): head and layer files are vouched for as a whole
 * (fp16cache.ts, at load: a first token reads all of them). The embedding (1 GB at real width, of which a prompt
 * reads a few rows) is vouched for in chunks of EMBED_CHUNK_ROWS rows, each hashed when a row in it is first read
 * (fp16cache.ts ChunkedFile). Hashing the experts files at start-up would read 12 GiB per layer to use 6 experts
 * per token, so the manifest holds one digest per routed expert (its w1, w2, w3 F16 bytes in that order) and an
 * expert is checked when it is first read, which is when it is first routed to (loadLayer's expert(e), as the
 * checkpoint binds it). A corrupt expert is an InputError naming the file and the expert, at that moment. An expert that matched is recorded in
 * the fingerprint cache under its file's stat key (PartDigests), as whole files are, so a later process trusts it
 * while the file is unchanged: at real width a first token's 6 experts a layer are ~290 MB × 43 layers to hash,
 * ~40% of the wide start-up before.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { InputError } from '../errors.js';
import type { DType } from '../formats/dtypes.js';
import type { LinearWeight, StoredTensor } from '../formats/linear.js';
import { type FingerprintOptions, PartDigests } from '../gate/fingerprint.js';
import { hashThreads } from '../gate/hash_workers.js';
import { blake3Parts } from '../io/blake3.js';
import {
  type DeepseekV4Checkpoint, type DeepseekV4Config, type DeepseekV4Expert, type DeepseekV4Head, type DeepseekV4LayerWeights,
  type DeepseekV4Weights, isNormKey, mapLayerTensors,
} from '../models/deepseek_v4.js';
import { forEachRowChunk, readRows } from '../models/rows.js';
import type { DeviceNative } from '../../device-hip/binding.js';
import { LinearCache, storedToF16 } from '../../device-hip/linear.js';
import type { TensorSpec } from '../io/stream_writer.js';
import { type CacheFiles, CacheStore, ChunkedFile, f16Bytes, type Fp16ManifestBase, identityOf, layerFile, MANIFEST, openCache, writeCache, writeTableF16 } from './fp16cache.js';

export interface ExpertsFileDigest {
  name: string;
  size: number;
  /** per routed expert e: BLAKE3 of its w1, w2, w3 F16 bytes, concatenated in that order */
  blake3: string[];
}

export interface DeepseekV4Fp16Manifest extends Fp16ManifestBase {
  architecture: 'deepseek_v4';
  /** per layer, its routed experts' file (verified expert by expert when read) */
  experts: ExpertsFileDigest[];
}

const EMBED = 'embed.safetensors';
const HEAD = 'head.safetensors';
const expertsFile = (L: number) => layerFile(L, '.experts');
const wholeFiles = (layers: number) => [...Array.from({ length: layers }, (_, L) => layerFile(L)), HEAD];
/**
 * Rows per digest of the embedding: 512 KiB at hidden 4096 (2,020 digests for 129,280 rows), so a token's
 * first read hashes 512 KiB (~0.3 ms) and a 16-token prompt at most 16 chunks, where the whole file is 1 GB.
 */
const EMBED_CHUNK_ROWS = 64;

/** A routed expert's label in the digest cache (PartDigests) and its digest there: one spelling for load and gate. */
const expertLabel = (L: number, e: number) => `layers.${L}.ffn.experts.${e}`;
const expertDigest = (hex: string) => `blake3:${hex}`;

/** One tensor of a cache file: its header entry and, when its turn comes, its bytes. */
interface Item {
  spec: TensorSpec;
  bytes: () => Uint8Array;
}

/** A stored (non-linear) tensor as the device keeps it: norms rounded to F16, the rest as stored. */
const storedItem = (N: DeviceNative, key: string, t: StoredTensor): Item =>
  isNormKey(key)
    ? { spec: { name: t.name, dtype: 'F16', shape: t.shape }, bytes: () => f16Bytes(storedToF16(N, t)) }
    : { spec: { name: t.name, dtype: t.dtype, shape: t.shape }, bytes: () => t.bytes };

const linearItem = (linears: LinearCache, lw: LinearWeight): Item => ({
  spec: { name: lw.name, dtype: 'F16', shape: [lw.out, lw.in] },
  bytes: () => f16Bytes(linears.dequant(lw, null)),
});

function writeItems(files: CacheFiles, file: string, items: Item[]): void {
  files.stream(file, items.map((i) => i.spec), (w) => {
    for (const i of items) w.write(i.spec.name, i.bytes());
  });
}

/** A [vocab, hidden] table converted chunk by chunk (never held whole). */
const writeTable = (N: DeviceNative, m: DeepseekV4Checkpoint, name: string, w: { write(name: string, b: Uint8Array): void }) => writeTableF16(N, m.ck, name, m.cfg.vocab, m.cfg.hidden, w);

export async function writeDeepseekV4Fp16Cache(m: DeepseekV4Checkpoint, N: DeviceNative, dir: string, fingerprint: string, onFile?: (name: string) => void, verify = false): Promise<DeepseekV4Fp16Manifest> {
  // Every tensor is checked against the config before a byte is written: bad input leaves nothing behind.
  m.conformance();
  const c = m.cfg;
  const table = (name: string): TensorSpec => ({ name, dtype: 'F16', shape: [c.vocab, c.hidden] });
  const linears = new LinearCache(N);
  const target = { dir, architecture: 'deepseek_v4' as const, numLayers: c.layers, fingerprint, checkpointDir: m.ck.dir, onFile, verify };
  return writeCache<DeepseekV4Fp16Manifest>(target, (files) => {
    files.stream(EMBED, [table(m.embedName)], (w) => writeTable(N, m, m.embedName, w));
    const experts: ExpertsFileDigest[] = [];
    for (let L = 0; L < c.layers; L++) {
      const items: Item[] = [];
      mapLayerTensors(m.loadLayer(L), {
        linear: (_k, lw) => (items.push(linearItem(linears, lw)), lw),
        stored: (k, t) => (items.push(storedItem(N, k, t)), t),
      });
      writeItems(files, layerFile(L), items);
      experts.push(writeExperts(files, m, linears, L));
    }
    const head = Object.entries(m.head()).map(([k, t]) => storedItem(N, k, t));
    files.stream(HEAD, [table(m.headName), ...head.map((i) => i.spec)], (w) => {
      writeTable(N, m, m.headName, w);
      for (const i of head) w.write(i.spec.name, i.bytes());
    });
    const parts = experts.flatMap((x, L) => x.blake3.map((d, e) => ({ file: x.name, label: expertLabel(L, e), digest: expertDigest(d) })));
    return { verified: wholeFiles(c.layers), chunked: [{ name: EMBED, chunkBytes: EMBED_CHUNK_ROWS * c.hidden * 2 }], parts, extra: { experts } };
  });
}

/** Layer L's routed experts, one at a time: read, dequantized, written and hashed, then dropped. */
function writeExperts(files: CacheFiles, m: DeepseekV4Checkpoint, linears: LinearCache, L: number): ExpertsFileDigest {
  const { experts: E, hidden: D, moeInter: I } = m.cfg;
  const specs: TensorSpec[] = [];
  for (let e = 0; e < E; e++) {
    const p = `layers.${L}.ffn.experts.${e}`;
    specs.push({ name: `${p}.w1.weight`, dtype: 'F16', shape: [I, D] }, { name: `${p}.w2.weight`, dtype: 'F16', shape: [D, I] }, { name: `${p}.w3.weight`, dtype: 'F16', shape: [I, D] });
  }
  const blake3: string[] = [];
  const file = expertsFile(L);
  const threads = hashThreads(Number.POSITIVE_INFINITY);
  files.stream(file, specs, (w) => {
    for (let e = 0; e < E; e++) {
      const ex = m.readExpert(L, e);
      const bytes = [ex.w1, ex.w2, ex.w3].map((lw) => {
        const b = f16Bytes(linears.dequant(lw, null));
        w.write(lw.name, b);
        return b;
      });
      blake3.push(blake3Parts([bytes], threads)[0]);
    }
  });
  return { name: file, size: fs.statSync(files.path(file)).size, blake3 };
}

export type DeepseekV4Fp16CacheLoad = { ok: true; weights: DeepseekV4Fp16Weights } | { ok: false; why: string };

/** Open the cache for `m` (stale → ok: false; corrupt → InputError). Layers and experts are read later, on use. */
export async function loadDeepseekV4Fp16Cache(dir: string, m: DeepseekV4Checkpoint, fingerprint: string, fpOptions: FingerprintOptions = {}, listDigest?: string | null): Promise<DeepseekV4Fp16CacheLoad> {
  const { layers, experts: E } = m.cfg;
  const want = { architecture: 'deepseek_v4' as const, numLayers: layers, fingerprint, files: wholeFiles(layers), chunked: [EMBED], checkpointDir: m.ck.dir, listDigest };
  const c = await openCache<DeepseekV4Fp16Manifest>(dir, want, fpOptions);
  if (!c.ok) return c;
  const man = c.manifest;
  const mf = path.join(dir, MANIFEST);
  if (!Array.isArray(man.experts) || man.experts.length !== layers) throw new InputError(`lists ${Array.isArray(man.experts) ? man.experts.length : 'no'} experts files, the checkpoint has ${layers} layers`, { file: mf });
  man.experts.forEach((x, L) => {
    if (x?.name !== expertsFile(L) || !Array.isArray(x.blake3) || x.blake3.length !== E) throw new InputError(`experts entry ${L} is not ${expertsFile(L)} with ${E} expert digests`, { file: mf });
    const f = path.join(dir, x.name);
    const st = fs.lstatSync(f, { throwIfNoEntry: false });
    if (st === undefined) throw new InputError('is missing (the FP16 cache manifest lists it); rerun layerdiff convert', { file: f });
    if (!st.isFile()) throw new InputError(`is ${st.isSymbolicLink() ? 'a symbolic link' : 'not a regular file'}; rerun layerdiff convert`, { file: f });
    const size = st.size;
    if (size !== x.size) throw new InputError(`has ${size} bytes, the FP16 cache manifest says ${x.size} (truncated or edited); rerun layerdiff convert`, { file: f });
  });
  return { ok: true, weights: new DeepseekV4Fp16Weights(m, new CacheStore(dir, c.pinned), man, { protect: m.ck.dir, ...fpOptions }) };
}

/** The device path's weights read from the cache: bound like the checkpoint's (same fields, same names), all F16/F32/I64. */
export class DeepseekV4Fp16Weights implements DeepseekV4Weights {
  readonly cfg: DeepseekV4Config;
  /** routed experts (`L.e`) whose bytes matched their digest: checked once, then trusted when read again */
  private readonly verified = new Set<string>();
  /** each experts file's identity (identityOf) when its first expert was bound: it must not change while in use */
  private readonly identities = new Map<string, string>();
  /** routed experts an earlier process checked, trusted while their experts file is unchanged */
  private parts: PartDigests | null = null;
  /** the embedding's reads, each chunk checked against its digest when first read */
  readonly embedChunks: ChunkedFile;
  /**
   * Keep a layer's routed experts on the layer object once read (the default, for checkpoints whose cache
   * fits in memory). Set false when layers are not kept: one prefill pass can route to every expert of a
   * layer, and all 256 F16 experts of a real-width layer are 12 GiB — each is then dropped after its use.
   */
  keepExperts = true;
  /** threads a group of routed experts is hashed on (FingerprintOptions.hashThreads; default one per core) */
  private readonly threads: number;

  constructor(
    private readonly m: DeepseekV4Checkpoint,
    private readonly store: CacheStore,
    readonly manifest: DeepseekV4Fp16Manifest,
    private readonly fpOptions: FingerprintOptions = {},
  ) {
    this.cfg = m.cfg;
    this.threads = hashThreads(Number.POSITIVE_INFINITY, fpOptions.hashThreads);
    this.embedChunks = new ChunkedFile(path.join(store.dir, EMBED), manifest.chunked.find((c) => c.name === EMBED)!, m.embedName, store.pinned);
  }

  /** Layer L from its cache file; routed experts are read from the experts file when first asked for. */
  loadLayer(L: number): DeepseekV4LayerWeights {
    const file = layerFile(L);
    // The checkpoint's binding without bytes names every field and its shape; the bytes come from the cache.
    const skeleton = this.m.loadLayer(L, false);
    const w = mapLayerTensors(skeleton, {
      linear: (_k, lw) => this.linear(file, lw),
      stored: (k, t) => this.stored(file, k, t),
    });
    const cache = new Map<number, DeepseekV4Expert>();
    const loaded = new Set<number>();
    // experts verified side by side with one asked for, kept until asked for (at most threads − 1 of them)
    const ahead = new Map<number, DeepseekV4Expert>();
    let upcoming: readonly number[] = [];
    return {
      ...w,
      expert: (e: number) => {
        let ex = cache.get(e) ?? ahead.get(e);
        if (ex === undefined) {
          // e and the next experts announced after it that this process has not verified yet, checked together
          const at = upcoming.indexOf(e);
          const next = at < 0 ? [] : upcoming.slice(at + 1).filter((x) => !cache.has(x) && !ahead.has(x) && !this.verified.has(`${L}.${x}`));
          const group = [e, ...next.slice(0, this.threads - 1)];
          const got = this.experts(L, group, group.map((x) => skeleton.expert(x)));
          ex = got[0];
          group.forEach((x, i) => i > 0 && ahead.set(x, got[i]));
        }
        ahead.delete(e);
        loaded.add(e);
        if (this.keepExperts) cache.set(e, ex);
        return ex;
      },
      expertsAhead: (es: readonly number[]) => {
        upcoming = [...es];
      },
      expertsLoaded: () => [...loaded].sort((a, b) => a - b),
    };
  }

  head(): DeepseekV4Head {
    const h = this.m.head(false);
    return Object.fromEntries(Object.entries(h).map(([k, t]) => [k, this.stored(HEAD, k, t)])) as unknown as DeepseekV4Head;
  }

  embedRows(tokens: number[]): StoredTensor {
    const { vocab: V, hidden: D } = this.cfg;
    return readRows(this.store.rows(EMBED, this.m.embedName, [V, D], this.embedChunks), this.m.embedName, V, D, tokens);
  }

  forEachHeadChunk(rowsPerChunk: number, fn: (rowStart: number, chunk: StoredTensor) => void): void {
    const { vocab: V, hidden: D } = this.cfg;
    forEachRowChunk(this.store.rows(HEAD, this.m.headName, [V, D]), this.m.headName, V, D, rowsPerChunk, fn);
  }

  hashExperts(w: DeepseekV4LayerWeights, token: number): number[] {
    return this.m.hashExperts(w, token);
  }

  /** Bytes of every cache file (the caller decides from it whether layers can stay in memory). */
  totalBytes(): number {
    return [...this.manifest.files, ...this.manifest.chunked, ...this.manifest.experts].reduce((s, f) => s + f.size, 0);
  }

  /** The cache files read so far are still the ones verified (CacheStore.unchanged). */
  unchanged(): void {
    this.store.unchanged();
  }

  close(): void {
    this.parts?.flush();
    this.parts = null;
    this.embedChunks.close();
    this.store.close();
  }

  private stored(file: string, key: string, t: StoredTensor): StoredTensor {
    const dtype: DType = isNormKey(key) ? 'F16' : t.dtype;
    return this.store.stored(file, t.name, dtype, t.shape);
  }

  private linear(file: string, lw: LinearWeight): LinearWeight {
    const weight = this.store.stored(file, lw.name, 'F16', [lw.out, lw.in]);
    return { name: lw.name, format: 'plain', out: lw.out, in: lw.in, weight, scale: null, block: [1, 1] };
  }

  /**
   * Routed experts `es` of layer L bound to their cache bytes, each verified on its first use in this process:
   * trusted if an earlier process checked it in this file as it is now (the whole files' stat-keyed trust), else
   * hashed where it is mapped (~50 MB at real width; the bytes hashed are the bytes used) on the hashing threads,
   * and, matching, recorded for the next process (as `blake3:<hex>`, never mistaken for another digest kind).
   */
  private experts(L: number, es: readonly number[], skeletons: readonly DeepseekV4Expert[]): DeepseekV4Expert[] {
    const x = this.manifest.experts[L];
    const [file, fd] = [path.join(this.store.dir, x.name), this.store.descriptor(x.name)];
    // An expert verified (or trusted by stat) earlier is mapped again when layers are not kept, and a digest-cache
    // entry vouches for the file as it was when first named: both hold only while the file is the same as then.
    const id = identityOf(fd);
    if ((this.identities.get(x.name) ?? id) !== id) throw new InputError('changed while in use (edited in place?); run again once nothing writes to the cache', { file });
    this.identities.set(x.name, id);
    const bound = skeletons.map((sk) => ({ w1: this.linear(x.name, sk.w1), w2: this.linear(x.name, sk.w2), w3: this.linear(x.name, sk.w3) }));
    const parts = (this.parts ??= new PartDigests(this.fpOptions));
    const tensor = (e: number) => expertLabel(L, e);
    const digest = (e: number) => expertDigest(x.blake3[e]);
    const toHash = es.map((e, i) => i).filter((i) => !this.verified.has(`${L}.${es[i]}`) && !parts.vouches(file, fd, tensor(es[i]), digest(es[i])));
    const got = blake3Parts(toHash.map((i) => [bound[i].w1.weight.bytes, bound[i].w2.weight.bytes, bound[i].w3.weight.bytes]), this.threads);
    toHash.forEach((i, j) => {
      if (got[j] !== x.blake3[es[i]]) {
        throw new InputError(`routed expert ${es[i]} does not match its digest in the FP16 cache manifest (corrupted or edited); rerun layerdiff convert`, { file, tensor: tensor(es[i]) });
      }
      parts.record(file, fd, tensor(es[i]), digest(es[i]));
    });
    for (const e of es) this.verified.add(`${L}.${e}`);
    return bound;
  }
}
