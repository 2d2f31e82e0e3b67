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
 * run's many decodes cost a message each (tens of microseconds), not a start.
 */
import { createRequire } from 'node:module';
import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from 'node:worker_threads';
import { InputError } from '../errors.js';

const WORKER = `
const { workerData } = require('node:worker_threads');
const { port, flag, lib, json, config } = workerData;
const done = new Int32Array(flag);
let tk = null, failed = null;
try {
  tk = new (require(lib).Tokenizer)(json, config);
} catch (e) {
  failed = String((e && e.message) || e);
}
port.on('message', (req) => {
  let res;
  try {
    if (tk === null) res = { error: failed };
    else if (req.op === 'encode') res = { ids: tk.encode(req.text, req.options).ids };
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

type Request = { op: 'encode'; text: string; options: object } | { op: 'decode'; ids: number[]; options: object };
type Reply = { ids: Array<number | undefined> } | { text: string } | { error: string };

export class GuardedTokenizer {
  private worker: Worker | null = null;
  private port: MessagePort | null = null;
  /** per worker: a stopped worker's late store can never wake the next one's wait */
  private flag = new Int32Array(new SharedArrayBuffer(4));

  /** `json`, `config`: what the library's Tokenizer is built from; `file`: what a message names */
  constructor(
    private readonly json: object,
    private readonly config: object,
    private readonly file: string,
    private readonly deadlineMs = deadlineFromEnv(),
  ) {}

  encode(text: string, options: object): Array<number | undefined> {
    const r = this.call({ op: 'encode', text, options }, 'encoding');
    if (!('ids' in r)) throw new Error('tokenizer worker: encode gave no ids');
    return r.ids;
  }

  decode(ids: number[], options: object): string {
    const r = this.call({ op: 'decode', ids, options }, 'decoding');
    if (!('text' in r)) throw new Error('tokenizer worker: decode gave no text');
    return r.text;
  }

  private call(req: Request, what: string): Reply {
    if (this.worker === null) this.start();
    Atomics.store(this.flag, 0, 0);
    this.port!.postMessage(req);
    if (Atomics.wait(this.flag, 0, 0, this.deadlineMs) === 'timed-out') {
      void this.worker!.terminate();
      this.port!.close();
      this.worker = null;
      this.port = null;
      throw new InputError(`${what} took longer than ${this.deadlineMs / 1000} s and was stopped: a regular expression of the tokenizer (pre_tokenizer, normalizer or decoder) backtracks without bound on this text, or the tokenizer could not run`, { file: this.file });
    }
    const m = receiveMessageOnPort(this.port!);
    if (m === undefined) throw new Error('tokenizer worker: signalled without a reply');
    const r = m.message as Reply;
    if ('error' in r) throw new InputError(`${what} failed: ${r.error}`, { file: this.file });
    return r;
  }

  private start(): void {
    this.flag = new Int32Array(new SharedArrayBuffer(4));
    const { port1, port2 } = new MessageChannel();
    const lib = createRequire(import.meta.url).resolve('@huggingface/tokenizers');
    this.worker = new Worker(WORKER, { eval: true, workerData: { port: port2, flag: this.flag.buffer, lib, json: this.json, config: this.config }, transferList: [port2] });
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
