/**
 * syncFolder / syncEntries (harness/io/writer.ts): what `layerdiff convert` flushes to the disk before its cache
 * replaces the previous one. Whether bytes reached the disk cannot be seen from here (that takes a power cut);
 * what can: only the folder's regular files are opened (a FIFO would block the open, a link would lead outside),
 * nothing is changed, and a folder that is not there is one line naming it.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InputError } from '../errors.js';
import { filesystemWriteError, syncEntries, syncFolder } from '../io/writer.js';
import { packageRoot } from '../version.js';

describe('syncFolder', () => {
  let tmp: string;
  beforeEach(() => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-sync-'));
  });
  afterEach(() => fs.rmSync(tmp, { recursive: true, force: true }));

  it.runIf(process.platform === 'linux')('flushes the regular files and passes by a FIFO, links and sub-folders without opening them', () => {
    const dir = path.join(tmp, 'cache');
    fs.mkdirSync(path.join(dir, 'sub'), { recursive: true });
    const bytes = Buffer.from(Array.from({ length: 70_000 }, (_, i) => (i * 7) & 255));
    fs.writeFileSync(path.join(dir, 'head.safetensors'), bytes);
    fs.writeFileSync(path.join(dir, 'manifest.json'), '{}\n');
    execFileSync('mkfifo', [path.join(dir, 'pipe')]);
    const outside = path.join(tmp, 'outside-pipe');
    execFileSync('mkfifo', [outside]);
    fs.symlinkSync(outside, path.join(dir, 'link'));
    const before = fs.readdirSync(dir).sort();
    // in a child with a time limit: opening either FIFO for reading would block, and would hang this worker
    const writer = path.join(packageRoot(), 'dist', 'harness', 'io', 'writer.js');
    const script = `import { syncEntries, syncFolder } from ${JSON.stringify(writer)}; syncFolder(${JSON.stringify(dir)}); syncEntries(${JSON.stringify(tmp)});`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000 });
    expect(r.signal, 'it returned (no open of a FIFO)').toBeNull();
    expect(r.status, r.stderr).toBe(0);
    expect(fs.readdirSync(dir).sort()).toEqual(before);
    expect(fs.readFileSync(path.join(dir, 'head.safetensors')).equals(bytes)).toBe(true);
    expect(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8')).toBe('{}\n');
  });

  it('a folder that is not there is one line naming it', () => {
    const gone = path.join(tmp, 'gone');
    expect(() => syncEntries(gone)).toThrow(InputError);
    expect(() => syncEntries(gone)).toThrow(/cannot flush to the disk/);
    expect(() => syncFolder(gone)).toThrow(InputError);
  });
});

describe('filesystemWriteError', () => {
  it('a full, over-quota, read-only or failing filesystem is a one-line InputError naming the file; other errors stay bugs', () => {
    const errno = (code: string, extra: Record<string, string> = {}) => Object.assign(new Error(`${code}: x`), { code, ...extra });
    expect(filesystemWriteError(errno('ENOSPC', { path: '/out/r.json' }))?.message).toBe('/out/r.json: cannot write: no space left on the device (ENOSPC)');
    expect(filesystemWriteError(errno('EROFS', { path: '/ro/x' }))?.message).toMatch(/^\/ro\/x: cannot write: the filesystem is read-only/);
    expect(filesystemWriteError(errno('EDQUOT', { dest: '/q/y' }))?.message).toMatch(/^\/q\/y: cannot write: disk quota exceeded/);
    expect(filesystemWriteError(errno('ENOSPC'))).toBeInstanceOf(InputError);
    for (const other of [errno('ENOENT', { path: '/x' }), errno('EBADF'), new TypeError('x is not a function'), null]) expect(filesystemWriteError(other)).toBeNull();
  });
});
