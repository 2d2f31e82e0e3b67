/**
 * `layerdiff gate <model> --record FILE`: the per-stage diff (the runner of `layerdiff diff`, both modes, all
 * stages) over the acceptance prompts; a per-prompt summary table on stdout. When every stage of every
 * prompt passes, the acceptance record is written atomically (DESIGN §8) and the exit code is 0; otherwise
 * no record is written, an existing record file is left exactly as it was, and the exit code is 1.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import Table from 'cli-table3';
import { diagnose } from '../compare/diagnose.js';
import { DEFAULT_POLICY, makePolicy, type Policy } from '../compare/policy.js';
import { ExitCode, InputError } from '../errors.js';
import { checkpointFingerprint, realish } from '../gate/fingerprint.js';
import { BUILTIN_PROMPTS, builtinTokenPrompts, readPromptsFile, type AcceptancePrompt } from '../gate/prompts.js';
import { type AcceptanceRecord, type PromptSummary, RECORD_SCHEMA, sign, signingKey, writeRecord } from '../gate/record.js';
import { Checkpoint } from '../io/checkpoint.js';
import { writeFileAtomic } from '../io/safetensors.js';
import { hasTokenizer } from '../io/tokenizer.js';
import { selectBackend } from '../runner/backend.js';
import { openModel } from '../runner/model.js';
import { buildReport, type Report } from '../runner/report.js';
import { runDiff, stageNames } from '../runner/run.js';
import { toolVersion } from '../version.js';
import { assertNoNanCodes, checkWeights } from '../weights/check.js';
import { reportJson } from '../../reports/json.js';
import { sci, verdictLine } from '../../reports/format.js';
import { gateCauseLines, gateVerdictLine } from '../../reports/gate.js';
import { stdoutTaken, writeGateReports } from '../../reports/writers.js';
import { buildGateReport } from '../gate/report.js';
import { checkReportTargets } from './outputs.js';
import { ProgressLine } from './progress.js';
import { terminal, useColour } from './terminal.js';
import { assertOutside } from './diff.js';
import { resolveInput } from './input.js';

export interface GateArgs {
  model: string;
  record: string;
  prompts?: string;
  device: string;
  metric: string;
  failAbove: number;
  warnAbove: number;
  /** also write each prompt's JSON report here (the files the record's report digest covers) */
  reports?: string;
  /** one report over every prompt (per-prompt sections), in each format; `-` is stdout */
  json?: string;
  junit?: string;
  summary?: string;
  html?: string;
}

export interface GateResult {
  code: ExitCode;
  summaries: PromptSummary[];
  reports: Report[];
  record: AcceptanceRecord | null;
}

const shq = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);

/** The gate command that writes a record matching this device and policy (quoted for a POSIX shell). */
export function gateCommand(model: string, record: string, device: string, policy: Policy): string {
  const parts = ['layerdiff', 'gate', shq(model), '--record', shq(record)];
  if (device !== 'auto') parts.push('--device', device);
  if (policy.metric !== DEFAULT_POLICY.metric) parts.push('--metric', policy.metric);
  if (policy.fail_above !== DEFAULT_POLICY.fail_above) parts.push('--fail-above', String(policy.fail_above));
  if (policy.warn_above !== DEFAULT_POLICY.warn_above) parts.push('--warn-above', String(policy.warn_above));
  return parts.join(' ');
}

/** Outputs never go inside the model directory, also not through a symlinked alias of it. */
export function assertOutsideModel(target: string, modelDir: string): void {
  assertOutside(target, modelDir);
  assertOutside(realish(target), realish(modelDir));
}

