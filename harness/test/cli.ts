/** Test helpers: run the real, built CLI (dist/) as a user would, and hash folders to prove they are untouched. */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { packageRoot } from '../version.js';
import { expect, it } from 'vitest';
import { type DiffArgs, runDiffCommand } from '../cli/diff.js';
import type { StageResult } from '../runner/run.js';

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function cli(args: string[], env: Record<string, string> = {}, timeoutMs = 300_000): CliResult {
  const main = path.join(packageRoot(), 'dist', 'harness', 'cli', 'main.js');
  if (!fs.existsSync(main)) throw new Error('dist/ is missing: run npm run build (npm ci does it)');
  const r = spawnSync(process.execPath, [main, ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: timeoutMs });
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

/** Flip bits of the byte at `at` (negative: from the end) of a file, in place: a corruption a digest must catch. */
export function flipBits(file: string, at: number, mask = 0x01): void {
  const b = fs.readFileSync(file);
  b[at < 0 ? b.length + at : at] ^= mask;
  fs.writeFileSync(file, b);
}

/**
 * Write a file's last `n` bytes back as they were, in place, and set its mtime back: the content is unchanged, but
 * the file was written (its ctime moved), as an edit that restores its mtime leaves it.
 */
export function rewriteInPlace(file: string, n = 64): void {
  const st = fs.statSync(file);
  const fd = fs.openSync(file, 'r+');
  try {
    const b = Buffer.alloc(n);
    fs.readSync(fd, b, 0, n, st.size - n);
    fs.writeSync(fd, b, 0, n, st.size - n);
  } finally {
    fs.closeSync(fd);
  }
  fs.utimesSync(file, st.atime, st.mtime);
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

/**
 * One test per `--inject FAULT[@L]` case: the run fails (exit 1) first at the expected stage, names the fault,
 * and that stage's isolated error is a real failure (above 0.1 or non-finite). For a layer-local fault
 * (`@L`), `otherLayer` checks every other layer's isolated metrics stay at their clean level.
 */
export function injectedFaultTests(cases: ReadonlyArray<readonly [string, string]>, args: (inject: string) => DiffArgs, otherLayer: (s: StageResult) => void): void {
  for (const [inject, first] of cases) {
    it(`--inject ${inject} fails first at ${first}`, async () => {
      const { code, report } = await quietDiff(args(inject));
      expect(code).toBe(1);
      expect(report.verdict).toBe('fail');
      expect(report.first_failure).toBe(first);
      expect(report.injected?.fault).toBe(inject.split('@')[0]);
      const st = report.stages.find((s) => s.name === first)!;
      expect(st.status).toBe('fail');
      const iso = st.isolated!;
      if (inject.startsWith('fp16-overflow')) expect(iso.nan.device + iso.inf.device).toBeGreaterThan(0);
      else expect(iso.max_abs > 0.1 || iso.nan.device + iso.inf.device > 0).toBe(true);
      if (inject.includes('@')) for (const s of report.stages) if (s.name.startsWith('layer.') && s.name !== first) otherLayer(s);
    });
  }
}
