/**
 * Our own safetensors reader and writer (the npm `safetensors` package is a 4 KB toy that crashes on
 * `__metadata__`). The format: u64 LE header length N, N bytes of JSON {name: {dtype, shape, data_offsets}},
 * then the data. The reader validates the header as strictly as the Rust reference implementation
 * (offsets in range, no overlap, no holes, byte size = shape × dtype size) and reads tensors by byte
 * range, so a shard is never held in memory whole.
 */
import { mapPopulated, mapRange } from './map.js';
import { activeReadPool, markWritten } from './read_pool.js';
import * as fs from 'node:fs';
import { createHash } from 'node:crypto';
import * as path from 'node:path';
import { InputError } from '../errors.js';
import { writeFileAtomic } from './writer.js';
import { DTYPE_BYTES, type DType, isDType } from '../formats/dtypes.js';
import { openRegular, utf8Text } from './regular.js';

/** A read's buffer of `length` bytes, 8-byte aligned and padded to 8: recycled inside withReadPool, else fresh. */
function readBuffer(length: number): Uint8Array {
  return activeReadPool()?.take(length) ?? new Uint8Array(new ArrayBuffer(Math.ceil(length / 8) * 8), 0, length);
}

/** A tensor's buffer and where its bytes are, for a pass that reads them itself (SafetensorsFile.reserve). */
export interface DeferredRead {
  /** the tensor's buffer, not yet filled */
  bytes: Uint8Array;
  fd: number;
  /** the tensor's first byte in the file */
  offset: number;
  file: string;
  /** read the bytes into `bytes` here (the fallback) */
  fill(): void;
}

export interface TensorInfo {
  name: string;
  dtype: DType;
  shape: number[];
  /** absolute byte offsets in the file */
  begin: number;
  end: number;
  file: string;
}

/** dataSampleSha256's windows: 4 × 64 KiB a shard (12 MB over the released model's 46 shards) */
export const DATA_SAMPLE_WINDOWS = 4;
export const DATA_SAMPLE_BYTES = 64 * 1024;

/** A header larger than this is hostile, not a checkpoint (the Rust crate uses 100 MB). */
const MAX_HEADER_BYTES = 100 * 1024 * 1024;

