/** `layerdiff fixture <kind> <out-dir>`: a seeded checkpoint in the real format, into a new or empty folder. */
import * as fs from 'node:fs';
import { ExitCode, InputError } from '../errors.js';
import { writeFixture } from '../../fixtures/generate.js';

export function runFixture(kind: string, out: string, format?: string): ExitCode {
  const st = fs.statSync(out, { throwIfNoEntry: false });
  if (st !== undefined && !st.isDirectory()) throw new InputError('exists and is not a folder; fixtures are written only into a new or empty folder', { file: out });
  if (st !== undefined && fs.readdirSync(out).length > 0) throw new InputError('output folder exists and is not empty; fixtures are written only into a new or empty folder', { file: out });
  writeFixture(kind, out, format === undefined ? {} : { format });
  process.stdout.write(`wrote ${kind}${format === undefined ? '' : ` (${format})`} to ${out}\n`);
  return ExitCode.pass;
}
