/**
 * Fuzz: mutate llama-tiny's headers, data, config, index and tokenizer (2,000+ seeded cases) and run the
 * whole diff in-process on each. Every case must end as bad input (InputError → exit 2) or as a complete,
 * well-formed report — never another exception (which the CLI would report as an internal error).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { InputError } from '../errors.js';
import { runDiffCommand } from '../cli/diff.js';
import { Rng } from '../rng.js';
import { copyCheckpoint } from '../../fixtures/inject.js';
import { LLAMA_TINY } from './cli.js';

const CASES = Number(process.env.LAYERDIFF_FUZZ_CASES ?? 2000);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-fuzz-'));
copyCheckpoint(LLAMA_TINY(), dir);
const files = fs.readdirSync(dir).filter((f) => fs.statSync(path.join(dir, f)).isFile());
const originals = new Map(files.map((f) => [f, fs.readFileSync(path.join(dir, f))]));

type Mutation = { file: string; bytes: Buffer; what: string };

function mutate(rng: Rng): Mutation {
  const file = files[rng.int(files.length)];
  const src = originals.get(file)!;
  const b = Buffer.from(src);
  const isShard = file.endsWith('.safetensors');
  const headerEnd = isShard ? 8 + Number(src.readBigUInt64LE(0)) : src.length;
  const kind = rng.int(6);
  if (kind === 0 && isShard) {
    const at = rng.int(8);
    b[at] = rng.int(256);
    return { file, bytes: b, what: `header-length byte ${at}` };
  }
  if (kind === 1) {
    const cut = rng.int(src.length);
    return { file, bytes: b.subarray(0, cut), what: `truncate to ${cut}` };
  }
  if (kind <= 3 || !isShard) {
    // text region (JSON header, config, index, tokenizer): flip a byte, or swap a digit for another digit
    const lo = isShard ? 8 : 0;
    const at = lo + rng.int(headerEnd - lo);
    b[at] = /[0-9]/.test(String.fromCharCode(b[at])) && rng.int(2) === 0 ? 48 + rng.int(10) : rng.int(256);
    return { file, bytes: b, what: `text byte ${at}` };
  }
  // data region: overwrite a few bytes (NaN codes, huge scales, random codes)
  const n = 1 + rng.int(8);
  for (let i = 0; i < n; i++) b[headerEnd + rng.int(src.length - headerEnd)] = rng.int(256);
  return { file, bytes: b, what: `${n} data bytes` };
}

const CHUNK = 250;
const counts = { badInput: 0, pass: 0, fail: 0 };

/** Run cases [from, to) — each case's mutation comes from its own seeded stream, so chunks are independent. */
async function runCases(from: number, to: number): Promise<void> {
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = (() => true) as typeof process.stdout.write;
  try {
    for (let i = from; i < to; i++) {
      const m = mutate(Rng.forKey(20261129, `case ${i}`));
      fs.writeFileSync(path.join(dir, m.file), m.bytes);
      try {
        const { report } = await runDiffCommand({
          model: dir, tokens: '0,5,9,77,200,383', layers: 'all', device: 'emulated', mode: 'both', metric: 'max_abs',
          failAbove: 0.1, warnAbove: 0.01, freeSelection: false, prompt: undefined,
        });
        expect(report.stages.map((s) => s.name)).toEqual(['embed', 'layer.0', 'layer.1', 'layer.2', 'layer.3', 'final_norm', 'logits']);
        for (const s of report.stages) expect(['pass', 'warn', 'fail']).toContain(s.status);
        counts[report.verdict]++;
      } catch (e) {
        if (!(e instanceof InputError)) throw new Error(`case ${i} (${m.file}: ${m.what}) raised ${String(e)}`);
        expect(e.message.length).toBeGreaterThan(0);
        counts.badInput++;
      } finally {
        fs.writeFileSync(path.join(dir, m.file), originals.get(m.file)!);
      }
    }
  } finally {
    process.stdout.write = write;
  }
}

// Chunks of 250 so one slow machine cannot time out the whole run; vitest runs them in order.
describe('fuzz: mutated checkpoints end as exit 2 or a valid report', () => {
  for (let from = 0; from < CASES; from += CHUNK) {
    const to = Math.min(CASES, from + CHUNK);
    it(`seeded mutations ${from}–${to - 1}`, () => runCases(from, to), 600_000);
  }
  it(`the ${CASES} cases reach both outcomes`, () => {
    // the mix must exercise both, or the fuzzer is not reaching the runner
    expect(counts.badInput + counts.pass + counts.fail).toBe(CASES);
    expect(counts.badInput).toBeGreaterThan(CASES / 10);
    expect(counts.pass + counts.fail).toBeGreaterThan(CASES / 10);
  });
});
