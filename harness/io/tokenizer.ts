/**
 * A model directory's tokenizer: `tokenizer.json` (plus `tokenizer_config.json` when present) run by
 * @huggingface/tokenizers, offline. Any problem with those files is one InputError naming the file.
 *
 * Defaults follow current transformers rather than the JS library: decode-time space clean-up is off
 * unless tokenizer_config.json turns it on (the JS default, on, rewrites " ." to "." and breaks round
 * trips of code), and special tokens are added on encode as the post-processor says (BOS for Llama).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { InputError } from '../errors.js';
import { readJsonObject } from './checkpoint.js';
import { GuardedTokenizer } from './tokenizer_guard.js';

/** The part of the library we use (its shipped .d.ts do not resolve under NodeNext, so we type it here). */
interface HfTokenizer {
  encode(text: string, options?: { add_special_tokens?: boolean }): { ids: Array<number | undefined> };
  decode(ids: number[], options?: { skip_special_tokens?: boolean; clean_up_tokenization_spaces?: boolean }): string;
  token_to_id(token: string): number | undefined;
}
type HfTokenizerCtor = new (tokenizer: object, config: object) => HfTokenizer;

export const TOKENIZER_FILE = 'tokenizer.json';
export const TOKENIZER_CONFIG_FILE = 'tokenizer_config.json';

export function hasTokenizer(modelDir: string): boolean {
  return fs.existsSync(path.join(modelDir, TOKENIZER_FILE));
}


function isIdMap(v: unknown): v is Record<string, number> {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && Object.values(v).every((id) => Number.isSafeInteger(id) && (id as number) >= 0);
}

export class TextTokenizer {
  /** one past the largest id in the model vocabulary and added tokens (the embedding needs this many rows) */
  readonly vocabSize: number;
  readonly bosTokenId: number | undefined;
  readonly eosTokenId: number | undefined;

  private constructor(
    readonly file: string,
    private readonly tk: HfTokenizer,
    /** encode and decode, on a worker with a deadline (tokenizer_guard.ts); `tk` answers the lookups */
    private readonly guarded: GuardedTokenizer,
    vocabSize: number,
    specials: { bos?: string; eos?: string },
    private readonly specialIds: ReadonlySet<number> = new Set(),
    private readonly unk: number | undefined = undefined,
  ) {
    this.vocabSize = vocabSize;
    this.bosTokenId = specials.bos === undefined ? undefined : tk.token_to_id(specials.bos);
    this.eosTokenId = specials.eos === undefined ? undefined : tk.token_to_id(specials.eos);
  }

  /** Load `<modelDir>/tokenizer.json` and, if present, `<modelDir>/tokenizer_config.json`. */
  /** `read`: the checkpoint's metadata reader (Checkpoint.readMeta), so the bytes parsed are the bytes fingerprinted */
  static load(modelDir: string, read?: MetaReader): TextTokenizer {
    const file = path.join(modelDir, TOKENIZER_FILE);
    const json = readJsonObject(file, read?.(TOKENIZER_FILE) ?? undefined);
    const configFile = path.join(modelDir, TOKENIZER_CONFIG_FILE);
    const cfgBytes = read !== undefined ? read(TOKENIZER_CONFIG_FILE) : fs.existsSync(configFile) ? undefined : null;
    const config = cfgBytes === null ? {} : readJsonObject(configFile, cfgBytes);
    return TextTokenizer.fromJson(json, config, file);
  }

