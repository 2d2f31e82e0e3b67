/**
 * The one writer of every output file (reports, dumps, golden runs, repro bundles, records, caches): a file
 * appears complete or not at all, and it only ever replaces a previous regular file. Each is written to a
 * temp file in the target's folder and renamed over the target; a target that is a symlink, a directory, a
 * device, a FIFO or a socket is refused (a rename would silently turn `/dev/stdout` or a user's link into a
 * plain file). `-` writes to stdout instead (`--json -`).
 *
 * Every temp name carries `layerdiff-partial-<pid>`, so whoever supervises the process (cli/supervise.ts)
 * can remove what a killed run left behind, and a later run can tell a dead run's litter from a live one's.
 * Failures of the output filesystem (full, read-only, no permission) are bad input naming the file (exit 2),
 * and `checkOutput*` finds them before a run starts.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { InputError } from '../errors.js';

/** `--json -`: the report goes to stdout. */
export const STDOUT = '-';

export const PARTIAL_TAG = 'layerdiff-partial-';

let seq = 0;

/** A temp name next to `target`, tagged with this process's id. */
export function partialName(target: string, suffix = '.tmp'): string {
  return path.join(path.dirname(target), `.${path.basename(target)}.${PARTIAL_TAG}${process.pid}.${seq++}${suffix}`);
}

/** The pid a partial name was made by, or null when `name` is not one. */
export function partialPid(name: string): number | null {
  const m = new RegExp(`\\.${PARTIAL_TAG}(\\d+)(?:\\.|$)`).exec(name);
  return m === null ? null : Number(m[1]);
}

const ERRNO_TEXT: Record<string, string> = {
  ENOSPC: 'no space left on the device',
  EDQUOT: 'disk quota exceeded',
  EROFS: 'the filesystem is read-only',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  ENOTDIR: 'a part of the path is not a directory',
  EISDIR: 'is a directory',
  ENAMETOOLONG: 'the name is too long',
  ELOOP: 'too many levels of symbolic links',
  ENOENT: 'no such file or folder',
  EEXIST: 'exists',
  EIO: 'the device reported an input/output error',
};

/**
 * A write that the filesystem refused (full, over quota, read-only, failing) wherever it happened, as one line
 * naming the file (exit 2), not an internal error to report: the last resort for writers that do not wrap their
 * own errors (cli/main.ts). null when `e` is not such a failure.
 */
export function filesystemWriteError(e: unknown): InputError | null {
  const x = e as NodeJS.ErrnoException | null;
  const code = x?.code;
  if (code === undefined || !['ENOSPC', 'EDQUOT', 'EROFS', 'EFBIG'].includes(code)) return null; // EIO: a read fails so too
  return new InputError(`cannot write: ${ERRNO_TEXT[code] ?? 'the file is too large for the filesystem'} (${code})`, { file: x?.path ?? (x as { dest?: string } | null)?.dest ?? 'an output' });
}

/** An errno from writing an output, as one line naming the file (exit 2); anything else stays a bug. */
export function outputError(e: unknown, file: string, what = 'cannot write'): Error {
  const code = (e as NodeJS.ErrnoException)?.code;
  if (code !== undefined && code in ERRNO_TEXT) return new InputError(`${what}: ${ERRNO_TEXT[code]} (${code})`, { file });
  return e instanceof Error ? e : new Error(String(e));
}

function kindOf(st: fs.Stats): string {
  if (st.isFile()) return 'a regular file';
  if (st.isSymbolicLink()) return 'a symbolic link';
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isSocket()) return 'a socket';
  if (st.isCharacterDevice() || st.isBlockDevice()) return 'a device';
  return 'not a regular file';
}

function lstatOrNull(p: string): fs.Stats | null {
  try {
    return fs.lstatSync(p);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw outputError(e, p, 'cannot check');
  }
}

