/**
 * Bad gpt-oss input through the CLI (`diff`, `inspect`): one line naming the tensor (or config key), exit 2,
 * no report left behind, the checkpoint untouched. Cases: fixtures/inject.ts GPT_OSS_BAD_INPUT_CASES.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { GPT_OSS_BAD_INPUT_CASES } from '../../fixtures/inject.js';
import { packageRoot } from '../version.js';
import { cli, hashTree } from './cli.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-gptoss-bad-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
const FIXTURE = () => path.join(packageRoot(), 'fixtures', 'gpt-oss-tiny');

describe('gpt-oss bad input → exit 2, one line naming the tensor', () => {
  it('the committed fixture itself conforms (inspect exit 0)', () => {
    const r = cli(['inspect', FIXTURE()]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('GptOssForCausalLM, 4 layers');
    expect(r.stdout).toMatch(/gate_up_proj_blocks.*mxfp4 \(blocks\)/);
    expect(r.stdout).toMatch(/down_proj_scales.*scale/);
  });

  for (const c of GPT_OSS_BAD_INPUT_CASES) {
    it(c.id, () => {
      const dir = path.join(tmp, c.id);
      const defect = c.make(FIXTURE(), dir);
      const before = hashTree(dir);
      const out = path.join(tmp, `${c.id}-out`);
      for (const args of [['diff', dir, '--json', path.join(out, 'report.json')], ['inspect', dir]]) {
        const r = cli(args);
        expect(r.code, `${args[0]}: ${r.stderr}`).toBe(2);
        const lines = r.stderr.trim().split('\n');
        expect(lines, r.stderr).toHaveLength(1);
        expect(lines[0]).toMatch(/^layerdiff: error: /);
        if (defect.tensor !== undefined) expect(lines[0]).toContain(`'${defect.tensor}'`);
        if (c.needle !== undefined) expect(lines[0]).toContain(c.needle);
      }
      expect(fs.existsSync(path.join(out, 'report.json'))).toBe(false);
      expect(hashTree(dir)).toBe(before);
    });
  }
});