export function numel(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

export class SafetensorsFile {
  readonly file: string;
  readonly tensors: Map<string, TensorInfo>;
  readonly metadata: Record<string, string>;
  readonly fileSize: number;
  /**
   * SHA-256 (hex) of the bytes the header was parsed from (the 8-byte length and the JSON): what an acceptance
   * record binds of a shard whose data a run never reads (generate from an FP16 cache: names and shapes only)
   */
  readonly headerSha256: string;
  /** where the data begins: 8 + the header's length */
  readonly dataStart: number;
  private fd: number | undefined;

  private constructor(file: string, tensors: Map<string, TensorInfo>, metadata: Record<string, string>, size: number, fd: number, headerSha256: string, dataStart: number) {
    this.file = file;
    this.tensors = tensors;
    this.metadata = metadata;
    this.fileSize = size;
    this.fd = fd;
    this.headerSha256 = headerSha256;
    this.dataStart = dataStart;
  }

  static open(file: string): SafetensorsFile {
    const shown = file;
    const fd = openRegular(file);
    try {
      const size = fs.fstatSync(fd).size;
      if (size < 8) throw new InputError(`truncated: ${size} bytes, too short for the 8-byte header length`, { file: shown });
      const lenBuf = Buffer.alloc(8);
      fs.readSync(fd, lenBuf, 0, 8, 0);
      const headerLen = lenBuf.readBigUInt64LE(0);
      if (headerLen > BigInt(MAX_HEADER_BYTES)) throw new InputError(`header length ${headerLen} exceeds the ${MAX_HEADER_BYTES}-byte limit`, { file: shown });
      const n = Number(headerLen);
      if (8 + n > size) throw new InputError(`truncated: header length ${n} runs past the end of the ${size}-byte file`, { file: shown });
      const hb = Buffer.alloc(n);
      fs.readSync(fd, hb, 0, n, 8);
      const text = utf8Text(hb, { file: shown }, 'the header');
      let header: unknown;
      try {
        header = JSON.parse(text);
      } catch {
        throw new InputError('header is not valid JSON', { file: shown });
      }
      if (header === null || typeof header !== 'object' || Array.isArray(header)) throw new InputError('header is not a JSON object', { file: shown });
      const dataStart = 8 + n;
      const dataLen = size - dataStart;
      const { tensors, metadata } = parseHeader(header as Record<string, unknown>, shown, dataStart, dataLen);
      return new SafetensorsFile(file, tensors, metadata, size, fd, createHash('sha256').update(lenBuf).update(hb).digest('hex'), dataStart);
    } catch (e) {
      fs.closeSync(fd);
      throw e;
    }
  }

  get(name: string): TensorInfo | undefined {
    return this.tensors.get(name);
  }

  /** the open file descriptor every read goes through (the fingerprint hashes through it too) */
  get descriptor(): number {
    if (this.fd === undefined) throw new Error(`${this.file} is closed`);
    return this.fd;
  }

  /** Read one tensor's bytes (8-byte aligned: a fresh copy, or inside withReadPool a recycled one or a mapping). */
  read(info: TensorInfo): Uint8Array {
    return this.readRange(info, 0, info.end - info.begin);
  }

  /** Read `length` bytes starting `offset` bytes into a tensor (row slices of embeddings and heads). */
  readRange(info: TensorInfo, offset: number, length: number): Uint8Array {
    if (this.fd === undefined) throw new Error(`${this.file} is closed`);
    if (offset < 0 || length < 0 || info.begin + offset + length > info.end) {
      throw new InputError(`read of [${offset}, ${offset + length}) is outside the tensor's ${info.end - info.begin} bytes`, { file: this.file, tensor: info.name });
    }
    // inside a pool's scope a large read is a mapping of the page cache's pages (ReadPool.mapRead: no copy, no fresh memory)
    const mapped = activeReadPool()?.mapRead(this.fd, info.begin + offset, length);
    if (mapped) return mapped;
    const buf = readBuffer(length);
    this.readInto(this.fd, info, offset, buf);
    return buf;
  }

  /** buf ← the file's bytes [info.begin + offset, + buf.length) through fd; a file that ends first is bad input */
  /**
   * SHA-256 (hex) of a sample of the data: DATA_SAMPLE_WINDOWS windows of DATA_SAMPLE_BYTES spread evenly from the
   * data's first byte to its last (all of it when shorter), read now through the descriptor. A record binds it beside
   * the header (harness/gate/deferred.ts): a checkpoint of the same layout whose weights differ (a fine-tune, another
   * quantization, a later revision in the same folder) has the same header and sizes, but not these bytes.
   */
  dataSampleSha256(): string {
    if (this.fd === undefined) throw new Error(`${this.file} is closed`);
    const start = this.dataStart;
    const len = this.fileSize - start;
    const h = createHash('sha256');
    const take = (at: number, n: number) => {
      const b = Buffer.alloc(n);
      let done = 0;
      while (done < n) {
        const got = fs.readSync(this.fd!, b, done, n - done, at + done);
        if (got === 0) throw new InputError('file shrank while reading', { file: this.file });
        done += got;
      }
      h.update(b);
    };
    if (len <= DATA_SAMPLE_WINDOWS * DATA_SAMPLE_BYTES) take(start, len);
    else for (let i = 0; i < DATA_SAMPLE_WINDOWS; i++) take(start + Math.floor((i * (len - DATA_SAMPLE_BYTES)) / (DATA_SAMPLE_WINDOWS - 1)), DATA_SAMPLE_BYTES);
    return h.digest('hex');
  }

  private readInto(fd: number, info: TensorInfo, offset: number, buf: Uint8Array): void {
    let done = 0;
    while (done < buf.length) {
      const got = fs.readSync(fd, buf, done, buf.length - done, info.begin + offset + done);
      if (got === 0) throw new InputError('file shrank while reading', { file: this.file, tensor: info.name });
      done += got;
    }
  }

  /**
   * A read left to the caller: a buffer for the tensor (8-byte aligned; inside withReadPool the pool's, a large
   * one taking no memory unless filled: ReadPool.reserve), not filled, with where its bytes start in the file, for
   * a native pass that reads them as it goes (the weights check's fused read). fill() reads them here instead, as
   * read() would.
   */
  reserve(info: TensorInfo): DeferredRead {
    if (this.fd === undefined) throw new Error(`${this.file} is closed`);
    const length = info.end - info.begin;
    const bytes = activeReadPool()?.reserve(length) ?? readBuffer(length);
    const fd = this.fd;
    return {
      bytes, fd, offset: info.begin, file: this.file,
      fill: () => {
        markWritten(bytes);  // the pool then unmaps the buffer when handed back, rather than keep it for another
        this.readInto(fd, info, 0, bytes);
      },
    };
  }

  /**
   * One tensor's bytes mapped from the file (harness/io/map.ts) instead of copied, for tensors held for a whole
   * run: a view of the page cache until written, written pages private to this process. A read copy where the
   * start is not 8-byte aligned (the reads' contract) or the range cannot be mapped. `populate`: every page mapped
   * now (mapPopulated), for a tensor about to be read whole; otherwise pages map as they are touched.
   */
  map(info: TensorInfo, populate = false): Uint8Array {
    return this.mapRange(info, 0, info.end - info.begin, populate);
  }

  /** `length` bytes from `offset` into a tensor, mapped as map() does (head chunks of the FP16 cache). */
  mapRange(info: TensorInfo, offset: number, length: number, populate = false): Uint8Array {
    if (this.fd === undefined) throw new Error(`${this.file} is closed`);
    const at = info.begin + offset;
    if (offset < 0 || length <= 0 || at + length > info.end || at % 8 !== 0) return this.readRange(info, offset, length);
    const populated = populate ? mapPopulated(this.fd, at, length) : null;
    if (populated !== null) return new Uint8Array(populated);
    return mapRange(this.fd, at, length) ?? this.readRange(info, offset, length);
  }

  close(): void {
    if (this.fd !== undefined) fs.closeSync(this.fd);
    this.fd = undefined;
  }
}

/** The safetensors files of one folder, each opened (header parsed) on first use and kept open until close(). */
export class SafetensorsFolder {
  private readonly open = new Map<string, SafetensorsFile>();

  constructor(readonly dir: string) {}

  /** `file`: a name inside the folder */
  get(file: string): SafetensorsFile {
    let f = this.open.get(file);
    if (f === undefined) {
      f = SafetensorsFile.open(path.join(this.dir, file));
      this.open.set(file, f);
    }
    return f;
  }

  close(): void {
    for (const f of this.open.values()) f.close();
    this.open.clear();
  }
}

function parseHeader(header: Record<string, unknown>, file: string, dataStart: number, dataLen: number) {
  const tensors = new Map<string, TensorInfo>();
  let metadata: Record<string, string> = {};
  const spans: Array<[number, number, string]> = [];
  for (const [name, raw] of Object.entries(header)) {
    if (name === '__metadata__') {
      if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new InputError('__metadata__ is not an object', { file });
      for (const [k, v] of Object.entries(raw as Record<string, unknown>)) {
        if (typeof v !== 'string') throw new InputError(`__metadata__.${k} is not a string`, { file });
      }
      metadata = raw as Record<string, string>;
      continue;
    }
    const where = { file, tensor: name };
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new InputError('entry is not an object', where);
    const entry = raw as Record<string, unknown>;
    const { dtype, shape, data_offsets: offsets } = entry;
    if (!isDType(dtype)) throw new InputError(`unknown dtype ${JSON.stringify(dtype)}`, where);
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new InputError(`shape ${JSON.stringify(shape)} is not a list of non-negative integers`, where);
    }
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isSafeInteger(o) && o >= 0)) {
      throw new InputError(`data_offsets ${JSON.stringify(offsets)} is not a pair of non-negative integers`, where);
    }
    const [b, e] = offsets as [number, number];
    if (e < b) throw new InputError(`data_offsets [${b}, ${e}] end before they begin`, where);
    if (e > dataLen) throw new InputError(`data_offsets [${b}, ${e}] run past the ${dataLen} data bytes (file truncated?)`, where);
    const count = numel(shape as number[]);
    const want = count * DTYPE_BYTES[dtype];
    if (!Number.isSafeInteger(want) || want !== e - b) {
      throw new InputError(`${dtype}${JSON.stringify(shape)} needs ${want} bytes but data_offsets hold ${e - b}`, where);
    }
    spans.push([b, e, name]);
    tensors.set(name, { name, dtype, shape: shape as number[], begin: dataStart + b, end: dataStart + e, file });
  }
  // Like the Rust crate: the data section must be covered exactly, with no overlap and no hole.
  spans.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let cursor = 0;
  for (const [b, e, name] of spans) {
    if (b < cursor) throw new InputError(`data_offsets [${b}, ${e}] overlap the previous tensor`, { file, tensor: name });
    if (b > cursor) throw new InputError(`hole in the data section before offset ${b}`, { file, tensor: name });
    cursor = e;
  }
  if (cursor !== dataLen) throw new InputError(`data section has ${dataLen} bytes but tensors cover ${cursor}`, { file });
  return { tensors, metadata };
}

