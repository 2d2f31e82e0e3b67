#!/usr/bin/env node
/**
 * The layerdiff command line. Exit codes (DESIGN §6): 0 pass · 1 a stage failed · 2 bad input or usage ·
 * 3 optimized path locked · 4 internal error. Errors are one line on stderr; a stack trace only with
 * LAYERDIFF_DEBUG=1.
 */
import * as path from 'node:path';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { ExitCode, InputError, LockedError } from '../errors.js';
import { filesystemWriteError } from '../io/writer.js';
import { printable } from '../io/printable.js';
import { simdLevel } from '../io/addon.js';
import { packageRoot, toolVersion } from '../version.js';
import { parseLayers, runDiffCommand } from './diff.js';
import { parseInject } from '../faults/plan.js';
import { runInspect } from './inspect.js';
import { runReplayCommand } from './replay.js';
import { runWeightsCheckCommand } from '../weights/command.js';
import { runFixture } from './fixture.js';
import { runConvert } from './convert.js';
import { runGate } from './gate.js';
import { runGateMerge } from './gate-merge.js';
import { runGenerate } from './generate.js';
import { superviseRun } from './supervise.js';
import { rejectEmptyValues, rejectRepeatedOptions } from './argv.js';
import { runCompare } from './compare.js';
import { faultLines, fixtureKinds, fixtureLines } from './catalog.js';
import { suggestOption } from './suggest.js';
import { COLOUR_MODES, type ColourMode, configureTerminal } from './terminal.js';
import { METRICS } from '../compare/policy.js';

export const DEFAULT_MODEL = () => path.join(packageRoot(), 'fixtures', 'llama-tiny');

/** Options shared by the commands that run the device path. */
const deviceOption = {
  device: { type: 'string', default: 'auto', choices: ['auto', 'hip', 'emulated'], describe: 'device path: hip (an AMD GPU with ROCm), emulated (its numerics on the CPU), auto = hip when one is found, else emulated' },
} as const;

/** The verdict policy (DESIGN §5). */
const policyOptions = {
  metric: { type: 'string', choices: [...METRICS], describe: 'fixed rule: judge every stage by this metric alone, no FP16 floor (default policy: max_abs with the floor)' },
  'fail-above': { type: 'number', describe: 'fixed rule: a stage fails when its metric exceeds this (default 0.1; NaN/Inf the reference has not always fails)' },
  'warn-above': { type: 'number', describe: 'fixed rule: a stage warns when its metric exceeds this (default 0.01)' },
  policy: { type: 'string', describe: 'policy file (JSON): thresholds per stage kind (embed, attn, moe, logits) and mode, floor and behaviour bounds (README "Reading the verdict")' },
} as const;

/** What yargs hands a middleware beside the arguments (its types omit it): the parser of the command being run. */
interface CommandParser {
  /** the command's options: `key` all of them (aliases too), `boolean` those that take no value */
  getOptions(): { boolean: string[]; key: Record<string, unknown> };
}

function fail(message: string, code: ExitCode): never {
  // one line, whatever a tensor name or a tokenizer's text in the message holds (escape sequences, line breaks)
  process.stderr.write(`layerdiff: error: ${printable(message)}\n`);
  process.exit(code);
}

/** The report options that take `-` for stdout. */
const REPORT_OPTIONS = new Set(['--json', '--junit', '--summary', '--html']);

/** yargs reads a lone `-` as a positional (stdin): after a report option, it is that option's value. */
export function joinStdoutTargets(argv: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    if (REPORT_OPTIONS.has(argv[i]) && argv[i + 1] === '-') out.push(`${argv[i++]}=-`);
    else out.push(argv[i]);
  }
  return out;
}

