/**
 * The FP16 weight cache of the optimized path (`layerdiff convert <model> --fp16-cache DIR`): the device
 * path's pre-dequantized weights as safetensors tensors named like the checkpoint's weights, plus
 * manifest.json binding them to the checkpoint's full fingerprint and to each file's BLAKE3 (harness/io/blake3.ts:
 * a cryptographic hash that runs on every core at SIMD width, where SHA-256 is one serial stream per file: a
 * first load took 2.4–2.8 s with it, against 0.7 s once the digests are recorded). This file holds what every
 * architecture shares; the layouts are fp16cache_llama.ts, fp16cache_gpt_oss.ts and fp16cache_deepseek_v4.ts.
 *
 * Writing (writeCache): into a staging folder next to the target, swapped in only when complete, so a failed
 * or interrupted convert leaves the previous cache intact and no partial output; a non-empty folder that is
 * not a cache of this checkpoint is refused.
 *
 * Loading (openCache): a cache whose manifest names another checkpoint fingerprint (or tool version) is stale
 * and is not used (the caller dequantizes at load instead, with a note); a cache whose files do not match the
 * manifest's digests, or lack a tensor, is corrupt: an InputError naming the file. A file that matched is
 * recorded in the stat-keyed cache checkpoint fingerprints use (PartDigests), so after the first load verifying
 * costs a few stats.
 * A file of which a run reads only a few rows (DeepSeek-V4's 1 GB embedding, for a prompt's tokens) is vouched
 * for chunk by chunk instead (ChunkedFileDigest): its header at the first read, each chunk when a read first
 * touches it, so a load never hashes what it does not use. A manifest of the earlier layout (schema /1, every
 * such file whole) or of SHA-256 digests (schema /2) is stale: the caller dequantizes at load and says to rerun
 * convert.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { InputError } from '../errors.js';
import type { DType } from '../formats/dtypes.js';
import type { StoredTensor } from '../formats/linear.js';
import { type FingerprintOptions, PartDigests, WHOLE_FILE } from '../gate/fingerprint.js';
import { hashThreads } from '../gate/hash_workers.js';
import { blake3File, blake3Parts } from '../io/blake3.js';
import { dropFolderFromPageCache, readIn } from '../io/prefetch.js';
import { createHash } from 'node:crypto';
import { canonicalJson } from '../gate/record.js';
import { encodeSafetensors, type SafetensorsFile, SafetensorsFolder, type TensorInfo, type TensorToWrite, writeSafetensors } from '../io/safetensors.js';
import { makeDirs, outputError, partialName, partialPid, realish, removePartials, syncEntries, syncFolder, writeFileAtomic } from '../io/writer.js';
import { forEachRowChunk, type RowSource } from '../models/rows.js';
import { identityOf, utf8Text } from '../io/regular.js';
import { toolVersion } from '../version.js';
import { safetensorsLayout, SafetensorsStreamWriter, type TensorSpec } from '../io/stream_writer.js';
import type { DeviceNative } from '../../device-hip/binding.js';
import { storedToF16 } from '../../device-hip/linear.js';

export const FP16_CACHE_SCHEMA = 'layerdiff.fp16-cache/3';
/** earlier layouts (/1: no chunked files; /2: SHA-256 digests): treated as stale, and replaceable by convert */
const OLDER_SCHEMAS = new Set(['layerdiff.fp16-cache/1', 'layerdiff.fp16-cache/2']);
export const MANIFEST = 'manifest.json';

/** the registry entry's name (harness/arch/): the layout a cache was written in */
export type Fp16Architecture = string;

export interface Fp16ManifestBase {
  schema: typeof FP16_CACHE_SCHEMA;
  tool: { name: 'layerdiff'; version: string };
  architecture: Fp16Architecture;
  checkpoint: { path: string; fingerprint: string };
  num_layers: number;
  /** the files verified as a whole at load */
  files: CacheFileDigest[];
  /** the files verified chunk by chunk as they are read (ChunkedFile) */
  chunked: ChunkedFileDigest[];
  created: string;
}

/** A cache file vouched for as a whole: its size and the BLAKE3 of all its bytes (hex). */
export interface CacheFileDigest {
  name: string;
  size: number;
  blake3: string;
}

/**
 * A cache file vouched for piece by piece: chunk 0 is its safetensors header (the 8-byte length and the JSON),
 * then its data in `chunk_bytes` pieces (the last one shorter), so the digests cover every byte of the file.
 */
export interface ChunkedFileDigest {
  name: string;
  size: number;
  header_bytes: number;
  chunk_bytes: number;
  /** BLAKE3 of the header, then of each data chunk in file order */
  blake3: string[];
}

export const layerFile = (L: number, part = '') => `layer.${String(L).padStart(5, '0')}${part}.safetensors`;

