/**
 * The full checkpoint fingerprint of acceptance records (DESIGN §8): a streamed SHA-256 of every file the
 * forward pass or the tokenizer reads — each shard, config.json, the shard index, DeepSeek's
 * inference/config.json, the tokenizer files — combined into one digest over (name, size, sha256) lines
 * sorted by name. A real checkpoint is ~160 GB, so per-file digests are cached by (path, size, mtime,
 * ctime, inode, device) in a JSON file outside the model directory ($LAYERDIFF_CACHE_DIR or
 * ~/.cache/layerdiff/fingerprints.json). ctime is in the key on top of DESIGN's (path, size, mtime, inode)
 * because mtime can be set back (touch -r, rsync -t) after an edit, and ctime cannot.
 * A progress bar goes to stderr on a TTY once hashing has taken more than a second. Large sets of files are
 * hashed side by side, one per core (hash_workers.ts).
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { InputError } from '../errors.js';
import { hashFilesInWorkers, hashThreads } from './hash_workers.js';
import { blake3File, blake3Parts } from '../io/blake3.js';
import { openRegular, readRegularText } from '../io/regular.js';
import { isInside, realish, writeFileAtomic } from '../io/writer.js';

export interface FileDigest {
  /** relative to the hashed folder, '/'-separated */
  name: string;
  size: number;
  sha256: string;
}

export interface Fingerprint {
  /** 'sha256:<hex>' over the sorted (name, size, sha256) lines */
  value: string;
  files: FileDigest[];
}

/** Files besides the shards that decide what the model computes or how text becomes tokens. */
const EXTRA_FILES = [
  'config.json',
  'model.safetensors.index.json',
  'inference/config.json',
  'tokenizer.json',
  'tokenizer_config.json',
  'tokenizer.model',
  'special_tokens_map.json',
  'added_tokens.json',
  'vocab.json',
  'merges.txt',
];

/** The files a checkpoint's fingerprint covers: its shards and whichever of EXTRA_FILES exist. */
export function checkpointFiles(dir: string, shardFiles: readonly string[]): string[] {
  const extra = EXTRA_FILES.filter((f) => fs.existsSync(path.join(dir, f)) && fs.statSync(path.join(dir, f)).isFile());
  return [...new Set([...shardFiles, ...extra])].sort();
}

export function combineDigests(files: readonly FileDigest[]): string {
  const h = createHash('sha256');
  for (const f of [...files].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) h.update(`${f.name}\t${f.size}\t${f.sha256}\n`);
  return `sha256:${h.digest('hex')}`;
}

// ---- the cache ---------------------------------------------------------------------------------------

interface CacheEntry {
  size: number;
  mtime_ns: string;
  ctime_ns: string;
  ino: string;
  dev: string;
  sha256: string;
  /** HMAC-SHA256 (signing key) over the path and every field above: present when written with a key */
  mac?: string;
}

/**
 * A cached digest is only a hint: anyone who can write the cache file can pair a changed file's new
 * (size, mtime, ctime, inode) with the old digest. With a signing key, entries are MACed over the path and
 * every field, and an entry without a valid MAC under this key is hashed again, so a forged entry costs a
 * re-hash, never a false match. Without a key, `--verify full` (useCache: 'write') re-hashes every byte.
 */
function entryMac(key: string, abs: string, e: Omit<CacheEntry, 'mac'>): string {
  return createHmac('sha256', key).update(JSON.stringify(['layerdiff.fingerprints/1', abs, e.size, e.mtime_ns, e.ctime_ns, e.ino, e.dev, e.sha256])).digest('hex');
}

function macOk(key: string | null, abs: string, e: CacheEntry): boolean {
  if (key === null) return true;
  if (typeof e.mac !== 'string' || !/^[0-9a-f]{64}$/.test(e.mac)) return false;
  const { mac, ...body } = e;
  return timingSafeEqual(Buffer.from(mac, 'hex'), Buffer.from(entryMac(key, abs, body), 'hex'));
}

