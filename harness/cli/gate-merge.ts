/**
 * `layerdiff gate --merge DIR... --record FILE`: the record from the partial results of a sharded gate
 * (`gate --shard I/N --out DIR` on N machines). Every partial is verified before any is trusted —
 * signature, tool version, internal consistency, each report file against its digest and its summary row
 * re-derived from the report — then the set: one checkpoint, device, policy, tool version, prompt set and
 * shard count; each of shards 1..N exactly once; each holding exactly the prompts the assignment gives it,
 * so every prompt is covered exactly once. Any of that wrong is bad input naming the folder (exit 2).
 * A consistent set with a failing prompt writes no record and names the prompt and its shard (exit 1).
 * Otherwise the record is built by the same function, from the same rows, as a single gate's.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ExitCode, InputError } from '../errors.js';
import { buildRecord, failedPrompts, summarize } from '../gate/accept.js';
import { combineDigests } from '../gate/fingerprint.js';
import { checkPartialSignature, PARTIAL_MANIFEST, readPartial, reportFileName, type ShardPartial } from '../gate/partial.js';
import { canonicalJson, deviceKey, modelProblems, policyDifferences, type PromptSummary, signingKey, writeRecord } from '../gate/record.js';
import { ASSIGNMENT, assignShards, promptSetDigest } from '../gate/shard.js';
import { readRegularBytes, utf8Text } from '../io/regular.js';
import { assertDistinctPaths } from '../io/writer.js';
import type { Report } from '../runner/report.js';
import { toolVersion } from '../version.js';
import type { GateResult } from './gate.js';
import { renderGateTable } from './gate.js';

export interface MergeArgs {
  /** the shards' --out folders, in any order */
  dirs: string[];
  record: string;
  /** take only partials of this run (gate --shard … --run-id ID): a previous run's folder left in place is refused */
  runId?: string;
}

interface Loaded {
  dir: string;
  file: string;
  p: ShardPartial;
  /** each prompt's diagnosis, from its report, by position in the set */
  diagnosis: Map<number, Report['diagnosis']>;
}

const short = (h: string) => h.replace(/^sha256:/, '').slice(0, 12);

