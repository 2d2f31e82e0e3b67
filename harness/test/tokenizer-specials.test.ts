/**
 * The special tokens added on encode where tokenizer_config.json decides them, as transformers does
 * (LlamaTokenizerFast.update_post_processor; transformers 5's TokenizersBackend for any class naming
 * add_bos_token / add_eos_token): DeepSeek's tokenizers ship a ByteLevel post-processor and `add_bos_token: true`,
 * and a prompt read from tokenizer.json alone lacked the BOS every serving stack puts first. Expected ids come from
 * the fixtures' own BPE encoder (fixtures/bpe.ts, a second implementation), with the template's tokens around them.
 */
import { describe, expect, it } from 'vitest';
import { InputError } from '../errors.js';
import { TextTokenizer } from '../io/tokenizer.js';
import { BOS_ID, BOS_TOKEN, BpeEncoder, EOS_ID, EOS_TOKEN, tinyBpe, tokenizerJson } from '../../fixtures/bpe.js';

const TEXT = 'The quick brown fox';
const FILE = '/models/m/tokenizer.json';
const plain = new BpeEncoder(tinyBpe()).encode(TEXT, false);

/** tokenizer.json as DeepSeek ships it: a ByteLevel post-processor that adds no token */
function byteLevelJson(): Record<string, unknown> {
  return { ...tokenizerJson(tinyBpe()), post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true } };
}
const specials = { bos_token: BOS_TOKEN, eos_token: EOS_TOKEN };
const encode = (json: Record<string, unknown>, config: Record<string, unknown>, addSpecialTokens = true) =>
  TextTokenizer.fromJson(json, config, FILE).encode(TEXT, { addSpecialTokens });

describe('special tokens from tokenizer_config.json', () => {
  it('DeepSeek-style files: LlamaTokenizerFast with add_bos_token true puts BOS first; the class alone does too', () => {
    expect(plain.length).toBeGreaterThan(1);
    expect(encode(byteLevelJson(), { tokenizer_class: 'LlamaTokenizerFast', add_bos_token: true, add_eos_token: false, ...specials })).toEqual([BOS_ID, ...plain]);
    expect(encode(byteLevelJson(), { tokenizer_class: 'LlamaTokenizerFast', ...specials })).toEqual([BOS_ID, ...plain]);
    // a BOS given as an AddedToken object, as DeepSeek's tokenizer_config.json gives it
    const added = { bos_token: { __type: 'AddedToken', content: BOS_TOKEN, lstrip: false, normalized: true, rstrip: false, single_word: false } };
    expect(encode(byteLevelJson(), { tokenizer_class: 'LlamaTokenizerFast', add_bos_token: true, ...added })).toEqual([BOS_ID, ...plain]);
    // encode without special tokens adds none
    expect(encode(byteLevelJson(), { tokenizer_class: 'LlamaTokenizerFast', add_bos_token: true, ...specials }, false)).toEqual(plain);
  });

  it('the fields replace tokenizer.json\'s post-processor whatever the class; without them and outside the Llama class it stands', () => {
    expect(encode(byteLevelJson(), { tokenizer_class: 'PreTrainedTokenizerFast', add_bos_token: false, add_eos_token: true, ...specials })).toEqual([...plain, EOS_ID]);
    expect(encode(byteLevelJson(), { add_bos_token: true, add_eos_token: true, ...specials })).toEqual([BOS_ID, ...plain, EOS_ID]);
    expect(encode(byteLevelJson(), { tokenizer_class: 'PreTrainedTokenizerFast', ...specials })).toEqual(plain);
    // the fixtures' own files (Llama-3-like: a BOS template in tokenizer.json, PreTrainedTokenizerFast): unchanged
    expect(encode(tokenizerJson(tinyBpe()), { tokenizer_class: 'PreTrainedTokenizerFast', ...specials })).toEqual([BOS_ID, ...plain]);
    // a Llama class naming no BOS in tokenizer_config.json (older conversions keep it in special_tokens_map.json):
    // tokenizer.json's post-processor stands
    expect(encode(tokenizerJson(tinyBpe()), { tokenizer_class: 'LlamaTokenizer', bos_token: '', eos_token: EOS_TOKEN })).toEqual([BOS_ID, ...plain]);
    expect(encode(byteLevelJson(), { tokenizer_class: 'LlamaTokenizerFast' })).toEqual(plain);
    // add_bos_token false on a Llama class removes the BOS a template in tokenizer.json would add (transformers replaces it)
    expect(encode(tokenizerJson(tinyBpe()), { tokenizer_class: 'LlamaTokenizerFast', add_bos_token: false, ...specials })).toEqual(plain);
  });

  it('refuses what it cannot read as transformers does: a non-boolean flag, a missing or unknown BOS, a token with two ids', () => {
    const refused = (json: Record<string, unknown>, config: Record<string, unknown>, says: RegExp) => {
      let err: unknown;
      try {
        TextTokenizer.fromJson(json, config, FILE);
      } catch (e) {
        err = e;
      }
      expect(err, JSON.stringify(config)).toBeInstanceOf(InputError);
      expect((err as Error).message).toMatch(says);
    };
    refused(byteLevelJson(), { add_bos_token: 'yes', ...specials }, /tokenizer_config\.json: add_bos_token "yes" is not true or false/);
    refused(byteLevelJson(), { tokenizer_class: 'LlamaTokenizerFast', add_bos_token: true, eos_token: EOS_TOKEN }, /tokenizer_config\.json: add_bos_token is true but there is no bos_token/);
    refused(byteLevelJson(), { add_bos_token: true, bos_token: '<s>' }, /add_bos_token is true but its bos_token "<s>" has no id in tokenizer\.json/);
    const twice = byteLevelJson();
    twice.added_tokens = [...(twice.added_tokens as object[]), { id: 7, content: BOS_TOKEN, special: true }];
    refused(twice, { add_bos_token: true, ...specials }, /tokenizer\.json: added_tokens gives "<\|begin_of_text\|>" 2 ids \(0, 7\)/);
  });
});