function defaultKey(): string | null {
  const k = process.env.LAYERDIFF_SIGNING_KEY;
  return k !== undefined && k !== '' ? k : null;
}

interface CacheFile {
  schema: 'layerdiff.fingerprints/1';
  entries: Record<string, CacheEntry>;
}

export function fingerprintCacheFile(): string {
  const dir = process.env.LAYERDIFF_CACHE_DIR;
  return dir !== undefined && dir !== '' ? path.join(dir, 'fingerprints.json') : path.join(os.homedir(), '.cache', 'layerdiff', 'fingerprints.json');
}

export { realish } from '../io/writer.js';

function readCache(file: string): CacheFile {
  try {
    const v = JSON.parse(readRegularText(file)) as CacheFile; // a FIFO planted there is skipped, not read until it ends
    if (v?.schema === 'layerdiff.fingerprints/1' && v.entries !== null && typeof v.entries === 'object') return v;
  } catch {
    // missing or unreadable: a cache is only ever an optimisation, start empty
  }
  return { schema: 'layerdiff.fingerprints/1', entries: {} };
}

/**
 * A file changed within the last few seconds is not cached ("racily clean", as git calls it): timestamps
 * come from a coarse clock (a jiffy; seconds on some filesystems), so an edit made in the same tick as the
 * hashed version would leave every key field equal. Such a file is simply hashed again next time.
 */
const RACY_MS = 3000;
const racy = (k: { mtime_ns: string; ctime_ns: string }, racyMs: number, readAtMs = Date.now()) => {
  const now = BigInt(Math.floor(readAtMs)) * 1_000_000n;
  const window = BigInt(racyMs) * 1_000_000n;
  return now - BigInt(k.mtime_ns) < window || now - BigInt(k.ctime_ns) < window;
};

const keyOf = (st: fs.BigIntStats) => ({ size: Number(st.size), mtime_ns: String(st.mtimeNs), ctime_ns: String(st.ctimeNs), ino: String(st.ino), dev: String(st.dev) });
const sameKey = (e: CacheEntry, k: ReturnType<typeof keyOf>) => e.size === k.size && e.mtime_ns === k.mtime_ns && e.ctime_ns === k.ctime_ns && e.ino === k.ino && e.dev === k.dev;

// ---- hashing -----------------------------------------------------------------------------------------

export interface FingerprintOptions {
  /** the folder the cache file must stay out of (the model directory); defaults to `dir` */
  protect?: string;
  /** force the progress bar on (tests) or off; default: stderr is a TTY */
  progress?: boolean;
  /** false: neither read nor write the cache; 'write': hash every byte (--verify full) and refresh the cache */
  useCache?: boolean | 'write';
  /** the key cache entries are MACed with (default: LAYERDIFF_SIGNING_KEY; null: none) */
  macKey?: string | null;
  /** where progress goes (tests) */
  stderr?: NodeJS.WritableStream & { isTTY?: boolean };
  /** show the bar once hashing has taken this long (default 1000 ms) */
  progressAfterMs?: number;
  /** files changed less than this long ago are not cached (default 3000 ms; tests use 0) */
  racyMs?: number;
  /**
   * per file name, what to hash instead of opening the path: an open descriptor (stat and read through it)
   * or the bytes already read (Checkpoint.hashSources: what the checkpoint computes with)
   */
  sources?: ReadonlyMap<string, number | Buffer>;
  /**
   * threads to hash files with, side by side (hash_workers.ts); 1: in this thread. Default: worker threads, one
   * per core, once the files to hash pass PARALLEL_BYTES (a worker's start costs ~20 ms), else this thread.
   * The FP16 cache's BLAKE3 digests (fp16cache.ts) take their thread count from it too (default: one per core).
   */
  hashThreads?: number;
}

/** Below this many bytes to hash, files are hashed one after another in this thread. */
const PARALLEL_BYTES = 256 << 20;

