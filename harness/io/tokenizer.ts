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
import { InputError } from '../errors.js';
import { parseJsonObject, readJsonObject } from './checkpoint.js';
import { readRegularBytes, utf8Text } from './regular.js';
import { GuardedTokenizer } from './tokenizer_guard.js';

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
  /** the model's unknown token, if it has one */
  private readonly unk: number | undefined;

  private constructor(
    readonly file: string,
    /** encode, decode and the id lookups, on a worker with a deadline (tokenizer_guard.ts) */
    private readonly guarded: GuardedTokenizer,
    vocabSize: number,
    specials: { bos?: string; eos?: string; unk?: string },
    private readonly specialIds: ReadonlySet<number> = new Set(),
  ) {
    this.vocabSize = vocabSize;
    const [bos, eos, unk] = guarded.ids([specials.bos ?? '', specials.eos ?? '', specials.unk ?? '']);
    this.bosTokenId = specials.bos === undefined ? undefined : bos;
    this.eosTokenId = specials.eos === undefined ? undefined : eos;
    this.unk = specials.unk === undefined ? undefined : unk;
  }

  /** Load `<modelDir>/tokenizer.json` and, if present, `<modelDir>/tokenizer_config.json`. */
  /** `read`: the checkpoint's metadata reader (Checkpoint.readMeta), so the bytes parsed are the bytes fingerprinted */
  static load(modelDir: string, read?: MetaReader): TextTokenizer {
    const file = path.join(modelDir, TOKENIZER_FILE);
    const configFile = path.join(modelDir, TOKENIZER_CONFIG_FILE);
    const cfgBytes = read !== undefined ? read(TOKENIZER_CONFIG_FILE) : fs.existsSync(configFile) ? undefined : null;
    const config = cfgBytes === null ? {} : readJsonObject(configFile, cfgBytes);
    const text = utf8Text(read?.(TOKENIZER_FILE) ?? readRegularBytes(file), { file });
    return TextTokenizer.build(text, () => parseJsonObject(text, file), config, file);
  }

  /** Build from parsed JSON; `file` is what error messages name (tokenizer_config.json's fields: the file beside it). */
  static fromJson(json: Record<string, unknown>, config: Record<string, unknown>, file: string): TextTokenizer {
    return TextTokenizer.build(JSON.stringify(json), () => json, config, file);
  }

  /**
   * The worker starts on `text` first, so it parses and builds the library's copy while this thread parses its own
   * (`parse`) and checks it; a refusal stops the worker.
   */
  private static build(text: string, parse: () => Record<string, unknown>, config: Record<string, unknown>, file: string): TextTokenizer {
    const guard = new GuardedTokenizer(text, libraryOptions(config), file);
    try {
      return TextTokenizer.checked(parse(), config, file, guard);
    } catch (e) {
      guard.close();
      throw e;
    }
  }

  private static checked(json: Record<string, unknown>, config: Record<string, unknown>, file: string, guard: GuardedTokenizer): TextTokenizer {
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
    const special = (key: string): string | undefined => {
      const v = config[key];
      if (typeof v === 'string') return v;
      if (v !== null && typeof v === 'object' && typeof (v as { content?: unknown }).content === 'string') return (v as { content: string }).content;
      return undefined;
    };
    const bos = special('bos_token'), eos = special('eos_token');
    const configFile = path.join(path.dirname(file), TOKENIZER_CONFIG_FILE);
    const template = specialTokensTemplate(config, { bos, eos }, (token) => idInJson(json, token, file), configFile);
    // The library requires added_tokens to exist and iterates it (the worker also fills the null-able keys).
    guard.build(template === undefined ? { added_tokens: added } : { added_tokens: added, post_processor: template.processor });
    const specialIds = new Set(added.filter((t) => (t as { special?: unknown }).special === true).map((t) => (t as { id: number }).id));
    const unkToken = (model as Record<string, unknown>).unk_token;
    const tk = new TextTokenizer(file, guard, maxId + 1, { bos, eos, unk: typeof unkToken === 'string' ? unkToken : undefined }, specialIds);
    // the template's ids were read from the JSON; the library's own lookup must agree (it decides every other id)
    for (const [token, id] of template?.ids ?? []) {
      const lib = token === bos ? tk.bosTokenId : tk.eosTokenId;
      if (lib !== id) throw new InputError(`${JSON.stringify(token)} has id ${id} in the file's tables but ${String(lib)} by the tokenizer library; an inconsistent tokenizer`, { file });
    }
    return tk;
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

  /** The id of the model's unknown token, if it has one. */
  unkId(): number | undefined {
    return this.unk;
  }

  /** Stop the worker that holds the library's tokenizer (a caller that refuses it). */
  close(): void {
    this.guarded.close();
  }

  /** Is `id` one of the added special tokens (BOS, EOS, padding, …)? */
  isSpecial(id: number): boolean {
    return this.specialIds.has(id);
  }
}

