/**
 * A Hugging Face style checkpoint directory: config.json (with quantization_config), one
 * model.safetensors or sharded model-*.safetensors with model.safetensors.index.json, tokenizer.json.
 * Opened read-only; tensors are read by byte range on demand. Nothing is ever written here.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { readAheadMark, willNeed } from './prefetch.js';
import { InputError } from '../errors.js';
import { identityOf, readRegularBytes, utf8Text } from './regular.js';
import { type DeferredRead, SafetensorsFile, SafetensorsFolder, type TensorInfo } from './safetensors.js';

export interface CheckpointConfig {
  raw: Record<string, unknown>;
  architecture: string;
  modelType: string;
}

export class Checkpoint {
  readonly dir: string;
  readonly config: Record<string, unknown>;
  readonly configFile: string;
  /** tensor name → shard file name (relative to dir) */
  readonly weightMap: Map<string, string>;
  readonly shardFiles: string[];
  private readonly shards: SafetensorsFolder;
  /** bytes read from tensor data so far (for progress lines and the streaming benchmarks) */
  bytesRead = 0;

  private constructor(dir: string, config: Record<string, unknown>, weightMap: Map<string, string>) {
    this.dir = dir;
    this.config = config;
    this.configFile = path.join(dir, 'config.json');
    this.weightMap = weightMap;
    this.shardFiles = [...new Set(weightMap.values())].sort();
    this.shards = new SafetensorsFolder(dir);
  }

  static open(dir: string): Checkpoint {
    assertModelDir(dir);
    const configFile = path.join(dir, 'config.json');
    // the bytes parsed are the bytes fingerprinted (hashSources): no window between hashing and reading
    const read = new Map<string, Buffer>();
    read.set('config.json', readRegularBytes(configFile));
    const config = readJsonObject(configFile, read.get('config.json'));
    const indexFile = path.join(dir, 'model.safetensors.index.json');
    const weightMap = new Map<string, string>();
    if (fs.existsSync(indexFile)) {
      read.set('model.safetensors.index.json', readRegularBytes(indexFile));
      const index = readJsonObject(indexFile, read.get('model.safetensors.index.json'));
      const wm = index.weight_map;
      if (wm === null || typeof wm !== 'object' || Array.isArray(wm)) throw new InputError('weight_map is missing or not an object', { file: indexFile });
      // each shard looked up once, not once per tensor naming it: the released DeepSeek-V4-Flash's index names its
      // shards ~10^5 times, and two stats an entry were 10 ms of the wide fixture's 905 (a start-up's open)
      const shards = new Set<string>();
      for (const [name, shard] of Object.entries(wm as Record<string, unknown>)) {
        if (typeof shard !== 'string' || shard === '' || shard.includes('/') || shard.includes('\\') || shard.startsWith('.')) {
          throw new InputError(`weight_map entry ${JSON.stringify(shard)} is not a shard file name in this folder`, { file: indexFile, tensor: name });
        }
        if (!shards.has(shard)) {
          let st: fs.Stats | undefined;
          try {
            st = fs.statSync(path.join(dir, shard), { throwIfNoEntry: false });
          } catch (e) {  // a symlink loop, a name too long: what existsSync answered false for
            throw new InputError(`shard ${shard} named by the index cannot be looked up (${(e as NodeJS.ErrnoException).code ?? String(e)})`, { file: indexFile, tensor: name });
          }
          if (st === undefined) throw new InputError(`shard ${shard} named by the index does not exist`, { file: indexFile, tensor: name });
          if (!st.isFile()) throw new InputError(`shard ${shard} named by the index is not a regular file`, { file: indexFile, tensor: name });
          shards.add(shard);
        }
        weightMap.set(name, shard);
      }
    } else if (fs.existsSync(path.join(dir, 'model.safetensors'))) {
      const f = SafetensorsFile.open(path.join(dir, 'model.safetensors'));
      for (const name of f.tensors.keys()) weightMap.set(name, 'model.safetensors');
      f.close();
    } else {
      throw new InputError('no model.safetensors.index.json and no model.safetensors', { file: dir });
    }
    const ck = new Checkpoint(dir, config, weightMap);
    for (const [n, b] of read) ck.readFiles.set(n, b);
    ck.crossCheckIndex(indexFile);
    return ck;
  }

  /** config.json, the index and the metadata files read through readMeta, as they were parsed */
  private readonly readFiles = new Map<string, Buffer>();

  /**
   * A metadata file of the checkpoint (`tokenizer.json`, `inference/config.json`, …), read once and kept:
   * whoever parses it and the fingerprint (hashSources) see the same bytes. null when the folder has none.
   */
  readMeta(name: string): Buffer | null {
    const kept = this.readFiles.get(name);
    if (kept !== undefined) return kept;
    const file = path.join(this.dir, name);
    if (!fs.existsSync(file)) return null;
    const b = readRegularBytes(file);
    this.readFiles.set(name, b);
    return b;
  }

  /**
   * What the fingerprint hashes, per file name: the open descriptor of each shard (the one every tensor is
   * read through) and the bytes of config.json, the index and every readMeta file as parsed. A file swapped after open is then
   * neither read nor hashed: the fingerprint is of what this checkpoint computes with.
   */
  hashSources(): Map<string, number | Buffer> {
    const out = new Map<string, number | Buffer>(this.readFiles);
    for (const s of this.shardFiles) out.set(s, this.shard(s).descriptor);
    return out;
  }

  /** Every shard's header must list exactly the tensors the index assigns to it. */
  private crossCheckIndex(indexFile: string): void {
    for (const shard of this.shardFiles) {
      const f = this.shard(shard);
      for (const name of f.tensors.keys()) {
        const owner = this.weightMap.get(name);
        if (owner === undefined) throw new InputError(`tensor is in ${shard} but missing from the index`, { file: indexFile, tensor: name });
        if (owner !== shard) throw new InputError(`index says ${owner} but the tensor is stored in ${shard}`, { file: indexFile, tensor: name });
      }
    }
    for (const [name, shard] of this.weightMap) {
      if (!this.shard(shard).tensors.has(name)) throw new InputError(`index names ${shard} but that shard has no such tensor`, { file: indexFile, tensor: name });
    }
  }

  private shard(file: string): SafetensorsFile {
    return this.shards.get(file);
  }

  /** Each shard's identity now (identityOf its descriptor): taken before the fingerprint hashes them, for unchangedSince. */
  shardIdentities(): Map<string, string> {
    return new Map(this.shardFiles.map((s) => [s, identityOf(this.shard(s).descriptor)]));
  }

  /**
   * Every shard is still the file it was when `pins` were taken (shardIdentities). Shards are read, or mapped, as
   * they are used: one written in place after the fingerprint vouched for it would be computed with, unverified.
   */
  unchangedSince(pins: ReadonlyMap<string, string>): void {
    for (const [s, id] of pins) {
      if (identityOf(this.shard(s).descriptor) !== id) throw new InputError('changed while in use (edited in place?): stopped before using what was computed from it; run again once nothing writes to the checkpoint', { file: path.join(this.dir, s) });
    }
  }

  /** A shard's size in bytes as it was opened. */
  shardSize(shard: string): number {
    return this.shard(shard).fileSize;
  }

  /** Each shard's header digest (SafetensorsFile.headerSha256): what a record binds of shards a run reads no data of. */
  headerDigests(): Map<string, string> {
    return new Map(this.shardFiles.map((s) => [s, this.shard(s).headerSha256]));
  }

  /** Each shard's data sample digest (SafetensorsFile.dataSampleSha256), read now. */
  dataSampleDigests(): Map<string, string> {
    return new Map(this.shardFiles.map((s) => [s, this.dataSampleDigest(s)]));
  }

  dataSampleDigest(shard: string): string {
    return this.shard(shard).dataSampleSha256();
  }

  /**
   * Call `guard(shard)` before the first read of any tensor data in each shard (reads, reservations, row ranges; not
   * the read-ahead's advice, which brings nothing into this process): generate from an FP16 cache verifies a shard's content only if the run
   * turns out to read it (harness/gate/deferred.ts). The guard throws to stop the read.
   */
  guardData(guard: (shard: string) => void): void {
    this.dataGuard = guard;
    this.guarded.clear();
  }

  private dataGuard: ((shard: string) => void) | null = null;
  private readonly guarded = new Set<string>();

  /** the shard holding `name`'s data, past the guard */
  private dataShard(name: string): SafetensorsFile {
    const shard = this.weightMap.get(name)!;
    if (this.dataGuard !== null && !this.guarded.has(shard)) {
      this.dataGuard(shard);
      this.guarded.add(shard);
    }
    return this.shard(shard);
  }

  /** The `generator` metadata its shards agree on (e.g. a repro bundle's), or null. */
  generator(): string | null {
    const seen = new Set(this.shardFiles.map((f) => this.shard(f).metadata.generator));
    const [only] = [...seen];
    return seen.size === 1 && typeof only === 'string' ? only : null;
  }

  has(name: string): boolean {
    return this.weightMap.has(name);
  }

  names(): string[] {
    return [...this.weightMap.keys()];
  }

  info(name: string): TensorInfo {
    const shard = this.weightMap.get(name);
    if (shard === undefined) throw new InputError('tensor not found in the checkpoint', { file: this.dir, tensor: name });
    const info = this.shard(shard).get(name);
    if (info === undefined) throw new InputError('tensor not found in its shard', { file: path.join(this.dir, shard), tensor: name });
    return info;
  }

  /**
   * Read-ahead: load these tensors' bytes into the page cache while the caller computes on what it already read
   * (harness/io/prefetch.ts, on the native addon's background thread). It changes no result, and is skipped where
   * the addon cannot give it. The byte ranges are merged per shard file where they touch or overlap: one
   * read-ahead per run of bytes (a wide DeepSeek-V4 layer's ~1,500 tensors are one or two runs), not one per
   * tensor. → the mark of the last one queued, for readAheadWait (0 where none was).
   */
  prefetchTensors(names: Iterable<string>): number {
    const byShard = new Map<string, Array<[number, number]>>();
    let queued = false;
    for (const n of names) {
      const info = this.info(n);
      const shard = this.weightMap.get(n)!;
      let runs = byShard.get(shard);
      if (runs === undefined) byShard.set(shard, (runs = []));
      runs.push([info.begin, info.end]);
    }
    for (const [shard, runs] of byShard) {
      // advice only (no byte reaches this process): not past the data guard
      const fd = this.shard(shard).descriptor;
      runs.sort((a, b) => a[0] - b[0]);
      // a length of 0 would mean "to the end of the file" to posix_fadvise: empty runs are not advised
      const advise = (b: number, e: number) => e > b && willNeed(fd, b, e - b) && (queued = true);
      let [b, e] = runs[0];
      for (const [x, y] of runs) {
        if (x <= e) e = Math.max(e, y);
        else {
          advise(b, e);
          [b, e] = [x, y];
        }
      }
      advise(b, e);
    }
    return queued ? readAheadMark() : 0;
  }

  read(name: string): Uint8Array {
    const info = this.info(name);
    this.bytesRead += info.end - info.begin;
    return this.dataShard(name).read(info);
  }

  /** A read of one tensor left to the caller (SafetensorsFile.reserve): counted as read. */
  reserve(name: string): DeferredRead {
    const info = this.info(name);
    this.bytesRead += info.end - info.begin;
    return this.dataShard(name).reserve(info);
  }

  readRange(name: string, offset: number, length: number): Uint8Array {
    const info = this.info(name);
    this.bytesRead += length;
    return this.dataShard(name).readRange(info, offset, length);
  }

  /** Total bytes of tensor data (for progress estimates). */
  totalBytes(): number {
    let n = 0;
    for (const name of this.weightMap.keys()) {
      const i = this.info(name);
      n += i.end - i.begin;
    }
    return n;
  }

  close(): void {
    this.shards.close();
  }
}

