/**
 * A shard's partial result (`layerdiff gate --shard I/N --out DIR`), schema layerdiff.partial/1:
 *
 * DIR/partial.json          — what the shard ran on and what it found: tool version, checkpoint (full
 *                             fingerprint and per-file digests), device identity, policy, the whole prompt
 *                             set (source, digest, every prompt's name, token count and digest), the shard
 *                             (I, N, assignment rule), the weights-first check, and per prompt of this shard
 *                             its summary row and report file; with LAYERDIFF_SIGNING_KEY an HMAC-SHA256 over
 *                             the canonical JSON of everything else (the same construction as the record's).
 * DIR/reports/prompt-NN.json — each prompt's JSON report (NN: its 1-based position in the set); its SHA-256 is
 *                             the summary's report_sha256, which the merge checks.
 *
 * A partial is not a record: nothing reads it but `gate --merge`, which turns a complete, consistent set of
 * them into one.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Policy } from '../compare/policy.js';
import { InputError } from '../errors.js';
import type { DeviceIdentity } from '../runner/backend.js';
import { type AcceptanceRecord, canonicalJson, type PromptSummary, SIGNING_KEY_ENV } from './record.js';
import { MAX_SHARDS, type PromptEntry } from './shard.js';
import { readRegularText } from '../io/regular.js';

export const PARTIAL_SCHEMA = 'layerdiff.partial/1';
export const PARTIAL_MANIFEST = 'partial.json';

/** prompt-NN, NN its 1-based position in the set: the name of its report file and of its golden run */
export const promptLabel = (index: number) => `prompt-${String(index + 1).padStart(2, '0')}`;
export const reportFileName = (index: number) => `reports/${promptLabel(index)}.json`;

export interface PartialPrompt {
  /** 0-based position in the prompt set */
  index: number;
  summary: PromptSummary;
  /** relative to the partial's folder */
  report: string;
}

export interface ShardPartial {
  schema: typeof PARTIAL_SCHEMA;
  /** the shard's tool: version and build (harness/runner/build.ts), which the merged record carries */
  tool: { name: 'layerdiff'; version: string; build: string };
  model: AcceptanceRecord['model'];
  device: DeviceIdentity;
  policy: Policy;
  prompt_set: { source: string; digest: string; prompts: PromptEntry[] };
  shard: { index: number; count: number; assignment: string };
  acceptance: { mode: 'both'; layers: 'all'; weights: AcceptanceRecord['acceptance']['weights'] };
  /** where the reference came from: computed here, or golden runs (gate --golden DIR) */
  reference: { source: 'computed' } | { source: 'golden'; dir: string };
  prompts: PartialPrompt[];
  created: string;
  /** the run it belongs to (gate --run-id: a scheduler's job id), which gate --merge --run-id requires */
  run_id?: string;
  hmac?: { alg: 'HMAC-SHA256'; value: string };
}

export function partialHmac(p: ShardPartial, key: string): string {
  const { hmac: _drop, ...body } = p;
  return createHmac('sha256', key).update(canonicalJson(body)).digest('hex');
}

export function signPartial(p: ShardPartial, key: string | null): ShardPartial {
  const { hmac: _drop, ...body } = p;
  return key === null ? body : { ...body, hmac: { alg: 'HMAC-SHA256', value: partialHmac(body, key) } };
}

/** Read DIR/partial.json; a missing or malformed one is bad input naming the file. */
export function readPartial(dir: string): ShardPartial {
  const file = path.join(dir, PARTIAL_MANIFEST);
  if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) throw new InputError('--merge: not a folder (give the --out folders of the shards)', { file: dir });
  if (!fs.existsSync(file)) throw new InputError(`--merge: no ${PARTIAL_MANIFEST} here (a shard writes one with gate --shard I/N --out DIR)`, { file: dir });
  const text = readRegularText(file);
  let p: ShardPartial;
  try {
    p = JSON.parse(text) as ShardPartial;
  } catch {
    throw new InputError('not valid JSON', { file });
  }
  if (p !== null && typeof p === 'object' && p.schema === PARTIAL_SCHEMA && typeof p.tool?.version === 'string' && p.tool.build === undefined) {
    throw new InputError('--merge: the shard names no build of layerdiff (run before builds were recorded); run the shard again', { file });
  }
  const ok =
    p !== null && typeof p === 'object' && p.schema === PARTIAL_SCHEMA && typeof p.tool?.version === 'string' && typeof p.tool.build === 'string' && /^sha256:[0-9a-f]{64}$/.test(p.tool.build) &&
    typeof p.model?.fingerprint === 'string' && Array.isArray(p.model.files) && typeof p.device?.name === 'string' &&
    typeof p.policy?.metric === 'string' && typeof p.prompt_set?.digest === 'string' && Array.isArray(p.prompt_set.prompts) && p.prompt_set.prompts.length > 0 && (p.run_id === undefined || (typeof p.run_id === 'string' && p.run_id !== '')) &&
    Number.isInteger(p.shard?.index) && Number.isInteger(p.shard?.count) && p.shard.count >= 1 && p.shard.count <= MAX_SHARDS &&
    Array.isArray(p.prompts) && typeof p.created === 'string' && Number.isFinite(Date.parse(p.created)) &&
    p.prompt_set.prompts.every((e) => typeof e?.name === 'string' && Number.isSafeInteger(e.tokens) && e.tokens > 0 && typeof e.digest === 'string') &&
    p.prompts.every((q) => Number.isInteger(q?.index) && typeof q.report === 'string' && typeof q.summary?.report_sha256 === 'string');
  if (!ok) throw new InputError(`not a ${PARTIAL_SCHEMA} partial result`, { file });
  return p;
}

/** The signature rule of records, for partials: with a key every partial must carry a matching HMAC. */
export function checkPartialSignature(p: ShardPartial, key: string | null, file: string): void {
  if (key === null && p.hmac === undefined) return;
  if (p.hmac === undefined) throw new InputError(`the partial is not signed but ${SIGNING_KEY_ENV} is set`, { file });
  if (key === null) throw new InputError(`the partial is signed and ${SIGNING_KEY_ENV} is not set, so its signature cannot be checked`, { file });
  const want = Buffer.from(partialHmac(p, key), 'hex');
  const got = Buffer.from(String(p.hmac.value), 'hex');
  if (p.hmac.alg !== 'HMAC-SHA256' || got.length !== want.length || !timingSafeEqual(got, want)) {
    throw new InputError('the partial\'s HMAC does not match its contents under this signing key (tampered, or signed with another key)', { file });
  }
}
