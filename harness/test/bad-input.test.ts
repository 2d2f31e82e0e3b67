/**
 * Bad input, as a user meets it through the CLI: one line on stderr naming the file and tensor, exit 2,
 * no report left behind, the checkpoint untouched.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { BAD_INPUT_CASES } from '../../fixtures/inject.js';
import { cli, hashTree, LLAMA_TINY } from './cli.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-bad-'));

describe('bad input → exit 2, one clear line', () => {
  for (const c of BAD_INPUT_CASES) {
    it(c.id, () => {
      const dir = path.join(tmp, c.id);
      const defect = c.make(LLAMA_TINY(), dir);
      const before = hashTree(dir);
      const out = path.join(tmp, `${c.id}-out`);
      const r = cli(['diff', dir, '--json', path.join(out, 'report.json'), '--dump', path.join(out, 'dump')]);
      expect(r.code, r.stderr).toBe(2);
      const lines = r.stderr.trim().split('\n');
      expect(lines, r.stderr).toHaveLength(1);
      expect(lines[0]).toMatch(/^layerdiff: error: /);
      expect(lines[0]).not.toMatch(/\n\s+at /);
      if (defect.tensor !== undefined) expect(lines[0]).toContain(defect.tensor);
      if (defect.file !== undefined) expect(lines[0]).toContain(defect.file);
      // nothing half-written: no report, no dump files (an empty dump folder at most)
      expect(fs.existsSync(path.join(out, 'report.json'))).toBe(false);
      const dumped = fs.existsSync(path.join(out, 'dump')) ? fs.readdirSync(path.join(out, 'dump')) : [];
      expect(dumped).toEqual([]);
      expect(hashTree(dir)).toBe(before);
    });
  }
});
