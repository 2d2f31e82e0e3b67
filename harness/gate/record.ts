/**
 * The acceptance record (DESIGN §8), schema layerdiff.record/1: written by `layerdiff gate` when every stage
 * passed in both modes over the acceptance prompts, read by `layerdiff generate` before it runs the
 * optimized path. It binds the checkpoint (full fingerprint, per-file digests), the tool version, the device
 * backend and identity, and the policy; it carries the digest of the per-prompt JSON reports and the time.
 * With LAYERDIFF_SIGNING_KEY set it carries an HMAC-SHA256 over the canonical JSON of everything else.
 *
 * Verification reports every difference it finds, each as one reason (no-record, invalid, signature,
 * weights, device, policy, tool), and ends with the command that makes a matching record.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { LockedError } from '../errors.js';
import type { Policy } from '../compare/policy.js';
import { writeFileAtomic } from '../io/writer.js';
import type { DeviceIdentity } from '../runner/backend.js';
import { toolVersion } from '../version.js';
import { combineDigests, type FileDigest, type Fingerprint } from './fingerprint.js';
import { readRegularText } from '../io/regular.js';

export const RECORD_SCHEMA = 'layerdiff.record/1';
export const SIGNING_KEY_ENV = 'LAYERDIFF_SIGNING_KEY';

export interface PromptSummary {
  name: string;
  tokens: number;
  verdict: 'pass' | 'fail';
  /** stages whose status is warn */
  warnings: number;
  /** the stage with the largest policy metric over both modes, and that value (null: NaN/Inf on the device) */
  worst: { stage: string; value: number | null };
  /** the three questions of the verdict (compare/questions.ts), each with its status and figures */
  questions?: {
    own_error: NumericSummary;
    drift: NumericSummary;
    behaviour: {
      status: 'pass' | 'fail' | 'not-run';
      top1_agreement: number | null;
      kl_mean: number | null;
      kl_p99: number | null;
      flips: number;
      benign: number;
      scoring_bug: number;
      unjudged: number;
      first_flip: string | null;
    };
  };
  /** SHA-256 of this prompt's JSON report (layerdiff.report/1, as reports/json.ts serializes it) */
  report_sha256: string;
}

export interface NumericSummary {
  status: 'pass' | 'fail' | 'not-run';
  first_failure: string | null;
  worst: { stage: string; metric: string; error: number | null; floor: number | null; ratio: number | null } | null;
}

export interface AcceptanceRecord {
  schema: typeof RECORD_SCHEMA;
  verdict: 'pass';
  /**
   * the tool that ran the gate: its version and its build (harness/runner/build.ts: the modules, both addons, the
   * backend and its native files), which generation must run under too; a record made before builds were recorded has none
   */
  tool: { name: 'layerdiff'; version: string; build?: string };
  /**
   * `headers`: per shard, the SHA-256 of its header as the gate parsed it (8-byte length and JSON). Generation from an
   * FP16 cache reads names and shapes from the shards and no data, and so checks these instead of hashing the shards
   * (harness/gate/deferred.ts); `data_samples` beside it, a SHA-256 of 4 × 64 KiB of each shard's data
   * (SafetensorsFile.dataSampleSha256), which tells apart checkpoints of one layout. Records of earlier versions have
   * neither (their shards are hashed)
   */
  model: {
    path: string; architecture: string; num_layers: number; fingerprint: string; files: FileDigest[];
    headers?: Record<string, string>; data_samples?: Record<string, string>;
  };
  device: DeviceIdentity;
  policy: Policy;
  acceptance: {
    mode: 'both';
    layers: 'all';
    prompt_source: string;
    prompts: PromptSummary[];
    /** the weights-first check (harness/weights/check.ts): quantized tensors whose FP16 device copy is bit-exact */
    weights: { checked: number; exact: number; mismatched: number; overflow_blocks: number; underflow_blocks: number };
  };
  /** SHA-256 over the per-prompt report digests, in prompt order */
  report_digest: string;
  /**
   * `gate --fp16-cache DIR`: the FP16 cache the gate re-derived from this checkpoint and compared byte for
   * byte; `files_digest` is generate/fp16cache.ts cacheListDigest of its manifest (a SHA-256 over every file's
   * size and BLAKE3, the chunk and expert digests included)
   */
  fp16_cache?: { path: string; files_digest: string };
  created: string;
  hmac?: { alg: 'HMAC-SHA256'; value: string };
}