export function runGateMerge(a: MergeArgs, out: NodeJS.WritableStream = process.stdout): GateResult {
  if (a.dirs.length === 0) throw new InputError('--merge: give the --out folder of every shard');
  if (fs.existsSync(a.record) && fs.statSync(a.record).isDirectory()) throw new InputError('--record names a directory; give a file path', { file: a.record });
  assertDistinctPaths([{ option: '--record', path: a.record, kind: 'file' }], a.dirs.map((d) => ({ option: '--merge', path: d, kind: 'dir' as const })));
  const key = signingKey();
  const loaded: Loaded[] = a.dirs.map((dir) => {
    const p = readPartial(dir);
    const file = path.join(dir, PARTIAL_MANIFEST);
    checkPartialSignature(p, key, file);
    return { dir, file, p, diagnosis: checkSelf(p, dir, file) };
  });

  // One run: a partial of another (a scheduler re-run into the same folders, whose shards refused the non-empty
  // --out and left the last run's partials there) is refused, never merged as this run's result.
  if (a.runId !== undefined) {
    if (typeof a.runId !== 'string' || a.runId === '') throw new InputError(`--run-id ${JSON.stringify(a.runId)}: expected one name`);
    for (const l of loaded) {
      if (l.p.run_id !== a.runId) throw new InputError(`--merge: the partial is of ${l.p.run_id === undefined ? 'no named run' : `run ${JSON.stringify(l.p.run_id)}`}, not --run-id ${JSON.stringify(a.runId)} (a previous run's folder left in place?)`, { file: l.dir });
    }
  }

  // One gate: everything that decides what a prompt's verdict means is the same in every partial.
  const base = loaded[0];
  for (const l of loaded.slice(1)) {
    const diff = differences(base.p, l.p);
    if (diff.length > 0) throw new InputError(`--merge: a shard of another gate — it differs from ${base.dir} in ${diff.join('; ')}`, { file: l.dir });
  }

  // Shards 1..N, each once.
  const n = base.p.shard.count;
  const byShard = new Map<number, Loaded>();
  for (const l of loaded) {
    const s = l.p.shard.index;
    if (s < 1 || s > n) throw new InputError(`--merge: shard ${s}/${n} is out of range`, { file: l.file });
    const seen = byShard.get(s);
    if (seen !== undefined) throw new InputError(`--merge: shard ${s}/${n} is given twice (${seen.dir} and ${l.dir})`, { file: l.dir });
    byShard.set(s, l);
  }
  const missing = Array.from({ length: n }, (_v, i) => i + 1).filter((s) => !byShard.has(s));
  if (missing.length > 0) throw new InputError(`--merge: ${missing.map((s) => `shard ${s}/${n}`).join(', ')} missing: no partial among the ${loaded.length} folders given`);

  // Each shard holds exactly what the assignment gives it, so every prompt is covered exactly once.
  const set = base.p.prompt_set.prompts;
  const assigned = assignShards(set, n);
  const rows = new Array<{ summary: PromptSummary; shard: number } | undefined>(set.length);
  for (const [s, l] of [...byShard].sort((x, y) => x[0] - y[0])) {
    const want = assigned.map((v, i) => (v === s ? i : -1)).filter((i) => i >= 0);
    const have = l.p.prompts.map((q) => q.index).sort((x, y) => x - y);
    if (canonicalJson(want) !== canonicalJson(have)) {
      throw new InputError(`--merge: shard ${s}/${n} holds prompts ${list(have)}, but this prompt set's shard ${s}/${n} is prompts ${list(want)}`, { file: l.file });
    }
    for (const q of l.p.prompts) rows[q.index] = { summary: q.summary, shard: s };
  }
  const uncovered = rows.map((r, i) => (r === undefined ? i : -1)).filter((i) => i >= 0);
  if (uncovered.length > 0) throw new InputError(`--merge: prompts ${list(uncovered)} are in no shard`); // unreachable after the check above; kept as the invariant
  const summaries = rows.map((r) => r!.summary);

  const first = byShard.get(1)!.p;
  out.write(renderGateTable(summaries, first.policy, first.device.name) + '\n');
  const failed = failedPrompts(summaries);
  if (failed.length > 0) {
    const where = failed.map((f) => `${f.name} (shard ${rows[summaries.indexOf(f)]!.shard}/${n}, ${byShard.get(rows[summaries.indexOf(f)]!.shard)!.dir})`);
    out.write(`FAIL — ${failed.length} of ${summaries.length} acceptance prompts failed: ${where.join(', ')}; no record written${fs.existsSync(a.record) ? ` (the existing ${a.record} is left as it was)` : ''}\n`);
    for (const f of failed) {
      const i = summaries.indexOf(f);
      for (const d of byShard.get(rows[i]!.shard)!.diagnosis.get(i) ?? []) out.write(`  ${f.name}: likely cause at ${d.stage}: ${d.cause} — ${d.evidence}\n`);
    }
    return { code: ExitCode.stageFailed, summaries, reports: [], record: null };
  }

  const sources = new Set(loaded.map((l) => l.p.prompt_set.source));
  if (sources.size > 1) process.stderr.write(`layerdiff: note: the shards read the same prompts from ${sources.size} sources; the record names shard 1's, ${first.prompt_set.source}\n`);
  const paths = new Set(loaded.map((l) => l.p.model.path));
  if (paths.size > 1) process.stderr.write(`layerdiff: note: the shards ran the checkpoint from ${paths.size} paths (same fingerprint); the record names shard 1's, ${first.model.path}\n`);
  const record = buildRecord({
    toolVersion: first.tool.version, build: first.tool.build, model: first.model, device: first.device, policy: first.policy, promptSource: first.prompt_set.source,
    summaries, weights: first.acceptance.weights, started: new Date(Math.min(...loaded.map((l) => Date.parse(l.p.created)))), key,
  });
  writeRecord(a.record, record);
  out.write(`PASS — all ${summaries.length} acceptance prompts passed in ${n} shard${n === 1 ? '' : 's'}; record written to ${a.record}${record.hmac ? ' (signed)' : ''}\n`);
  return { code: ExitCode.pass, summaries, reports: [], record };
}

const list = (xs: number[]) => (xs.length === 0 ? 'none' : xs.map((i) => i + 1).join(', '));

