/** Test helpers: run the real, built CLI (dist/) as a user would, and hash folders to prove they are untouched. */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { packageRoot } from '../version.js';
import { type DiffArgs, runDiffCommand } from '../cli/diff.js';

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function cli(args: string[], env: Record<string, string> = {}): CliResult {
  const main = path.join(packageRoot(), 'dist', 'harness', 'cli', 'main.js');
  if (!fs.existsSync(main)) throw new Error('dist/ is missing: run npm run build (npm ci does it)');
  const r = spawnSync(process.execPath, [main, ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 300_000 });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

export function hashTree(dir: string): string {
  const h = createHash('sha256');
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const p = path.join(d, e.name);
      h.update(p.slice(dir.length));
      if (e.isDirectory()) walk(p);
      else h.update(fs.readFileSync(p));
    }
  };
  walk(dir);
  return h.digest('hex');
}

export const LLAMA_TINY = () => path.join(packageRoot(), 'fixtures', 'llama-tiny');

/** runDiffCommand in-process with the table on stdout suppressed (the tests read the report record). */
export async function quietDiff(a: DiffArgs): ReturnType<typeof runDiffCommand> {
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = (() => true) as typeof process.stdout.write;
  try {
    return await runDiffCommand(a);
  } finally {
    process.stdout.write = write;
  }
}