export const f16Bytes = (a: Uint16Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
export const f16Tensor = (name: string, shape: number[], data: Uint16Array): TensorToWrite => ({ name, dtype: 'F16', shape, data: f16Bytes(data) });

/** Rows per chunk of an embedding/head conversion: 4096 × 4096 F16 = 32 MiB at real width. */
const TABLE_ROWS = 4096;

/** A checkpoint's [vocab, hidden] table (embedding, head) converted to F16 chunk by chunk into `w`: never held whole. */
export function writeTableF16(N: DeviceNative, ck: RowSource, name: string, vocab: number, hidden: number, w: { write(name: string, b: Uint8Array): void }): void {
  forEachRowChunk(ck, name, vocab, hidden, TABLE_ROWS, (_r0, chunk) => w.write(name, f16Bytes(storedToF16(N, chunk))));
}

/** A note for stderr when a cache is not used (stale or unfinished): what happens instead and how to refresh it. */
export function staleCacheNote(cacheDir: string, model: string, why: string): string {
  return `layerdiff: note: not using the FP16 cache ${cacheDir}: ${why}; dequantizing at load (rerun layerdiff convert ${model} --fp16-cache ${cacheDir})\n`;
}

// ---- writing -----------------------------------------------------------------------------------------

export interface CacheTarget {
  dir: string;
  architecture: Fp16Architecture;
  numLayers: number;
  fingerprint: string;
  /** the checkpoint folder (named in the manifest; the digest cache never goes inside it) */
  checkpointDir: string;
  /** called as each file is complete */
  onFile?: (name: string) => void;
  /**
   * `gate --fp16-cache DIR`: write nothing; re-derive every byte of the cache in `dir` and compare it with
   * what is there (CacheFiles in verify mode), so the record can vouch for the cache (verifyExistingCache)
   */
  verify?: boolean;
}

/** The files of one conversion: each appears complete (temp file, then rename) and is remembered for cleanup. */
export class CacheFiles {
  readonly written: string[] = [];
  readonly meta: Record<string, string>;
  /** verify mode: each compared file's identity (identityOf) as it was compared, so its digests are of those bytes */
  readonly compared: Pinned = new Map();
  /** verify mode: when each file's compare began (Date.now()), what the digest cache's racy rule judges it by */
  readonly comparedAt = new Map<string, number>();

  constructor(private readonly t: CacheTarget) {
    this.meta = { format: 'pt', generator: 'layerdiff convert', checkpoint_fingerprint: t.fingerprint };
  }

  path(file: string): string {
    return path.join(this.t.dir, file);
  }

  /** A file of tensors held in memory. */
  put(file: string, tensors: TensorToWrite[]): void {
    if (this.t.verify === true) {
      const v = new CacheFileCheck(this.path(file));
      try {
        v.expect(encodeSafetensors(tensors, this.meta), 'the header and tensors');
        this.compared.set(file, v.end());
        this.comparedAt.set(file, v.startedAt);
      } finally {
        v.close();
      }
    } else writeSafetensors(this.path(file), tensors, this.meta);
    this.done(file);
  }

  /** A file whose tensors `body` writes one after another, in `specs` order, in chunks (memory: one chunk). */
  stream(file: string, specs: TensorSpec[], body: (w: Pick<SafetensorsStreamWriter, 'write'>) => void): void {
    if (this.t.verify === true) {
      const v = new CacheFileCheck(this.path(file));
      try {
        v.expect(safetensorsLayout(specs, this.meta).header, 'the safetensors header');
        body({ write: (name, chunk) => v.expect(chunk, name) });
        this.compared.set(file, v.end());
        this.comparedAt.set(file, v.startedAt);
      } finally {
        v.close();
      }
      this.done(file);
      return;
    }
    const w = SafetensorsStreamWriter.create(this.path(file), specs, this.meta);
    try {
      body(w);
      w.close();
    } catch (e) {
      w.abort();
      throw e;
    }
    this.done(file);
  }

  private done(file: string): void {
    this.written.push(file);
    this.t.onFile?.(file);
  }
}

/**
 * One cache file compared, in order, with the bytes a conversion would write there: the first difference
 * (or a length mismatch) is an InputError naming the file and the tensor whose bytes differ.
 */
class CacheFileCheck {
  private readonly fd: number;
  private readonly identity: string;
  readonly startedAt = Date.now();
  private at = 0;

  constructor(private readonly file: string) {
    this.fd = openCacheFile(file);
    try {
      this.identity = identityOf(this.fd);
    } catch (e) {
      fs.closeSync(this.fd);
      throw e;
    }
  }

  expect(bytes: Uint8Array, what: string): void {
    const got = Buffer.alloc(bytes.byteLength);
    const n = bytes.byteLength === 0 ? 0 : fs.readSync(this.fd, got, 0, got.length, this.at);
    if (n !== bytes.byteLength || !got.equals(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength))) {
      throw new InputError(`differs from what the checkpoint converts to (in ${what}, from byte ${this.at}): the cache is not the device path's dequantization of this checkpoint (edited or corrupted); rerun layerdiff convert`, { file: this.file });
    }
    this.at += n;
  }

  /** The file ends where the conversion does and did not change while compared: its identity then. */
  end(): string {
    const size = fs.fstatSync(this.fd).size;
    if (size !== this.at) throw new InputError(`is ${size} bytes where the conversion gives ${this.at} (edited or corrupted); rerun layerdiff convert`, { file: this.file });
    if (identityOf(this.fd) !== this.identity) throw new InputError('changed while it was being compared; run again once nothing writes to the cache', { file: this.file });
    return this.identity;
  }

  close(): void {
    fs.closeSync(this.fd);
  }
}

/**
 * Which file a descriptor reads, as it is now: device, inode, size, mtime and ctime. Verification pins each file it
 * vouches for by this, and the file later mapped must have it, so a file swapped (or edited) between the check and
 * the use is refused rather than used unverified.
 */
export type Pinned = Map<string, string>;
export { identityOf };

