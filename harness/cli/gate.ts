/**
 * `layerdiff gate <model> --record FILE`: the per-stage diff (the runner of `layerdiff diff`, both modes, all
 * stages) over the acceptance prompts; a per-prompt summary table on stdout. When every stage of every
 * prompt passes, the acceptance record is written atomically (DESIGN §8) and the exit code is 0; otherwise
 * no record is written, an existing record file is left exactly as it was, and the exit code is 1.
 *
 * `--shard I/N --out DIR` runs only shard I's prompts (harness/gate/shard.ts) and writes a partial result
 * instead (harness/gate/partial.ts; `gate --merge`, in gate-merge.ts, makes the record from all N).
 * `--save-golden DIR` / `--golden DIR` save or take each prompt's reference as the golden run DIR/prompt-NN,
 * so the reference side and the device side of a gate can run on different machines.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import Table from 'cli-table3';
import { diagnose } from '../compare/diagnose.js';
import { DEFAULT_POLICY, type Policy, resolvePolicy } from '../compare/policy.js';
import { ExitCode, InputError } from '../errors.js';
import { checkpointFingerprint, openCheckpointFingerprint } from '../gate/fingerprint.js';
import { BUILTIN_PROMPTS, builtinTokenPrompts, readPromptsFile, type AcceptancePrompt } from '../gate/prompts.js';
import { buildRecord, failedPrompts, summarize } from '../gate/accept.js';
import { PARTIAL_MANIFEST, PARTIAL_SCHEMA, promptLabel, reportFileName, type ShardPartial, signPartial } from '../gate/partial.js';
import { type AcceptanceRecord, type PromptSummary, signingKey, writeRecord } from '../gate/record.js';
import { ASSIGNMENT, assignShards, parseShard, promptSetDigest, promptSetEntries } from '../gate/shard.js';
import { Checkpoint } from '../io/checkpoint.js';
import { quickFingerprint } from '../io/fingerprint.js';
import { assertDistinctPaths, assertOutsideModel, checkOutputDir, checkOutputFile, isInside, realish, writeFileAtomic } from '../io/writer.js';
import { printable } from '../io/printable.js';
import { hasTokenizer } from '../io/tokenizer.js';
import { selectBackend } from '../runner/backend.js';
import { backendBuild, referenceBuild } from '../runner/build.js';
import { openModel } from '../runner/model.js';
import { assertNewOrEmptyDir, StagedDir } from '../repro/files.js';
import { GOLDEN_MANIFEST, GoldenReader, GoldenWriter } from '../repro/golden.js';
import { buildReport, type Report } from '../runner/report.js';
import { runDiff, type RunResult, stageNames } from '../runner/run.js';
import { toolVersion } from '../version.js';
import { assertNoNanCodes, checkWeights } from '../weights/check.js';
import { reportJson } from '../../reports/json.js';
import { policyText, sci, verdictLine } from '../../reports/format.js';
import { gateCauseLines, gateVerdictLine } from '../../reports/gate.js';
import { stdoutTaken, writeGateReports } from '../../reports/writers.js';
import { buildGateReport } from '../gate/report.js';
import { parseInject } from '../faults/plan.js';
import { assertInjectApplies, checkInjectFor } from './diff.js';
import { architectureFor } from '../arch/registry.js';
import { cacheListDigest, MANIFEST } from '../generate/fp16cache.js';
import { checkReportTargets } from './outputs.js';
import { ProgressLine } from './progress.js';
import { terminal, useColour } from './terminal.js';
import { type ResolvedInput, resolveInput } from './input.js';
import { readRegularBytes } from '../io/regular.js';

export interface GateArgs {
  model: string;
  /** acceptance record to write (a whole, unsharded gate) */
  record?: string;
  prompts?: string;
  device: string;
  /** a fixed rule (diff's flags); none of them and no policy file: the default floor policy */
  metric?: string;
  failAbove?: number;
  warnAbove?: number;
  /** --policy FILE, as diff's */
  policy?: string;
  /** also write each prompt's JSON report here (the files the record's report digest covers) */
  reports?: string;
  /** run only the prompts of shard I/N (harness/gate/shard.ts); needs --out */
  shard?: string;
  /** write a partial result (harness/gate/partial.ts) into this new or empty folder instead of a record */
  out?: string;
  /** name the partial with this run (a scheduler's job id), which gate --merge --run-id requires */
  runId?: string;
  /** take each prompt's reference from the golden run DIR/prompt-NN instead of computing it */
  golden?: string;
  /** save each prompt's reference stage outputs as the golden run DIR/prompt-NN */
  saveGolden?: string;
  /** one report over every prompt run (per-prompt sections), in each format; `-` is stdout */
  json?: string;
  junit?: string;
  summary?: string;
  html?: string;
  /** an FP16 cache (layerdiff convert) to compare with the checkpoint and bind into the record */
  fp16Cache?: string;
  /** simulate a device-path bug (diff's --inject): the gate must refuse it; no record or partial is ever written */
  inject?: string;
}

