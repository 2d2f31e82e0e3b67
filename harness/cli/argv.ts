/**
 * Command-line rules yargs does not enforce by itself: an option given twice is a usage error (exit 2), not a
 * silent array that reaches a command as a list (`--json a --json b` used to crash with exit 4) nor a
 * silent "last one wins". Only options documented as repeatable may repeat.
 */
import { InputError } from '../errors.js';

/** Options that take one value per occurrence (generate's batch of prompts). */
const REPEATABLE = new Set(['prompt', 'tokens']);

export function rejectRepeatedOptions(argv: readonly string[], repeatable: ReadonlySet<string> = REPEATABLE): void {
  const cmd = argv.find((a) => !a.startsWith('-'));
  const seen = new Set<string>();
  for (const a of argv) {
    if (a === '--') break;
    const m = /^--(?:no-)?([A-Za-z][\w-]*)(?:=|$)/.exec(a);
    if (m === null) continue;
    const name = m[1];
    if (cmd === 'generate' && repeatable.has(name)) continue;
    if (seen.has(name)) throw new InputError(`--${name} is given more than once; give it once (see layerdiff ${cmd ?? ''} --help)`.replace('  ', ' '));
    seen.add(name);
  }
}

