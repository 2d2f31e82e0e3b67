/**
 * How the CLI talks to a terminal: colour (--color auto|always|never, NO_COLOR, FORCE_COLOR), -q (the verdict
 * line and errors only) and -v (more detail), set once from the options before a command runs. The flag wins
 * over the environment (no-color.org: a command-line flag may override NO_COLOR); `auto` colours a TTY only.
 */
export type ColourMode = 'auto' | 'always' | 'never';
export const COLOUR_MODES: readonly ColourMode[] = ['auto', 'always', 'never'];

export interface TerminalSettings {
  colour: ColourMode;
  quiet: boolean;
  verbose: boolean;
}

const settings: TerminalSettings = { colour: 'auto', quiet: false, verbose: false };

export function configureTerminal(s: Partial<TerminalSettings>): void {
  Object.assign(settings, s);
}

export function terminal(): Readonly<TerminalSettings> {
  return settings;
}

/** Whether to colour what goes to `stream`. */
export function useColour(stream: { isTTY?: boolean }, env: NodeJS.ProcessEnv = process.env, mode: ColourMode = settings.colour): boolean {
  if (mode !== 'auto') return mode === 'always';
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== '') return false;
  if (env.FORCE_COLOR !== undefined) return !['0', 'false', 'no'].includes(env.FORCE_COLOR.toLowerCase());
  return stream.isTTY === true;
}

/** Clip a line to the terminal's width so a carriage return can overwrite it (a wrapped line leaves stale rows). */
export function clipToWidth(line: string, columns: number | undefined): string {
  const w = columns !== undefined && columns > 1 ? columns - 1 : 79;
  const chars = [...line];
  return chars.length <= w ? line : `${chars.slice(0, w - 1).join('')}…`;
}

/** Progress goes to a TTY only, never with -q. */
export function showProgress(): boolean {
  return process.stderr.isTTY === true && !settings.quiet;
}