export interface GateResult {
  code: ExitCode;
  summaries: PromptSummary[];
  reports: Report[];
  record: AcceptanceRecord | null;
}

export const shq = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);

/** The gate command that writes a record matching this device and policy (quoted for a POSIX shell). */
export function gateCommand(model: string, record: string, device: string, policy: Policy): string {
  // gate never writes inside the model folder: a record named there gets a suggestion beside the folder instead
  const inside = isInside(realish(record), realish(model));
  const target = inside ? path.join(path.dirname(path.resolve(model)), `${path.basename(path.resolve(model))}.acceptance.json`) : record;
  const parts = ['layerdiff', 'gate', shq(model), '--record', shq(target)];
  if (device !== 'auto') parts.push('--device', device);
  if (policy.rule === 'fixed') {
    // a record matches on metric and thresholds (gate/record.ts): the defaults need no flag
    if (policy.metric !== DEFAULT_POLICY.metric) parts.push('--metric', policy.metric);
    if (policy.fail_above !== DEFAULT_POLICY.fail_above) parts.push('--fail-above', String(policy.fail_above));
    if (policy.warn_above !== DEFAULT_POLICY.warn_above) parts.push('--warn-above', String(policy.warn_above));
  } else if (policy.source !== 'default') {
    parts.push('--policy', shq(policy.source));
  }
  return parts.join(' ');
}

/** Outputs never go inside the model directory, also not through a symlinked alias of it (harness/io/writer.ts). */
export { assertOutsideModel };

/** Which outputs a gate writes; every combination that makes no sense is refused before anything runs. */
function checkOutputs(a: GateArgs): void {
  if (a.shard !== undefined && a.out === undefined && a.saveGolden === undefined) throw new InputError('--shard I/N needs --out DIR (a shard writes a partial result, which gate --merge turns into the record) or --save-golden DIR (the reference side)');
  if (a.shard !== undefined && a.record !== undefined) throw new InputError('--shard I/N writes no record: give --out DIR, and make the record with gate --merge');
  if (a.out !== undefined && a.record !== undefined) throw new InputError('give --record FILE (a whole gate) or --out DIR (a shard\'s partial result), not both; gate --merge writes the record from the partials');
  if (a.record === undefined && a.out === undefined && a.saveGolden === undefined) throw new InputError('give --record FILE, or --shard I/N --out DIR, or --save-golden DIR');
  if (a.golden !== undefined && a.saveGolden !== undefined) throw new InputError('give --golden or --save-golden, not both');
  if (a.fp16Cache !== undefined && a.record === undefined) throw new InputError('--fp16-cache binds the cache into the record: give --record FILE (a whole gate)');
  // eslint-disable-next-line no-control-regex -- a run id names a folder: no control character in it
  if (a.runId !== undefined && (typeof a.runId !== 'string' || a.runId === '' || /[\u0000-\u001f/\\]/.test(a.runId))) throw new InputError(`--run-id ${JSON.stringify(a.runId)}: expected one name (no slash or control character)`);
  if (a.runId !== undefined && a.out === undefined) throw new InputError('--run-id names a shard\'s partial result: give --shard I/N --out DIR (or --merge)');
}

