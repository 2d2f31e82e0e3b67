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


/**
 * An option given an empty value (`--temperature=`, `--seed ''`, `--fp16-cache ''`) is a usage error: yargs reads
 * an empty number as 0 and an empty path as "no path", so `--warn-above=` warned on every stage and
 * `--temperature=` sampled greedily. A prompt may be empty; a flag takes no value. `-q` with `-v` asks for two
 * opposite outputs. `flags`: the options of the command being run that take no value (yargs' booleans, read from
 * the parser itself so that a new flag can never be taken for an option missing its value); `known`: all its
 * options, so that one it lacks is left to the parser's "unknown argument" instead of called empty.
 */
export function rejectEmptyValues(argv: readonly string[], flags: ReadonlySet<string>, known?: ReadonlySet<string>): void {
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--') break;
    const m = /^--([A-Za-z][\w-]*)(=?)(.*)$/.exec(a);
    if (m === null) continue;
    const [, name, eq, value] = m;
    if (name === 'prompt' || flags.has(name) || name.startsWith('no-') || (known !== undefined && !known.has(name))) continue;
    if ((eq === '=' && value === '') || (eq === '' && argv[i + 1] === '')) throw new InputError(`--${name} is given an empty value; give one, or leave the option out`);
  }
  // a token right after an option that takes a value (`--prompt -q`) is that value, not a flag
  const isValue = (i: number) => i > 0 && /^--[A-Za-z][\w-]*$/.test(argv[i - 1]) && !flags.has(argv[i - 1].slice(2)) && !argv[i - 1].startsWith('--no-');
  // an empty positional (`diff ''`) is a path yargs would take as given: it was reported as ": no such directory"
  const command = argv.findIndex((a, i) => !a.startsWith('-') && !isValue(i)); // `--color never diff`: diff
  const help = command >= 0 && argv[command] !== '' ? `layerdiff ${argv[command]} --help` : 'layerdiff --help';
  argv.forEach((a, i) => {
    if (a === '' && !isValue(i)) throw new InputError(i === command ? "an empty command ('') is given; give one (see layerdiff --help)" : `an empty argument ('') is given; give what it stands for (a path, a name) or leave it out (see ${help})`);
  });
  const has = (long: string, short: string) => argv.some((a, i) => !isValue(i) && (a === `--${long}` || a === short || (/^-[a-z]+$/.test(a) && a.includes(short[1]))));
  if (has('quiet', '-q') && has('verbose', '-v')) throw new InputError('--quiet and --verbose ask for opposite outputs; give one');
}