export async function runGate(a: GateArgs, out: NodeJS.WritableStream = process.stdout): Promise<GateResult> {
  const started = Date.now();
  const policy = makePolicy(a.metric, a.failAbove, a.warnAbove);
  assertOutsideModel(a.record, a.model);
  if (a.reports !== undefined) assertOutsideModel(a.reports, a.model);
  const targets = { json: a.json, junit: a.junit, summary: a.summary, html: a.html };
  checkReportTargets(targets, (t) => assertOutsideModel(t, a.model));
  // with a report on stdout, the human-readable table goes to stderr
  const human = stdoutTaken(targets) ? process.stderr : out;
  const log = (line: string) => !terminal().quiet && process.stderr.write(line + '\n');
  if (fs.existsSync(a.record) && fs.statSync(a.record).isDirectory()) throw new InputError('--record names a directory; give a file path', { file: a.record });
  const ck = Checkpoint.open(a.model);
  try {
    const backend = selectBackend(a.device);
    const model = openModel(ck, backend, null);
    let prompts: AcceptancePrompt[];
    if (a.prompts !== undefined) prompts = readPromptsFile(a.prompts);
    else prompts = hasTokenizer(ck.dir) ? [...BUILTIN_PROMPTS] : builtinTokenPrompts(model.vocab);
    // Which prompts vouched for the record: the file by path and content digest.
    const source = a.prompts !== undefined ? `${path.resolve(a.prompts)} sha256:${createHash('sha256').update(fs.readFileSync(a.prompts)).digest('hex')}` : 'built-in';
    // Built-in prompts stay within the model's context; a user's prompts are taken as given.
    const maxPos = typeof ck.config.max_position_embeddings === 'number' ? ck.config.max_position_embeddings : undefined;
    const inputs = [];
    for (const p of prompts) {
      const spec = p.tokens !== undefined ? { tokens: p.tokens.join(',') } : { prompt: p.prompt };
      inputs.push(await resolveInput(ck.dir, model.vocab, a.prompts === undefined && maxPos !== undefined ? { ...spec, maxTokens: maxPos } : spec));
    }

    const fp = await checkpointFingerprint(ck.dir, ck.shardFiles);
    const progress = new ProgressLine(null, 0);
    const nStages = stageNames(model.numLayers, null).length;
    // Weights first, as `diff` does (once: it does not depend on the prompt): shapes against the config,
    // every quantized tensor's FP16 copy against the exact one, NaN codes as bad input. Each report carries it.
    model.conformance();
    const weights = checkWeights(ck, backend.native, {
      layers: null, faults: null,
      onTensor: (name, done, total) => progress.show(`gate: weights ${done + 1}/${total} ${name}`),
    });
    progress.done();
    assertNoNanCodes(ck, weights);
    const summaries: PromptSummary[] = [];
    const reports: Report[] = [];
    for (let i = 0; i < prompts.length; i++) {
      const t0 = Date.now();
      const run = runDiff(model, {
        tokens: inputs[i].tokens, mode: 'both', layers: null, policy, freeSelection: false, dumpDir: null,
        onStage: (p) => progress.show(`gate: prompt ${i + 1}/${prompts.length} (${prompts[i].name}) · ${p.stage} ${p.done}/${nStages}`),
      });
      progress.done();
      const report = buildReport({
        modelPath: path.resolve(ck.dir), architecture: model.architecture, fingerprint: { value: fp.value, kind: 'sha256 of every file' },
        numLayers: model.numLayers, tokens: inputs[i].tokens, prompt: inputs[i].prompt, device: backend.identity, policy,
        mode: 'both', layers: 'all', injected: null, run, diagnosis: diagnose(run, policy, weights), weights, elapsedMs: Date.now() - t0,
      });
      const json = reportJson(report);
      if (a.reports !== undefined) writeFileAtomic(path.join(a.reports, `prompt-${String(i + 1).padStart(2, '0')}.json`), json);
      reports.push(report);
      const sum = summarize(prompts[i].name, report, policy, createHash('sha256').update(json).digest('hex'));
      summaries.push(sum);
      // one line per prompt as it finishes: a CI log shows progress (and which prompt failed) before the end
      log(`gate: prompt ${i + 1}/${prompts.length} ${prompts[i].name}: ${report.verdict === 'pass' ? 'pass' : verdictLine(report)} · worst ${policy.metric} ${sum.worst.value !== null ? sci(sum.worst.value) : 'NaN/Inf'} at ${sum.worst.stage} · ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    }
    const gateReport = (written: boolean) =>
      buildGateReport({ prompts: prompts.map((p, i) => ({ name: p.name, verdict: reports[i].verdict, report: reports[i] })), device: backend.identity, policy, record: path.resolve(a.record), written, elapsedMs: Date.now() - started });

    const failed = summaries.filter((s) => s.verdict === 'fail');
    if (failed.length > 0) {
      const g = gateReport(false);
      const colour = useColour(human as { isTTY?: boolean });
      const vl = gateVerdictLine(g);
      human.write(`${colour ? `\x1b[1;31m${vl}\x1b[0m` : vl}\n`);
      if (!terminal().quiet) {
        human.write(renderGateTable(summaries, policy, backend.identity.name) + '\n');
        const existing = fs.existsSync(a.record) ? ` (the existing ${a.record} is left as it was)` : '';
        human.write(`FAIL — ${failed.length} of ${summaries.length} acceptance prompts failed (${failed.map((s) => s.name).join(', ')}); no record written${existing}\n`);
        for (const l of gateCauseLines(g)) human.write(`  ${l}\n`);
      }
      writeGateReports(g, targets, out);
      return { code: ExitCode.stageFailed, summaries, reports, record: null };
    }

    // The weights the record vouches for must be the weights that ran: re-check (stat-only with the cache).
    const after = await checkpointFingerprint(ck.dir, ck.shardFiles);
    if (after.value !== fp.value) throw new InputError('the checkpoint changed while the gate ran; no record written', { file: ck.dir });

    const digest = createHash('sha256');
    summaries.forEach((s, i) => digest.update(`${i}\t${s.report_sha256}\n`));
    const record = sign(
      {
        schema: RECORD_SCHEMA,
        verdict: 'pass',
        tool: { name: 'layerdiff', version: toolVersion() },
        model: { path: path.resolve(ck.dir), architecture: model.architecture, num_layers: model.numLayers, fingerprint: fp.value, files: fp.files },
        device: backend.identity,
        policy,
        acceptance: {
          mode: 'both', layers: 'all', prompt_source: source, prompts: summaries,
          weights: { checked: weights.checked, exact: weights.exact, mismatched: weights.mismatched, overflow_blocks: weights.overflow_blocks, underflow_blocks: weights.underflow_blocks },
        },
        report_digest: `sha256:${digest.digest('hex')}`,
        created: new Date(started).toISOString(),
      },
      signingKey(),
    );
    writeRecord(a.record, record);
    writeGateReports(gateReport(true), targets, out);
    if (!terminal().quiet) human.write(renderGateTable(summaries, policy, backend.identity.name) + '\n');
    human.write(`PASS — all ${summaries.length} acceptance prompts passed; record written to ${a.record}${record.hmac ? ' (signed)' : ''}\n`);
    return { code: ExitCode.pass, summaries, reports, record };
  } finally {
    ck.close();
  }
}

function summarize(name: string, r: Report, policy: Policy, sha: string): PromptSummary {
  // A non-finite metric (device NaN/Inf) outranks every number; it is recorded as null (JSON has no Inf).
  let worst = { stage: r.stages[0]?.name ?? '-', rank: -Infinity, value: null as number | null };
  let warnings = 0;
  for (const s of r.stages) {
    if (s.status === 'warn') warnings++;
    for (const m of [s.accumulated, s.isolated]) {
      if (m === null) continue;
      const v = m[policy.metric];
      const rank = m.nan.device + m.inf.device > 0 || !Number.isFinite(v) ? Infinity : v;
      if (rank > worst.rank) worst = { stage: s.name, rank, value: Number.isFinite(rank) ? v : null };
    }
  }
  return { name, tokens: r.input.tokens.length, verdict: r.verdict, warnings, worst: { stage: worst.stage, value: worst.value }, report_sha256: sha };
}

export function renderGateTable(rows: PromptSummary[], policy: Policy, device: string): string {
  const t = new Table({
    head: ['#', 'prompt', 'tokens', `worst ${policy.metric}`, 'at stage', 'warn stages', 'verdict'],
    style: { head: [], border: [], compact: true },
    colAligns: ['right', 'left', 'right', 'right', 'left', 'right', 'left'],
  });
  rows.forEach((s, i) => t.push([String(i + 1), s.name, String(s.tokens), s.worst.value !== null ? sci(s.worst.value) : 'nan/inf', s.worst.stage, String(s.warnings), s.verdict]));
  return [`layerdiff gate — ${rows.length} acceptance prompts · device ${device} · policy ${policy.metric} fail > ${policy.fail_above}, warn > ${policy.warn_above} · both modes, all stages`, t.toString()].join('\n');
}
