/**
 * Reusing a passed weights-first check (issue 15): on a real checkpoint the check streams every packed byte
 * (~160 GB), so a second `diff` of the same model with the same numerics build should not pay it again.
 *
 * A check is stored only when it passed — every tensor exact, no NaN code — and was run without an injected
 * fault, under $LAYERDIFF_CACHE_DIR or ~/.cache/layerdiff/weights/ (never inside the model directory: there the
 * check runs and nothing is stored). Its key is the checkpoint's content digest (BLAKE3 of every byte the
 * acceptance fingerprint covers: openCheckpointContentDigest in harness/gate/fingerprint.ts, itself cached by file
 * identity), the numerics build (numericsBuild, below: everything that decides either side's bits) and the layers
 * checked. A check that runs and fails removes what its key stored, so a pass can never outlive a check of the same
 * key that failed (a change the key does not see, a recheck). A stored check is a hint, as the fingerprint cache is:
 * with LAYERDIFF_SIGNING_KEY it is MACed and an entry without a valid MAC is ignored; without a key, anyone who can
 * write the cache could claim a pass. That is acceptable for `diff`, whose verdict never rests on the weights
 * check (every stage still runs, and a wrong decoder fails there), and `gate` never reuses: the acceptance run
 * checks again. An entry that is not a passed check's record in every field is ignored like a missing one.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { FORMATS } from '../formats/registry.js';
import { isInside, realish, writeFileAtomic } from '../io/writer.js';
import { packageRoot, toolVersion } from '../version.js';
import type { TensorCheck, WeightsReport } from './check.js';

const SCHEMA = 'layerdiff.weights-check/2';

export interface WeightsCheckKey {
  fingerprint: string;
  numerics: string;
  layers: [number, number] | null;
  num_layers: number;
}

interface Stored {
  schema: typeof SCHEMA;
  key: WeightsCheckKey;
  /** when the check ran, and which tool */
  run: { at: string; tool: string };
  report: WeightsReport;
  mac?: string;
}

/** What decides the device side's bits beyond this package's own code: the backend as the report names it, and its files. */
export interface NumericsBackend {
  /** 'emulated' or 'hip' */
  name: string;
  /** the emulation's kernel level ('avx512+vbmi', 'avx512', 'avx2', 'scalar') */
  simd?: string;
  /** the GPU's gfx architecture, its HIP runtime and driver, the code object's name */
  arch?: string;
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

/** The folders whose modules take part in a check: the device emulation's and the reference's, and the harness that binds and compares. */
const CODE_DIRS = ['harness', 'device-hip', 'reference-cpu'];
/** Not code that runs in a check: dependencies, native build outputs (hashed as files), tests. */
const NOT_CODE = new Set(['node_modules', 'build', 'test']);

/**
 * SHA-256 over the modules under `root` that take part in a check (CODE_DIRS, .js and .ts but declarations), each by
 * its path and bytes: the TypeScript side of both decoders (operand binding, fault codes, format recognition, the
 * compare's reading) changes the bits as much as the addons do, and the package version does not change with it.
 */
export function moduleDigest(root: string): string {
  const h = createHash('sha256');
  const walk = (dir: string): void => {
    const entries = fs.existsSync(dir) ? fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)) : [];
    for (const e of entries) {
      const p = path.join(dir, e.name);
      if (e.isDirectory() && !NOT_CODE.has(e.name)) walk(p);
      else if (e.isFile() && /\.(js|ts)$/.test(e.name) && !e.name.endsWith('.d.ts')) h.update(`${path.relative(root, p)}\0`).update(fs.readFileSync(p)).update('\0');
    }
  };
  for (const d of CODE_DIRS) walk(path.join(root, d));
  return h.digest('hex');
}