/** One partial on its own: this tool's version, its fingerprint its files' digest, each report what its row says. */
function checkSelf(p: ShardPartial, dir: string, file: string): Map<number, Report['diagnosis']> {
  const diagnosis = new Map<number, Report['diagnosis']>();
  if (p.tool.version !== toolVersion()) throw new InputError(`--merge: the shard ran layerdiff ${p.tool.version}, this is ${toolVersion()}: a record vouches for one tool's device path`, { file });
  if (p.shard.assignment !== ASSIGNMENT) throw new InputError(`--merge: prompts assigned by ${JSON.stringify(p.shard.assignment)}, this tool assigns by ${ASSIGNMENT}`, { file });
  if (combineDigests(p.model.files) !== p.model.fingerprint) throw new InputError('--merge: model.fingerprint is not the digest of model.files (edited?)', { file });
  const model = modelProblems(p.model);
  if (model.length > 0) throw new InputError(`--merge: ${model[0]} (edited?)`, { file });
  const set = p.prompt_set.prompts;
  if (promptSetDigest(set) !== p.prompt_set.digest) throw new InputError('--merge: prompt_set.digest is not the digest of prompt_set.prompts (edited?)', { file });
  for (const q of p.prompts) {
    const entry = set[q.index];
    if (entry === undefined || q.report !== reportFileName(q.index)) throw new InputError(`--merge: prompt entry ${q.index + 1} does not belong to the prompt set or names another file (${q.report})`, { file });
    const rf = path.join(dir, q.report);
    if (!fs.existsSync(rf)) throw new InputError(`--merge: the report of prompt ${q.index + 1} (${entry.name}) is missing`, { file: rf });
    // read once (a regular file, never a FIFO): the bytes hashed are the bytes parsed
    const bytes = readRegularBytes(rf);
    const sha = createHash('sha256').update(bytes).digest('hex');
    if (sha !== q.summary.report_sha256) throw new InputError(`--merge: the report does not match its SHA-256 in ${PARTIAL_MANIFEST} (${sha.slice(0, 12)}… ≠ ${q.summary.report_sha256.slice(0, 12)}…): changed after the shard wrote it`, { file: rf });
    const text = utf8Text(bytes, { file: rf });
    let report: Report;
    try {
      report = JSON.parse(text) as Report;
    } catch {
      throw new InputError('not valid JSON', { file: rf });
    }
    // The row the shard recorded must be the row its report gives: the verdict is re-derived, not taken on trust.
    const again = summarize(entry.name, report, p.policy, sha);
    if (canonicalJson(again) !== canonicalJson(q.summary) || report.model?.fingerprint !== p.model.fingerprint || report.input?.tokens?.length !== entry.tokens) {
      throw new InputError(`--merge: the summary of prompt ${q.index + 1} (${entry.name}) is not what its report says`, { file });
    }
    diagnosis.set(q.index, Array.isArray(report.diagnosis) ? report.diagnosis : []);
  }
  return diagnosis;
}

/** What two partials of one gate must share, as 'what: this ≠ that' lines (empty: the same gate). */
function differences(a: ShardPartial, b: ShardPartial): string[] {
  const d: string[] = [];
  if (a.model.fingerprint !== b.model.fingerprint) d.push(`the checkpoint (fingerprint ${short(b.model.fingerprint)}… ≠ ${short(a.model.fingerprint)}…)`);
  else if (canonicalJson([a.model.headers ?? null, a.model.data_samples ?? null]) !== canonicalJson([b.model.headers ?? null, b.model.data_samples ?? null])) d.push('the shards\' header and data-sample digests (model.headers, model.data_samples)');
  if (a.model.architecture !== b.model.architecture || a.model.num_layers !== b.model.num_layers) d.push(`the model (${b.model.architecture}/${b.model.num_layers} layers ≠ ${a.model.architecture}/${a.model.num_layers})`);
  const da = deviceKey(a.device);
  const db = deviceKey(b.device);
  const dev = Object.keys(da).filter((k) => canonicalJson(da[k]) !== canonicalJson(db[k]));
  if (dev.length > 0) d.push(`the device (${dev.map((k) => `${k}: ${canonicalJson(db[k])} ≠ ${canonicalJson(da[k])}`).join(', ')})`);
  // every field that judges a stage: a shard judged by a looser per-stage override or another rule checked less
  const pol = policyDifferences(b.policy, a.policy);
  if (pol.length > 0) d.push(`the policy (${pol.map((x) => `${x.key} ${x.have} ≠ ${x.want}`).join(', ')})`);
  if (a.tool.version !== b.tool.version) d.push(`the tool version (${b.tool.version} ≠ ${a.tool.version})`);
  // the record carries one build, which generation must match: shards of two builds ran two device paths
  else if (a.tool.build !== b.tool.build) d.push(`the build (${short(b.tool.build)}… ≠ ${short(a.tool.build)}…)`);
  // by content: the same prompts read from a file at another path (another checkout) are the same set
  if (a.prompt_set.digest !== b.prompt_set.digest || canonicalJson(a.prompt_set.prompts) !== canonicalJson(b.prompt_set.prompts)) {
    d.push(`the prompt set (${b.prompt_set.source} ${short(b.prompt_set.digest)}… ≠ ${a.prompt_set.source} ${short(a.prompt_set.digest)}…)`);
  }
  if (a.shard.count !== b.shard.count) d.push(`the shard count (${b.shard.count} ≠ ${a.shard.count})`);
  if (a.run_id !== b.run_id) d.push(`the run (${JSON.stringify(b.run_id ?? null)} ≠ ${JSON.stringify(a.run_id ?? null)})`);
  if (canonicalJson(a.acceptance) !== canonicalJson(b.acceptance)) d.push('the weights-first check or the mode');
  return d;
}
