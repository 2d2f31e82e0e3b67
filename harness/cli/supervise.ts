/**
 * Ctrl-C and kill leave no partial outputs. The heavy work of a run is synchronous (a stage is one long
 * computation), so a signal handler in the same process would only run once the work is done. Instead, a
 * command that writes outputs runs in a child process; this parent only waits. When the child ends by a
 * signal (SIGINT from the terminal reaches both; SIGTERM is forwarded), the parent removes every partial
 * the child made — each is named `.<target>.layerdiff-partial-<child pid>…` next to or inside an output
 * (harness/io/writer.ts) — and exits 130 (SIGINT) or 143 (SIGTERM), as shells report a signalled command.
 *
 * A command that reads a checkpoint's weights (diff, gate, generate, convert, inspect, replay) runs in such a
 * child too, started with glibc's malloc advising transparent huge pages (GLIBC_TUNABLES glibc.malloc.hugetlb=1,
 * a tunable glibc reads only at process start): on the virtual machines this tool runs on, the first touch of
 * a fresh 4 KiB page costs ~3–15 µs, and a wide diff first-touches ~2 GB of read buffers and FP16 weights;
 * with 2 MiB pages the same 16-token diff of deepseek-v4-wide took 23–28 s instead of 31–33 s (measured,
 * same bits: no numerics depend on where memory comes from). A user's own GLIBC_TUNABLES is kept, and
 * LAYERDIFF_MALLOC=system (harness/contracts/ld_allocator.h) leaves glibc's defaults alone.
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
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

/** Commands that read a checkpoint's weights: their child gets huge pages (see above). */
const READS_WEIGHTS = new Set(['diff', 'gate', 'generate', 'convert', 'inspect', 'replay']);

/**
 * The child's GLIBC_TUNABLES for this command line: the caller's, with glibc.malloc.hugetlb=1 added for a command
 * that reads weights; undefined where nothing is to be added (another command, the caller set the tunable
 * itself, LAYERDIFF_MALLOC=system, not Linux).
 */
export function childTunables(argv: readonly string[], env: NodeJS.ProcessEnv, platform: NodeJS.Platform = process.platform): string | undefined {
  const cmd = argv.find((a) => !a.startsWith('-'));
  if (platform !== 'linux' || cmd === undefined || !READS_WEIGHTS.has(cmd) || env.LAYERDIFF_MALLOC === 'system') return undefined;
  const own = env.GLIBC_TUNABLES ?? '';
  if (/(^|:)glibc\.malloc\.hugetlb=/.test(own)) return undefined;
  return own === '' ? 'glibc.malloc.hugetlb=1' : `${own}:glibc.malloc.hugetlb=1`;
}

/**
 * What the parent says and exits with when the child ended by `signal`. SIGBUS is not an interruption: large
 * reads are mappings of the checkpoint's or the FP16 cache's pages (harness/io/map.ts), and a file truncated or
 * rewritten in place by another process while mapped faults on the next access to a page past its new end. That is
 * the input changing under the run: bad input, exit 2. Any other signal: 128 + its number, as shells report it.
 */
export function signalledEnd(signal: NodeJS.Signals): { code: number; line: string } {
  if (signal === 'SIGBUS') {
    // the signal names no file and no cause: say what it almost always is here, not more
    return { code: 2, line: 'layerdiff: error: the run\'s mapped input became unreadable (SIGBUS): most likely a checkpoint or FP16-cache file was truncated or rewritten in place by another process while mapped; partial outputs removed' };
  }
  return { code: 128 + (os.constants.signals[signal] ?? 9), line: `layerdiff: interrupted (${signal}); partial outputs removed` };
}

/**
 * Run this command line in a supervised child when it names outputs or reads weights; resolves to the exit code,
 * or null when the caller should run the command itself (neither, or this is the child).
 */
export function superviseRun(argv: readonly string[]): Promise<number> | null {
  if (process.env[CHILD_ENV] === '1') return null;
  const outputs = outputPaths(argv);
  const tunables = childTunables(argv, process.env);
  if (outputs.length === 0 && tunables === undefined) return null;
  return new Promise((resolve) => {
    const env = { ...process.env, [CHILD_ENV]: '1', ...(tunables === undefined ? {} : { GLIBC_TUNABLES: tunables }) };
    const child = spawn(process.execPath, [...process.execArgv, process.argv[1], ...argv], { stdio: 'inherit', env });
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
        const end = signalledEnd(signal);
        process.stderr.write(`\n${end.line}\n`);
        resolve(end.code);
      } else resolve(code ?? 4);
    });
    child.on('error', (e) => {
      process.stderr.write(`layerdiff: error: cannot start the run: ${e.message}\n`);
      resolve(4);
    });
  });
}