/** SHA-256 of `names` (relative to `dir`), streamed, with the stat-keyed cache. */
export async function fingerprintFiles(dir: string, names: readonly string[], o: FingerprintOptions = {}): Promise<Fingerprint> {
  const stderr = o.stderr ?? process.stderr;
  const cacheFile = fingerprintCacheFile();
  let useCache: boolean = (o.useCache ?? true) !== false;
  const readFromCache = o.useCache !== 'write';
  const key = o.macKey === undefined ? defaultKey() : o.macKey;
  if (useCache && isInside(realish(cacheFile), realish(o.protect ?? dir))) {
    // No command writes inside the model directory, the cache included: hash without it.
    stderr.write(`layerdiff: note: the fingerprint cache ${cacheFile} would be inside ${o.protect ?? dir}; hashing without it\n`);
    useCache = false;
  }
  const cache = useCache ? readCache(cacheFile) : null;
  const stats = names.map((n) => {
    const p = path.join(dir, n);
    const src = o.sources?.get(n);
    let st: fs.BigIntStats;
    try {
      st = typeof src === 'number' ? fs.fstatSync(src, { bigint: true }) : fs.statSync(p, { bigint: true });
    } catch (e) {
      throw new InputError(`cannot read: ${(e as NodeJS.ErrnoException).code ?? String(e)}`, { file: p });
    }
    if (!st.isFile()) throw new InputError('is not a regular file', { file: p });
    const key = keyOf(st);
    // bytes already read are hashed as they are (small: config, index), never from the cache
    return { name: n, abs: realish(p), key: Buffer.isBuffer(src) ? { ...key, size: src.length } : key, src };
  });
  const todo = stats.filter((s) => {
    if (Buffer.isBuffer(s.src)) return true;
    const e = readFromCache ? cache?.entries[s.abs] : undefined;
    return e === undefined || typeof e.sha256 !== 'string' || !sameKey(e, s.key) || !macOk(key, s.abs, e);
  });
  const total = todo.reduce((n, s) => n + s.key.size, 0);
  const bar = new HashProgress(o.progress ?? stderr.isTTY === true, total, stderr, o.progressAfterMs ?? 1000);
  const fresh = new Map<string, string>();
  try {
    const onDisk: Array<(typeof todo)[number] & { src?: number }> = [];
    for (const s of todo) {
      if (Buffer.isBuffer(s.src)) fresh.set(s.abs, createHash('sha256').update(s.src).digest('hex'));
      else onDisk.push(s as (typeof onDisk)[number]);
    }
    // workers also on one core: their positional reads hash ~2× faster than a read stream here (0.5–0.7 GB/s)
    const threads = hashThreads(onDisk.length, o.hashThreads);
    if (o.hashThreads !== undefined ? threads === 1 : total < PARALLEL_BYTES) {
      for (const s of onDisk) fresh.set(s.abs, await hashFile(path.join(dir, s.name), s.key, (n) => bar.add(n, s.name), s.src));
    } else {
      const jobs = onDisk.map((s) => ({ file: path.join(dir, s.name), fd: s.src }));
      const got = await hashFilesInWorkers(jobs, threads, (n, j) => bar.add(n, onDisk[j].name));
      got.forEach((r, j) => {
        const { file, fd } = jobs[j];
        if ('error' in r) throw new InputError(`cannot read: ${r.error}`, { file });
        assertUnchanged(file, onDisk[j].key, r.bytes, fd);
        fresh.set(onDisk[j].abs, r.sha256);
      });
    }
  } finally {
    bar.done();
  }
  const files = stats.map((s) => ({ name: s.name.split(path.sep).join('/'), size: s.key.size, sha256: fresh.get(s.abs) ?? cache!.entries[s.abs].sha256 }));
  if (cache !== null && fresh.size > 0) {
    storeEntries(cacheFile, key, stderr, (put) => {
      for (const s of todo) if (!Buffer.isBuffer(s.src) && !racy(s.key, o.racyMs ?? RACY_MS)) put(s.abs, s.key, fresh.get(s.abs)!);
    });
  }
  return { value: combineDigests(files), files };
}