/** openRegularForRead, its failure an InputError naming the file. */
function openCacheFile(file: string): number {
  try {
    return openRegularForRead(file);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const why = code === 'ELOOP' ? 'it is a symbolic link' : code === 'ENOENT' ? 'it is missing' : (code ?? (e as Error).message);
    throw new InputError(`cannot be read as part of the FP16 cache (${why}); rerun layerdiff convert`, { file });
  }
}

/** Open a regular file for reading (O_NOFOLLOW: never a symlink, FIFO or device). */
function openRegularForRead(file: string): number {
  const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  if (!fs.fstatSync(fd).isFile()) {
    fs.closeSync(fd);
    throw new Error('not a regular file');
  }
  return fd;
}

/**
 * The text of DIR's manifest, or null where there is none: read through one descriptor opened without following a
 * symlink and without blocking (a FIFO named manifest.json would hang a plain read, and serve each reader other
 * text), and only from a regular file.
 */
export function readManifestText(dir: string): string | null {
  const mf = path.join(dir, MANIFEST);
  let fd: number;
  try {
    fd = openRegularForRead(mf);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    // a directory opens read-only and then fails the regular-file test, as a FIFO or a device does
    const why = code === 'ELOOP' ? 'a symbolic link' : code === undefined ? 'not a regular file' : code;
    throw new InputError(`cannot be read as the FP16 cache's manifest (${why}); rerun layerdiff convert`, { file: mf });
  }
  try {
    return utf8Text(fs.readFileSync(fd), { file: mf });
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * The digest of a cache's file list as its manifest gives it (every file: name, size, BLAKE3; DeepSeek-V4's
 * chunked files with their per-chunk digests, DeepSeek-V4's experts files with their per-expert digests): what
 * an acceptance record binds (`fp16_cache.files_digest`, a SHA-256 of the list: records keep one digest kind).
 * Since every file is verified against the manifest when read, a cache whose list digest is the record's
 * holds exactly the bytes the gate compared.
 */
export function cacheListDigest(man: Fp16ManifestBase & { experts?: unknown[] }, file: string): string {
  const list = (x: unknown, what: string): unknown[] => {
    if (x === undefined && what !== 'files') return [];
    if (!Array.isArray(x)) throw new InputError(`its "${what}" entry is not a list (edited manifest?); rerun layerdiff convert`, { file });
    return x;
  };
  const entries = [...list(man.files, 'files').map((f) => ['file', f]), ...list(man.chunked, 'chunked').map((f) => ['chunked', f]), ...list(man.experts, 'experts').map((f) => ['experts', f])].map((e) => canonicalJson(e));
  return `sha256:${createHash('sha256').update(entries.sort().join('\n')).digest('hex')}`;
}

/**
 * `gate --fp16-cache DIR`: the cache in t.dir re-derived from the checkpoint by the architecture's own
 * converter (`body`, in verify mode: nothing written) and compared byte for byte, then its manifest checked
 * to list exactly those files with their digests. Returns the manifest; any difference is an InputError.
 */
async function verifyExistingCache<M extends Fp16ManifestBase>(t: CacheTarget, body: Parameters<typeof writeCache<M>>[1]): Promise<M> {
  const mf = path.join(t.dir, MANIFEST);
  let man: M;
  try {
    man = JSON.parse(readManifestText(t.dir) ?? '') as M;
  } catch {
    throw new InputError(`--fp16-cache: no readable ${MANIFEST} (write the cache with layerdiff convert first)`, { file: mf });
  }
  if (OLDER_SCHEMAS.has(String(man?.schema))) throw new InputError(`the FP16 cache is in an earlier layout (${String(man.schema)}); rerun layerdiff convert`, { file: mf });
  if (man?.schema !== FP16_CACHE_SCHEMA || !Array.isArray(man.files)) throw new InputError(`not a ${FP16_CACHE_SCHEMA} manifest`, { file: mf });
  if (man.checkpoint?.fingerprint !== t.fingerprint) throw new InputError('the FP16 cache was converted from another checkpoint (its manifest names another fingerprint); rerun layerdiff convert', { file: mf });
  if (man.tool?.version !== toolVersion()) throw new InputError(`the FP16 cache was written by layerdiff ${String(man.tool?.version)}, this is ${toolVersion()}; rerun layerdiff convert`, { file: mf });
  const files = new CacheFiles(t);
  const { verified, chunked, parts, extra } = await body(files);
  // the files were just compared byte for byte with the conversion, so their digests are the conversion's
  const want = { architecture: t.architecture, num_layers: t.numLayers, files: wholeDigests(t.dir, verified, files.compared), chunked: chunkDigests(t.dir, chunked, files.compared), ...extra };
  for (const [k, v] of Object.entries(want)) {
    if (canonicalJson(v) !== canonicalJson((man as Record<string, unknown>)[k])) throw new InputError(`its ${k} is not what the checkpoint converts to (edited manifest?); rerun layerdiff convert`, { file: mf });
  }
  recordCompared(t, files, want.files, parts ?? []);
  return man;
}

/**
 * After `gate --fp16-cache`: the files it compared byte for byte with the conversion go into the stat-keyed digest
 * cache with their digests (PartDigests: MACed with the signing key when there is one, not for a file changed too
 * recently), as a load records what it verified, whole files and DeepSeek-V4's routed experts alike. So the first
 * `generate` after the gate verifies them by stat instead of hashing again the 3.4 GB (wide fixture) it uses. A file
 * that is no longer the one compared is not recorded, and is then hashed at load as always.
 */
function recordCompared(t: CacheTarget, files: CacheFiles, whole: readonly CacheFileDigest[], parts: NonNullable<CacheBody<Fp16ManifestBase>['parts']>): void {
  const fds = new Map<string, number>();
  const fdOf = (name: string): number => {
    let fd = fds.get(name);
    if (fd === undefined) fds.set(name, (fd = openCacheFile(path.join(t.dir, name))));
    return fd;
  };
  try {
    const trusted = new PartDigests({ protect: t.checkpointDir });
    // recorded first (which takes the file's stat key), then checked to be the file compared: a ctime only moves
    // forward, so a file that is the compared one now was the compared one when its key was taken
    const named = new Set<string>();
    const record = (name: string, label: string, digest: string) => {
      trusted.record(path.join(t.dir, name), fdOf(name), label, digest, files.comparedAt.get(name));
      named.add(name);
    };
    for (const f of whole) record(f.name, WHOLE_FILE, `blake3:${f.blake3}`);
    for (const p of parts) record(p.file, p.label, p.digest);
    for (const name of named) if (files.compared.get(name) !== identityOf(fdOf(name))) return; // changed since: nothing recorded
    trusted.flush();
  } catch (e) {
    // the gate's verdict stands; only the shortcut for the next load is lost
    process.stderr.write(`layerdiff: note: could not record the FP16 cache's digests for the next load: ${(e as Error).message}\n`);
  } finally {
    for (const fd of fds.values()) fs.closeSync(fd);
  }
}

/**
 * What may be replaced: nothing, an empty folder, or a cache of this same checkpoint (its manifest names this
 * checkpoint's folder or fingerprint) holding nothing but the files its manifest lists. Anything else is a
 * user's folder and is refused, so a convert never deletes or mixes into it.
 */
function assertReplaceableCache(t: CacheTarget): void {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(t.dir);
  } catch {
    return;
  }
  if (!st.isDirectory()) throw new InputError(`--fp16-cache names ${st.isSymbolicLink() ? 'a symbolic link' : 'something that is not a folder'}; give a folder`, { file: t.dir });
  const names = fs.readdirSync(t.dir).filter((n) => partialPid(n) === null);
  if (names.length === 0) return;
  let man: Partial<Fp16ManifestBase> & { experts?: unknown };
  try {
    man = JSON.parse(readManifestText(t.dir) ?? '') as typeof man;
  } catch {
    throw new InputError(`--fp16-cache: the folder is not empty and holds no readable ${MANIFEST} of layerdiff convert; give a new or empty folder`, { file: t.dir });
  }
  const sameCheckpoint = man?.checkpoint?.fingerprint === t.fingerprint || (typeof man?.checkpoint?.path === 'string' && realish(man.checkpoint.path) === realish(t.checkpointDir));
  if ((man?.schema !== FP16_CACHE_SCHEMA && !OLDER_SCHEMAS.has(String(man?.schema))) || !sameCheckpoint) {
    throw new InputError(`--fp16-cache: the folder is not empty and is not an FP16 cache of this checkpoint (${man?.schema === FP16_CACHE_SCHEMA ? `it caches ${String(man.checkpoint?.path)}` : `${MANIFEST} is not a ${FP16_CACHE_SCHEMA} manifest`}); give a new or empty folder`, { file: t.dir });
  }
  const listed = [man.files, man.chunked, man.experts].flatMap((l) => (Array.isArray(l) ? (l as Array<{ name?: unknown }>) : []));
  const known = new Set([MANIFEST, ...listed.map((f) => String(f?.name))]);
  const foreign = names.filter((n) => !known.has(n));
  if (foreign.length > 0) throw new InputError(`--fp16-cache: the folder holds files the cache's manifest does not list (${foreign.slice(0, 3).join(', ')}${foreign.length > 3 ? ', …' : ''}); give a new or empty folder`, { file: t.dir });
}

/** What a conversion's body returns: the files vouched for whole, those vouched for chunk by chunk, the rest of the manifest. */
export interface CacheBody<M extends Fp16ManifestBase> {
  verified: string[];
  chunked?: ChunkedSpec[];
  /** parts of files a load verifies one by one (DeepSeek-V4's routed experts): their digest-cache labels and digests */
  parts?: Array<{ file: string; label: string; digest: string }>;
  extra: Omit<M, keyof Fp16ManifestBase>;
}

/** A file to vouch for chunk by chunk, and its chunk size (a whole number of table rows, so a row read hashes one or two). */
export interface ChunkedSpec {
  name: string;
  chunkBytes: number;
}

/**
 * Convert into t.dir: `body` writes the files into a staging folder next to it and returns the manifest's
 * architecture-specific fields and which files the manifest vouches for as a whole or chunk by chunk (digests
 * taken here, after writing). Only a complete cache replaces the previous one (two renames), so a failed or
 * killed convert leaves the previous cache exactly as it was.
 */
export async function writeCache<M extends Fp16ManifestBase>(t: CacheTarget, body: (files: CacheFiles) => Promise<CacheBody<M>> | CacheBody<M>): Promise<M> {
  if (t.verify === true) return verifyExistingCache(t, body);
  assertReplaceableCache(t);
  const target = path.resolve(t.dir);
  const parent = path.dirname(target);
  // the outermost folder this convert creates: removed whole on failure (with any parents it had to make)
  let made: string | null = null;
  for (let d = parent; !fs.existsSync(d); d = path.dirname(d)) made = d;
  makeDirs(parent);
  removePartials(parent); // a killed convert's staging folder (its process is gone)
  const staging = partialName(target, '');
  fs.mkdirSync(staging);
  const files = new CacheFiles({ ...t, dir: staging });
  try {
    const { verified, chunked, extra } = await body(files);
    const manifest = {
      schema: FP16_CACHE_SCHEMA,
      tool: { name: 'layerdiff', version: toolVersion() },
      architecture: t.architecture,
      checkpoint: { path: path.resolve(t.checkpointDir), fingerprint: t.fingerprint },
      num_layers: t.numLayers,
      files: wholeDigests(staging, verified),
      chunked: chunkDigests(staging, chunked),
      ...extra,
      created: new Date().toISOString(),
    } as M;
    writeFileAtomic(path.join(staging, MANIFEST), JSON.stringify(manifest, null, 2) + '\n');
    syncFolder(staging); // on the disk before it replaces anything (syncFolder says why)
    // The cache's files, on the disk now, leave the page cache, so that the first run to use them reads them back in
    // 2 MiB folios (their mappings are advised MADV_HUGEPAGE: harness/io/map.ts), which every later run maps by PMD
    // entries. What the convert's own writes leave there is in the folios the kernel could allocate as it wrote: the
    // wide DeepSeek-V4 cache, written with the page cache full, kept 29–64 % of two layer files in smaller ones, mapped a
    // 4 KiB page at a time, and a start-up from it took ~330 ms against ~200 ms from the same files in 2 MiB folios
    // (round 41). A run from a cache larger than the memory reads it from the disk anyway. Advice only: a file the
    // kernel keeps is read as it is.
    dropFolderFromPageCache(staging);
    // Swap: the previous cache steps aside (still whole) until the new one is in place, then goes.
    const old = fs.existsSync(target) ? partialName(target, '.old') : null;
    if (old !== null) fs.renameSync(target, old);
    try {
      fs.renameSync(staging, target);
    } catch (e) {
      if (old !== null) fs.renameSync(old, target);
      throw outputError(e, target);
    }
    made = null; // the new cache is in place: a failure below (the folder's sync) must not remove the folders holding it
    syncEntries(parent); // the swap itself
    if (old !== null) fs.rmSync(old, { recursive: true, force: true });
    return manifest;
  } catch (e) {
    fs.rmSync(staging, { recursive: true, force: true });
    if (made !== null) fs.rmSync(made, { recursive: true, force: true });
    throw e;
  }
}

// ---- loading -----------------------------------------------------------------------------------------

/** ok: the manifest, and the identity of every file it vouched for as a whole (for CacheStore to hold them to). */
export type CacheOpen<M> = { ok: true; manifest: M; pinned: Pinned } | { ok: false; why: string };

export interface CacheExpectation {
  architecture: Fp16Architecture;
  numLayers: number;
  fingerprint: string;
  /** the files the manifest must vouch for as a whole, exactly these */
  files: string[];
  /** the files it must vouch for chunk by chunk, exactly these (none when absent) */
  chunked?: string[];
  checkpointDir: string;
  /**
   * the list digest (cacheListDigest) an acceptance record binds: the manifest read here must have it. null: the
   * record binds none that the manifest read before had (generate then expected this cache to be stale or absent),
   * so a manifest found current here was swapped in between and is refused. Absent: no record is involved (bench).
   */
  listDigest?: string | null;
}

/** Read and check the manifest; on a match, verify the vouched-for files' digests. Stale → ok: false; corrupt → InputError. */
export async function openCache<M extends Fp16ManifestBase>(dir: string, want: CacheExpectation, fpOptions: FingerprintOptions = {}): Promise<CacheOpen<M>> {
  const mf = path.join(dir, MANIFEST);
  const text = readManifestText(dir);
  if (text === null) return { ok: false, why: `${dir} holds no ${MANIFEST} (not written by layerdiff convert, or the conversion did not finish)` };
  let man: M;
  try {
    man = JSON.parse(text) as M;
  } catch {
    throw new InputError('not valid JSON', { file: mf });
  }
  if (OLDER_SCHEMAS.has(String(man?.schema))) return { ok: false, why: `the cache is in an earlier layout (${String(man.schema)})` };
  if (man?.schema !== FP16_CACHE_SCHEMA || !Array.isArray(man.files) || !Array.isArray(man.chunked)) throw new InputError(`not a ${FP16_CACHE_SCHEMA} manifest`, { file: mf });
  if (man.checkpoint?.fingerprint !== want.fingerprint) return { ok: false, why: `the cache was converted from another checkpoint (fingerprint ${String(man.checkpoint?.fingerprint).slice(0, 19)}…, this one is ${want.fingerprint.slice(0, 19)}…)` };
  if (man.tool?.version !== toolVersion()) return { ok: false, why: `the cache was written by layerdiff ${man.tool?.version}, this is ${toolVersion()}` };
  // Same checkpoint bytes but another architecture or depth: the manifest was edited.
  if (man.architecture !== want.architecture) throw new InputError(`manifest says architecture ${JSON.stringify(man.architecture)}, the checkpoint is ${want.architecture}`, { file: mf });
  if (man.num_layers !== want.numLayers) throw new InputError(`manifest says ${man.num_layers} layers, the checkpoint has ${want.numLayers}`, { file: mf });
  if (want.listDigest !== undefined && (want.listDigest === null || cacheListDigest(man, mf) !== want.listDigest)) throw new InputError('changed after the acceptance record was checked against it; no FP16 weights read from it', { file: mf });

  // Every file read later must be one the manifest vouches for, and nothing outside the folder.
  const expected = [...want.files].sort();
  const listed = man.files.map((f) => String(f?.name)).sort();
  if (listed.length !== expected.length || listed.some((n, i) => n !== expected[i])) {
    throw new InputError(`lists files ${JSON.stringify(listed)}, expected ${JSON.stringify(expected)}`, { file: mf });
  }
  const wantChunked = [...(want.chunked ?? [])].sort();
  const listedChunked = man.chunked.map((f) => String(f?.name)).sort();
  if (listedChunked.length !== wantChunked.length || listedChunked.some((n, i) => n !== wantChunked[i])) {
    throw new InputError(`lists chunked files ${JSON.stringify(listedChunked)}, expected ${JSON.stringify(wantChunked)}`, { file: mf });
  }
  for (const c of man.chunked) checkChunkedEntry(dir, c, mf);
  const pinned = verifyWholeFiles(dir, man.files, mf, { protect: want.checkpointDir, ...fpOptions });
  return { ok: true, manifest: man, pinned };
}

// ---- files vouched for as a whole ---------------------------------------------------------------------------


/**
 * The BLAKE3 of each named file in `dir` (every core on each file), read back from disk after writing, or after a
 * compare (`compared`: each file must still be the one compared, and not change while hashed).
 */
function wholeDigests(dir: string, names: readonly string[], compared?: Pinned): CacheFileDigest[] {
  return names.map((name) => {
    const file = path.join(dir, name);
    const fd = openCacheFile(file);
    try {
      const before = identityOf(fd);
      assertCompared(compared, name, before, file);
      const size = fs.fstatSync(fd).size;
      return { name, size, blake3: hashUnchanged(fd, file, before, size, hashThreads(Number.POSITIVE_INFINITY)) };
    } finally {
      fs.closeSync(fd);
    }
  });
}

/** The BLAKE3 of the `size` bytes of the file open as `fd`, which must still have `identity` once they are hashed. */
function hashUnchanged(fd: number, file: string, identity: string, size: number, threads: number): string {
  const digest = blake3File(fd, size, threads);
  if (digest === null || identityOf(fd) !== identity) throw new InputError('changed while it was being hashed; run again once nothing writes to the cache', { file });
  return digest;
}

function assertCompared(compared: Pinned | undefined, name: string, identity: string, file: string): void {
  if (compared !== undefined && !compared.has(name)) throw new Error(`${name} is vouched for but was never compared (the layout's converter does not write it)`);
  if (compared !== undefined && compared.get(name) !== identity) throw new InputError('changed after it was compared with the conversion (replaced or edited meanwhile); run again once nothing writes to the cache', { file });
}

/**
 * Every file the manifest vouches for as a whole has its size and BLAKE3, each hashed through its own descriptor
 * on every core, unless the stat-keyed cache holds that digest for the file as it is now (an earlier process
 * verified it; with a signing key the entry is MACed, and `--verify full` ignores it). A match is recorded there.
 */
function verifyWholeFiles(dir: string, files: readonly CacheFileDigest[], mf: string, o: FingerprintOptions): Pinned {
  const trusted = new PartDigests(o);
  const pinned: Pinned = new Map();
  const threads = hashThreads(Number.POSITIVE_INFINITY, o.hashThreads);
  const fds: number[] = [];
  try {
    for (const f of files) {
      const file = path.join(dir, String(f?.name));
      if (!Number.isSafeInteger(f?.size) || typeof f?.blake3 !== 'string' || !HEX64.test(f.blake3)) throw new InputError(`its entry for ${String(f?.name)} is not {name, size, blake3} (edited manifest?); rerun layerdiff convert`, { file: mf });
      const fd = openCacheFile(file);
      fds.push(fd);
      const identity = identityOf(fd);
      const size = fs.fstatSync(fd).size;
      if (size !== f.size) throw new InputError(`has ${size} bytes, the FP16 cache manifest says ${f.size} (truncated or edited); rerun layerdiff convert`, { file });
      const digest = `blake3:${f.blake3}`;
      if (!trusted.vouches(file, fd, WHOLE_FILE, digest)) {
        if (hashUnchanged(fd, file, identity, size, threads) !== f.blake3) throw new InputError('does not match the digest in the FP16 cache manifest (corrupted or edited); rerun layerdiff convert', { file });
        trusted.record(file, fd, WHOLE_FILE, digest);
      }
      pinned.set(f.name, identity);
    }
    trusted.flush();
    return pinned;
  } finally {
    for (const fd of fds) fs.closeSync(fd);
  }
}

// ---- files vouched for chunk by chunk ---------------------------------------------------------------------

/** The chunk digests of each spec'd file in `dir` (read back from disk, as the whole-file digests are). */
function chunkDigests(dir: string, specs: ChunkedSpec[] = [], compared?: Pinned): ChunkedFileDigest[] {
  return specs.map((c) => {
    const file = path.join(dir, c.name);
    const fd = openCacheFile(file);
    try {
      const before = identityOf(fd);
      assertCompared(compared, c.name, before, file);
      const size = fs.fstatSync(fd).size;
      const len = Buffer.alloc(8);
      if (fs.readSync(fd, len, 0, 8, 0) !== 8) throw new InputError('is too short for a safetensors file', { file });
      const headerBytes = 8 + Number(len.readBigUInt64LE(0));
      if (headerBytes > size) throw new InputError('has a header longer than the file', { file });
      const blake3: string[] = [];
      const buf = Buffer.alloc(Math.max(headerBytes, c.chunkBytes));
      for (let at = 0; at < size; ) {
        const n = Math.min(at === 0 ? headerBytes : c.chunkBytes, size - at);
        readFully(fd, buf, n, at, file);
        blake3.push(blake3Parts([[buf.subarray(0, n)]], 1)[0]);
        at += n;
      }
      if (identityOf(fd) !== before) throw new InputError('changed while it was being hashed; run again once nothing writes to the cache', { file });
      return { name: c.name, size, header_bytes: headerBytes, chunk_bytes: c.chunkBytes, blake3 };
    } finally {
      fs.closeSync(fd);
    }
  });
}

function readFully(fd: number, buf: Buffer, n: number, at: number, file: string): void {
  for (let done = 0; done < n; ) {
    const got = fs.readSync(fd, buf, done, n - done, at + done);
    if (got === 0) throw new InputError('shrank while it was being read (truncated?); rerun layerdiff convert', { file });
    done += got;
  }
}

const HEX64 = /^[0-9a-f]{64}$/;

/** A chunked entry of the manifest well formed for the file on disk: sizes, chunk count and digests (not yet the bytes). */
function checkChunkedEntry(dir: string, c: ChunkedFileDigest, mf: string): void {
  const file = path.join(dir, String(c?.name));
  const int = (v: unknown, min: number) => Number.isSafeInteger(v) && (v as number) >= min;
  if (!int(c.size, 8) || !int(c.header_bytes, 8) || c.header_bytes > c.size || !int(c.chunk_bytes, 1) || !Array.isArray(c.blake3)
    || c.blake3.length !== 1 + Math.ceil((c.size - c.header_bytes) / c.chunk_bytes) || c.blake3.some((h) => typeof h !== 'string' || !HEX64.test(h))) {
    throw new InputError(`its entry for ${String(c?.name)} is not a well-formed chunked digest (edited manifest?); rerun layerdiff convert`, { file: mf });
  }
  let st: fs.Stats;
  try {
    st = fs.lstatSync(file);
  } catch {
    throw new InputError('is missing (the FP16 cache manifest lists it); rerun layerdiff convert', { file });
  }
  if (!st.isFile()) throw new InputError('is not a regular file', { file });
  if (st.size !== c.size) throw new InputError(`has ${st.size} bytes, the FP16 cache manifest says ${c.size} (truncated or edited); rerun layerdiff convert`, { file });
}

/**
 * A chunked cache file's reads checked against its manifest entry: before bytes [begin, end) are used, each
 * chunk they touch is read and hashed, once per process; the header (chunk 0) before the file is parsed. The
 * file it opens is pinned (`pinned`, the CacheStore's), so the store maps that same file or refuses.
 */
export class ChunkedFile {
  private readonly checked: boolean[];
  private fd: number | undefined;
  private buf: Buffer | undefined;

  constructor(
    readonly file: string,
    private readonly d: ChunkedFileDigest,
    private readonly tensor: string,
    private readonly pinned: Pinned = new Map(),
  ) {
    this.checked = d.blake3.map(() => false);
  }

  /** chunks whose bytes matched their digest so far */
  checkedChunks(): number {
    return this.checked.filter(Boolean).length;
  }

  header(): void {
    this.check(0, 1);
  }

  /** The table a reader found must fill the file after the header: no byte outside the chunks it checks. */
  covers(begin: number, end: number): void {
    if (begin !== this.d.header_bytes || end !== this.d.size) throw new InputError(`holds bytes outside ${this.tensor} (edited?); rerun layerdiff convert`, { file: this.file, tensor: this.tensor });
  }

  check(begin: number, end: number): void {
    const H = this.d.header_bytes, C = this.d.chunk_bytes;
    const chunkOf = (at: number) => (at < H ? 0 : 1 + Math.floor((at - H) / C));
    for (let c = chunkOf(begin), last = chunkOf(Math.max(begin, end - 1)); c <= last; c++) if (!this.checked[c]) this.checkChunk(c);
  }

  private checkChunk(c: number): void {
    const at = c === 0 ? 0 : this.d.header_bytes + (c - 1) * this.d.chunk_bytes;
    const n = c === 0 ? this.d.header_bytes : Math.min(this.d.chunk_bytes, this.d.size - at);
    if (this.fd === undefined) {
      this.fd = openCacheFile(this.file);
      this.pinned.set(path.basename(this.file), identityOf(this.fd));
    }
    // n ≤ the file's size (checkChunkedEntry): an edited chunk_bytes cannot make this allocation absurd
    if (this.buf === undefined || this.buf.length < n) this.buf = Buffer.alloc(n);
    readIn(this.fd, at, n); // in 2 MiB folios, for the mapped reads of the same chunk that follow (prefetch.ts)
    readFully(this.fd, this.buf, n, at, this.file);
    if (blake3Parts([[this.buf.subarray(0, n)]], 1)[0] !== this.d.blake3[c]) {
      const what = c === 0 ? 'its header' : `bytes ${at}–${at + n} of ${this.tensor}`;
      throw new InputError(`${what} do${c === 0 ? 'es' : ''} not match the digest in the FP16 cache manifest (corrupted or edited); rerun layerdiff convert`, { file: this.file, tensor: this.tensor });
    }
    this.checked[c] = true;
  }

  close(): void {
    if (this.fd !== undefined) fs.closeSync(this.fd);
    this.fd = undefined;
    this.checked.fill(false); // a file opened again is checked again
  }
}

/**
 * Tensors of a cache's files, opened on first use, each read checked to have the dtype and shape the layout says.
 * A file verified before it is opened here (openCache's whole files, a ChunkedFile's) must be the file verified:
 * `pinned` holds its identity then, and an open that finds another file, or the file changed, is refused.
 */
export class CacheStore {
  private readonly files: SafetensorsFolder;
  /** each file handed out, and its identity then (the pinned one, where verification pinned it) */
  private readonly held = new Map<string, string>();

  constructor(
    readonly dir: string,
    readonly pinned: Pinned = new Map(),
  ) {
    this.files = new SafetensorsFolder(dir);
  }

  private file(file: string): SafetensorsFile {
    const f = this.files.get(file);
    if (!this.held.has(file)) {
      const want = this.pinned.get(file);
      const now = identityOf(f.descriptor);
      if (want !== undefined && now !== want) {
        throw new InputError('is not the file that was verified against the FP16 cache manifest (replaced or edited since); run again once nothing writes to the cache', { file: path.join(this.dir, file) });
      }
      this.held.set(file, now);
    }
    return f;
  }

  /**
   * Every file this store handed out bytes of is still the file it was then. The weights are mapped, and a mapping
   * shows later writes to its file: a file edited in place after it was verified would be computed with, unverified.
   * Generation asks after each forward pass, before that pass's logits are used (GenerateOptions.afterForward), so
   * no token computed while a file changed is emitted. A write, a truncate or a metadata change moves the ctime, which
   * no one can set back; a process writing through its own shared mapping to pages it had dirtied already moves no
   * time, and is caught by the next run's digests only (README, Security model).
   */
  unchanged(): void {
    for (const [file, id] of this.held) {
      if (identityOf(this.files.get(file).descriptor) !== id) {
        throw new InputError('changed while in use (edited in place?): generation stopped before using what was computed from it; run again once nothing writes to the cache', { file: path.join(this.dir, file) });
      }
    }
  }

  info(file: string, name: string, dtype: DType, shape: readonly number[]): TensorInfo {
    const info = this.file(file).get(name);
    const where = { file: path.join(this.dir, file), tensor: name };
    if (info === undefined) throw new InputError('tensor missing from the FP16 cache', where);
    if (info.dtype !== dtype || info.shape.length !== shape.length || info.shape.some((d, i) => d !== shape[i])) {
      throw new InputError(`is ${info.dtype}${JSON.stringify(info.shape)}, expected ${dtype}${JSON.stringify(shape)}`, where);
    }
    return info;
  }

  /**
   * Mapped, not copied (SafetensorsFile.map): the weights are held for the run, and a tensor never used is never read.
   * `whole`: the caller reads the tensor whole as soon as it has it (a layer's weights, bound as the layer is entered;
   * a routed expert, bound when first routed to), so its pages are mapped now, in one call: a page fault per 2 MiB
   * costs ~16 µs on the VMs this runs on and one per 64 KiB where the page cache holds 4 KiB folios, and the wide
   * DeepSeek-V4 start-up from the cache spent ~0.14 core-s in the GEMV's faults (perf; 0.42–0.46 s populated against
   * 0.47–0.55 s faulted, side by side). A table read a row at a time (an embedding) is left to map as touched.
   */
  read(file: string, name: string, dtype: DType, shape: readonly number[], whole = false): Uint8Array {
    return this.file(file).map(this.info(file, name, dtype, shape), whole);
  }

  f16(file: string, name: string, shape: readonly number[], whole = false): Uint16Array {
    const b = this.read(file, name, 'F16', shape, whole);
    return new Uint16Array(b.buffer, b.byteOffset, b.byteLength / 2);
  }

  /** the descriptor `file` is mapped through (what its digests' stat key is taken from) */
  descriptor(file: string): number {
    return this.file(file).descriptor;
  }

  /** a tensor bound for the run; `whole` (read's): read whole as soon as it is bound, as weights are */
  stored(file: string, name: string, dtype: DType, shape: readonly number[], whole = true): StoredTensor {
    return { name, dtype, shape: [...shape], bytes: this.read(file, name, dtype, shape, whole), file: path.join(this.dir, file) };
  }

  /**
   * Row reads of one [rows, cols] F16 table (embeddings, heads), as harness/models/rows.ts reads a checkpoint's;
   * with `chunks`, every read is first checked against the file's chunk digests (the header before it is parsed).
   */
  rows(file: string, name: string, shape: [number, number], chunks?: ChunkedFile): RowSource {
    const info = () => {
      chunks?.header();
      const i = this.info(file, name, 'F16', shape);
      chunks?.covers(i.begin, i.end);
      return i;
    };
    return {
      info,
      readRange: (_n: string, offset: number, length: number) => {
        const i = info();
        chunks?.check(i.begin + offset, i.begin + offset + length);
        return this.file(file).mapRange(i, offset, length, true);  // a chunk of rows, read whole now
      },
    };
  }

  close(): void {
    this.held.clear(); // a file opened again is held to its pin again
    this.files.close();
  }
}