/**
 * The longest sequence the gate compared: its longest prompt, in tokens. Every position of a gated prompt was
 * compared stage by stage in both modes; a generation that feeds a longer sequence runs positions the gate never did.
 */
export function gatedTokens(r: AcceptanceRecord): number {
  return Math.max(...r.acceptance.prompts.map((p) => p.tokens));
}

/** JSON with object keys sorted at every level and no whitespace: the bytes the HMAC covers. */
export function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== 'object') {
    if (typeof v === 'number' && !Number.isFinite(v)) throw new Error(`canonicalJson: ${v} has no JSON form`);
    return JSON.stringify(v);
  }
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o).filter((k) => o[k] !== undefined).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`).join(',')}}`;
}

/**
 * The fields in which two policies judge differently (canonical JSON of each side): every field that judges a stage
 * (rule, thresholds, floor ratios, per-kind and per-stage overrides, behaviour bounds), all but `source`, which only
 * names where the policy came from. Generation against its record and a merge across its shards both compare this.
 */
export function policyDifferences(have: Policy, want: Policy): Array<{ key: string; have: string; want: string }> {
  const field = (p: Policy, k: string) => canonicalJson((p as unknown as Record<string, unknown>)[k] ?? null);
  const keys = [...new Set(['metric', 'fail_above', 'warn_above', ...Object.keys(want), ...Object.keys(have)])].filter((k) => k !== 'source');
  return keys.filter((k) => field(have, k) !== field(want, k)).map((key) => ({ key, have: field(have, key), want: field(want, key) }));
}

export function recordHmac(rec: AcceptanceRecord, key: string): string {
  const { hmac: _drop, ...body } = rec;
  return createHmac('sha256', key).update(canonicalJson(body)).digest('hex');
}

export function signingKey(): string | null {
  const k = process.env[SIGNING_KEY_ENV];
  return k !== undefined && k !== '' ? k : null;
}

export function sign(rec: AcceptanceRecord, key: string | null): AcceptanceRecord {
  const { hmac: _drop, ...body } = rec;
  return key === null ? body : { ...body, hmac: { alg: 'HMAC-SHA256', value: recordHmac(body, key) } };
}

export function writeRecord(file: string, rec: AcceptanceRecord): void {
  writeFileAtomic(file, JSON.stringify(rec, null, 2) + '\n', '--record');
}

/**
 * What of a device identity a record binds: the backend and what the numbers are computed on and with.
 * Not the host's CPU model, SIMD level or thread count: the emulated kernels give the same bits on any
 * x86-64 at any of them (device-hip tests check it), so a record moves with the checkpoint between hosts.
 */
export function deviceKey(d: DeviceIdentity): Record<string, unknown> {
  return { name: d.name, device_name: d.device_name ?? null, arch: d.arch ?? null, emulates: d.emulates ?? null, versions: d.versions ?? {} };
}

export type LockReason = 'no-record' | 'invalid' | 'signature' | 'weights' | 'device' | 'policy' | 'tool' | 'fp16-cache' | 'length';

/** exit 3 with the list of reasons (tests read `reasons`; the user reads the message) */
export class RecordMismatch extends LockedError {
  constructor(
    message: string,
    readonly reasons: LockReason[],
  ) {
    super(message);
    this.name = 'RecordMismatch';
  }
}

export interface VerifyInput {
  recordFile: string | undefined;
  /** the record file's text as the caller already read it (readRecordText): checked as it is, not read again */
  recordText?: string;
  modelDir: string;
  fingerprint: Fingerprint;
  device: DeviceIdentity;
  /** this process's build with that device (backendBuild) */
  build: string;
  policy: Policy;
  key: string | null;
  /** the `layerdiff gate …` command that writes a matching record */
  fixCommand: string;
  /** refuse unsigned records (--require-signature, LAYERDIFF_REQUIRE_SIGNATURE=1) */
  requireSignature?: boolean;
  /**
   * the same command with a record path of its own, for when the record accepts another checkpoint: the
   * fix must not overwrite that model's record
   */
  newRecordCommand?: (recordPath: string) => string;
}

