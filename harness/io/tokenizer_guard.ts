/**
 * The tokenizer's encode and decode, run on a worker thread with a deadline. A tokenizer.json carries regular
 * expressions (a Split pre-tokenizer, a Replace normalizer or decoder) that @huggingface/tokenizers compiles to
 * JavaScript RegExps with the `u` flag, which V8 runs by backtracking: a hostile or broken pattern such as
 * `(a+)+$` takes exponential time on a few dozen characters, and on the main thread no timer could stop it.
 * On a worker it can be stopped: the main thread waits (Atomics.wait, so encode stays synchronous) at most
 * TOKENIZE_DEADLINE_MS per call, then ends the worker and reports the file as bad input. V8's fallback to its
 * linear-time engine (--enable-experimental-regexp-engine-on-excessive-backtracks) does not cover `u` patterns.
 *
 * The worker is a short CommonJS script (eval), as harness/gate/hash_workers.ts's is, so the same code runs under
 * the tests (TypeScript sources) and from dist/. It is started at the first call and kept, unreferenced, so a
 * run's many decodes cost a message each (tens of microseconds), not a start. It holds the only built copy of the
 * tokenizer (its id lookups included): building DeepSeek's 128k-token BPE takes ~0.5 s, and the main thread had
 * built a second one for the lookups alone.
 */
import { createRequire } from 'node:module';
import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from 'node:worker_threads';
import { InputError } from '../errors.js';

const WORKER = `
const { workerData } = require('node:worker_threads');
const { port, flag, lib, text, config } = workerData;
const done = new Int32Array(flag);
// parsed at once, while the main thread checks its own copy; built at the 'build' message, with the main thread's patch
let json = null, tk = null, failed = null;
try {
  json = JSON.parse(text);
} catch (e) {
  failed = String((e && e.message) || e);
}
port.on('message', (req) => {
  if (req.op === 'build') {
    if (failed === null) {
      try {
        tk = new (require(lib).Tokenizer)({ normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null, ...json, ...req.patch }, config);
      } catch (e) {
        failed = String((e && e.message) || e);
      }
    }
    json = null;
    return; // no reply: the next request's wait covers the build
  }
  let res;
  try {
    if (tk === null) res = { error: failed, load: true };
    else if (req.op === 'encode') res = { ids: tk.encode(req.text, req.options).ids };
    else if (req.op === 'ids') res = { ids: req.tokens.map((t) => tk.token_to_id(t) ?? undefined) };
    else res = { text: tk.decode(req.ids, req.options) };
  } catch (e) {
    res = { error: String((e && e.message) || e) };
  }
  port.postMessage(res);
  Atomics.store(done, 0, 1);
  Atomics.notify(done, 0);
});
`;

/** How long one encode or decode may take: far beyond any real tokenizer on the longest prompt taken (1 MiB). */
export const TOKENIZE_DEADLINE_MS = 60_000;

type Request = { op: 'encode'; text: string; options: object } | { op: 'decode'; ids: number[]; options: object } | { op: 'ids'; tokens: string[] };
/** `load`: the library could not build the tokenizer from its files at all */
type Reply = { ids: Array<number | undefined> } | { text: string } | { error: string; load?: boolean };

export class GuardedTokenizer {
  private worker: Worker | null = null;
  private port: MessagePort | null = null;
  /** per worker: a stopped worker's late store can never wake the next one's wait */
  private flag = new Int32Array(new SharedArrayBuffer(4));
  /** the keys build() lays over the parsed file; null until it is called */
  private patch: object | null = null;

  /**
   * `text`: tokenizer.json as read (the worker parses it itself: a parsed 8 MB object costs ~0.3 s to copy into a
   * worker, the text nothing); `config`: the library's options; `file`: what a message names. The worker starts
   * here, so it parses while the caller checks its own copy, then builds at build().
   */
  constructor(
    private readonly text: string,
    private readonly config: object,
    private readonly file: string,
    private readonly deadlineMs = deadlineFromEnv(),
  ) {
    this.start();
  }

  /** Build the library's tokenizer from the file with `patch`'s keys over it; the next call waits for it. */
  build(patch: object): void {
    this.patch = patch;
    this.port!.postMessage({ op: 'build', patch });
  }

  /** Stop the worker (a caller that refuses the file before using it). */
  close(): void {
    void this.worker?.terminate();
    this.port?.close();
    this.worker = null;
    this.port = null;
  }

  encode(text: string, options: object): Array<number | undefined> {
    const r = this.call({ op: 'encode', text, options }, 'encoding');
    if (!('ids' in r)) throw new Error('tokenizer worker: encode gave no ids');
    return r.ids;
  }

  /** Each token's id (the library's token_to_id: added tokens, then the model's vocabulary), or undefined. */
  ids(tokens: string[]): Array<number | undefined> {
    const r = this.call({ op: 'ids', tokens }, 'looking up tokens');
    if (!('ids' in r)) throw new Error('tokenizer worker: a lookup gave no ids');
    return r.ids;
  }

  decode(ids: number[], options: object): string {
    const r = this.call({ op: 'decode', ids, options }, 'decoding');
    if (!('text' in r)) throw new Error('tokenizer worker: decode gave no text');
    return r.text;
  }

  private call(req: Request, what: string): Reply {
    if (this.patch === null) throw new Error('tokenizer worker: used before build()');
    if (this.worker === null) {
      // a worker stopped at the deadline is replaced, built as the first was
      this.start();
      this.build(this.patch);
    }
    Atomics.store(this.flag, 0, 0);
    this.port!.postMessage(req);
    if (Atomics.wait(this.flag, 0, 0, this.deadlineMs) === 'timed-out') {
      this.close();
      throw new InputError(`${what} took longer than ${this.deadlineMs / 1000} s and was stopped: a regular expression of the tokenizer (pre_tokenizer, normalizer or decoder) backtracks without bound on this text, or the tokenizer could not run`, { file: this.file });
    }
    const m = receiveMessageOnPort(this.port!);
    if (m === undefined) throw new Error('tokenizer worker: signalled without a reply');
    const r = m.message as Reply;
    if ('error' in r) throw new InputError(r.load === true ? `cannot be loaded by @huggingface/tokenizers: ${r.error}` : `${what} failed: ${r.error}`, { file: this.file });
    return r;
  }

  private start(): void {
    this.flag = new Int32Array(new SharedArrayBuffer(4));
    const { port1, port2 } = new MessageChannel();
    const lib = createRequire(import.meta.url).resolve('@huggingface/tokenizers');
    this.worker = new Worker(WORKER, { eval: true, workerData: { port: port2, flag: this.flag.buffer, lib, text: this.text, config: this.config }, transferList: [port2] });
    // neither keeps the process alive: a run ends when its work does
    this.worker.unref();
    port1.unref();
    this.port = port1;
  }
}

/** LAYERDIFF_TOKENIZE_DEADLINE_MS: a shorter deadline, for tests of the stop itself. */
function deadlineFromEnv(): number {
  const v = process.env.LAYERDIFF_TOKENIZE_DEADLINE_MS;
  const n = v === undefined ? NaN : Number(v);
  return Number.isSafeInteger(n) && n > 0 ? n : TOKENIZE_DEADLINE_MS;
}
