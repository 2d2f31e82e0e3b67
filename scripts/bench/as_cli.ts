/**
 * Benchmarks measure the tool as its command line runs it. `layerdiff diff`, `generate` and the other commands
 * that read weights run in a supervised child with glibc's malloc on huge pages (harness/cli/supervise.ts); a
 * glibc tunable is read once at process start, so a bench gets the same only in a fresh process.
 */
import { spawnSync } from 'node:child_process';
import { childTunables } from '../../harness/cli/supervise.js';

/** The environment `layerdiff <cmd>` gives the child it runs in (empty where it adds nothing). */
export function asTheCliRuns(cmd: string): Record<string, string> {
  const t = childTunables([cmd], process.env);
  return t === undefined ? {} : { GLIBC_TUNABLES: t };
}

/**
 * Run this bench script again in a child with the CLI's environment, unless this process already has it (or the
 * CLI would add nothing: LAYERDIFF_MALLOC=system, not Linux). True when it did: the caller then stops, and the
 * child's exit status is this process's.
 */
export function rerunAsTheCli(): boolean {
  const env = asTheCliRuns('diff');
  if (env.GLIBC_TUNABLES === undefined) return false;
  const r = spawnSync(process.execPath, [...process.execArgv, ...process.argv.slice(1)], { stdio: 'inherit', env: { ...process.env, ...env } });
  process.exitCode = r.status ?? 1;
  return true;
}