/** A record path beside `file` named after the model folder: `accept.json` for ./llama → `llama.accept.json`. */
export function recordPathFor(file: string, modelDir: string): string {
  const base = path.basename(path.resolve(modelDir)).replace(/[^\w.-]+/g, '_') || 'model';
  return path.join(path.dirname(file), `${base}.${path.basename(file)}`);
}

/** Same file names in both lists: the same checkpoint layout (maybe with changed bytes), not another model. */
function sameFiles(a: FileDigest[], b: FileDigest[]): boolean {
  const x = a.map((f) => f.name).sort().join('\n');
  return x === b.map((f) => f.name).sort().join('\n') && a.some((f) => b.some((g) => g.name === f.name && g.sha256 === f.sha256));
}

/** SHA-256 over the per-prompt report digests, in prompt order: the record's report_digest. */
export function reportDigest(summaries: readonly PromptSummary[]): string {
  const digest = createHash('sha256');
  summaries.forEach((s, i) => digest.update(`${i}\t${s.report_sha256}\n`));
  return `sha256:${digest.digest('hex')}`;
}

export const REQUIRE_SIGNATURE_ENV = 'LAYERDIFF_REQUIRE_SIGNATURE';

export function signatureRequired(flag: boolean | undefined): boolean {
  return flag === true || process.env[REQUIRE_SIGNATURE_ENV] === '1';
}

const HEX64 = /^[0-9a-f]{64}$/;
const isObj = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** What is wrong with a record's (or a shard partial's) model section: its files, fingerprint and shard digests. */
export function modelProblems(m: unknown): string[] {
  const p: string[] = [];
  if (!isObj(m) || typeof m.fingerprint !== 'string' || !Array.isArray(m.files)) p.push('model.fingerprint/files missing');
  else {
    const files = m.files as unknown[];
    const bad = files.findIndex((f) => !isObj(f) || typeof f.name !== 'string' || f.name === '' || !Number.isSafeInteger(f.size) || (f.size as number) < 0 || typeof f.sha256 !== 'string' || !HEX64.test(f.sha256));
    if (files.length === 0) p.push('model.files is empty');
    else if (bad >= 0) p.push(`model.files[${bad}] is not {name, size, sha256 (64 lowercase hex)}`);
    else if (!/^sha256:[0-9a-f]{64}$/.test(m.fingerprint)) p.push('model.fingerprint is not sha256:<64 lowercase hex>');
    else if (combineDigests(files as FileDigest[]) !== m.fingerprint) p.push('model.fingerprint is not the digest of model.files');
    else if (new Set(files.map((f) => (f as FileDigest).name)).size !== files.length) p.push('model.files lists a file twice');
    else {
      const names = new Set(files.map((f) => (f as FileDigest).name));
      for (const k of ['headers', 'data_samples'] as const) {
        const h = m[k];
        if (k in m && (!isObj(h) || Object.keys(h).length === 0 || Object.entries(h).some(([n, v]) => !names.has(n) || typeof v !== 'string' || !HEX64.test(v)))) {
          p.push(`model.${k} is not {shard in model.files: 64 lowercase hex}`);
        }
      }
    }
  }
  return p;
}

/**
 * What makes a record internally inconsistent (empty: consistent). A record says pass only if every prompt
 * passed; its digests are strict lowercase hex; its fingerprint is the combination of the file digests it
 * lists; its report digest covers exactly the prompts' report digests; an HMAC is absent or well-formed.
 * A hand-edited record (a prompt's verdict, a file list, `"hmac": null`) is refused as invalid (exit 3).
 */
