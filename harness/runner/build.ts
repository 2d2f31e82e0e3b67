/**
 * The build of the tool a run used: what decides the bits of the device path and of the reference beyond the
 * checkpoint and the run's options. A passed weights check is reused (harness/weights/reuse.ts), and an acceptance
 * record unlocks generation (harness/gate/record.ts), only under the build that produced them.
 *
 * It covers both native addons' bytes, the backend (its kind; a GPU's architecture, HIP runtime and driver; the
 * backend's own native files, ld_hip.node and the code object it loaded), the modules this process runs, and the
 * tool version. The package version alone did not change with the code: a decoder's TypeScript (operand binding,
 * fault codes, format recognition) changes the bits as much as an addon does.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { packageRoot, toolVersion } from '../version.js';
import type { DeviceBackend } from './backend.js';

/** What of a backend enters the build (DeviceBackend's identity and files). */
export interface BuildBackend {
  /** 'emulated' or 'hip' */
  name: string;
  /** the GPU's gfx architecture */
  arch?: string;
  /** the emulation's compiler; a GPU's HIP runtime and driver and the code object's name */
  versions?: Record<string, string>;
  /** the backend's own native files (hip: ld_hip.node and the code object it loaded) */
  files?: readonly string[];
}

const fileDigests = new Map<string, string>();
/** SHA-256 of a file's bytes ('absent' when there is none), once per process and file identity (a rebuilt file is hashed again). */
function fileDigest(file: string): string {
  const st = fs.statSync(file, { throwIfNoEntry: false });
  if (st === undefined) return 'absent';
  const id = `${file}\0${st.dev}\0${st.ino}\0${st.size}\0${st.mtimeMs}\0${st.ctimeMs}`;
  let d = fileDigests.get(id);
  if (d === undefined) {
    d = createHash('sha256').update(fs.readFileSync(file)).digest('hex');
    fileDigests.set(id, d);
  }
  return d;
}

/** The folders whose modules take part in a run's numerics: the device path's, the reference's, and the harness that binds and compares. */
const CODE_DIRS = ['harness', 'device-hip', 'reference-cpu'];
/** Not code that runs: dependencies, native build outputs (hashed as files), tests. */
const NOT_CODE = new Set(['node_modules', 'build', 'test']);

/** SHA-256 over the modules under `root` in CODE_DIRS (.js and .ts, declarations excepted, or `files`), each by its path and bytes. */
export function moduleDigest(root: string, files = /\.(js|ts)$/): string {
  const h = createHash('sha256');
  const walk = (dir: string): void => {
    const entries = fs.existsSync(dir) ? fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)) : [];
    for (const e of entries) {
      const p = path.join(dir, e.name);
      if (e.isDirectory() && !NOT_CODE.has(e.name)) walk(p);
      else if (e.isFile() && files.test(e.name) && !e.name.endsWith('.d.ts')) h.update(`${path.relative(root, p)}\0`).update(fs.readFileSync(p)).update('\0');
    }
  };
  for (const d of CODE_DIRS) walk(path.join(root, d));
  return h.digest('hex');
}

let codeCache: string | null = null;
/** moduleDigest of the modules this process runs: the compiled JavaScript under dist/, or the TypeScript under vitest. */
const codeDigest = (): string => (codeCache ??= moduleDigest(path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')));

/** The build (`sha256:<hex>`) for a backend described by its parts. */
export function buildOf(backend: BuildBackend): string {
  const addons = ['ld_device', 'ld_reference'].map((name) => `${name}:${fileDigest(path.join(packageRoot(), 'device-hip', 'build', 'Release', `${name}.node`))}`);
  const files = (backend.files ?? []).map((f) => `${path.basename(f)}:${fileDigest(f)}`);
  const what = { addons, backend: { name: backend.name, arch: backend.arch ?? null, versions: backend.versions ?? null, files }, code: codeDigest(), tool: toolVersion() };
  return `sha256:${createHash('sha256').update(JSON.stringify(what)).digest('hex')}`;
}

let nativeCache: string | null = null;
/**
 * The build of a reference side (`gate --save-golden`, taken by a device shard's `--golden` on another machine):
 * the modules, the addons' sources and the tool version; not the backend (the reference does not run on it) nor
 * the addons' bytes (each machine compiles its own from those sources).
 */
export function referenceBuild(): string {
  nativeCache ??= moduleDigest(packageRoot(), /\.(cc|h|hip|gyp)$/);
  return `sha256:${createHash('sha256').update(JSON.stringify({ code: codeDigest(), native: nativeCache, tool: toolVersion() })).digest('hex')}`;
}

/** The build of a selected backend. */
export function backendBuild(b: DeviceBackend): string {
  const { name, arch, versions } = b.identity;
  return buildOf({ name, arch, versions, files: b.files });
}