/** The target of a file write must be nothing or a regular file (not followed through a symlink). */
export function assertFileTarget(file: string, option: string): void {
  const st = lstatOrNull(file);
  if (st === null || st.isFile()) return;
  const hint = st.isSymbolicLink() ? ` (give the path it points to${option.startsWith('--json') ? ', or - for stdout' : ''})` : '';
  throw new InputError(`${option}: refusing to replace ${kindOf(st)}; give a new path or a regular file${hint}`, { file });
}

/** The nearest existing folder of `p` (p itself when it is one). */
function nearestDir(p: string): string {
  let d = path.resolve(p);
  for (;;) {
    const st = lstatOrNull(d);
    if (st !== null) {
      let target: fs.Stats;
      try {
        target = fs.statSync(d);
      } catch (e) {
        throw new InputError(`is a symbolic link to nothing that can be written into (${(e as NodeJS.ErrnoException).code ?? String(e)})`, { file: d });
      }
      if (!target.isDirectory()) throw new InputError('is not a directory', { file: d });
      return d;
    }
    const up = path.dirname(d);
    if (up === d) return d;
    d = up;
  }
}

/**
 * Before a run: can a file be created in `dir` (or the folder that will hold it)? A probe file is written
 * (a few bytes, so a full filesystem shows as well as a read-only one) and removed at once.
 */