export function recordProblems(r: unknown): string[] {
  const p: string[] = [];
  if (!isObj(r)) return ['not a JSON object'];
  if (r.schema !== RECORD_SCHEMA) p.push(`schema ${JSON.stringify(r.schema)}`);
  if (r.verdict !== 'pass') p.push(`verdict ${JSON.stringify(r.verdict)}`);
  if (!isObj(r.tool) || typeof r.tool.version !== 'string') p.push('tool.version missing');
  else if (r.tool.build !== undefined && (typeof r.tool.build !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(r.tool.build))) p.push(`tool.build ${JSON.stringify(r.tool.build)}`);
  if (!isObj(r.device) || typeof r.device.name !== 'string') p.push('device.name missing');
  if (!isObj(r.policy) || typeof r.policy.metric !== 'string' || typeof r.policy.fail_above !== 'number' || typeof r.policy.warn_above !== 'number') p.push('policy incomplete');
  if (typeof r.created !== 'string') p.push('created missing');
  p.push(...modelProblems(r.model));
  const a = r.acceptance;
  if (!isObj(a) || !Array.isArray(a.prompts) || a.prompts.length === 0) p.push('acceptance.prompts missing or empty');
  else {
    const prompts = a.prompts as unknown[];
    const failed = prompts.findIndex((x) => !isObj(x) || x.verdict !== 'pass');
    if (failed >= 0) p.push(`acceptance.prompts[${failed}] did not pass`);
    // generate compares its sequences' length with the longest gated prompt (gatedTokens)
    const badLength = prompts.findIndex((x) => !isObj(x) || !Number.isSafeInteger(x.tokens) || (x.tokens as number) < 1);
    if (badLength >= 0) p.push(`acceptance.prompts[${badLength}].tokens is not a positive integer`);
    const badHex = prompts.findIndex((x) => !isObj(x) || typeof x.report_sha256 !== 'string' || !HEX64.test(x.report_sha256));
    if (badHex >= 0) p.push(`acceptance.prompts[${badHex}].report_sha256 is not 64 lowercase hex`);
    else {
      if (r.report_digest !== reportDigest(prompts as PromptSummary[])) p.push('report_digest does not cover the prompts\' report digests');
    }
  }
  if ('fp16_cache' in r) {
    const c = r.fp16_cache;
    if (!isObj(c) || typeof c.path !== 'string' || typeof c.files_digest !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(c.files_digest)) p.push('fp16_cache is not {path, files_digest: sha256:<64 lowercase hex>}');
  }
  if ('hmac' in r) {
    const h = r.hmac;
    if (!isObj(h) || h.alg !== 'HMAC-SHA256' || typeof h.value !== 'string' || !HEX64.test(h.value)) p.push('hmac is not {alg: "HMAC-SHA256", value: 64 lowercase hex}');
  }
  return p;
}

const shortHash = (h: string) => h.replace(/^sha256:/, '').slice(0, 12);

/**
 * The text of the record file, read once, for a caller that looks at the record before verifying it (generate, to
 * fingerprint the checkpoint as the record allows: harness/gate/deferred.ts) and then verifies those very bytes
 * (VerifyInput.recordText); null where it cannot be read (verifyRecord then says why).
 */
export function readRecordText(file: string | undefined): string | null {
  if (file === undefined || !fs.existsSync(file)) return null;
  try {
    return readRegularText(file);
  } catch {
    return null;
  }
}