/**
 * Add entries to the cache file and write it (a failure is a note: the cache is an optimisation). The file is read
 * again just before, so a concurrent run's new entries are kept; entries of files that are gone are dropped; with a
 * signing key each new entry is MACed.
 */
function storeEntries(cacheFile: string, macKey: string | null, stderr: NodeJS.WritableStream, fill: (put: (at: string, k: ReturnType<typeof keyOf>, sha256: string) => void) => void): void {
  const latest = readCache(cacheFile);
  forgetGone(latest);
  fill((at, k, sha256) => {
    const e = { ...k, sha256 };
    latest.entries[at] = macKey !== null ? { ...e, mac: entryMac(macKey, at, e) } : e;
  });
  try {
    writeFileAtomic(cacheFile, JSON.stringify(latest) + '\n');
  } catch (e) {
    stderr.write(`layerdiff: note: could not update the fingerprint cache ${cacheFile}: ${(e as Error).message}\n`);
  }
}

/**
 * Forget files that are gone (deleted checkpoints, temporary copies), so the cache does not grow forever. A part's
 * entry (PartDigests) is named `<path>\0<label>`: it goes with its file.
 */
function forgetGone(c: CacheFile): void {
  for (const p of Object.keys(c.entries)) if (!fs.existsSync(p.split('\0')[0])) delete c.entries[p];
}

/**
 * Digests of parts of open files (a part is named by a label: the FP16 cache's routed experts by their tensor
 * prefix, its whole files by '(whole file)'), cached as whole files are (the entry's sha256 field holds the digest
 * the caller names, 'blake3:<hex>' for the FP16 cache's): under the file's (size, mtime, ctime, inode, device) taken through the
 * descriptor its bytes are read through, MACed with the signing key when there is one, as `<path>\0<label>` in
 * the same cache file. A part whose bytes matched their expected digest is recorded (`record`, written by
 * `flush`), and a later process opening the unchanged file trusts it (`vouches`) without hashing it again. The
 * trust is the whole-file cache's, no more: an entry is a hint, which a signing key makes unforgeable and
 * useCache 'write' (hash every byte) leaves unused. The cache file is read once, at construction.
 */
export class PartDigests {
  private readonly cache: CacheFile | null;
  private readonly readFromCache: boolean;
  private readonly macKey: string | null;
  private readonly opened = new Map<string, { fd: number; abs: string; key: ReturnType<typeof keyOf> }>();
  private readonly fresh = new Map<string, Map<string, { digest: string; readAtMs: number }>>();

  constructor(private readonly o: Pick<FingerprintOptions, 'useCache' | 'macKey' | 'racyMs' | 'protect'> = {}) {
    const cacheFile = fingerprintCacheFile();
    const use = (o.useCache ?? true) !== false && !(o.protect !== undefined && isInside(realish(cacheFile), realish(o.protect)));
    this.cache = use ? readCache(cacheFile) : null;
    this.readFromCache = o.useCache !== 'write';
    this.macKey = o.macKey === undefined ? defaultKey() : o.macKey;
  }

  /** `file` as read through `fd`, its stat key taken the first time it is named */
  private of(file: string, fd: number): { fd: number; abs: string; key: ReturnType<typeof keyOf> } {
    let f = this.opened.get(file);
    if (f === undefined) this.opened.set(file, (f = { fd, abs: realish(file), key: keyOf(fs.fstatSync(fd, { bigint: true })) }));
    return f;
  }

  /** The cache holds `label`'s digest in `file` (read through `fd`) as `digest`, for the file as it is now. */
  vouches(file: string, fd: number, label: string, digest: string): boolean {
    return this.cached(file, fd, label) === digest;
  }

