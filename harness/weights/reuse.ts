/**
 * Reusing a passed weights-first check (issue 15): on a real checkpoint the check streams every packed byte
 * (~160 GB), so a second `diff` of the same model with the same numerics build should not pay it again.
 *
 * A check is stored only when it passed — every tensor exact, no NaN code — and was run without an injected
 * fault, under $LAYERDIFF_CACHE_DIR or ~/.cache/layerdiff/weights/ (never inside the model directory: there the
 * check runs and nothing is stored). Its key is the checkpoint's content digest (BLAKE3 of every byte the
 * acceptance fingerprint covers: openCheckpointContentDigest in harness/gate/fingerprint.ts, itself cached by file
 * identity), the numerics key (numericsKey, below: the build and the kernel level) and the layers checked. A check
 * that runs and fails removes what its key stored, so a pass can never outlive a check of the same key that failed
 * (a change the key does not see, a recheck). A stored check is a hint, as the fingerprint cache is: with
 * LAYERDIFF_SIGNING_KEY it is MACed and an entry without a valid MAC is ignored; without a key, anyone who can
 * write the cache could claim a pass. That is acceptable for `diff`, whose verdict never rests on the weights
 * check (every stage still runs, and a wrong decoder fails there), and `gate` never reuses: the acceptance run
 * checks again. An entry that is not a passed check's record in every field is ignored like a missing one.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { FORMATS, FUSED_FORMATS } from '../formats/registry.js';
import { readRegularText } from '../io/regular.js';
import { isInside, realish, writeFileAtomic } from '../io/writer.js';
import { toolVersion } from '../version.js';
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

/**
 * The numerics key of a check: the build (harness/runner/build.ts: addons, backend and its files, the modules that
 * run) and the emulation's kernel level, which chooses other kernels (every level is tested to give the same bits,
 * but a check vouches for the kernels it ran; a cache folder may be shared by hosts of different CPUs).
 */
export function numericsKey(build: string, simd: string | undefined): string {
  return `sha256:${createHash('sha256').update(`${build}\n${simd ?? 'none'}`).digest('hex')}`;
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
/** every stored form a check can meet: the registry's, and those of fused tensors (gpt-oss's experts) */
const ENCODINGS = new Set<string>([...FORMATS, ...FUSED_FORMATS].filter((f) => f.id !== 'plain').map((f) => f.id));

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
    s = JSON.parse(readRegularText(file)) as Stored; // a FIFO planted in the cache is skipped, not read until it ends
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
    writeFileAtomic(file, JSON.stringify(stored)); // makes the cache's folders (makeDirs)
  } catch {
    // a cache is only ever an optimisation
  }
}