export function probeWritable(dir: string, option: string): void {
  const at = nearestDir(dir);
  const probe = partialName(path.join(at, 'probe'));
  try {
    const fd = fs.openSync(probe, 'wx');
    try {
      fs.writeSync(fd, Buffer.alloc(4096));
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  } catch (e) {
    throw outputError(e, at, `${option}: cannot write here`);
  } finally {
    fs.rmSync(probe, { force: true });
  }
}

/** Before a run: `file` (an output file, or `-`) can be written and replaces nothing but a regular file. */
export function checkOutputFile(file: string, option: string): void {
  if (file === STDOUT) return;
  if (file === '') throw new InputError(`${option}: give a file path (or - for stdout)`);
  assertFileTarget(file, option);
  probeWritable(path.dirname(path.resolve(file)), option);
}

/** Before a run: `dir` (an output folder) is a folder or nothing, and writable. */
export function checkOutputDir(dir: string, option: string): void {
  if (dir === '') throw new InputError(`${option}: give a folder path`);
  const st = lstatOrNull(dir);
  if (st !== null && !st.isDirectory()) throw new InputError(`${option}: exists and is ${kindOf(st)}, not a folder`, { file: dir });
  probeWritable(st !== null ? dir : path.dirname(path.resolve(dir)), option);
}

/** Write all of `data` to fd. */
function writeAllSync(fd: number, data: Uint8Array): void {
  let off = 0;
  while (off < data.byteLength) off += fs.writeSync(fd, data, off, data.byteLength - off);
}

/**
 * Write `data` to `file` atomically (or to stdout for `-`): temp file in the same folder, then rename over
 * nothing or a regular file. Errors of the output filesystem are InputErrors naming the file.
 */
export function writeFileAtomic(file: string, data: string | Uint8Array, option = 'output'): void {
  const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
  if (file === STDOUT) {
    writeAllSync(1, bytes);
    return;
  }
  assertFileTarget(file, option);
  const dir = path.dirname(file);
  const tmp = partialName(file);
  try {
    makeDirs(dir);
    const fd = fs.openSync(tmp, 'wx');
    try {
      writeAllSync(fd, bytes);
    } finally {
      fs.closeSync(fd);
    }
    assertFileTarget(file, option); // again: something may have been put there during the run
    fs.renameSync(tmp, file);
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    throw outputError(e, file);
  }
}

/**
 * Flush a folder an output was written into to the disk: every regular file's data (fdatasync) and then the
 * folder itself (its entries), so a rename that publishes the folder afterwards publishes bytes that are on the
 * disk, not only in the page cache. Why: a convert that returned with gigabytes still dirty could, after a power
 * loss, leave a cache whose files are empty or torn where the previous good cache was (the manifest's digests
 * would then refuse it, but the previous cache would be gone), and its writeback competed with whatever ran next.
 * Errors (a full disk shows here at the latest) are one line naming the file.
 */
export function syncFolder(dir: string): void {
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch (e) {
    throw outputError(e, dir, 'cannot flush to the disk');
  }
  // regular files only: a FIFO would block the open, and a link leads out of the folder
  for (const e of entries) if (e.isFile()) flush(path.join(dir, e.name), true);
  syncEntries(dir);
}

/** Flush a folder's entries only (a rename into it), never its files: the folder that receives a published output. */
export function syncEntries(dir: string): void {
  flush(dir, false);
}

function flush(p: string, data: boolean): void {
  let fd: number | undefined;
  try {
    fd = fs.openSync(p, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
    if (data) fs.fdatasyncSync(fd);
    else fs.fsyncSync(fd);
  } catch (e) {
    throw outputError(e, p, 'cannot flush to the disk');
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

/** A file written in pieces (a streamed safetensors file): temp file until `commit`, removed by `abort`. */
export class PartialFile {
  readonly tmp: string;
  private fd: number | undefined;

  constructor(
    readonly file: string,
    private readonly option = 'output',
  ) {
    assertFileTarget(file, option);
    this.tmp = partialName(file);
    try {
      makeDirs(path.dirname(file));
      this.fd = fs.openSync(this.tmp, 'wx');
    } catch (e) {
      throw outputError(e, file);
    }
  }

  write(b: Uint8Array): void {
    if (this.fd === undefined) throw new Error(`${this.file}: writer is closed`);
    try {
      writeAllSync(this.fd, b);
    } catch (e) {
      this.abort();
      throw outputError(e, this.file);
    }
  }

  commit(): void {
    if (this.fd === undefined) throw new Error(`${this.file}: writer is closed`);
    try {
      fs.closeSync(this.fd);
      this.fd = undefined;
      assertFileTarget(this.file, this.option);
      fs.renameSync(this.tmp, this.file);
    } catch (e) {
      this.abort();
      throw outputError(e, this.file);
    }
  }

  abort(): void {
    if (this.fd !== undefined) fs.closeSync(this.fd);
    this.fd = undefined;
    fs.rmSync(this.tmp, { force: true });
  }
}

/** Is `pid` a running process (ours or someone else's)? */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Remove the partials of dead runs (or of `pid`) directly in `dir`. */
export function removePartials(dir: string, pid?: number): void {
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    const p = partialPid(name);
    if (p === null) continue;
    if (pid !== undefined ? p !== pid : p === process.pid || processAlive(p)) continue;
    // A previous output set aside during a swap (writeCache) whose replacement never arrived: put it back.
    const aside = /^\.(.+)\.layerdiff-partial-\d+\.\d+\.old$/.exec(name);
    if (aside !== null && !fs.existsSync(path.join(dir, aside[1]))) {
      fs.renameSync(path.join(dir, name), path.join(dir, aside[1]));
      continue;
    }
    fs.rmSync(path.join(dir, name), { recursive: true, force: true });
  }
}

/** Resolve symlinks of the longest existing prefix, so an alias of a folder is seen as that folder. */
export function realish(p: string): string {
  const abs = path.resolve(p);
  let head = abs;
  const tail: string[] = [];
  while (!fs.existsSync(head)) {
    const up = path.dirname(head);
    if (up === head) return abs;
    tail.unshift(path.basename(head));
    head = up;
  }
  return path.join(fs.realpathSync(head), ...tail);
}

/**
 * `mkdir -p`, one level at a time from the nearest folder that exists. Node's recursive mkdir loops forever where a
 * filesystem refuses a new folder with ENOENT although its parent exists (under /proc: LAYERDIFF_CACHE_DIR=/proc/x
 * hung every command); here that refusal is thrown at once, as any other.
 */
export function makeDirs(dir: string): void {
  const missing: string[] = [];
  for (let d = path.resolve(dir); !fs.existsSync(d); d = path.dirname(d)) {
    missing.push(d);
    if (path.dirname(d) === d) break;
  }
  for (const d of missing.reverse()) {
    try {
      fs.mkdirSync(d);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
  }
}

export function isInside(target: string, dir: string): boolean {
  const rel = path.relative(dir, target);
  // `..r.json` is a name inside dir; only `..` itself or `../…` leave it
  return rel === '' || (rel !== '..' && !rel.startsWith('..' + path.sep) && !path.isAbsolute(rel));
}

/** No command ever writes inside the model directory, also not through a symlinked alias of it or of the target. */
export function assertOutsideModel(target: string, modelDir: string): void {
  if (target === STDOUT) return;
  if (isInside(path.resolve(target), path.resolve(modelDir)) || isInside(realish(target), realish(modelDir))) {
    throw new InputError(`refusing to write ${target}: it is inside the model directory ${modelDir}, which layerdiff never modifies`);
  }
}

/** A path a command names, for assertDistinctPaths: the option that named it and whether it is a file or a folder. */
export interface NamedPath {
  option: string;
  path: string | undefined;
  /** 'shared': a folder the command only adds its own named files to (gate --reports), where other paths may live */
  kind: 'file' | 'dir' | 'shared';
}

/**
 * No output of a command is one of its inputs or lies inside an input folder, and no two outputs overlap (the same
 * file, or one inside another's folder): `--json pol.json` beside `--policy pol.json` replaced the policy with the
 * report, `gate --merge s1 --record s1/partial.json` a shard's partial with the record, `--dump d --save-golden d`
 * left half of each. Compared as realpaths (realish), so a symlinked alias is the same path. Checked before the
 * run; stdout (`-`) is no path.
 */
export function assertDistinctPaths(outputs: readonly NamedPath[], inputs: readonly NamedPath[] = []): void {
  const real = (xs: readonly NamedPath[]) => xs.filter((x) => x.path !== undefined && x.path !== STDOUT).map((x) => ({ ...x, real: realish(x.path!) }));
  const outs = real(outputs);
  const ins = real(inputs);
  for (let i = 0; i < outs.length; i++) {
    for (let j = i + 1; j < outs.length; j++) {
      const [a, b] = [outs[i], outs[j]];
      if (a.real === b.real) throw new InputError(`${a.option} and ${b.option} name the same path; give each output its own`, { file: a.path });
      for (const [outer, inner] of [[a, b], [b, a]] as const) {
        if (outer.kind === 'dir' && isInside(inner.real, outer.real)) throw new InputError(`${inner.option} ${inner.path} is inside ${outer.option}'s folder ${outer.path}; give each output its own place`, { file: inner.path });
      }
    }
    for (const input of ins) {
      const o = outs[i];
      if (o.real === input.real) throw new InputError(`${o.option} names ${input.option}'s input; the output would replace it`, { file: o.path });
      if (input.kind === 'dir' && isInside(o.real, input.real)) throw new InputError(`${o.option} ${o.path} is inside ${input.option}'s folder ${input.path}, an input this command reads`, { file: o.path });
      if (o.kind === 'dir' && isInside(input.real, o.real)) throw new InputError(`${input.option} ${input.path} is inside ${o.option}'s folder ${o.path}, which this command writes`, { file: input.path });
    }
  }
}

/** Every output of a command, checked before it runs: outside the model, the right kind, writable. */
export function checkOutputs(modelDir: string | null, outputs: readonly NamedPath[]): void {
  for (const o of outputs) {
    if (o.path === undefined) continue;
    if (modelDir !== null) assertOutsideModel(o.path, modelDir);
    if (o.kind === 'file') checkOutputFile(o.path, o.option);
    else checkOutputDir(o.path, o.option);
  }
}