  /** The digest the cache holds for `label` in `file` (read through `fd`), for the file as it is now; else null. */
  cached(file: string, fd: number, label: string): string | null {
    const f = this.of(file, fd);
    if (this.cache === null || !this.readFromCache) return null;
    // the file as it is now, not as it was when first named: one changed in place since is hashed (and refused)
    if (!sameKey({ ...keyOf(fs.fstatSync(fd, { bigint: true })), sha256: '' }, f.key)) return null;
    const at = `${f.abs}\0${label}`;
    const e = this.cache.entries[at];
    return e !== undefined && typeof e.sha256 === 'string' && sameKey(e, f.key) && macOk(this.macKey, at, e) ? e.sha256 : null;
  }

  /**
   * `label`'s bytes in `file` were hashed (or compared) to `digest` and matched what they should be; `readAtMs`: when
   * that read began, the time the racy rule (above) judges the file's timestamps against (default: now).
   */
  record(file: string, fd: number, label: string, digest: string, readAtMs = Date.now()): void {
    if (this.cache === null) return;
    this.of(file, fd);
    let m = this.fresh.get(file);
    if (m === undefined) this.fresh.set(file, (m = new Map()));
    m.set(label, { digest, readAtMs: Math.min(readAtMs, m.get(label)?.readAtMs ?? Infinity) });
  }

  /** Write what was recorded, but not for a file changed since it was first named or too recently (racy, above). */
  flush(): void {
    if (this.cache === null || this.fresh.size === 0) return;
    const cacheFile = fingerprintCacheFile();
    storeEntries(cacheFile, this.macKey, process.stderr, (put) => {
      for (const [file, labels] of this.fresh) {
        const f = this.opened.get(file)!;
        const now = keyOf(fs.fstatSync(f.fd, { bigint: true }));
        if (!sameKey({ ...now, sha256: '' }, f.key)) continue;
        for (const [label, { digest, readAtMs }] of labels) if (!racy(f.key, this.o.racyMs ?? RACY_MS, readAtMs)) put(`${f.abs}\0${label}`, f.key, digest);
      }
    });
    this.fresh.clear();
  }
}

/** The label of a whole file's BLAKE3 in the stat-keyed cache (PartDigests; a part's label is a tensor prefix). */
export const WHOLE_FILE = '(whole file)';

export interface ContentDigest {
  /** 'blake3:<hex>': BLAKE3 of the sorted (name, size, 'blake3:<hex>') lines */
  value: string;
  files: Array<{ name: string; size: number; blake3: string }>;
}

/**
 * A checkpoint's content digest, for the keys the tool keeps for itself (a reused weights check): the files its
 * acceptance fingerprint covers (checkpointFiles), each hashed whole with BLAKE3 on every core, through what the
 * checkpoint reads with (hashSources), and cached by file identity as the FP16 cache's whole files are (PartDigests,
 * label WHOLE_FILE: a hint, MACed with a signing key; useCache 'write' hashes every byte). Why not the SHA-256
 * fingerprint: SHA-256 is one serial stream a file, so a first diff of deepseek-v4-wide (8.7 GB) spent 2.4 s
 * fingerprinting (3.8 GB/s on two cores, files side by side) against 0.72 s for this (12–13 GB/s), and the released
 * model's 160 GB ~42 s against ~13 s: the disk's speed, not a core's. An acceptance record's fingerprint stays
 * SHA-256 (DESIGN §8): gate and generate compute that one.
 */