export async function runGate(a: GateArgs, out: NodeJS.WritableStream = process.stdout): Promise<GateResult> {
  const started = Date.now();
  const policy = resolvePolicy(a);
  checkOutputs(a);
  assertDistinctPaths(
    [
      { option: '--record', path: a.record, kind: 'file' }, { option: '--json', path: a.json, kind: 'file' }, { option: '--junit', path: a.junit, kind: 'file' },
      { option: '--summary', path: a.summary, kind: 'file' }, { option: '--html', path: a.html, kind: 'file' },
      { option: '--reports', path: a.reports, kind: 'shared' }, { option: '--out', path: a.out, kind: 'dir' }, { option: '--save-golden', path: a.saveGolden, kind: 'dir' },
    ],
    [
      { option: '--prompts', path: a.prompts, kind: 'file' }, { option: '--policy', path: a.policy, kind: 'file' },
      { option: '--golden', path: a.golden, kind: 'dir' }, { option: '--fp16-cache', path: a.fp16Cache, kind: 'dir' },
    ],
  );
  // Every output checked before the run: outside the model (realpath), the right kind of target, writable.
  for (const p of [a.record, a.reports, a.out, a.saveGolden]) if (p !== undefined) assertOutsideModel(p, a.model);
  if (a.record === '-') throw new InputError('--record -: the record is a file; give a path');
  if (a.record !== undefined) checkOutputFile(a.record, '--record');
  for (const [o, d] of [['--reports', a.reports], ['--out', a.out], ['--save-golden', a.saveGolden]] as const) if (d !== undefined) checkOutputDir(d, o);
  if (a.out !== undefined) assertNewOrEmptyDir(a.out, '--out');
  // the cache is compared after a passing run; a folder that holds none is refused before anything runs
  if (a.fp16Cache !== undefined && !fs.existsSync(path.join(a.fp16Cache, MANIFEST))) throw new InputError(`--fp16-cache: no ${MANIFEST} here; write the cache first (layerdiff convert ${a.model} --fp16-cache ${a.fp16Cache})`, { file: a.fp16Cache });
  const targets = { json: a.json, junit: a.junit, summary: a.summary, html: a.html };
  checkReportTargets(targets, (t) => assertOutsideModel(t, a.model));
  for (const [o, t] of Object.entries(targets)) if (t !== undefined) checkOutputFile(t, `--${o}`);
  // with a report on stdout, the human-readable table goes to stderr
  const human = stdoutTaken(targets) ? process.stderr : out;
  const log = (line: string) => !terminal().quiet && process.stderr.write(line + '\n');
  const shard = a.shard !== undefined ? parseShard(a.shard) : a.out !== undefined ? { index: 1, count: 1 } : null;
  const ck = Checkpoint.open(a.model);
  // each shard as its header was parsed: the record binds that header beside a digest hashed later, so neither may
  // belong to an edit in between (checked before anything is written)
  const pins = ck.shardIdentities();
  try {
    const backend = selectBackend(a.device);
    const faults = a.inject !== undefined ? parseInject(a.inject, Number.MAX_SAFE_INTEGER) : null;
    const model = openModel(ck, backend, faults);
    checkInjectFor(a.inject, faults, model);
    let prompts: AcceptancePrompt[];
    // one read of the prompts file: the prompts run are the bytes its digest in the record names
    const promptBytes = a.prompts !== undefined ? readRegularBytes(a.prompts) : null;
    if (a.prompts !== undefined) prompts = readPromptsFile(a.prompts, promptBytes!);
    else prompts = hasTokenizer(ck.dir) ? [...BUILTIN_PROMPTS] : builtinTokenPrompts(model.vocab);
    // Which prompts vouched for the record: the file by path and content digest.
    const source = a.prompts !== undefined ? `${path.resolve(a.prompts)} sha256:${createHash('sha256').update(promptBytes!).digest('hex')}` : 'built-in';
    // Built-in prompts stay within the model's context; a user's prompts are taken as given.
    const maxPos = typeof ck.config.max_position_embeddings === 'number' ? ck.config.max_position_embeddings : undefined;
    const inputs: ResolvedInput[] = [];
    for (const [i, p] of prompts.entries()) {
      const spec = p.tokens !== undefined ? { tokens: p.tokens.join(',') } : { prompt: p.prompt };
      try {
        inputs.push(await resolveInput(ck.dir, model.vocab, a.prompts === undefined && maxPos !== undefined ? { ...spec, maxTokens: maxPos } : spec, (n) => ck.readMeta(n)));
      } catch (e) {
        // named by the prompt it came from, not by the --tokens option the ids went through
        if (!(e instanceof InputError) || a.prompts === undefined) throw e;
        throw new InputError(`prompt ${i + 1} (${p.name}): ${e.message.replace(/^--tokens [^:]*: /, '')}`, { file: a.prompts });
      }
    }
    // The whole set is resolved on every shard: the assignment and the set's digest depend on all of it.
    const set = promptSetEntries(prompts.map((p, i) => ({ name: p.name, tokens: inputs[i].tokens })));
    const assigned = shard !== null ? assignShards(set, shard.count) : null;
    const mine = prompts.map((_p, i) => i).filter((i) => assigned === null || assigned[i] === shard!.index);

    const fp = await openCheckpointFingerprint(ck);
    // Golden runs in (the reference from another machine) or out (for one), checked before anything runs: a gate's
    // golden binds the checkpoint's content and the build that computed it, signed as partials are
    const quick = a.golden !== undefined || a.saveGolden !== undefined ? quickFingerprint(ck) : '';
    const goldenSide = { fingerprint: fp.value, build: referenceBuild() };
    const goldens = new Map<number, GoldenReader>();
    if (a.golden !== undefined) {
      for (const i of mine) {
        const g = openPromptGolden(a.golden, i, prompts[i].name, inputs[i].tokens, quick, model.architecture);
        g.checkGateSide(goldenSide.fingerprint, goldenSide.build, signingKey());
        goldens.set(i, g);
      }
    }
    if (a.saveGolden !== undefined) for (const i of mine) assertNewOrEmptyDir(path.join(a.saveGolden, promptLabel(i)), '--save-golden');

    const progress = new ProgressLine(null, 0);
    const nStages = stageNames(model.numLayers, null).length;
    // Weights first, as `diff` does (once: it does not depend on the prompt): shapes against the config,
    // every quantized tensor's FP16 copy against the exact one, NaN codes as bad input. Each report carries it.
    model.conformance();
    const weights = checkWeights(ck, backend.native, {
      layers: null, faults, numLayers: model.numLayers, fused: model.fusedLinears,
      onTensor: (name, done, total) => progress.show(`gate: weights ${done + 1}/${total} ${name}`),
    });
    progress.done();
    assertNoNanCodes(ck, weights);
    assertInjectApplies(a.inject, faults, weights);
    const summaries: PromptSummary[] = [];
    const reports: Report[] = [];
    const jsons: string[] = [];
    const savedGoldens: string[] = [];
    try {
      for (const [k, i] of mine.entries()) {
        const t0 = Date.now();
        const goldenDir = a.golden !== undefined ? path.join(a.golden, promptLabel(i)) : a.saveGolden !== undefined ? path.join(a.saveGolden, promptLabel(i)) : null;
        const saver = a.saveGolden !== undefined ? new GoldenWriter(goldenDir!) : null;
        let run: RunResult;
        try {
          run = runDiff(model, {
            tokens: inputs[i].tokens, mode: 'both', layers: null, policy, freeSelection: false, dumpDir: null,
            golden: goldens.get(i) ?? null, saveGolden: saver,
            onStage: (p) => progress.show(`gate: prompt ${k + 1}/${mine.length} (${printable(prompts[i].name)}) · ${p.stage} ${p.done}/${nStages}`),
          });
        } catch (e) {
          saver?.abort();
          throw e;
        } finally {
          progress.done();
        }
        if (saver !== null) {
          saver.commit({ model: { path: path.resolve(ck.dir), architecture: model.architecture, fingerprint: quick, num_layers: model.numLayers }, tokens: inputs[i].tokens, ...(inputs[i].prompt !== undefined ? { prompt: inputs[i].prompt } : {}), layers: null, gate: goldenSide }, signingKey());
          savedGoldens.push(goldenDir!);
        }
        const report = buildReport({
          modelPath: path.resolve(ck.dir), architecture: model.architecture, fingerprint: { value: fp.value, kind: 'sha256 of every file' },
          numLayers: model.numLayers, tokens: inputs[i].tokens, prompt: inputs[i].prompt, device: backend.identity, policy,
          mode: 'both', layers: 'all', injected: faults, run, diagnosis: diagnose(run, policy, weights), weights, elapsedMs: Date.now() - t0,
          golden: goldenDir !== null ? { dir: path.resolve(goldenDir), action: a.golden !== undefined ? 'compared' : 'saved' } : null,
        });
        const json = reportJson(report);
        if (a.reports !== undefined) writeFileAtomic(path.join(a.reports, `${promptLabel(i)}.json`), json, '--reports');
        reports.push(report);
        jsons.push(json);
        const sum = summarize(prompts[i].name, report, policy, createHash('sha256').update(json).digest('hex'));
        summaries.push(sum);
        // one line per prompt as it finishes: a CI log shows progress (and which prompt failed) before the end
        log(`gate: prompt ${k + 1}/${mine.length} ${printable(prompts[i].name)}: ${report.verdict === 'pass' ? 'pass' : verdictLine(report)} · worst ${policy.metric} ${sum.worst.value !== null ? sci(sum.worst.value) : 'NaN/Inf'} at ${sum.worst.stage} · ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      }
    } catch (e) {
      // an interrupted gate leaves none of the golden runs it saved: they would look like a finished side
      for (const d of savedGoldens) fs.rmSync(d, { recursive: true, force: true });
      throw e;
    }
    const failed = failedPrompts(summaries);
    const recordPath = a.record !== undefined ? path.resolve(a.record) : null;
    const gateReport = (written: boolean) =>
      buildGateReport({ prompts: mine.map((i, k) => ({ name: prompts[i].name, verdict: reports[k].verdict, report: reports[k] })), device: backend.identity, policy, record: recordPath, written, elapsedMs: Date.now() - started });
    const g = gateReport(false);
    if (failed.length > 0) {
      const vl = printable(gateVerdictLine(g)); // prompt names from the user's file: shown, never obeyed
      human.write(`${useColour(human as { isTTY?: boolean }) ? `\x1b[1;31m${vl}\x1b[0m` : vl}\n`);
    }
    if (!terminal().quiet) human.write(renderGateTable(summaries, policy, backend.identity.name, { numbers: mine.map((i) => i + 1), of: prompts.length, shard }) + '\n');
    const modelEntry = { path: path.resolve(ck.dir), architecture: model.architecture, num_layers: model.numLayers, fingerprint: fp.value, files: fp.files, headers: Object.fromEntries(ck.headerDigests()), data_samples: Object.fromEntries(ck.dataSampleDigests()) };
    const weightsEntry = { checked: weights.checked, exact: weights.exact, mismatched: weights.mismatched, overflow_blocks: weights.overflow_blocks, underflow_blocks: weights.underflow_blocks };
    if (failed.length > 0 && !terminal().quiet) {
      human.write(`FAIL — ${failed.length} of ${summaries.length} acceptance prompts${shard !== null ? ` of shard ${shard.index}/${shard.count}` : ''} failed (${failed.map((s) => printable(s.name)).join(', ')}); no record written${a.record !== undefined && fs.existsSync(a.record) ? ` (the existing ${a.record} is left as it was)` : ''}\n`);
      // each cause once, naming the prompts it showed in
      for (const l of gateCauseLines(g)) human.write(`  ${printable(l)}\n`);
    }
    if (faults !== null) {
      // a simulated bug never unlocks anything: report whether the gate caught it, write no record or partial
      writeGateReports(g, targets, out);
      human.write(failed.length > 0 ? `injected fault ${a.inject}: refused (${failed.length} of ${summaries.length} prompts failed); no record written\n` : `injected fault ${a.inject}: NOT caught — every prompt passed with a simulated device bug; no record written\n`);
      return { code: failed.length > 0 ? ExitCode.stageFailed : ExitCode.pass, summaries, reports, record: null };
    }
    if (a.out === undefined && (a.record === undefined || failed.length > 0)) {
      writeGateReports(g, targets, out);
      if (a.saveGolden !== undefined) human.write(`golden runs of ${mine.length} prompts saved under ${a.saveGolden}\n`);
      return { code: failed.length > 0 ? ExitCode.stageFailed : ExitCode.pass, summaries, reports, record: null };
    }

    // The weights the record (or partial) vouches for must be the weights that ran, and still be what the folder holds:
    // re-check by path (stat-only with the cache), which also sees a shard swapped since it was opened.
    const after = await checkpointFingerprint(ck.dir, ck.shardFiles);
    if (after.value !== fp.value) throw new InputError('the checkpoint changed while the gate ran; no record written', { file: ck.dir });
    ck.unchangedSince(pins);

    if (a.out !== undefined) {
      // A failing shard still writes its partial: the merge names it and its failing prompts.
      writePartialDir(a.out, signPartial(
        {
          schema: PARTIAL_SCHEMA,
          tool: { name: 'layerdiff', version: toolVersion(), build: backendBuild(backend) },
          model: modelEntry,
          device: backend.identity,
          policy,
          prompt_set: { source, digest: promptSetDigest(set), prompts: set },
          shard: { ...shard!, assignment: ASSIGNMENT },
          acceptance: { mode: 'both', layers: 'all', weights: weightsEntry },
          reference: a.golden !== undefined ? { source: 'golden', dir: path.resolve(a.golden) } : { source: 'computed' },
          prompts: mine.map((i, k) => ({ index: i, summary: summaries[k], report: reportFileName(i) })),
          created: new Date(started).toISOString(),
          ...(a.runId !== undefined ? { run_id: a.runId } : {}),
        },
        signingKey(),
      ), jsons);
      writeGateReports(g, targets, out);
      const what = failed.length > 0 ? 'FAIL' : 'PASS';
      human.write(`${what} — shard ${shard!.index}/${shard!.count}: ${summaries.length} of ${prompts.length} prompts; partial result written to ${a.out}${signingKey() !== null ? ' (signed)' : ''}; merge the shards' folders with layerdiff gate --merge DIR... --record FILE\n`);
      return { code: failed.length > 0 ? ExitCode.stageFailed : ExitCode.pass, summaries, reports, record: null };
    }

    // The FP16 cache the optimized path will read: every byte re-derived from these (validated) weights by the
    // device path's own dequantization and compared with the cache, so the record vouches for its content.
    let fp16Cache: AcceptanceRecord['fp16_cache'];
    if (a.fp16Cache !== undefined) {
      const entry = architectureFor(ck);
      const man = await entry.writeFp16Cache(ck, backend.native, a.fp16Cache, fp.value, () => () => {}, true);
      fp16Cache = { path: path.resolve(a.fp16Cache), files_digest: cacheListDigest(man, path.join(a.fp16Cache, MANIFEST)) };
      human.write(`FP16 cache ${a.fp16Cache}: every byte equals the device path's dequantization of the checkpoint; bound into the record\n`);
    }
    const record = buildRecord({
      toolVersion: toolVersion(), build: backendBuild(backend), model: modelEntry, device: backend.identity, policy, promptSource: source, summaries, weights: weightsEntry,
      started: new Date(started), key: signingKey(), fp16Cache,
    });
    writeRecord(a.record!, record);
    writeGateReports(gateReport(true), targets, out);
    human.write(`PASS — all ${summaries.length} acceptance prompts passed; record written to ${a.record}${record.hmac ? ' (signed)' : ''}\n`);
    return { code: ExitCode.pass, summaries, reports, record };
  } finally {
    ck.close();
  }
}

/** The golden run of prompt i (DIR/prompt-NN): of this checkpoint, every stage, this prompt's tokens. */
function openPromptGolden(dir: string, i: number, name: string, tokens: number[], fingerprint: string, architecture: string): GoldenReader {
  const d = path.join(dir, promptLabel(i));
  if (!fs.existsSync(path.join(d, GOLDEN_MANIFEST))) {
    throw new InputError(`--golden: no golden run for prompt ${i + 1} (${name}); save the reference side with layerdiff gate MODEL --save-golden ${dir} (same prompts, any --shard)`, { file: d });
  }
  const g = GoldenReader.open(d);
  g.checkModel(fingerprint, architecture);
  if (g.manifest.layers !== null) throw new InputError(`--golden: holds ${g.rangeText()}; the gate needs every stage`, { file: d });
  if (g.manifest.tokens.join(',') !== tokens.join(',')) throw new InputError(`--golden: its ${g.manifest.tokens.length} tokens are not prompt ${i + 1} (${name})'s ${tokens.length}: saved from another prompt set`, { file: d });
  return g;
}

/** The partial's folder appears whole or not at all (staged, then renamed into place). */
function writePartialDir(dir: string, partial: ShardPartial, jsons: string[]): void {
  const staged = new StagedDir(dir);
  try {
    partial.prompts.forEach((p, k) => fs.writeFileSync(staged.file(p.report), jsons[k]));
    fs.writeFileSync(staged.file(PARTIAL_MANIFEST), JSON.stringify(partial, null, 2) + '\n');
    staged.commit();
  } catch (e) {
    staged.abort();
    throw e;
  }
}

export interface GateTableScope {
  /** each row's 1-based position in the prompt set (default 1, 2, …) */
  numbers?: number[];
  /** the set's size, when the rows are one shard of it */
  of?: number;
  shard?: { index: number; count: number } | null;
}

export function renderGateTable(rows: PromptSummary[], policy: Policy, device: string, scope: GateTableScope = {}): string {
  const t = new Table({
    head: ['#', 'prompt', 'tokens', `worst ${policy.metric}`, 'at stage', 'warn stages', 'verdict'],
    style: { head: [], border: [], compact: true },
    colAligns: ['right', 'left', 'right', 'right', 'left', 'right', 'left'],
  });
  rows.forEach((s, i) => t.push([String(scope.numbers?.[i] ?? i + 1), printable(s.name), String(s.tokens), s.worst.value !== null ? sci(s.worst.value) : 'nan/inf', s.worst.stage, String(s.warnings), s.verdict]));
  const what = scope.shard != null ? `shard ${scope.shard.index}/${scope.shard.count}: ${rows.length} of ${scope.of ?? rows.length} acceptance prompts` : `${rows.length} acceptance prompts`;
  const q = (s: PromptSummary) => (s.questions ? `own error ${s.questions.own_error.status} · drift ${s.questions.drift.status} · behaviour ${s.questions.behaviour.status}` : '-');
  const flips = (s: PromptSummary) => (s.questions && s.questions.behaviour.flips > 0 ? ` (${s.questions.behaviour.flips} flips: ${s.questions.behaviour.benign} benign, ${s.questions.behaviour.scoring_bug} scoring bug)` : '');
  const answers = rows.some((s) => s.questions) ? rows.map((s, i) => `  ${scope.numbers?.[i] ?? i + 1}. ${printable(s.name)}: ${q(s)}${flips(s)}`) : [];
  return [`layerdiff gate — ${what} · device ${device} · policy ${policyText(policy)} · all modes, all stages`, t.toString(), ...answers].join('\n');
}
