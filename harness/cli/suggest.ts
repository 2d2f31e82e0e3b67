/**
 * "Did you mean --fail-above?": yargs reports an unknown option as `Unknown arguments: fail-abve, failAbve`
 * (the name and its camel-case twin); this turns it into one name with the closest known option of the
 * command, by edit distance (a typo is one or two edits away; a wholly different word gets no guess).
 */
/** What yargs 18 hands a .fail() handler as its third argument (its usage object): the options of the command that ran. */
interface WithDescriptions {
  getDescriptions?: () => Record<string, unknown>;
}

export function editDistance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...new Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0][j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      // a swap of two neighbours is one typo
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.length][b.length];
}

export function closest(name: string, known: string[]): string | null {
  let best: string | null = null;
  let bestD = Infinity;
  for (const k of known) {
    const dist = editDistance(name, k);
    if (dist < bestD) [best, bestD] = [k, dist];
  }
  return best !== null && bestD <= Math.max(1, Math.min(3, Math.floor(name.length / 3))) ? best : null;
}

const camel = (s: string) => s.replace(/-([a-z])/g, (_m, c: string) => c.toUpperCase());

/** yargs' failure message, with unknown options named once each (with --) and a suggestion when one is close. */
export function suggestOption(msg: string, y: unknown, argv: readonly string[] = []): string {
  // recommendCommands' own message, for a mistyped command
  const cmd = /^Did you mean (\S+)\?$/.exec(msg);
  if (cmd !== null) return `unknown command ${JSON.stringify(argv.find((a) => !a.startsWith('-')) ?? '')} (did you mean ${cmd[1]}?)`;
  // yargs' choices message is three lines: make it one, with the nearest choice
  const inv = /^Invalid values:\s*Argument: (\S+), Given: "?([^"]*)"?, Choices: (.*)$/s.exec(msg);
  if (inv !== null) {
    const choices = inv[3].split(', ').map((c) => c.replace(/^"|"$/g, ''));
    const near = closest(inv[2], choices);
    const flag = argv.length === 0 || argv.some((a) => a === `--${inv[1]}` || a.startsWith(`--${inv[1]}=`)) ? `--${inv[1]}` : inv[1];
    return `${flag} ${JSON.stringify(inv[2])}: expected one of ${choices.join(', ')}${near !== null ? ` (did you mean ${near}?)` : ''}`;
  }
  const m = /^Unknown arguments?: (.*)$/.exec(msg);
  if (m === null) return msg.replace(/\s*\n\s*/g, ' ');
  const given = m[1].split(', ').filter((x) => x !== '');
  // drop the camel-case twin yargs adds for every kebab-case name
  const names = given.filter((x) => !(x !== camel(x) ? false : given.some((o) => o !== x && camel(o) === x)));
  const known = Object.keys((y as WithDescriptions | null)?.getDescriptions?.() ?? {}).filter((k) => k.length > 1 && !/[A-Z]/.test(k) && k !== '$0' && k !== '_');
  const asOption = (n: string) => argv.length === 0 || argv.some((a) => a === `--${n}` || a.startsWith(`--${n}=`) || a === `-${n}` || a === `--no-${n}`);
  const extra = names.filter((n) => !asOption(n));
  if (extra.length > 0 && extra[0] === argv[0]) return `unknown command ${JSON.stringify(argv[0])} (the commands: diff, compare, gate, generate, inspect, replay, fixture, convert, faults)`;
  if (extra.length > 0) return `unexpected argument${extra.length === 1 ? '' : 's'} ${extra.map((n) => JSON.stringify(n)).join(', ')}`;
  const parts = names.map((n) => {
    const near = closest(n, known);
    return `--${n}${near !== null ? ` (did you mean --${near}?)` : ''}`;
  });
  return `unknown option${parts.length === 1 ? '' : 's'} ${parts.join(', ')}`;
}