export function openCheckpointContentDigest(ck: { dir: string; shardFiles: readonly string[]; hashSources(): Map<string, number | Buffer> }, o: FingerprintOptions = {}): ContentDigest {
  const sources = ck.hashSources();
  const names = checkpointFiles(ck.dir, ck.shardFiles);
  const parts = new PartDigests({ protect: ck.dir, ...o });
  const threads = o.hashThreads ?? os.availableParallelism();
  const stderr = o.stderr ?? process.stderr;
  const files: ContentDigest['files'] = [];
  const own: number[] = []; // descriptors opened here: open until the cache is written (flush takes their stat keys)
  try {
    // every file opened first (a regular file, else one line naming it), so the bar knows the bytes to hash
    const src = names.map((name) => {
      const s = sources.get(name);
      return Buffer.isBuffer(s) || typeof s === 'number' ? s : own[own.push(openRegular(path.join(ck.dir, name))) - 1];
    });
    const sizes = src.map((s) => (Buffer.isBuffer(s) ? s.length : fs.fstatSync(s).size));
    const bar = new HashProgress(o.progress ?? stderr.isTTY === true, sizes.reduce((a, b) => a + b, 0), stderr, o.progressAfterMs ?? 1000);
    try {
      names.forEach((name, i) => {
        const s = src[i];
        // bytes already parsed (config, index) are hashed as they are, never from the cache
        if (Buffer.isBuffer(s)) return files.push({ name, size: s.length, blake3: `blake3:${blake3Parts([[s]], 1)[0]}` });
        files.push({ name, ...wholeFileBlake3(parts, path.join(ck.dir, name), s, threads) });
        bar.add(sizes[i], name);
      });
    } finally {
      bar.done();
    }
    parts.flush();
  } finally {
    for (const fd of own) fs.closeSync(fd);
  }
  const lines = files.map((f) => `${f.name.split(path.sep).join('/')}\t${f.size}\t${f.blake3}\n`).sort();
  return { value: `blake3:${blake3Parts([[Buffer.from(lines.join(''))]], 1)[0]}`, files };
}

/**
 * A file's size and whole BLAKE3 ('blake3:<hex>'): the cache's, when it holds one for the file as it is, else hashed
 * (and recorded), the file's whole stat key (ctime too) unchanged across the hash.
 */
function wholeFileBlake3(parts: PartDigests, file: string, fd: number, threads: number): { size: number; blake3: string } {
  const before = keyOf(fs.fstatSync(fd, { bigint: true }));
  const cached = parts.cached(file, fd, WHOLE_FILE);
  if (cached !== null && /^blake3:[0-9a-f]{64}$/.test(cached)) return { size: before.size, blake3: cached };
  const readAt = Date.now();
  const hex = blake3File(fd, before.size, threads);
  if (hex === null || !sameKey({ ...keyOf(fs.fstatSync(fd, { bigint: true })), sha256: '' }, before)) {
    throw new InputError('changed or ended while it was being hashed; run again once nothing writes to the checkpoint', { file });
  }
  parts.record(file, fd, WHOLE_FILE, `blake3:${hex}`, readAt);
  return { size: before.size, blake3: `blake3:${hex}` };
}

/** SHA-256 of a file by path, or through `fd` from byte 0 (the descriptor stays open: its owner reads through it). */
async function hashFile(file: string, key: ReturnType<typeof keyOf>, onBytes: (n: number) => void, fd?: number): Promise<string> {
  const h = createHash('sha256');
  const stream = fd !== undefined ? fs.createReadStream('', { fd, autoClose: false, start: 0, highWaterMark: 4 << 20 }) : fs.createReadStream(file, { highWaterMark: 4 << 20 });
  let n = 0;
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    h.update(chunk);
    n += chunk.length;
    onBytes(chunk.length);
  }
  assertUnchanged(file, key, n, fd);
  return h.digest('hex');
}

/** The file as it was stat'ed before hashing, and `n` bytes of it hashed: else it changed under the hash. */
function assertUnchanged(file: string, key: ReturnType<typeof keyOf>, n: number, fd?: number): void {
  const after = keyOf(fd !== undefined ? fs.fstatSync(fd, { bigint: true }) : fs.statSync(file, { bigint: true }));
  if (n !== key.size || after.size !== key.size || after.mtime_ns !== key.mtime_ns || after.ino !== key.ino) {
    throw new InputError('changed while it was being hashed; run again once nothing writes to the checkpoint', { file });
  }
}

/**
 * The SHA-256 of one file of a checkpoint open as `fd`, in this thread (a read that must not wait: the data guard of
 * harness/gate/deferred.ts, on the path of a tensor read), with the stat-keyed cache as fingerprintFiles uses it.
 */
