/**
 * Inputs are opened only when they are regular files. A FIFO named `config.json` or a shard that is a
 * directory, a device or a socket would block forever (FIFO), fail deep inside a read with EISDIR (exit 4)
 * or stream without end (/dev/zero). The path is opened with O_NONBLOCK (so opening a FIFO cannot hang),
 * then the descriptor itself is checked with fstat: what is read is what was checked. Symlinks are
 * followed (Hugging Face caches link every file to a blob).
 */
import * as fs from 'node:fs';
import { InputError } from '../errors.js';

function kind(st: fs.Stats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isSocket()) return 'a socket';
  if (st.isCharacterDevice() || st.isBlockDevice()) return 'a device';
  return 'not a regular file';
}

/**
 * Which file a descriptor reads, as it is now: device, inode, size, mtime and ctime. A write, a truncate or a metadata
 * change moves the ctime, which no one can set back, so a file pinned by this before it is verified and found with it
 * later was not written since, but through a shared mapping whose pages were already dirty (the kernel moves the
 * times on a page's first write only).
 */
export function identityOf(fd: number): string {
  const st = fs.fstatSync(fd, { bigint: true });
  return `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
}

/** Open `file` read-only; it must be a regular file. The caller closes the descriptor. */
export function openRegular(file: string): number {
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EISDIR') throw new InputError('is a directory, not a file', { file });
    throw new InputError(`cannot open: ${code ?? String(e)}`, { file });
  }
  const st = fs.fstatSync(fd);
  if (!st.isFile()) {
    fs.closeSync(fd);
    throw new InputError(`is ${kind(st)}, not a regular file`, { file });
  }
  return fd;
}

/** The whole text of a regular file (config.json, an index, tokenizer.json). */
export function readRegularText(file: string): string {
  return utf8Text(readRegularBytes(file), { file });
}

const STRICT_UTF8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Bytes as UTF-8 text, or an InputError: JSON is UTF-8 (RFC 8259), and Python's json.load and the Rust
 * safetensors crate refuse what is not, where Buffer.toString would quietly substitute U+FFFD and read a
 * different name or value than the producer wrote.
 */
export function utf8Text(bytes: Uint8Array, where: { file: string; tensor?: string }, what = 'the file'): string {
  try {
    return STRICT_UTF8.decode(bytes);
  } catch {
    throw new InputError(`${what} is not valid UTF-8`, where);
  }
}

/** The bytes of a regular file (FIFOs, devices and directories refused, as openRegular does). */
export function readRegularBytes(file: string): Buffer {
  const fd = openRegular(file);
  try {
    return fs.readFileSync(fd);
  } catch (e) {
    throw new InputError(`cannot read: ${(e as NodeJS.ErrnoException).code ?? String(e)}`, { file });
  } finally {
    fs.closeSync(fd);
  }
}
