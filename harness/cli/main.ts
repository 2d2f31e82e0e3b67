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
import { runFixture } from './fixture.js';

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
    .demandCommand(1, 'give a command: diff, inspect or fixture')
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
          .option('free-selection', { type: 'boolean', default: false, describe: 'isolated mode: let the device make its own top-k choices' }),
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
        });
        code = r.code;
      },
    )
    .command(
      'inspect <model>',
      'config, storage format of every tensor group, conformance of every shape',
      (y) => y.positional('model', { type: 'string', demandOption: true }),
      (a) => {
        code = runInspect(a.model);
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
