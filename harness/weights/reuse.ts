/**
 * Reusing a passed weights-first check (issue 15): on a real checkpoint the check streams every packed byte
 * (~160 GB), so a second `diff` of the same model with the same numerics build should not pay it again.
 *
 * A check is stored only when it passed — every tensor exact, no NaN code — and was run without an injected
 * fault, under $LAYERDIFF_CACHE_DIR or ~/.cache/layerdiff/weights/. Its key is the checkpoint's content
 * digest (BLAKE3 of every byte the acceptance fingerprint covers: openCheckpointContentDigest in
 * harness/gate/fingerprint.ts, itself cached by file identity), the numerics build (SHA-256 of both native
 * addons, the backend, the tool version) and the layers checked. A stored check is a hint, as the fingerprint cache is: with LAYERDIFF_SIGNING_KEY it is
 * MACed and an entry without a valid MAC is ignored; without a key, anyone who can write the cache could
 * claim a pass. That is acceptable for `diff`, whose verdict never rests on the weights check (every stage
 * still runs, and a wrong decoder fails there), and `gate` never reuses: the acceptance run checks again.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { writeFileAtomic } from '../io/writer.js';
import { packageRoot, toolVersion } from '../version.js';
import type { WeightsReport } from './check.js';

const SCHEMA = 'layerdiff.weights-check/1';

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

let numericsCache: string | null = null;

/** The numerics build: both native addons' bytes, the backend that dequantizes, and the tool version (its TypeScript decoders). */
export function numericsBuild(backend: string): string {
  numericsCache ??= (() => {
    const h = createHash('sha256');
    for (const name of ['ld_device', 'ld_reference']) {
      const file = path.join(packageRoot(), 'device-hip', 'build', 'Release', `${name}.node`);
      h.update(name).update(fs.existsSync(file) ? fs.readFileSync(file) : Buffer.alloc(0));
    }
    return h.digest('hex');
  })();
  return `sha256:${createHash('sha256').update(`${numericsCache}\n${backend}\n${toolVersion()}`).digest('hex')}`;
}

export function weightsCacheDir(): string {
  const dir = process.env.LAYERDIFF_CACHE_DIR;
  return path.join(dir !== undefined && dir !== '' ? dir : path.join(os.homedir(), '.cache', 'layerdiff'), 'weights');
}

const fileOf = (key: WeightsCheckKey) => path.join(weightsCacheDir(), `${createHash('sha256').update(JSON.stringify(key)).digest('hex')}.json`);

function mac(k: string, body: Omit<Stored, 'mac'>): string {
  return createHmac('sha256', k).update(JSON.stringify(body)).digest('hex');
}

const signingKey = () => (process.env.LAYERDIFF_SIGNING_KEY !== undefined && process.env.LAYERDIFF_SIGNING_KEY !== '' ? process.env.LAYERDIFF_SIGNING_KEY : null);

/** The stored passed check for this key, marked as reused; null when there is none (or it is not to be trusted). */
export function reusedCheck(key: WeightsCheckKey): WeightsReport | null {
  const file = fileOf(key);
  let s: Stored;
  try {
    s = JSON.parse(fs.readFileSync(file, 'utf8')) as Stored;
  } catch {
    return null;
  }
  if (s?.schema !== SCHEMA || JSON.stringify(s.key) !== JSON.stringify(key) || s.report === undefined) return null;
  const k = signingKey();
  if (k !== null) {
    const { mac: m, ...body } = s;
    if (typeof m !== 'string' || !/^[0-9a-f]{64}$/.test(m) || !timingSafeEqual(Buffer.from(m, 'hex'), Buffer.from(mac(k, body), 'hex'))) return null;
  }
  const r = s.report;
  if (r.checked === 0 || r.exact !== r.checked || r.nan_codes !== 0) return null;
  return { ...r, time_ms: 0, reused: { at: s.run.at, tool: s.run.tool, fingerprint: key.fingerprint, file } };
}

/** Store a check that passed (and ran without a fault); a failed or faulted check is never stored. A store error is not fatal. */
export function storeCheck(key: WeightsCheckKey, report: WeightsReport, faulted: boolean): void {
  if (faulted || report.reused !== undefined || report.checked === 0 || report.exact !== report.checked || report.nan_codes !== 0) return;
  const body: Omit<Stored, 'mac'> = { schema: SCHEMA, key, run: { at: new Date().toISOString(), tool: `layerdiff ${toolVersion()}` }, report };
  const k = signingKey();
  const stored: Stored = k === null ? body : { ...body, mac: mac(k, body) };
  try {
    fs.mkdirSync(weightsCacheDir(), { recursive: true });
    writeFileAtomic(fileOf(key), JSON.stringify(stored));
  } catch {
    // a cache is only ever an optimisation
  }
}