export function verifyRecord(v: VerifyInput): AcceptanceRecord {
  let fix = v.fixCommand;
  const locked = (reasons: LockReason[], what: string[]): never => {
    throw new RecordMismatch(`the optimized path is locked: ${what.join('; ')}. To unlock it, run: ${fix}`, reasons);
  };
  if (v.recordFile === undefined) locked(['no-record'], ['no acceptance record given (--record FILE)']);
  const file = v.recordFile!;
  if (!fs.existsSync(file)) locked(['no-record'], [`no acceptance record at ${file}`]);
  let rec: AcceptanceRecord;
  try {
    rec = JSON.parse(v.recordText ?? readRegularText(file)) as AcceptanceRecord; // a FIFO or a device is refused, not read until it ends
  } catch (e) {
    return locked(['invalid'], [`${file} is not a readable JSON acceptance record (${(e as Error).message})`]);
  }
  const problems = recordProblems(rec);
  if (problems.length > 0) locked(['invalid'], [`${file} is not a consistent passing ${RECORD_SCHEMA} acceptance record (${problems.slice(0, 3).join('; ')})`]);

  const reasons: LockReason[] = [];
  const what: string[] = [];
  const add = (r: LockReason, s: string) => {
    reasons.push(r);
    what.push(s);
  };

  // Signature first: when it fails, nothing else in the record can be trusted, but the rest is still listed.
  if (v.requireSignature === true && rec.hmac === undefined && v.key === null) {
    add('signature', `the record is not signed and a signature is required (--require-signature or ${REQUIRE_SIGNATURE_ENV}=1)`);
  }
  if (v.key !== null || rec.hmac !== undefined) {
    if (rec.hmac === undefined) add('signature', `the record is not signed but ${SIGNING_KEY_ENV} is set`);
    else if (v.key === null) add('signature', `the record is signed and ${SIGNING_KEY_ENV} is not set, so its signature cannot be checked`);
    else {
      const want = Buffer.from(recordHmac(rec, v.key), 'hex');
      const got = Buffer.from(rec.hmac.value, 'hex'); // strict lowercase hex: checked by recordProblems
      if (rec.hmac.alg !== 'HMAC-SHA256' || got.length !== want.length || !timingSafeEqual(got, want)) {
        add('signature', 'the record\'s HMAC does not match its contents under this signing key (tampered, or signed with another key)');
      }
    }
  }

  const otherModel = typeof rec.model.path === 'string' && path.resolve(rec.model.path) !== path.resolve(v.modelDir) && !sameFiles(rec.model.files, v.fingerprint.files);
  if (rec.model.fingerprint !== v.fingerprint.value && otherModel) {
    const alt = recordPathFor(file, v.modelDir);
    add('weights', `${file} is the record of another checkpoint (${rec.model.path}, ${rec.model.architecture}), not of ${path.resolve(v.modelDir)}; keep it for that model and gate this one into a record of its own, e.g. ${alt}`);
    if (v.newRecordCommand !== undefined) fix = v.newRecordCommand(alt);
  } else if (rec.model.fingerprint !== v.fingerprint.value) {
    const recorded = new Map(rec.model.files.map((f) => [f.name, f]));
    const now = new Map(v.fingerprint.files.map((f) => [f.name, f]));
    const changed = v.fingerprint.files.filter((f) => recorded.has(f.name) && recorded.get(f.name)!.sha256 !== f.sha256).map((f) => f.name);
    const added = v.fingerprint.files.filter((f) => !recorded.has(f.name)).map((f) => f.name);
    const removed = rec.model.files.filter((f) => !now.has(f.name)).map((f) => f.name);
    const parts = [
      changed.length > 0 ? `changed: ${changed.join(', ')}` : '',
      added.length > 0 ? `not in the record: ${added.join(', ')}` : '',
      removed.length > 0 ? `missing now: ${removed.join(', ')}` : '',
    ].filter((s) => s !== '');
    add('weights', `the checkpoint's weights differ from the accepted ones (fingerprint ${shortHash(v.fingerprint.value)}… ≠ recorded ${shortHash(rec.model.fingerprint)}…${parts.length > 0 ? `; ${parts.join('; ')}` : ''})`);
  }

  const want = deviceKey(rec.device);
  const have = deviceKey(v.device);
  const devDiff = Object.keys(have).filter((k) => canonicalJson(have[k]) !== canonicalJson(want[k]));
  if (devDiff.length > 0) {
    add('device', `the device differs from the accepted one (${devDiff.map((k) => `${k}: ${canonicalJson(have[k])} ≠ recorded ${canonicalJson(want[k])}`).join(', ')})`);
  }

  // a record accepted under a looser per-kind policy must not unlock a stricter-looking run
  const polDiff = policyDifferences(v.policy, rec.policy);
  if (polDiff.length > 0) add('policy', `the policy differs from the accepted one (${polDiff.map((d) => `${d.key} ${d.have} ≠ recorded ${d.want}`).join(', ')})`);

  // The record vouches for the device path of the tool that ran the gate; another version, or another build of the
  // same version (its modules, addons or the backend's native files changed), is other code.
  if (rec.tool.version !== toolVersion()) add('tool', `the record was made by layerdiff ${rec.tool.version}, this is ${toolVersion()}`);
  else if (rec.tool.build !== v.build) {
    add('tool', rec.tool.build === undefined
      ? 'the record names no build of layerdiff (made before builds were recorded)'
      : `the record was made by another build of layerdiff ${toolVersion()} (${shortHash(rec.tool.build)}… ≠ this ${shortHash(v.build)}…: its modules, native addons or the backend's files differ)`);
  }

  if (reasons.length > 0) locked(reasons, what);
  return rec;
}