  /** Build from parsed JSON; `file` is what error messages name. */
  static fromJson(json: Record<string, unknown>, config: Record<string, unknown>, file: string): TextTokenizer {
    const model = json.model;
    if (model === null || typeof model !== 'object' || Array.isArray(model)) throw new InputError('has no "model" object', { file });
    const vocab = (model as Record<string, unknown>).vocab;
    // Unigram stores [piece, score] pairs; WordPiece/BPE an id map.
    let maxId = -1;
    if (Array.isArray(vocab)) maxId = vocab.length - 1;
    else if (isIdMap(vocab)) for (const id of Object.values(vocab)) maxId = Math.max(maxId, id);
    else throw new InputError('model.vocab is neither a token → id map nor a list', { file });
    const added = json.added_tokens ?? [];
    if (!Array.isArray(added)) throw new InputError('added_tokens is not a list', { file });
    for (const t of added) {
      const id = (t as { id?: unknown } | null)?.id;
      if (!Number.isSafeInteger(id) || (id as number) < 0 || typeof (t as { content?: unknown }).content !== 'string') {
        throw new InputError(`added_tokens entry ${JSON.stringify(t)} needs an integer id and a string content`, { file });
      }
      maxId = Math.max(maxId, id as number);
    }
    if (maxId < 0) throw new InputError('the vocabulary is empty', { file });
    // The library requires these keys to exist (null is fine) and iterates added_tokens.
    const filled: Record<string, unknown> = { normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null, ...json, added_tokens: added };
    const cfg = { ...config, clean_up_tokenization_spaces: config.clean_up_tokenization_spaces === true };
    let tk: HfTokenizer;
    try {
      tk = new (Tokenizer as unknown as HfTokenizerCtor)(filled, cfg);
    } catch (e) {
      throw new InputError(`cannot be loaded by @huggingface/tokenizers: ${(e as Error).message}`, { file });
    }
    const special = (key: string): string | undefined => {
      const v = config[key];
      if (typeof v === 'string') return v;
      if (v !== null && typeof v === 'object' && typeof (v as { content?: unknown }).content === 'string') return (v as { content: string }).content;
      return undefined;
    };
    const specialIds = new Set(added.filter((t) => (t as { special?: unknown }).special === true).map((t) => (t as { id: number }).id));
    const unkToken = (model as Record<string, unknown>).unk_token;
    const unk = typeof unkToken === 'string' ? tk.token_to_id(unkToken) : undefined;
    return new TextTokenizer(file, tk, new GuardedTokenizer(filled, cfg, file), maxId + 1, { bos: special('bos_token'), eos: special('eos_token') }, specialIds, unk ?? undefined);
  }

  /** Token ids for `text`; special tokens (BOS) are added as the tokenizer's post-processor specifies. */
  encode(text: string, options: { addSpecialTokens?: boolean } = {}): number[] {
    const ids = this.guarded.encode(text, { add_special_tokens: options.addSpecialTokens ?? true });
    const missing = ids.findIndex((id) => id === undefined || !Number.isSafeInteger(id));
    if (missing >= 0) throw new InputError(`text piece ${missing} has no id in the vocabulary and there is no unk_token`, { file: this.file });
    return ids as number[];
  }

  decode(ids: readonly number[], options: { skipSpecialTokens?: boolean } = {}): string {
    if (ids.length === 0) return ''; // the library rejects an empty list
    for (const id of ids) {
      if (!Number.isSafeInteger(id) || id < 0 || id >= this.vocabSize) {
        throw new InputError(`token id ${id} is outside the vocabulary (size ${this.vocabSize})`, { file: this.file });
      }
    }
    return this.guarded.decode([...ids], { skip_special_tokens: options.skipSpecialTokens ?? false });
  }

  tokenToId(token: string): number | undefined {
    return this.tk.token_to_id(token);
  }

  /** The id of the model's unknown token, if it has one. */
  unkId(): number | undefined {
    return this.unk;
  }

  /** Is `id` one of the added special tokens (BOS, EOS, padding, …)? */
  isSpecial(id: number): boolean {
    return this.specialIds.has(id);
  }
}

/** Text any real tokenizer maps to ordinary vocabulary pieces. */
const PROBE_TEXT = 'hello world';

/**
 * `TextTokenizer.load`, checked against the model: its ids must fit config.json's vocab_size (the embedding's
 * rows; a smaller tokenizer is normal, padded tables are), and ordinary text must become ordinary tokens —
 * a tokenizer that maps "hello world" to nothing, to its unknown token or only to special tokens would make
 * every run compute on a meaningless input and pass.
 */
/** A checkpoint's metadata file by name (Checkpoint.readMeta): its bytes, or null when absent. */
export type MetaReader = (name: string) => Buffer | null;

export function loadTokenizer(modelDir: string, read?: MetaReader): TextTokenizer {
  const tk = TextTokenizer.load(modelDir, read);
  const configFile = path.join(modelDir, 'config.json');
  const vocab = fs.existsSync(configFile) ? readJsonObject(configFile).vocab_size : undefined;
  if (typeof vocab === 'number' && tk.vocabSize > vocab) {
    throw new InputError(`the tokenizer's ids run to ${tk.vocabSize - 1}, beyond vocab_size ${vocab} of ${configFile}`, { file: tk.file });
  }
  const ids = tk.encode(PROBE_TEXT, { addSpecialTokens: false });
  const unk = tk.unkId();
  const ordinary = ids.filter((id) => id !== unk && !tk.isSpecial(id));
  if (ordinary.length === 0) throw new InputError(`maps ordinary text (${JSON.stringify(PROBE_TEXT)}) to no vocabulary token (${JSON.stringify(ids)}); not a usable tokenizer`, { file: tk.file });
  return tk;
}
