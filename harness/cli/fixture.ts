/** `layerdiff fixture <kind> <out-dir>`: a seeded checkpoint in the real format, into a new or empty folder. */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ExitCode, InputError } from '../errors.js';
import { checkOutputDir, outputError } from '../io/writer.js';
import { writeFixture } from '../../fixtures/generate.js';

export function runFixture(kind: string, out: string, format?: string): ExitCode {
  const st = fs.statSync(out, { throwIfNoEntry: false });
  if (st !== undefined && !st.isDirectory()) throw new InputError('exists and is not a folder; fixtures are written only into a new or empty folder', { file: out });
  if (st !== undefined && fs.readdirSync(out).length > 0) throw new InputError('output folder exists and is not empty; fixtures are written only into a new or empty folder', { file: out });
  checkOutputDir(out, 'fixture OUT');
  // the outermost folder this run creates: what a failed write removes, so it leaves no partial checkpoint
  let created: string | null = null;
  for (let d = path.resolve(out); !fs.existsSync(d) && path.dirname(d) !== d; d = path.dirname(d)) created = d;
  try {
    writeFixture(kind, out, format === undefined ? {} : { format });
  } catch (e) {
    if (created !== null) fs.rmSync(created, { recursive: true, force: true });
    else for (const f of fs.readdirSync(out)) fs.rmSync(path.join(out, f), { recursive: true, force: true });
    if (e instanceof InputError) throw e;
    throw outputError(e, out, 'fixture OUT: cannot write the fixture');
  }
  process.stdout.write(`wrote ${kind}${format === undefined ? '' : ` (${format})`} to ${out}\n`);
  return ExitCode.pass;
}
