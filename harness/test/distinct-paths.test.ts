/**
 * An output never replaces an input, and two outputs never share a path: each case is one line naming both
 * options, exit 2, before anything runs, with every file as it was (found by a fuzzing review: `--json` over
 * `--policy`, `--record` over a shard's partial, `--summary` over the record, `--dump` and `--save-golden` in one
 * folder, each exited 0 or 4 with the input gone or half of two outputs left).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { assertDistinctPaths } from '../io/writer.js';
import { InputError } from '../errors.js';
import { cli, hashTree, LLAMA_TINY } from './cli.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-distinct-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
const at = (n: string) => path.join(tmp, n);

describe('outputs are neither inputs nor each other', () => {
  it('assertDistinctPaths: same file, a file inside an output or input folder, an input inside an output folder, through a symlink too', () => {
    fs.mkdirSync(at('real'));
    fs.symlinkSync(at('real'), at('alias'));
    const f = (option: string, p: string) => ({ option, path: p, kind: 'file' as const });
    const d = (option: string, p: string) => ({ option, path: p, kind: 'dir' as const });
    const refused: Array<[Parameters<typeof assertDistinctPaths>, RegExp]> = [
      [[[f('--json', at('a.json')), f('--summary', at('a.json'))]], /--json and --summary name the same path/],
      [[[d('--dump', at('d')), d('--save-golden', at('d'))]], /--dump and --save-golden name the same path/],
      [[[d('--dump', at('d')), f('--json', at('d/r.json'))]], /--json .* is inside --dump's folder/],
      [[[f('--json', at('real/p.json'))], [f('--policy', at('alias/p.json'))]], /--json names --policy's input/],
      [[[f('--record', at('s1/partial.json'))], [d('--merge', at('s1'))]], /--record .* is inside --merge's folder/],
      [[[d('--dump', at('real'))], [f('--policy', at('alias/p.json'))]], /--policy .* is inside --dump's folder/],
      [[[f('--json', at('d/..r.json')), d('--dump', at('d'))]], /--json .* is inside --dump's folder/],
    ];
    for (const [args, says] of refused) {
      expect(() => assertDistinctPaths(...args)).toThrow(InputError);
      expect(() => assertDistinctPaths(...args)).toThrow(says);
    }
    // a folder the command only adds its named files to (gate --reports) may hold the run's other files: a CI layout
    const sh = (option: string, p: string) => ({ option, path: p, kind: 'shared' as const });
    expect(() => assertDistinctPaths([sh('--reports', at('ci')), f('--record', at('ci/record.json')), f('--summary', at('ci/summary.md'))], [f('--prompts', at('ci/prompts.jsonl')), f('--policy', at('ci/policy.json'))])).not.toThrow();
    expect(() => assertDistinctPaths([sh('--reports', at('ci')), f('--record', at('ci'))])).toThrow(/--reports and --record name the same path/);
    // distinct places, and stdout, are fine
    expect(() => assertDistinctPaths([f('--json', '-'), f('--summary', '-'), f('--html', at('r.html')), d('--dump', at('dump'))], [f('--policy', at('p.json'))])).not.toThrow();
  });

  it('through the CLI: one line, exit 2, nothing changed', () => {
    const work = path.join(tmp, 'cli');
    fs.mkdirSync(work);
    const w = (n: string) => path.join(work, n);
    const policy = w('pol.json');
    fs.writeFileSync(policy, JSON.stringify({ metric: 'max_abs', fail_above: 0.1, warn_above: 0.01 }));
    const prompts = w('p.jsonl');
    fs.writeFileSync(prompts, JSON.stringify({ name: 'one', tokens: [1, 2, 3] }) + '\n');
    const record = w('rec.json');
    fs.writeFileSync(record, '{}');
    for (const [args, says] of [
      [['diff', '--policy', policy, '--json', policy], /--json names --policy's input/],
      [['diff', '--dump', w('o1'), '--save-golden', w('o1')], /--dump and --save-golden name the same path/],
      [['gate', LLAMA_TINY(), '--prompts', prompts, '--record', w('r.json'), '--json', prompts], /--json names --prompts's input/],
      [['gate', LLAMA_TINY(), '--prompts', prompts, '--record', w('r2.json'), '--summary', w('r2.json')], /--record and --summary name the same path/],
      [['gate', '--merge', w('s1'), w('s2'), '--record', w('s1/partial.json')], /--record .* is inside --merge's folder/],
      [['generate', LLAMA_TINY(), '--record', record, '--tokens', '1,2', '--max-new-tokens', '1', '--json', record], /--json names --record's input/],
    ] as const) {
      const before = hashTree(work);
      const r = cli([...args]);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(says);
      expect(hashTree(work), args.join(' ')).toBe(before);
    }
  });
});