export async function main(rawArgv: string[]): Promise<number> {
  let code: ExitCode = ExitCode.pass;
  rejectRepeatedOptions(rawArgv);
  simdLevel(); // a bad LAYERDIFF_SIMD is one line and exit 2 before any work, not a level silently ignored
  const argv = joinStdoutTargets(rawArgv);
  await yargs(argv)
    .scriptName('layerdiff')
    .version(toolVersion())
    .help()
    .alias('h', 'help')
    .strict()
    .recommendCommands()
    .wrap(Math.min(120, process.stdout.columns ?? 100))
    .demandCommand(1, 'give a command: diff, compare, replay, gate, generate, convert, inspect, fixture or faults')
    .option('color', { type: 'string', choices: COLOUR_MODES, default: 'auto', global: true, describe: 'colour the verdict and statuses: auto = on a TTY (NO_COLOR turns it off, FORCE_COLOR on); always; never' })
    .option('quiet', { alias: 'q', type: 'boolean', default: false, global: true, describe: 'print only the verdict line and errors (reports are still written)' })
    .option('verbose', { alias: 'v', type: 'boolean', default: false, global: true, describe: 'print more: every differing tensor, the finite part of non-finite stages, timings, the environment' })
    // before validation, so that `--mode=` is named as an empty value, not as a choice yargs does not know
    .middleware(((_a: unknown, y: CommandParser) => rejectEmptyValues(rawArgv, new Set(y.getOptions().boolean), new Set(Object.keys(y.getOptions().key)))) as never, true)
    .middleware((a) => configureTerminal({ colour: a.color as ColourMode, quiet: a.quiet === true, verbose: a.verbose === true }))
    .fail((msg, err, y) => {
      if (err) throw err;
      fail(`${suggestOption(msg, y, argv)} (see layerdiff --help)`, ExitCode.badInput);
    })
    .command(
      'diff [model]',
      'per-stage diff of the FP32 reference and the device path (default: the bundled fixture)',
      (y) =>
        y
          .positional('model', { type: 'string', describe: 'checkpoint folder (config.json + safetensors); default: the bundled fixtures/llama-tiny' })
          .option('prompt', { type: 'string', describe: 'input text (needs tokenizer.json); default: a fixed built-in prompt' })
          .option('tokens', { type: 'string', describe: 'input token ids, comma-separated (instead of --prompt)' })
          .option('layers', { type: 'string', default: 'all', describe: 'layers to diff: all, N or A-B (earlier layers run on the reference only)' })
          .option('max-tokens', { type: 'number', describe: 'truncate the input to N tokens' })
          .options(deviceOption)
          .option('mode', { type: 'string', default: 'both', choices: ['both', 'accumulated', 'accumulated-forced', 'isolated'], describe: 'both: the three questions (isolated: each device stage on the reference\'s input and choices, where a bug shows; accumulated-forced: the device on its own output with the reference\'s top-k choices, FP16 drift; accumulated: the user\'s model, judged on its logits)' })
          .options(policyOptions)
          .option('fail-fast', { type: 'boolean', default: false, describe: 'stop at the first failing stage (the report covers the stages run)' })
          .option('json', { type: 'string', describe: 'write the JSON report (layerdiff.report/1) to FILE; - for stdout (the table then goes to stderr)' })
          .option('dump', { type: 'string', describe: 'write DIR/<stage>.safetensors with both paths\' outputs (F32 reference, device, device_isolated)' })
          .option('inject', { type: 'string', describe: 'simulate a device-path bug: FAULT[@layer] (see layerdiff faults)' })
          .option('free-selection', { type: 'boolean', default: false, describe: 'isolated mode: let the device make its own top-k choices' })
          .option('junit', { type: 'string', describe: 'write JUnit XML to FILE (- for stdout): one testcase per stage' })
          .option('html', { type: 'string', describe: 'write a self-contained HTML report to FILE (plots, histograms, drill-down)' })
          .option('summary', { type: 'string', describe: 'write a Markdown summary to FILE (CI job summaries; - for stdout)' })
          .option('repro', { type: 'string', describe: 'export the first failing layer as a repro bundle into DIR (see layerdiff replay)' })
          .option('repeat', { type: 'number', default: 1, describe: 'run the device path N times per stage (1-100) and report the run-to-run spread' })
          .option('save-golden', { type: 'string', describe: 'save the reference stage outputs to DIR (a golden run)' })
          .option('golden', { type: 'string', describe: 'compare against a golden run in DIR instead of recomputing the reference' })
          .option('drill', { type: 'boolean', default: true, describe: 'drill into failing layers sub-stage by sub-stage (--no-drill to skip)' })
          .option('weights', { type: 'boolean', default: true, describe: 'check every quantized weight before any activation runs (--no-weights to skip)' })
          .option('recheck-weights', { type: 'boolean', describe: 'run the weights check even if this checkpoint (same fingerprint) already passed it with this numerics build; its result replaces the stored one' }),
      async (a) => {
        const r = await runDiffCommand({
          model: a.model ?? DEFAULT_MODEL(),
          prompt: a.prompt,
          tokens: a.tokens,
          layers: a.layers,
          maxTokens: a['max-tokens'],
          device: a.device,
          mode: a.mode,
          metric: a.metric,
          failAbove: a['fail-above'],
          warnAbove: a['warn-above'],
          policy: a.policy,
          json: a.json,
          dump: a.dump,
          inject: a.inject,
          freeSelection: a['free-selection'],
          junit: a.junit,
          html: a.html,
          summary: a.summary,
          repro: a.repro,
          repeat: a.repeat,
          saveGolden: a['save-golden'],
          golden: a.golden,
          drill: a.drill,
          weights: a.weights,
          recheckWeights: a.recheckWeights as boolean | undefined,
          failFast: a['fail-fast'],
        });
        code = r.code;
      },
    )
    .command(
      'compare <run-a> <run-b>',
      'compare two saved runs without recomputing either: RUN_A gives the reference side, RUN_B the device side (each a --dump folder or a golden run)',
      (y) =>
        y
          .positional('run-a', { type: 'string', demandOption: true, describe: 'reference side: a golden run (--save-golden, or an independent reference\'s) or a --dump folder (its reference tensors)' })
          .positional('run-b', { type: 'string', demandOption: true, describe: 'device side: a --dump folder (its device and device_isolated tensors) or a golden run (its outputs)' })
          .options(policyOptions)
          .option('fail-fast', { type: 'boolean', default: false, describe: 'stop at the first failing stage' })
          .option('json', { type: 'string', describe: 'write the JSON report (layerdiff.report/1) to FILE; - for stdout' })
          .option('junit', { type: 'string', describe: 'write JUnit XML to FILE (- for stdout)' })
          .option('html', { type: 'string', describe: 'write a self-contained HTML report to FILE' })
          .option('summary', { type: 'string', describe: 'write a Markdown summary to FILE (- for stdout)' }),
      (a) => {
        code = runCompare({
          runA: a['run-a'], runB: a['run-b'], policy: a.policy, metric: a.metric, failAbove: a['fail-above'], warnAbove: a['warn-above'], failFast: a['fail-fast'],
          json: a.json, junit: a.junit, html: a.html, summary: a.summary,
        }).code;
      },
    )
    .command(
      'faults',
      'list the device-path bugs --inject can simulate (DESIGN §9), one line each: what goes wrong · its signature',
      (y) => y,
      () => {
        process.stdout.write(faultLines().join('\n') + '\n');
      },
    )
    .command(
      'inspect <model>',
      'config, storage format of every tensor group, conformance of every shape',
      (y) =>
        y
          .positional('model', { type: 'string', demandOption: true, describe: 'checkpoint folder' })
          .option('check', { type: 'boolean', default: false, describe: 'also compare every quantized weight as the device dequantizes it with the reference (no activations run)' })
          .option('inject', { type: 'string', describe: 'with --check: simulate a device-path bug, FAULT[@layer]' })
          .option('layers', { type: 'string', default: 'all', describe: 'with --check: all, N or A-B' })
          .options(deviceOption)
          .option('json', { type: 'string', describe: 'with --check: write the weights check as JSON' }),
      (a) => {
        // the check's options without the check would be accepted and do nothing
        if (!a.check) for (const o of ['inject', 'json'] as const) if (a[o] !== undefined) throw new InputError(`--${o} goes with --check (the weights check); without it inspect reads no weights`);
        if (!a.check && a.layers !== 'all') throw new InputError('--layers goes with --check (the weights check); without it inspect reads no weights');
        const before = a.check ? (n: number) => void (parseLayers(a.layers, n), a.inject !== undefined && parseInject(a.inject, n)) : undefined;
        code = runInspect(a.model, before);
        if (a.check && code === ExitCode.pass) code = runWeightsCheckCommand({ model: a.model, device: a.device, inject: a.inject, layers: a.layers, json: a.json });
      },
    )
    .command(
      'replay <dir>',
      'rerun the layer a repro bundle (diff --repro DIR) holds, on both paths, and print its numbers',
      (y) =>
        y
          .positional('dir', { type: 'string', demandOption: true, describe: 'repro bundle folder written by diff --repro' })
          .options(deviceOption)
          .option('json', { type: 'string', describe: 'write the replayed metrics as JSON' }),
      (a) => {
        code = runReplayCommand({ dir: a.dir, device: a.device, json: a.json }).code;
      },
    )
    .command(
      'fixture <kind> <out>',
      'write a small seeded checkpoint in the real on-disk format',
      (y) =>
        y
          .positional('kind', { type: 'string', demandOption: true, choices: fixtureKinds(), describe: 'which fixture (see the list below)' })
          .positional('out', { type: 'string', demandOption: true, describe: 'output folder (new or empty)' })
          .option('format', { type: 'string', describe: 'llama-tiny: quark-mxfp4, modelopt-nvfp4, ct-nvfp4, ct-mxfp4, bnb-nf4 or bnb-fp4 (one producer\'s FP4 form); deepseek-v4-tiny: modelopt-nvfp4 (routed experts)' })
          .epilogue(`kinds:\n${fixtureLines().join('\n')}`),
      (a) => {
        code = runFixture(a.kind, a.out, a.format);
      },
    )
    .command(
      'gate [model]',
      'the diff over the acceptance prompts (both modes, all stages); on pass writes the acceptance record (or, sharded, a partial result to merge)',
      (y) =>
        y
          .positional('model', { type: 'string', describe: 'checkpoint directory (not with --merge)' })
          .option('record', { type: 'string', describe: 'acceptance record to write (JSON, outside the model dir)' })
          .option('prompts', { type: 'string', describe: 'JSONL acceptance prompts: {"prompt": "..."} or {"tokens": [...]} per line (default: built-in set)' })
          .option('reports', { type: 'string', describe: 'also write each prompt\'s JSON report into this folder' })
          .option('shard', { type: 'string', describe: 'run only shard I/N of the prompts (1-based), writing a partial result to --out' })
          .option('out', { type: 'string', describe: 'new or empty folder for the shard\'s partial result (no record is written)' })
          .option('merge', { type: 'string', array: true, describe: 'merge the shards\' --out folders into --record (no model: nothing is rerun)' })
          .option('run-id', { type: 'string', describe: 'a shard: name its partial with this run (a scheduler\'s job id); --merge: take only partials of this run' })
          .option('golden', { type: 'string', describe: 'take each prompt\'s reference from the golden run DIR/prompt-NN' })
          .option('save-golden', { type: 'string', describe: 'save each prompt\'s reference as the golden run DIR/prompt-NN' })
          .option('json', { type: 'string', describe: 'write one JSON report over all prompts run (layerdiff.gate-report/1) to FILE; - for stdout' })
          .option('junit', { type: 'string', describe: 'write JUnit XML to FILE, one testsuite per prompt (- for stdout)' })
          .option('summary', { type: 'string', describe: 'write a Markdown summary to FILE (- for stdout)' })
          .option('html', { type: 'string', describe: 'write one HTML report to FILE, a section per prompt' })
          .option('fp16-cache', { type: 'string', describe: 'also vouch for this FP16 cache (layerdiff convert): every byte re-derived from the checkpoint and compared, then bound into the record' })
          .option('inject', { type: 'string', describe: 'simulate a device-path bug, as diff --inject (see layerdiff faults): exit 1 when the gate refuses it; never writes a record' })
          .options(deviceOption)
          .options(policyOptions),
      async (a) => {
        if (a.merge !== undefined) {
          const given = ['model', 'prompts', 'reports', 'shard', 'out', 'golden', 'save-golden', 'fp16-cache', 'inject'].filter((k) => (a as Record<string, unknown>)[k] !== undefined);
          if (given.length > 0) throw new InputError(`gate --merge reads only the shards' folders and --record; drop ${given.map((k) => (k === 'model' ? 'the model' : `--${k}`)).join(', ')}`);
          if (a.record === undefined) throw new InputError('gate --merge needs --record FILE: the record to write');
          code = runGateMerge({ dirs: a.merge.map(String), record: a.record, runId: a['run-id'] }).code;
          return;
        }
        if (a.model === undefined) throw new InputError('gate: give the checkpoint directory (or --merge DIR... to merge shards)');
        code = (
          await runGate({
            model: a.model, record: a.record, prompts: a.prompts, reports: a.reports, device: a.device, metric: a.metric, failAbove: a['fail-above'], warnAbove: a['warn-above'],
            policy: a.policy, shard: a.shard, out: a.out, golden: a.golden, saveGolden: a['save-golden'],
            json: a.json, junit: a.junit, summary: a.summary, html: a.html, fp16Cache: a['fp16-cache'], inject: a.inject, runId: a['run-id'],
          })
        ).code;
      },
    )
    .command(
      'generate <model>',
      'generate text: the optimized device path (needs a matching acceptance record) or --path reference',
      (y) =>
        y
          .positional('model', { type: 'string', demandOption: true, describe: 'checkpoint folder' })
          .option('prompt', { type: 'string', array: true, nargs: 1, default: [] as string[], describe: 'prompt text (repeat for a batch)' })
          .option('tokens', { type: 'string', array: true, nargs: 1, default: [] as string[], describe: 'prompt as token ids 1,2,3 (repeatable)' })
          .option('record', { type: 'string', describe: 'acceptance record written by layerdiff gate (required for --path device)' })
          .option('max-new-tokens', { type: 'number', default: 32, describe: 'tokens to generate per prompt' })
          .option('temperature', { type: 'number', describe: 'sampling temperature; 0 = greedy (default: generation_config.json, as transformers: greedy unless it says do_sample)' })
          .option('top-k', { type: 'number', describe: 'keep the K most likely tokens; 0 = off (default: generation_config.json, else 50)' })
          .option('top-p', { type: 'number', describe: 'nucleus sampling: keep the smallest set of tokens whose probability reaches P (default: generation_config.json, else 1)' })
          .option('repetition-penalty', { type: 'number', describe: 'divide the logits of tokens already seen by this, 1 = off (default: generation_config.json, else 1)' })
          .option('seed', { type: 'number', describe: 'sampling seed (default: random, printed on stderr)' })
          .option('path', { type: 'string', default: 'device', choices: ['device', 'reference'], describe: 'device: the optimized path (needs --record); reference: the FP32 reference' })
          .option('fp16-cache', { type: 'string', describe: 'FP16 weights written by layerdiff convert' })
          .options(deviceOption)
          .options(policyOptions)
          .option('json', { type: 'string', describe: 'write the generated tokens and texts as JSON' })
          .option('require-signature', { type: 'boolean', default: false, describe: 'refuse an unsigned acceptance record (also LAYERDIFF_REQUIRE_SIGNATURE=1)' })
          .option('verify', { type: 'string', default: 'cached', choices: ['cached', 'full'], describe: 'full: re-hash every checkpoint byte instead of using the digest cache' })
          .option('within-gated', { type: 'boolean', default: false, describe: 'refuse (exit 3) a run whose sequences are longer than the gate\'s longest prompt, instead of a note on stderr' }),
      async (a) => {
        code = (
          await runGenerate({
            model: a.model, prompt: a.prompt.map(String), tokens: a.tokens.map(String), record: a.record, maxNewTokens: a['max-new-tokens'],
            temperature: a.temperature, topP: a['top-p'], topK: a['top-k'], repetitionPenalty: a['repetition-penalty'], seed: a.seed, path: a.path,
            fp16Cache: a['fp16-cache'], device: a.device, policy: a.policy, metric: a.metric, failAbove: a['fail-above'], warnAbove: a['warn-above'], json: a.json,
            requireSignature: a['require-signature'], verify: a.verify, withinGated: a['within-gated'],
          })
        ).code;
      },
    )
    .command(
      'convert <model>',
      'write the optimized path\'s FP16 weights once (generate --fp16-cache DIR)',
      (y) =>
        y
          .positional('model', { type: 'string', demandOption: true, describe: 'checkpoint folder' })
          .option('fp16-cache', { type: 'string', demandOption: true, describe: 'output folder (outside the model dir)' })
          .options(deviceOption),
      async (a) => {
        code = await runConvert({ model: a.model, fp16Cache: a['fp16-cache'], device: a.device });
      },
    )
    .parseAsync();
  return code;
}

