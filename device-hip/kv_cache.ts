/**
 * The FP16 K/V cache bookkeeping the device decoders share (Llama, gpt-oss): one region of `capacity` rows per
 * sequence and layer, ragged batches (no padding), new rows written at their positions, then attention over
 * the cache through attentionDecodeF16 (one call when every entry adds the same number of tokens, else one
 * per entry). That kernel equals attentionF16's rows at a position offset bit for bit (window and sinks
 * included: generate.test.ts), so a decoder built on this reproduces the diff's full recompute.
 */
import type { Decoder } from '../harness/contracts/decoder.js';
import type { DecodeNative } from './binding.js';

export interface DecodeEntry {
  seq: number;
  tokens: readonly number[];
}

/** The rows of one advance: every entry's new tokens in order, with their sequence and position. */
export interface DecodeRows {
  tokens: number[];
  rowSeq: number[];
  rowPos: number[];
}

export class KvCacheF16 {
  private k: Uint16Array[] = [];
  private v: Uint16Array[] = [];
  private cap = 0;
  private lens = new Int32Array(0);

  constructor(
    private readonly layers: number,
    /** kvHeads × headDim */
    private readonly kvRow: number,
  ) {}

  /** Forget everything; room for `capacity` tokens per sequence for a batch of `batch`. */
  reset(batch: number, capacity: number): void {
    this.cap = capacity;
    this.lens = new Int32Array(batch);
    const size = batch * capacity * this.kvRow;
    this.k = Array.from({ length: this.layers }, () => new Uint16Array(size));
    this.v = Array.from({ length: this.layers }, () => new Uint16Array(size));
  }

  /** The rows of `entries` (checked: sequence in the batch, room left, token ids in the vocabulary). */
  rows(entries: readonly DecodeEntry[], vocab: number): DecodeRows {
    const out: DecodeRows = { tokens: [], rowSeq: [], rowPos: [] };
    for (const e of entries) {
      if (e.seq < 0 || e.seq >= this.lens.length) throw new Error(`sequence ${e.seq} is not in the batch`);
      if (this.lens[e.seq] + e.tokens.length > this.cap) throw new Error(`sequence ${e.seq} would exceed the cache capacity ${this.cap}`);
      e.tokens.forEach((t, i) => {
        if (!Number.isInteger(t) || t < 0 || t >= vocab) throw new Error(`token id ${t} is outside the vocabulary [0, ${vocab})`);
        out.tokens.push(t);
        out.rowSeq.push(e.seq);
        out.rowPos.push(this.lens[e.seq] + i);
      });
    }
    return out;
  }

  /**
   * Layer L: append the new K/V rows [R, kvHeads, headDim] at their positions, then attend with q [R, Hq, D]
   * over the cache (new rows included); `window` > 0 limits keys to the last `window` positions, `sinks` adds
   * a per-head logit to each softmax denominator (attentionDecodeF16).
   */
  attend(K: DecodeNative, L: number, rows: DecodeRows, entries: readonly DecodeEntry[], q: Uint16Array, k: Uint16Array, v: Uint16Array, Hq: number, Hkv: number, D: number, scale: number, window: number, sinks: Float32Array | null): Uint16Array {
    const { kvRow } = this;
    const R = rows.tokens.length;
    for (let r = 0; r < R; r++) {
      const at = (rows.rowSeq[r] * this.cap + rows.rowPos[r]) * kvRow;
      this.k[L].set(k.subarray(r * kvRow, (r + 1) * kvRow), at);
      this.v[L].set(v.subarray(r * kvRow, (r + 1) * kvRow), at);
    }
    const Bc = this.lens.length;
    if (entries.every((e) => e.tokens.length === entries[0].tokens.length)) {
      // one call for the whole batch: rows are entry-major, so q is already [B, Tq, H, D]
      const slot = Int32Array.from(entries, (e) => e.seq);
      const start = Int32Array.from(entries, (e) => this.lens[e.seq]);
      return K.attentionDecodeF16(q, this.k[L], this.v[L], entries.length, entries[0].tokens.length, Bc, this.cap, slot, start, Hq, Hkv, D, D, scale, window, sinks);
    }
    const att = new Uint16Array(R * Hq * D);
    let r0 = 0;
    for (const e of entries) {
      const T = e.tokens.length;
      const qe = q.subarray(r0 * Hq * D, (r0 + T) * Hq * D);
      att.set(K.attentionDecodeF16(qe, this.k[L], this.v[L], 1, T, Bc, this.cap, Int32Array.of(e.seq), Int32Array.of(this.lens[e.seq]), Hq, Hkv, D, D, scale, window, sinks), r0 * Hq * D);
      r0 += T;
    }
    return att;
  }

  /** After the last layer: the entries' tokens are in the cache. */
  commit(entries: readonly DecodeEntry[]): void {
    for (const e of entries) this.lens[e.seq] += e.tokens.length;
  }

  /** Tokens held per sequence. */
  lengths(): number[] {
    return [...this.lens];
  }
}

/** Each entry's last row of x [R, D] (the only rows the head reads), [entries, D]. */
export function lastRows(x: Uint16Array, D: number, entries: readonly DecodeEntry[]): Uint16Array {
  const last = new Uint16Array(entries.length * D);
  let r = 0;
  entries.forEach((e, i) => {
    r += e.tokens.length;
    last.set(x.subarray((r - 1) * D, r * D), i * D);
  });
  return last;
}

/**
 * A device decoder over a KvCacheF16: prefill and step turn into entries (a sequence and its new tokens),
 * which the architecture's `advance` runs through its layers; the checks of both are here once.
 */
export abstract class KvCacheDecoder implements Decoder {
  abstract readonly vocab: number;
  protected abstract readonly cache: KvCacheF16;

  prefill(prompts: readonly (readonly number[])[], capacity: number): Float32Array[] {
    if (prompts.length === 0 || prompts.some((p) => p.length === 0)) throw new Error('prefill needs at least one non-empty prompt');
    const longest = Math.max(...prompts.map((p) => p.length));
    if (capacity < longest) throw new Error(`capacity ${capacity} is below the longest prompt (${longest} tokens)`);
    this.cache.reset(prompts.length, capacity);
    return this.advance(prompts.map((tokens, seq) => ({ seq, tokens })));
  }

  step(seqs: readonly number[], tokens: readonly number[]): Float32Array[] {
    if (seqs.length !== tokens.length) throw new Error(`step: ${seqs.length} sequences but ${tokens.length} tokens`);
    return this.advance(seqs.map((seq, i) => ({ seq, tokens: [tokens[i]] })));
  }

  /** Tokens held per sequence (tests and benchmarks). */
  lengths(): number[] {
    return this.cache.lengths();
  }

  /** Run each entry's new tokens through the model, appending to its cache; logits of each entry's last token. */
  protected abstract advance(entries: DecodeEntry[]): Float32Array[];
}