export function fileSha256Sync(dir: string, name: string, fd: number, o: FingerprintOptions = {}): string {
  const file = path.join(dir, name);
  try {
    return sha256Sync(dir, file, fd, o);
  } catch (e) {
    if (e instanceof InputError) throw e;
    throw new InputError(`cannot read: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, { file });
  }
}

function sha256Sync(dir: string, file: string, fd: number, o: FingerprintOptions): string {
  const abs = realish(file);
  const key = keyOf(fs.fstatSync(fd, { bigint: true }));
  const macKey = o.macKey === undefined ? defaultKey() : o.macKey;
  const cacheFile = fingerprintCacheFile();
  const useCache = (o.useCache ?? true) !== false && !isInside(realish(cacheFile), realish(o.protect ?? dir));
  if (useCache && o.useCache !== 'write') {
    const e = readCache(cacheFile).entries[abs];
    if (e !== undefined && typeof e.sha256 === 'string' && sameKey(e, key) && macOk(macKey, abs, e)) return e.sha256;
  }
  const h = createHash('sha256');
  const buf = Buffer.allocUnsafe(4 << 20);
  let at = 0;
  for (let n; (n = fs.readSync(fd, buf, 0, buf.length, at)) > 0; at += n) h.update(buf.subarray(0, n));
  assertUnchanged(file, key, at, fd);
  const sha256 = h.digest('hex');
  if (useCache && !racy(key, o.racyMs ?? RACY_MS)) {
    storeEntries(cacheFile, macKey, o.stderr ?? process.stderr, (put) => put(abs, key, sha256));
  }
  return sha256;
}

/** The fingerprint of a checkpoint folder: its shards (from the index or model.safetensors) and metadata. */
export async function checkpointFingerprint(dir: string, shardFiles: readonly string[], o: FingerprintOptions = {}): Promise<Fingerprint> {
  return fingerprintFiles(dir, checkpointFiles(dir, shardFiles), { protect: dir, ...o });
}

/**
 * The fingerprint of an open checkpoint, hashed through what it reads with (Checkpoint.hashSources): its
 * shards' open descriptors and the config and index bytes it parsed, so no file can be swapped between
 * hashing and reading. The other metadata files (the tokenizer's) are hashed by path. generation_config.json is
 * not covered: it chooses how tokens are drawn, not what the validated path computes.
 */
export async function openCheckpointFingerprint(ck: { dir: string; shardFiles: readonly string[]; hashSources(): Map<string, number | Buffer> }, o: FingerprintOptions = {}): Promise<Fingerprint> {
  return checkpointFingerprint(ck.dir, ck.shardFiles, { sources: ck.hashSources(), ...o });
}

/** A one-line bar on stderr, shown only after a second of hashing (afterMs), redrawn at most 10 times a second. */
class HashProgress {
  private readonly t0 = Date.now();
  private done_ = 0;
  private last = 0;
  private shown = false;

  constructor(
    private readonly enabled: boolean,
    private readonly total: number,
    private readonly out: NodeJS.WritableStream,
    private readonly afterMs: number,
  ) {}

  add(n: number, file: string): void {
    this.done_ += n;
    if (!this.enabled) return;
    const now = Date.now();
    if (now - this.t0 < this.afterMs || now - this.last < 100) return;
    this.last = now;
    this.shown = true;
    const frac = this.total > 0 ? this.done_ / this.total : 1;
    const width = 24;
    const fill = Math.round(frac * width);
    const gib = (b: number) => (b / 2 ** 30).toFixed(2);
    const rate = this.done_ / 2 ** 20 / ((now - this.t0) / 1000);
    const eta = rate > 0 ? (this.total - this.done_) / 2 ** 20 / rate : 0;
    this.out.write(`\r\x1b[Kfingerprint [${'#'.repeat(fill)}${'.'.repeat(width - fill)}] ${(frac * 100).toFixed(0)}% ${gib(this.done_)}/${gib(this.total)} GiB · ${rate.toFixed(0)} MiB/s · ~${eta.toFixed(0)} s left · ${file}`);
  }

  done(): void {
    if (this.shown) this.out.write('\r\x1b[K');
  }
}
