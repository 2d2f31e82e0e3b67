/**
 * A tokenizer.json whose regular expression backtracks without bound (a hostile Split pre-tokenizer, `(a+)+$`)
 * is stopped at the deadline and reported as bad input, where it used to hang every command that encodes a
 * prompt; the same tokenizer encodes ordinary text as before, and a stopped worker is replaced at the next call.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InputError } from '../errors.js';
import { TextTokenizer } from '../io/tokenizer.js';
import { GuardedTokenizer } from '../io/tokenizer_guard.js';
import { Tokenizer } from '@huggingface/tokenizers';
import { copyCheckpoint } from '../../fixtures/inject.js';
import { packageRoot } from '../version.js';
import { cli, hashTree } from './cli.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-tokguard-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
const LLAMA = path.join(packageRoot(), 'fixtures', 'llama-tiny');
const HOSTILE = { type: 'Split', pattern: { Regex: '(a+)+$' }, behavior: 'Isolated', invert: false };
/** 40 a's and a b: 2^40 ways for `(a+)+$` to fail, hours by backtracking; instant for a linear engine */
const BAIT = 'a'.repeat(40) + 'b';

function hostileTokenizer(dir: string): Record<string, unknown> {
  copyCheckpoint(LLAMA, dir);
  const f = path.join(dir, 'tokenizer.json');
  const j = JSON.parse(fs.readFileSync(f, 'utf8')) as Record<string, unknown>;
  j.pre_tokenizer = { type: 'Sequence', pretokenizers: [HOSTILE, j.pre_tokenizer] };
  fs.writeFileSync(f, JSON.stringify(j));
  return j;
}

describe('the tokenizer runs with a deadline', () => {
  it('stops a backtracking pattern at the deadline with an InputError naming the file, and encodes the next text on a new worker', () => {
    const json = hostileTokenizer(path.join(tmp, 'unit'));
    const file = path.join(tmp, 'unit', 'tokenizer.json');
    const filled = { normalizer: null, post_processor: null, decoder: null, ...json };
    const cfg = { clean_up_tokenization_spaces: false };
    // the library itself on this thread: what the guarded worker must reproduce
    const direct = new (Tokenizer as unknown as new (j: object, c: object) => { encode(t: string, o: object): { ids: number[] } })(filled, cfg);
    const ordinary = direct.encode('hello world', { add_special_tokens: false }).ids;
    expect(ordinary.length).toBeGreaterThan(0);
    expect(TextTokenizer.fromJson(json, {}, file).encode('hello world', { addSpecialTokens: false })).toEqual(ordinary);
    const g = new GuardedTokenizer(JSON.stringify(json), cfg, file, 1500);
    g.build({});
    const t0 = Date.now();
    expect(() => g.encode(BAIT, { add_special_tokens: false })).toThrow(InputError);
    expect(Date.now() - t0).toBeLessThan(10_000);
    let err: unknown;
    try {
      g.encode(BAIT, { add_special_tokens: false });
    } catch (e) {
      err = e;
    }
    expect((err as Error).message).toMatch(/tokenizer\.json: encoding took longer than 1\.5 s and was stopped: a regular expression of the tokenizer/);
    // the worker was replaced: the same guard encodes ordinary text as the unguarded library does
    expect(g.encode('hello world', { add_special_tokens: false })).toEqual(ordinary);
  }, 30_000);

  it('diff --prompt with such a tokenizer: one line, exit 2, no report, the checkpoint untouched', () => {
    const dir = path.join(tmp, 'cli');
    hostileTokenizer(dir);
    const before = hashTree(dir);
    const json = path.join(tmp, 'out', 'r.json');
    const r = cli(['diff', dir, '--prompt', BAIT, '--json', json], { LAYERDIFF_TOKENIZE_DEADLINE_MS: '1500' }, 60_000);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^layerdiff: error: .*tokenizer\.json: encoding took longer than 1\.5 s and was stopped/);
    expect(fs.existsSync(json)).toBe(false);
    expect(hashTree(dir)).toBe(before);
  }, 60_000);
});