export function readJsonObject(file: string, bytes?: Buffer): Record<string, unknown> {
  return parseJsonObject(utf8Text(bytes ?? readRegularBytes(file), { file }), file);
}

/** `text` (read from `file`) as a JSON object, or an InputError naming the file. */
export function parseJsonObject(text: string, file: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new InputError('not valid JSON', { file });
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new InputError('not a JSON object', { file });
  return v as Record<string, unknown>;
}

/** A Hub id has the form owner/name: one slash, no leading dot or slash (a local path to it would exist). */
const HUB_ID = /^[A-Za-z0-9][\w.-]*\/[A-Za-z0-9][\w.-]*$/;

/** The commonest mistakes with the model argument, each with its own message (a typo, a file, a Hub id, a non-model folder). */
export function assertModelDir(dir: string): void {
  if (!fs.existsSync(dir)) {
    if (HUB_ID.test(dir)) throw new InputError(`no such directory; this looks like a Hub id: download it first (e.g. huggingface-cli download ${dir} --local-dir DIR) and give that folder`, { file: dir });
    throw new InputError('no such directory', { file: dir });
  }
  if (!fs.statSync(dir).isDirectory()) throw new InputError('not a directory (give the checkpoint\'s folder, the one holding config.json)', { file: dir });
  if (!fs.existsSync(path.join(dir, 'config.json'))) throw new InputError('not a model directory (no config.json)', { file: dir });
}
