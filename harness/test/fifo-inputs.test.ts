/**
 * Inputs that are not checkpoint files are read only from regular files (harness/io/regular.ts): a policy, a prompt
 * set, a golden run's manifest, a shard's partial, a repro bundle's manifest, an acceptance record and an FP16
 * cache's manifest given as a FIFO are one line naming it and a non-zero exit, never a hang (a FIFO with no writer
 * blocks a plain read forever). An output under a dangling symlink is one line, not an internal error; a
 * quant_method spelled like an Object prototype key is unknown, not mistaken for a known one; a stated
 * max_position_embeddings that is not a length is refused, not read as none; a fixture's folder that is a file is
 * one line; a cache folder no folder can be made in (under /proc) is a note, not a hang.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { copyCheckpoint } from '../../fixtures/inject.js';
import { cli, LLAMA_TINY } from './cli.js';
import { packageRoot } from '../version.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-fifo-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
const env = { LAYERDIFF_CACHE_DIR: path.join(tmp, 'cache') };
/** a folder holding `name` as a FIFO (no writer: a plain read of it would never return) */
function fifoIn(dir: string, name: string): string {
  fs.mkdirSync(dir, { recursive: true });
  const f = path.join(dir, name);
  execFileSync('mkfifo', [f]);
  return f;
}
/** the run ends within a minute, with one stderr line naming the FIFO, and exit `code` */
function refused(args: string[], fifo: string, code = 2): void {
  const r = cli(args, env, 60_000);
  expect(r.code, r.stderr).toBe(code);
  expect(r.stderr.trim().split('\n')).toHaveLength(1);
  expect(r.stderr).toContain(fifo);
  expect(r.stderr).toMatch(/FIFO/);
}

describe('inputs that are FIFOs are refused, not read', () => {
  it('--policy, --prompts, a golden run\'s manifest, a shard\'s partial and a repro bundle\'s manifest', () => {
    const model = LLAMA_TINY();
    const policy = fifoIn(path.join(tmp, 'p'), 'policy.json');
    refused(['diff', model, '--policy', policy, '--layers', '0-0'], policy);
    const prompts = fifoIn(path.join(tmp, 'q'), 'prompts.jsonl');
    refused(['gate', model, '--prompts', prompts, '--record', path.join(tmp, 'q', 'r.json')], prompts);
    const golden = fifoIn(path.join(tmp, 'g'), 'golden.json');
    refused(['diff', model, '--golden', path.dirname(golden)], golden);
    const partial = fifoIn(path.join(tmp, 's'), 'partial.json');
    refused(['gate', '--merge', path.dirname(partial), '--record', path.join(tmp, 's-record.json')], partial);
    const repro = fifoIn(path.join(tmp, 'b'), 'repro.json');
    refused(['replay', path.dirname(repro)], repro);
  });

  it('an acceptance record (locked, exit 3) and an FP16 cache\'s manifest where convert would write', () => {
    const model = LLAMA_TINY();
    const record = fifoIn(path.join(tmp, 'r'), 'accept.json');
    refused(['generate', model, '--prompt', 'Hi', '--record', record, '--max-new-tokens', '1'], record, 3);
    const cacheDir = path.join(tmp, 'c');
    fifoIn(cacheDir, 'manifest.json');
    const r = cli(['convert', model, '--fp16-cache', cacheDir], env, 60_000);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/not empty and holds no readable manifest\.json/);
  });
});

describe('the caches, which are hints: a FIFO planted in one is skipped, never read', () => {
  it('the digest cache and the weights-check cache', () => {
    const cache = path.join(tmp, 'planted');
    fifoIn(cache, 'fingerprints.json');
    const weights = path.join(cache, 'weights');
    fs.mkdirSync(weights);
    const first = cli(['diff', LLAMA_TINY()], { LAYERDIFF_CACHE_DIR: cache }, 120_000);
    expect(first.code, first.stderr).toBe(0);
    // every record the first run stored becomes a FIFO: the second run checks again instead of hanging
    const stored = fs.readdirSync(weights);
    expect(stored.length).toBeGreaterThan(0);
    for (const f of stored) {
      fs.rmSync(path.join(weights, f));
      execFileSync('mkfifo', [path.join(weights, f)]);
    }
    const second = cli(['diff', LLAMA_TINY(), '--json', path.join(tmp, 'planted.json')], { LAYERDIFF_CACHE_DIR: cache }, 120_000);
    expect(second.code, second.stderr).toBe(0);
    const w = (JSON.parse(fs.readFileSync(path.join(tmp, 'planted.json'), 'utf8')) as { weights: { checked: number; reused?: unknown } }).weights;
    expect(w.checked).toBeGreaterThan(0);
    expect(w.reused).toBeUndefined();
  });
});

