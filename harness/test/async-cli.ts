/** The built CLI run asynchronously, so a test can run a few in parallel (harness/test/cli.ts is the sync form). */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { packageRoot } from '../version.js';
import type { CliResult } from './cli.js';

export function cliAsync(args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  const main = path.join(packageRoot(), 'dist', 'harness', 'cli', 'main.js');
  if (!fs.existsSync(main)) throw new Error('dist/ is missing: run npm run build (npm ci does it)');
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [main, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    p.on('error', reject);
    p.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

/** Run async jobs with at most `n` in flight (the CI machine has two cores). */
export async function limit<T>(n: number, jobs: Array<() => Promise<T>>): Promise<T[]> {
  const out = new Array<T>(jobs.length);
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const k = next++;
      out[k] = await jobs[k]();
    }
  };
  await Promise.all(Array.from({ length: Math.min(n, jobs.length) }, worker));
  return out;
}
