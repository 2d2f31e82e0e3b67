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
import { packageRoot, toolVersion } from '../version.js';
import { runDiffCommand } from './diff.js';
import { runInspect } from './inspect.js';
import { runReplayCommand } from './replay.js';
import { runWeightsCheckCommand } from '../weights/command.js';
import { runFixture } from './fixture.js';
import { runConvert } from './convert.js';
import { runGate } from './gate.js';
import { runGateMerge } from './gate-merge.js';
import { runGenerate } from './generate.js';

export const DEFAULT_MODEL = () => path.join(packageRoot(), 'fixtures', 'llama-tiny');

function fail(message: string, code: ExitCode): never {
  process.stderr.write(`layerdiff: error: ${message}\n`);
  process.exit(code);
}

export async function main(argv: string[]): Promise<number> {
  let code: ExitCode = ExitCode.pass;
  await yargs(argv)
    .scriptName('layerdiff')
    .version(toolVersion())
    .strict()
    .demandCommand(1, 'give a command: diff, replay, gate, generate, convert, inspect or fixture')
    .fail((msg, err) => {
      if (err) throw err;
      fail(`${msg} (see layerdiff --help)`, ExitCode.badInput);
    })
    .command(
      'diff [model]',
      'per-stage diff of the FP32 reference and the device path (default: the bundled fixture)',
      (y) =>
        y
          .positional('model', { type: 'string', describe: 'checkpoint directory' })
          .option('prompt', { type: 'string', describe: 'input text (needs tokenizer.json)' })
          .option('tokens', { type: 'string', describe: 'input token ids, comma-separated' })
          .option('layers', { type: 'string', default: 'all', describe: 'all, N or A-B' })
          .option('max-tokens', { type: 'number', describe: 'truncate the input' })
          .option('device', { type: 'string', default: 'auto', choices: ['auto', 'hip', 'emulated'] })
          .option('mode', { type: 'string', default: 'both', choices: ['both', 'accumulated', 'isolated'] })
          .option('metric', { type: 'string', default: 'max_abs' })
          .option('fail-above', { type: 'number', default: 0.1 })
          .option('warn-above', { type: 'number', default: 0.01 })
          .option('json', { type: 'string', describe: 'write the JSON report (layerdiff.report/1)' })
          .option('dump', { type: 'string', describe: 'write DIR/<stage>.safetensors with both paths\' outputs' })
          .option('inject', { type: 'string', describe: 'simulate a device-path bug: FAULT[@layer]' })
          .option('free-selection', { type: 'boolean', default: false, describe: 'isolated mode: let the device make its own top-k choices' })
          .option('junit', { type: 'string', describe: 'write JUnit XML: one testcase per stage' })
          .option('html', { type: 'string', describe: 'write a self-contained HTML report (plots, histograms, drill-down)' })
          .option('summary', { type: 'string', describe: 'write a Markdown summary (CI job summaries)' })
          .option('repro', { type: 'string', describe: 'export the first failing layer as a repro bundle (see layerdiff replay)' })
          .option('repeat', { type: 'number', default: 1, describe: 'run the device path N times per stage and report the run-to-run spread' })
          .option('save-golden', { type: 'string', describe: 'save the reference stage outputs to DIR (a golden run)' })
          .option('golden', { type: 'string', describe: 'compare against a golden run in DIR instead of recomputing the reference' })
          .option('drill', { type: 'boolean', default: true, describe: 'drill into failing layers sub-stage by sub-stage (--no-drill to skip)' })
          .option('weights', { type: 'boolean', default: true, describe: 'check every quantized weight before any activation runs (--no-weights to skip)' }),
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
        });
        code = r.code;
      },
    )
    .command(
      'inspect <model>',
      'config, storage format of every tensor group, conformance of every shape',
      (y) =>
        y
          .positional('model', { type: 'string', demandOption: true })
          .option('check', { type: 'boolean', default: false, describe: 'also compare every quantized weight as the device dequantizes it with the reference (no activations run)' })
          .option('inject', { type: 'string', describe: 'with --check: simulate a device-path bug, FAULT[@layer]' })
          .option('layers', { type: 'string', default: 'all', describe: 'with --check: all, N or A-B' })
          .option('device', { type: 'string', default: 'auto', choices: ['auto', 'hip', 'emulated'] })
          .option('json', { type: 'string', describe: 'with --check: write the weights check as JSON' }),
      (a) => {
        code = runInspect(a.model);
        if (a.check && code === ExitCode.pass) code = runWeightsCheckCommand({ model: a.model, device: a.device, inject: a.inject, layers: a.layers, json: a.json });
      },
    )
    .command(
      'replay <dir>',
      'rerun the layer a repro bundle (diff --repro DIR) holds, on both paths, and print its numbers',
      (y) =>
        y
          .positional('dir', { type: 'string', demandOption: true })
          .option('device', { type: 'string', default: 'auto', choices: ['auto', 'hip', 'emulated'] })
          .option('json', { type: 'string', describe: 'write the replayed metrics as JSON' }),
      (a) => {
        code = runReplayCommand({ dir: a.dir, device: a.device, json: a.json }).code;
      },
    )
    .command(
      'fixture <kind> <out>',
      'write a small seeded checkpoint in the real on-disk format',
      (y) => y.positional('kind', { type: 'string', demandOption: true }).positional('out', { type: 'string', demandOption: true }),
      (a) => {
        code = runFixture(a.kind, a.out);
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
          .option('golden', { type: 'string', describe: 'take each prompt\'s reference from the golden run DIR/prompt-NN' })
          .option('save-golden', { type: 'string', describe: 'save each prompt\'s reference as the golden run DIR/prompt-NN' })
          .option('device', { type: 'string', default: 'auto', choices: ['auto', 'hip', 'emulated'] })
          .option('metric', { type: 'string', default: 'max_abs' })
          .option('fail-above', { type: 'number', default: 0.1 })
          .option('warn-above', { type: 'number', default: 0.01 }),
      async (a) => {
        if (a.merge !== undefined) {
          const given = ['model', 'prompts', 'reports', 'shard', 'out', 'golden', 'save-golden'].filter((k) => (a as Record<string, unknown>)[k] !== undefined);
          if (given.length > 0) throw new InputError(`gate --merge reads only the shards' folders and --record; drop ${given.map((k) => (k === 'model' ? 'the model' : `--${k}`)).join(', ')}`);
          if (a.record === undefined) throw new InputError('gate --merge needs --record FILE: the record to write');
          code = runGateMerge({ dirs: a.merge.map(String), record: a.record }).code;
          return;
        }
        if (a.model === undefined) throw new InputError('gate: give the checkpoint directory (or --merge DIR... to merge shards)');
        code = (
          await runGate({
            model: a.model, record: a.record, prompts: a.prompts, reports: a.reports, device: a.device, metric: a.metric, failAbove: a['fail-above'], warnAbove: a['warn-above'],
            shard: a.shard, out: a.out, golden: a.golden, saveGolden: a['save-golden'],
          })
        ).code;
      },
    )
    .command(
      'generate <model>',
      'generate text: the optimized device path (needs a matching acceptance record) or --path reference',
      (y) =>
        y
          .positional('model', { type: 'string', demandOption: true })
          .option('prompt', { type: 'string', array: true, nargs: 1, default: [] as string[], describe: 'prompt text (repeat for a batch)' })
          .option('tokens', { type: 'string', array: true, nargs: 1, default: [] as string[], describe: 'prompt as token ids 1,2,3 (repeatable)' })
          .option('record', { type: 'string', describe: 'acceptance record written by layerdiff gate (required for --path device)' })
          .option('max-new-tokens', { type: 'number', default: 32 })
          .option('temperature', { type: 'number', default: 0.6, describe: '0 = greedy' })
          .option('top-p', { type: 'number', default: 0.9 })
          .option('repetition-penalty', { type: 'number', default: 1.1 })
          .option('seed', { type: 'number', describe: 'sampling seed (default: random, printed on stderr)' })
          .option('path', { type: 'string', default: 'device', choices: ['device', 'reference'] })
          .option('fp16-cache', { type: 'string', describe: 'FP16 weights written by layerdiff convert' })
          .option('device', { type: 'string', default: 'auto', choices: ['auto', 'hip', 'emulated'] })
          .option('metric', { type: 'string', default: 'max_abs', describe: 'policy the record must carry' })
          .option('fail-above', { type: 'number', default: 0.1 })
          .option('warn-above', { type: 'number', default: 0.01 })
          .option('json', { type: 'string', describe: 'write the generated tokens and texts as JSON' }),
      async (a) => {
        code = (
          await runGenerate({
            model: a.model, prompt: a.prompt.map(String), tokens: a.tokens.map(String), record: a.record, maxNewTokens: a['max-new-tokens'],
            temperature: a.temperature, topP: a['top-p'], repetitionPenalty: a['repetition-penalty'], seed: a.seed, path: a.path,
            fp16Cache: a['fp16-cache'], device: a.device, metric: a.metric, failAbove: a['fail-above'], warnAbove: a['warn-above'], json: a.json,
          })
        ).code;
      },
    )
    .command(
      'convert <model>',
      'write the optimized path\'s FP16 weights once (generate --fp16-cache DIR)',
      (y) =>
        y
          .positional('model', { type: 'string', demandOption: true })
          .option('fp16-cache', { type: 'string', demandOption: true, describe: 'output folder (outside the model dir)' })
          .option('device', { type: 'string', default: 'auto', choices: ['auto', 'hip', 'emulated'] }),
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

if (isMain()) {
  main(hideBin(process.argv)).then(
    (code) => process.exit(code),
    (e: unknown) => {
      if (e instanceof InputError) fail(e.message, ExitCode.badInput);
      if (e instanceof LockedError) fail(e.message, ExitCode.locked);
      if (process.env.LAYERDIFF_DEBUG === '1') console.error(e);
      fail(`internal error: ${e instanceof Error ? e.message : String(e)} (rerun with LAYERDIFF_DEBUG=1 for a stack trace, and please report it)`, ExitCode.internal);
    },
  );
}