describe('other hostile inputs', () => {
  it('an output under a dangling symlink is one line and exit 2, and nothing is written', () => {
    const link = path.join(tmp, 'dangling');
    fs.symlinkSync(path.join(tmp, 'nowhere', 'deeper'), link);
    for (const args of [['--json', path.join(link, 'r.json')], ['--dump', path.join(link, 'd')]]) {
      const r = cli(['diff', LLAMA_TINY(), '--layers', '0-0', ...args], env, 120_000);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(/dangling.*symbolic link to nothing/);
    }
    expect(fs.existsSync(path.join(tmp, 'nowhere'))).toBe(false);
  });

  it('a quant_method named like an Object prototype key is unknown, not a known method', () => {
    for (const method of ['toString', '__proto__', 'constructor']) {
      const dir = path.join(tmp, `proto-${method}`);
      copyCheckpoint(LLAMA_TINY(), dir);
      const cfgFile = path.join(dir, 'config.json');
      const cfg = JSON.parse(fs.readFileSync(cfgFile, 'utf8')) as { quantization_config: Record<string, unknown> };
      cfg.quantization_config.quant_method = method;
      fs.writeFileSync(cfgFile, JSON.stringify(cfg));
      const r = cli(['inspect', dir], env, 60_000);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toContain(`unknown quantization_config.quant_method "${method}"`);
    }
  });

  it('max_position_embeddings stated as 0, -1 or a string is refused (exit 2), not taken as no limit', () => {
    for (const v of [0, -1, 'x']) {
      const dir = path.join(tmp, `maxpos-${String(v)}`);
      copyCheckpoint(LLAMA_TINY(), dir);
      const cfgFile = path.join(dir, 'config.json');
      fs.writeFileSync(cfgFile, JSON.stringify({ ...JSON.parse(fs.readFileSync(cfgFile, 'utf8')), max_position_embeddings: v }));
      const r = cli(['diff', dir, '--layers', '0-0'], env, 120_000);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toContain(`config.json: max_position_embeddings ${JSON.stringify(v)} is not a positive integer`);
    }
  });

  it('a fixture written to a path that is a file is one line and exit 2, the file untouched', () => {
    const file = path.join(tmp, 'a-file');
    fs.writeFileSync(file, 'keep');
    const r = cli(['fixture', 'llama-tiny', file], env, 60_000);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/a-file.*exists and is not a folder/);
    expect(fs.readFileSync(file, 'utf8')).toBe('keep');
  });

  it.runIf(process.platform === 'linux' && fs.existsSync('/dev/full'))('stdout that cannot be written (/dev/full) is one line and exit 2, not a lost report and exit 0', () => {
    const main = path.join(packageRoot(), 'dist', 'harness', 'cli', 'main.js');
    for (const args of [['diff', '--json', '-', '-q'], ['inspect', LLAMA_TINY()]]) {
      const full = fs.openSync('/dev/full', 'w');
      try {
        const r = spawnSync(process.execPath, [main, ...args], { stdio: ['ignore', full, 'pipe'], encoding: 'utf8', env: { ...process.env, ...env }, timeout: 120_000 });
        expect(r.status, `${args.join(' ')}: ${r.stderr}`).toBe(2);
        expect(r.stderr).toMatch(/^layerdiff: error: stdout: cannot write \(ENOSPC\)/m);
        expect(r.stderr.split('\n').filter((l) => l.startsWith('layerdiff: error:'))).toHaveLength(1);
      } finally {
        fs.closeSync(full);
      }
    }
  });

  it('errors name what the user gave: a prompts file line, not --tokens; a regular file as a regular file', () => {
    const prompts = path.join(tmp, 'ids.jsonl');
    fs.writeFileSync(prompts, JSON.stringify({ name: 'big', tokens: [1, 99999999] }) + '\n');
    const g = cli(['gate', LLAMA_TINY(), '--prompts', prompts, '--record', path.join(tmp, 'never.json')], env, 60_000);
    expect(g.code, g.stderr).toBe(2);
    expect(g.stderr).toMatch(/^layerdiff: error: .*ids\.jsonl: prompt 1 \(big\): "99999999" is not a token id in \[0, 384\)/);
    const file = path.join(tmp, 'a-regular-file');
    fs.writeFileSync(file, '{}');
    const c = cli(['convert', LLAMA_TINY(), '--fp16-cache', file], env, 60_000);
    expect(c.code, c.stderr).toBe(2);
    expect(c.stderr).toMatch(/--fp16-cache: exists and is a regular file, not a folder/);
    // a record named inside the model folder: the suggested gate writes beside the folder, where gate may write
    const g2 = cli(['generate', LLAMA_TINY(), '--record', path.join(LLAMA_TINY(), 'config.json'), '--tokens', '1,2', '--max-new-tokens', '1'], env, 60_000);
    expect(g2.code, g2.stderr).toBe(3);
    expect(g2.stderr).toContain(`To unlock it, run: layerdiff gate ${LLAMA_TINY()} --record ${LLAMA_TINY()}.acceptance.json`);
  });

  it.runIf(process.platform === 'linux')('a fixture under /proc (no folder can be made there) is one line and exit 2, not a hang', () => {
    const r = cli(['fixture', 'llama-tiny', '/proc/layerdiff-nope/fx'], env, 60_000);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^layerdiff: error: \/proc: fixture OUT: cannot write here/);
  });

  it('LAYERDIFF_CACHE_DIR where no folder can be made (under /proc) is a note and the run goes on, not a hang', () => {
    const r = cli(['diff', LLAMA_TINY()], { LAYERDIFF_CACHE_DIR: '/proc/layerdiff-nope' }, 60_000);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/note: could not update the fingerprint cache \/proc\/layerdiff-nope/);
    expect(r.stderr).not.toMatch(/error/);
  });
});