export interface TensorToWrite {
  name: string;
  dtype: DType;
  shape: number[];
  data: Uint8Array;
}

/** Serialize tensors into safetensors bytes (header padded with spaces to a multiple of 8, like the reference writer). */
export function encodeSafetensors(tensors: TensorToWrite[], metadata: Record<string, string> = { format: 'pt' }): Buffer {
  // a null-prototype object: a tensor named "__proto__" is a key like any other (found by the codec property test)
  const header = Object.assign(Object.create(null) as Record<string, unknown>, { __metadata__: metadata });
  let offset = 0;
  for (const t of tensors) {
    if (Object.hasOwn(header, t.name)) throw new Error(`encodeSafetensors: duplicate or reserved tensor name ${JSON.stringify(t.name)}`);
    const want = numel(t.shape) * DTYPE_BYTES[t.dtype];
    if (want !== t.data.byteLength) throw new Error(`${t.name}: ${t.dtype}${JSON.stringify(t.shape)} needs ${want} bytes, got ${t.data.byteLength}`);
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + want] };
    offset += want;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (Buffer.byteLength(json) % 8)) % 8);
  const hb = Buffer.from(json, 'utf8');
  const out = Buffer.alloc(8 + hb.length + offset);
  out.writeBigUInt64LE(BigInt(hb.length), 0);
  hb.copy(out, 8);
  let at = 8 + hb.length;
  for (const t of tensors) {
    out.set(t.data, at);
    at += t.data.byteLength;
  }
  return out;
}

/** The one atomic writer (harness/io/writer.ts): re-exported here for the writers of safetensors files. */
export { writeFileAtomic };

export function writeSafetensors(file: string, tensors: TensorToWrite[], metadata?: Record<string, string>): void {
  writeFileAtomic(file, encodeSafetensors(tensors, metadata));
}
