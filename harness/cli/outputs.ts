/**
 * The report options (--json, --junit, --summary, --html) as the CLI takes them: `-` means standard output,
 * for one of them at a time (two reports on one stream could not be told apart); every other target is a
 * file outside the model directory (the writer itself refuses symlinks, devices and folders).
 */
import { InputError } from '../errors.js';
import { STDOUT } from '../../reports/writers.js';

export function checkReportTargets(targets: Record<string, string | undefined>, outside: (file: string) => void): void {
  const toStdout = Object.entries(targets).filter(([, t]) => t === STDOUT).map(([k]) => `--${k}`);
  if (toStdout.length > 1) throw new InputError(`${toStdout.join(' and ')} both write to stdout (-): give a file to all but one`);
  for (const t of Object.values(targets)) if (t !== undefined && t !== STDOUT) outside(t);
}
