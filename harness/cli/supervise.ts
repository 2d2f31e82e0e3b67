/**
 * Ctrl-C and kill leave no partial outputs. The heavy work of a run is synchronous (a stage is one long
 * computation), so a signal handler in the same process would only run once the work is done. Instead, a
 * command that writes outputs runs in a child process; this parent only waits. When the child ends by a
 * signal (SIGINT from the terminal reaches both; SIGTERM is forwarded), the parent removes every partial
 * the child made — each is named `.<target>.layerdiff-partial-<child pid>…` next to or inside an output
 * (harness/io/writer.ts) — and exits 130 (SIGINT) or 143 (SIGTERM), as shells report a signalled command.
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { removePartials, STDOUT } from '../io/writer.js';

const CHILD_ENV = 'LAYERDIFF_SUPERVISED_CHILD';

/** Options whose value is an output (file or folder), per command; `fixture`'s second positional is one too. */
const OUTPUT_OPTIONS: Record<string, string[]> = {
  diff: ['json', 'junit', 'html', 'summary', 'dump', 'repro', 'save-golden'],
  gate: ['record', 'reports', 'out', 'save-golden', 'json', 'junit', 'html', 'summary'],
  generate: ['json'],
  convert: ['fp16-cache'],
  inspect: ['json'],
  replay: ['json'],
};

/** The output paths named on the command line (file or folder), as given. */
export function outputPaths(argv: readonly string[]): string[] {
  const cmd = argv.find((a) => !a.startsWith('-'));
  if (cmd === undefined) return [];
  const opts = OUTPUT_OPTIONS[cmd] ?? [];
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const m = /^--([\w-]+)(?:=(.*))?$/.exec(argv[i]);
    if (m === null || !opts.includes(m[1])) continue;
    const v = m[2] ?? argv[i + 1];
    if (v !== undefined && v !== STDOUT) out.push(v);
  }
  if (cmd === 'fixture') {
    const pos = argv.filter((a) => !a.startsWith('-'));
    if (pos[2] !== undefined) out.push(pos[2]);
  }
  return out;
}

/** Remove what process `pid` left next to and inside each output. */
export function cleanPartials(outputs: readonly string[], pid: number): void {
  for (const o of outputs) {
    const abs = path.resolve(o);
    removePartials(path.dirname(abs), pid);
    try {
      if (fs.lstatSync(abs).isDirectory()) removePartials(abs, pid);
    } catch {
      // not there: nothing inside it
    }
  }
}

/**
 * Run this command line in a supervised child when it names outputs; resolves to the exit code, or null
 * when the caller should run the command itself (no outputs, or this is the child).
 */
export function superviseOutputs(argv: readonly string[]): Promise<number> | null {
  if (process.env[CHILD_ENV] === '1') return null;
  const outputs = outputPaths(argv);
  if (outputs.length === 0) return null;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [...process.execArgv, process.argv[1], ...argv], { stdio: 'inherit', env: { ...process.env, [CHILD_ENV]: '1' } });
    const forward = (sig: NodeJS.Signals) => () => {
      if (child.exitCode === null) child.kill(sig);
    };
    const onInt = forward('SIGINT');
    const onTerm = forward('SIGTERM');
    process.on('SIGINT', onInt);
    process.on('SIGTERM', onTerm);
    child.on('exit', (code, signal) => {
      process.off('SIGINT', onInt);
      process.off('SIGTERM', onTerm);
      if (child.pid !== undefined) cleanPartials(outputs, child.pid);
      if (signal !== null) {
        process.stderr.write(`\nlayerdiff: interrupted (${signal}); partial outputs removed\n`);
        resolve(signal === 'SIGINT' ? 130 : signal === 'SIGTERM' ? 143 : 128 + 9);
      } else resolve(code ?? 4);
    });
    child.on('error', (e) => {
      process.stderr.write(`layerdiff: error: cannot start the run: ${e.message}\n`);
      resolve(4);
    });
  });
}