function isMain(): boolean {
  const arg = process.argv[1];
  return arg !== undefined && /layerdiff(\.js)?$|cli[\\/]main\.js$/.test(arg);
}

/**
 * A write to stdout that failed (`--json -` into a full disk, /dev/full) loses the output: the
 * error comes as an event after the write returned, and process.exit would drop it and exit 0. So the exit
 * waits for stdout to take everything written (an empty write's callback comes after the earlier writes),
 * and a failure is one line and exit 2.
 */
let stdoutError: NodeJS.ErrnoException | null = null;
function exitAfterStdout(code: number): void {
  process.stdout.write('', (e) => {
    if (e !== null && e !== undefined) stdoutError ??= e;
    setImmediate(() => {
      // a reader that closed the pipe (`| head`) took what it wanted: that is no failure of the run
      if (stdoutError !== null && stdoutError.code !== 'EPIPE') fail(`stdout: cannot write (${stdoutError.code ?? stdoutError.message}); the output written there is lost`, ExitCode.badInput);
      process.exit(code);
    });
  });
}

if (isMain()) {
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    stdoutError ??= e;
  });
  const argv = hideBin(process.argv);
  const supervised = superviseRun(argv);
  // the supervisor writes nothing to stdout: its child, which shares it, checks its own writes
  (supervised ?? main(argv)).then(
    (code) => (supervised !== null ? process.exit(code) : exitAfterStdout(code)),
    (e: unknown) => {
      if (e instanceof InputError) fail(e.message, ExitCode.badInput);
      const full = filesystemWriteError(e);
      if (full !== null) fail(full.message, ExitCode.badInput);
      if (e instanceof LockedError) fail(e.message, ExitCode.locked);
      if (process.env.LAYERDIFF_DEBUG === '1') console.error(e);
      fail(`internal error: ${e instanceof Error ? e.message : String(e)} (rerun with LAYERDIFF_DEBUG=1 for a stack trace, and please report it)`, ExitCode.internal);
    },
  );
}