let codeCache: string | null = null;
/** moduleDigest of the modules this process runs: the compiled JavaScript under dist/, or the TypeScript under vitest. */
const codeDigest = (): string => (codeCache ??= moduleDigest(path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')));

/**
 * The numerics build: both native addons' bytes, the backend (its kind, kernel level, GPU architecture and runtime,
 * its own native files), the modules this process runs, and the tool version. Any of them can change a decoded bit,
 * and a cache folder may be shared by hosts of different CPUs or GPUs.
 */
export function numericsBuild(backend: NumericsBackend): string {
  const addons = ['ld_device', 'ld_reference'].map((name) => `${name}:${fileDigest(path.join(packageRoot(), 'device-hip', 'build', 'Release', `${name}.node`))}`);
  const files = (backend.files ?? []).map((f) => `${path.basename(f)}:${fileDigest(f)}`);
  const what = { addons, backend: { name: backend.name, simd: backend.simd ?? null, arch: backend.arch ?? null, versions: backend.versions ?? null, files }, code: codeDigest(), tool: toolVersion() };
  return `sha256:${createHash('sha256').update(JSON.stringify(what)).digest('hex')}`;
}

export function weightsCacheDir(): string {
  const dir = process.env.LAYERDIFF_CACHE_DIR;
  return path.join(dir !== undefined && dir !== '' ? dir : path.join(os.homedir(), '.cache', 'layerdiff'), 'weights');
}

const fileOf = (key: WeightsCheckKey) => path.join(weightsCacheDir(), `${createHash('sha256').update(JSON.stringify(key)).digest('hex')}.json`);

/** Whether the weights cache would lie inside the model directory, which no command writes to (then nothing is stored or read there). */
export function weightsCacheInside(modelDir: string): boolean {
  return isInside(realish(weightsCacheDir()), realish(modelDir));
}

function mac(k: string, body: Omit<Stored, 'mac'>): string {
  return createHmac('sha256', k).update(JSON.stringify(body)).digest('hex');
}

const signingKey = () => (process.env.LAYERDIFF_SIGNING_KEY !== undefined && process.env.LAYERDIFF_SIGNING_KEY !== '' ? process.env.LAYERDIFF_SIGNING_KEY : null);

const count = (x: unknown): x is number => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;
const pair = (x: unknown): x is [number, number] => Array.isArray(x) && x.length === 2 && count(x[0]) && count(x[1]);
const isObject = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);
const ENCODINGS = new Set<string>(FORMATS.filter((f) => f.id !== 'plain').map((f) => f.id));

/** A tensor's record as a passed check writes it: exact, no bad block, no NaN code, nothing to explain. */
function passedTensor(t: unknown): t is TensorCheck {
  if (!isObject(t) || !isObject(t.scale)) return false;
  const s = t.scale;
  return typeof t.name === 'string' && count(t.layer) && typeof t.format === 'string' && typeof t.encoding === 'string' && ENCODINGS.has(t.encoding)
    && pair(t.shape) && typeof s.name === 'string' && typeof s.dtype === 'string' && pair(s.grid) && count(t.blocks)
    && t.exact === true && t.bad_blocks === 0 && t.first_bad_block === null && t.max_abs === 0 && t.nan_codes === 0 && t.nan_in === null
    && count(t.overflow_blocks) && count(t.underflow_blocks) && count(t.device_nonfinite) && Array.isArray(t.matches) && t.matches.length === 0 && t.example === null;
}

/** A whole report as a passed check writes it, every field of the type it has (a renderer reads them all). */
function passedReport(r: unknown): r is WeightsReport {
  if (!isObject(r) || !isObject(r.by_format) || !Array.isArray(r.tensors) || r.reused !== undefined) return false;
  const byFormat = Object.entries(r.by_format).every(([id, v]) => ENCODINGS.has(id) && isObject(v) && count(v.tensors) && count(v.blocks) && count(v.overflow_blocks) && count(v.underflow_blocks));
  return byFormat && pair(r.layers) && count(r.checked) && r.checked > 0 && r.exact === r.checked && r.mismatched === 0 && r.nan_codes === 0
    && count(r.overflow_blocks) && count(r.underflow_blocks) && count(r.skipped) && typeof r.time_ms === 'number' && Number.isFinite(r.time_ms)
    && r.tensors.length === r.checked && r.tensors.every(passedTensor);
}

/** The stored passed check for this key, marked as reused; null when there is none (or it is not to be trusted). */
export function reusedCheck(key: WeightsCheckKey, modelDir: string): WeightsReport | null {
  if (weightsCacheInside(modelDir)) return null;
  const file = fileOf(key);
  let s: Stored;
  try {
    s = JSON.parse(fs.readFileSync(file, 'utf8')) as Stored;
  } catch {
    return null;
  }
  if (!isObject(s) || s.schema !== SCHEMA || JSON.stringify(s.key) !== JSON.stringify(key)) return null;
  const k = signingKey();
  if (k !== null) {
    const { mac: m, ...body } = s;
    if (typeof m !== 'string' || !/^[0-9a-f]{64}$/.test(m) || !timingSafeEqual(Buffer.from(m, 'hex'), Buffer.from(mac(k, body), 'hex'))) return null;
  }
  if (!isObject(s.run) || typeof s.run.at !== 'string' || typeof s.run.tool !== 'string' || !passedReport(s.report)) return null;
  return { ...s.report, time_ms: 0, reused: { at: s.run.at, tool: s.run.tool, fingerprint: key.fingerprint, file } };
}

const passed = (r: WeightsReport) => r.checked > 0 && r.exact === r.checked && r.nan_codes === 0;

/**
 * Record a check that ran for this key (not a reused one): a pass without a fault is stored; a failure removes
 * what the key stored. A cache error is not fatal, and nothing is written inside the model directory.
 */
export function recordCheck(key: WeightsCheckKey, report: WeightsReport, faulted: boolean, modelDir: string): void {
  if (faulted || report.reused !== undefined || weightsCacheInside(modelDir)) return;
  const file = fileOf(key);
  try {
    if (!passed(report)) {
      fs.rmSync(file, { force: true });
      return;
    }
    const body: Omit<Stored, 'mac'> = { schema: SCHEMA, key, run: { at: new Date().toISOString(), tool: `layerdiff ${toolVersion()}` }, report };
    const k = signingKey();
    const stored: Stored = k === null ? body : { ...body, mac: mac(k, body) };
    fs.mkdirSync(weightsCacheDir(), { recursive: true });
    writeFileAtomic(file, JSON.stringify(stored));
  } catch {
    // a cache is only ever an optimisation
  }
}
