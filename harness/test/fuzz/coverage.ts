/**
 * A small coverage-guided fuzzer for the checkpoint parsers, on V8's own block coverage (node:inspector,
 * Profiler.takePreciseCoverage with detailed blocks): an input is kept in the corpus when it reaches a block
 * of the watched sources that no earlier input reached, and new inputs are mutations and splices of the
 * corpus (libFuzzer's loop, without its instrumentation). We write our own because the fuzzers for Node
 * (Jazzer.js) ship a native part built against glibc 2.38, which the CI image does not have.
 *
 * The oracle: the target must return or throw InputError (bad input, exit 2); any other exception is a
 * crash (the CLI would print "internal error"), recorded with the input that caused it.
 */
import { Session } from 'node:inspector';
import { Rng } from '../../rng.js';

export interface FuzzTarget {
  /** run one input; throw InputError for bad input */
  run(input: Buffer): void;
}

export interface FuzzResult {
  execs: number;
  /** distinct covered blocks of the watched sources */
  blocks: number;
  /** blocks the seed corpus alone reaches */
  seedBlocks: number;
  /** the corpus after the run (seeds first) */
  corpus: Buffer[];
  /** inputs that raised something other than bad input, with what */
  crashes: Array<{ input: Buffer; error: string }>;
}

/**
 * Block coverage as a set of "url:start-end" keys with a count above zero. Start it before the watched
 * modules are imported: V8 gives block ranges only for functions compiled while precise coverage is on.
 */
export class Coverage {
  private readonly session = new Session();

  constructor(readonly watch: readonly string[]) {
    this.session.connect();
    this.post('Profiler.enable');
    this.post('Profiler.startPreciseCoverage', { callCount: true, detailed: true });
  }

  private post(method: string, params?: object): unknown {
    let out: unknown;
    let err: Error | null = null;
    // in-process sessions answer synchronously
    this.session.post(method, params ?? {}, (e, r) => {
      err = e;
      out = r;
    });
    if (err !== null) throw err;
    return out;
  }

  /** the blocks run since the last call (takePreciseCoverage resets the counters) */
  take(): Set<string> {
    const r = this.post('Profiler.takePreciseCoverage') as { result: Array<{ url: string; functions: Array<{ ranges: Array<{ startOffset: number; endOffset: number; count: number }> }> }> };
    const keys = new Set<string>();
    for (const script of r.result) {
      if (!this.watch.some((w) => script.url.includes(w))) continue;
      for (const fn of script.functions) for (const range of fn.ranges) if (range.count > 0) keys.add(`${script.url}:${range.startOffset}-${range.endOffset}`);
    }
    return keys;
  }

  close(): void {
    this.post('Profiler.stopPreciseCoverage');
    this.session.disconnect();
  }
}

/** Values that sit on edges of parsers: sizes, offsets, dtype and JSON tokens. */
const INTERESTING = ['0', '-1', '1e309', '4294967296', '9007199254740993', '"F8_E8M0"', '"I8"', '"BF16"', 'null', '[]', '{}', '"__metadata__"', '""', 'NaN', '[0,0]', '[1e9,2]'];

function mutate(rng: Rng, a: Buffer, corpus: readonly Buffer[]): Buffer {
  const b = Buffer.from(a);
  switch (rng.int(8)) {
    case 0: // flip a bit
      if (b.length > 0) b[rng.int(b.length)] ^= 1 << rng.int(8);
      return b;
    case 1: // a random byte
      if (b.length > 0) b[rng.int(b.length)] = rng.int(256);
      return b;
    case 2: // truncate
      return b.subarray(0, rng.int(b.length + 1));
    case 3: {
      // delete a chunk
      const at = rng.int(b.length + 1);
      return Buffer.concat([b.subarray(0, at), b.subarray(Math.min(b.length, at + 1 + rng.int(16)))]);
    }
    case 4: {
      // replace a number in the text with an edge value
      const s = b.toString('latin1');
      const nums = [...s.matchAll(/-?\d+(\.\d+)?(e-?\d+)?/g)];
      if (nums.length === 0) return b;
      const m = nums[rng.int(nums.length)];
      const v = INTERESTING[rng.int(INTERESTING.length)];
      return Buffer.from(s.slice(0, m.index) + v + s.slice(m.index! + m[0].length), 'latin1');
    }
    case 5: {
      // replace a JSON string token
      const s = b.toString('latin1');
      const strs = [...s.matchAll(/"[^"\\]{0,40}"/g)];
      if (strs.length === 0) return b;
      const m = strs[rng.int(strs.length)];
      const other = strs[rng.int(strs.length)][0];
      const v = rng.int(2) === 0 ? other : INTERESTING[rng.int(INTERESTING.length)];
      return Buffer.from(s.slice(0, m.index) + v + s.slice(m.index! + m[0].length), 'latin1');
    }
    case 6: {
      // splice with another corpus entry
      const o = corpus[rng.int(corpus.length)];
      const cut = rng.int(b.length + 1);
      return Buffer.concat([b.subarray(0, cut), o.subarray(rng.int(o.length + 1))]);
    }
    default: {
      // duplicate a chunk in place
      const at = rng.int(b.length + 1);
      const chunk = b.subarray(at, at + 1 + rng.int(32));
      return Buffer.concat([b.subarray(0, at), chunk, b.subarray(at)]);
    }
  }
}

/** Run `target` on the seeds, then on mutations for `seconds` (or `maxExecs`), growing the corpus by coverage. */
export function fuzz(cov: Coverage, target: FuzzTarget, seeds: readonly Buffer[], opts: { seconds: number; seed: number; maxExecs?: number; isBadInput: (e: unknown) => boolean }): FuzzResult {
  const seen = new Set<string>();
  const corpus: Buffer[] = [];
  const crashes: FuzzResult['crashes'] = [];
  let execs = 0;
  const exec = (input: Buffer): boolean => {
    cov.take(); // discard whatever ran in between
    try {
      target.run(input);
    } catch (e) {
      if (!opts.isBadInput(e)) crashes.push({ input, error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) });
    }
    execs++;
    let fresh = false;
    for (const k of cov.take()) {
      if (!seen.has(k)) {
        seen.add(k);
        fresh = true;
      }
    }
    return fresh;
  };
  try {
    for (const s of seeds) {
      exec(s);
      corpus.push(s);
    }
    const seedBlocks = seen.size;
    const rng = new Rng(opts.seed);
    const end = Date.now() + opts.seconds * 1000;
    while (Date.now() < end && (opts.maxExecs === undefined || execs < opts.maxExecs)) {
      const parent = corpus[rng.int(corpus.length)];
      let input = mutate(rng, parent, corpus);
      for (let k = rng.int(3); k > 0; k--) input = mutate(rng, input, corpus);
      if (input.length > 1 << 20) continue;
      if (exec(input)) corpus.push(input);
    }
    return { execs, blocks: seen.size, seedBlocks, corpus, crashes };
  } finally {
    cov.close();
  }
}