/** The library's options from tokenizer_config.json: transformers' default of no clean-up (the JS default is on). */
function libraryOptions(config: Record<string, unknown>): object {
  return { ...config, clean_up_tokenization_spaces: config.clean_up_tokenization_spaces === true };
}

/** The classes whose tokenizer transformers builds with add_bos_token true unless tokenizer_config.json says otherwise. */
const BOS_BY_DEFAULT = new Set(['LlamaTokenizer', 'LlamaTokenizerFast']);

/**
 * The special tokens transformers adds on encode where tokenizer_config.json decides them, not tokenizer.json:
 * a Llama-class tokenizer (LlamaTokenizerFast.update_post_processor, add_bos_token true by default), or any class
 * naming add_bos_token / add_eos_token (transformers 5's TokenizersBackend), has its post-processor replaced by
 * the template `[BOS] $A [EOS]`, each part as those fields say. DeepSeek's tokenizers ship a ByteLevel
 * post-processor and `add_bos_token: true`: read from tokenizer.json alone, a prompt lacked the BOS that
 * transformers, vLLM and DeepSeek's own code put first. undefined: tokenizer.json's post-processor stands.
 * `ids`: the processor and the ids it names, read from the file's tables (`idOf`).
 */
function specialTokensTemplate(
  config: Record<string, unknown>,
  tokens: { bos?: string; eos?: string },
  idOf: (token: string) => number | undefined,
  configFile: string,
): { processor: object; ids: Array<[string, number]> } | undefined {
  const flag = (key: string, byDefault: boolean): boolean => {
    const v = config[key];
    if (v === undefined || v === null) return v === null ? false : byDefault;
    if (typeof v !== 'boolean') throw new InputError(`${key} ${JSON.stringify(v)} is not true or false`, { file: configFile });
    return v;
  };
  const llama = typeof config.tokenizer_class === 'string' && BOS_BY_DEFAULT.has(config.tokenizer_class);
  const explicit = Object.hasOwn(config, 'add_bos_token') || Object.hasOwn(config, 'add_eos_token');
  // a Llama class naming no BOS here (older conversions keep it in special_tokens_map.json, which transformers
  // also reads): tokenizer.json's own post-processor stands, as it did before these fields were read
  if (!explicit && (!llama || (tokens.bos ?? '') === '')) return undefined;
  const parts: Array<{ token: string; key: string }> = [];
  if (flag('add_bos_token', llama)) parts.push({ token: tokens.bos ?? '', key: 'bos_token' });
  if (flag('add_eos_token', false)) parts.push({ token: tokens.eos ?? '', key: 'eos_token' });
  const ids: Array<[string, number]> = [];
  for (const p of parts) {
    const what = p.key === 'bos_token' ? 'add_bos_token' : 'add_eos_token';
    if (p.token === '') throw new InputError(`${what} is true but there is no ${p.key}; name the token or set ${what} false`, { file: configFile });
    const id = idOf(p.token);
    if (id === undefined) throw new InputError(`${what} is true but its ${p.key} ${JSON.stringify(p.token)} has no id in tokenizer.json`, { file: configFile });
    ids.push([p.token, id]);
  }
  const piece = (p: { token: string }, typeId: number) => ({ SpecialToken: { id: p.token, type_id: typeId } });
  const [head, tail] = [parts.filter((p) => p.key === 'bos_token'), parts.filter((p) => p.key === 'eos_token')];
  const sequence = (id: 'A' | 'B', typeId: number) => [...head.map((p) => piece(p, typeId)), { Sequence: { id, type_id: typeId } }, ...tail.map((p) => piece(p, typeId))];
  const processor = {
    type: 'TemplateProcessing',
    single: sequence('A', 0),
    pair: [...sequence('A', 0), ...sequence('B', 1)],
    special_tokens: Object.fromEntries(ids.map(([token, id]) => [token, { id: token, ids: [id], tokens: [token] }])),
  };
  return { processor, ids };
}

/**
 * A token's id from tokenizer.json's own tables, as the library looks it up: the added tokens first, then the
 * model's vocabulary (an id map, or Unigram's list of [piece, score]). Two added entries of one text with two ids
 * are refused: which one a library takes is not something to guess.
 */
function idInJson(json: Record<string, unknown>, token: string, file: string): number | undefined {
  const added = (json.added_tokens ?? []) as Array<{ id: number; content: string }>;
  const ids = new Set(added.filter((t) => t.content === token).map((t) => t.id));
  if (ids.size > 1) throw new InputError(`added_tokens gives ${JSON.stringify(token)} ${ids.size} ids (${[...ids].join(', ')})`, { file });
  if (ids.size === 1) return [...ids][0];
  const vocab = (json.model as { vocab: unknown }).vocab;
  if (Array.isArray(vocab)) {
    const i = vocab.findIndex((e) => Array.isArray(e) && e[0] === token);
    return i < 0 ? undefined : i;
  }
  return Object.hasOwn(vocab as object, token) ? (vocab as Record<string, number>)[token] : undefined;
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
  try {
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
  } catch (e) {
    tk.close(); // a refused tokenizer leaves no worker behind
    throw e;
  }
}
