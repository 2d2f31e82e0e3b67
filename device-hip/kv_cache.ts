/**
 * The FP16 K/V cache bookkeeping the device decoders share (Llama, gpt-oss): one region per sequence and
 * layer, ragged batches (no padding), new rows written at their positions, then attention over the cache
 * through attentionDecodeF16 (one call when every entry adds the same number of tokens, else one per entry).
 * That kernel equals attentionF16's rows at a position offset bit for bit (window and sinks included:
 * generate.test.ts), so a decoder built on this reproduces the diff's full recompute.
 *
 * A full-attention layer holds `capacity` rows. A sliding-window layer (gpt-oss's, window W) holds a ring of
 * W + RING_CHUNK − 1 rows: position p lives in slot p mod that size (ld_ring_slot), and an advance of more than
 * RING_CHUNK tokens (a prefill) is attended RING_CHUNK tokens at a time, so every key a query sees is still in
 * the ring when it attends. Keys are visited in position order either way, so the bits are the recompute's.
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

/** Tokens of one ring-layer attention call: a sliding layer's ring is window + RING_CHUNK − 1 rows. */
export const RING_CHUNK = 64;

export class KvCacheF16 {
  private k: Uint16Array[] = [];
  private v: Uint16Array[] = [];
  private cap = 0;
  /** rows held per sequence, per layer: `cap`, or a sliding layer's ring */
  private rowsOf: number[] = [];
  private lens = new Int32Array(0);

  constructor(
    private readonly layers: number,
    /** kvHeads × headDim */
    private readonly kvRow: number,
    /** per layer: its sliding window (0: full attention, every row kept); absent: every layer full */
    private readonly windows: readonly number[] = [],
    /** tokens per ring-layer attention call (RING_CHUNK; tests shrink it to make the ring wrap on a tiny model) */
    private readonly ringChunk = RING_CHUNK,
  ) {
    if (!Number.isInteger(ringChunk) || ringChunk < 1) throw new Error(`ring chunk ${ringChunk} must be a positive integer`);
  }

  /** Forget everything; room for `capacity` tokens per sequence for a batch of `batch`. */
  reset(batch: number, capacity: number): void {
    this.cap = capacity;
    this.lens = new Int32Array(batch);
    this.rowsOf = Array.from({ length: this.layers }, (_, L) => ((this.windows[L] ?? 0) > 0 ? Math.min(capacity, this.windows[L] + this.ringChunk - 1) : capacity));
    this.k = this.rowsOf.map((n) => new Uint16Array(batch * n * this.kvRow));
    this.v = this.rowsOf.map((n) => new Uint16Array(batch * n * this.kvRow));
  }

  /** Rows held per sequence in layer L (a ring's size on a sliding layer). */
  rowsHeld(L: number): number {
    return this.rowsOf[L];
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
    if (window !== (this.windows[L] ?? 0)) throw new Error(`layer ${L}: attention window ${window} but the cache was laid out for ${this.windows[L] ?? 0}`);
    const cap = this.rowsOf[L];
    const ring = cap < this.cap;
    // one call for the whole batch when every entry adds the same tokens and (in a ring) no more than a chunk
    if (entries.every((e) => e.tokens.length === entries[0].tokens.length) && (!ring || entries[0].tokens.length <= this.ringChunk)) {
      this.write(L, rows, 0, rows.tokens.length, k, v);
      // rows are entry-major, so q is already [B, Tq, H, D]
      const slot = Int32Array.from(entries, (e) => e.seq);
      const start = Int32Array.from(entries, (e) => this.lens[e.seq]);
      return K.attentionDecodeF16(q, this.k[L], this.v[L], entries.length, entries[0].tokens.length, this.lens.length, cap, slot, start, Hq, Hkv, D, D, scale, window, sinks);
    }
    const att = new Uint16Array(rows.tokens.length * Hq * D);
    let r0 = 0;
    for (const e of entries) {
      const step = ring ? this.ringChunk : e.tokens.length;
      for (let t0 = 0; t0 < e.tokens.length; t0 += step) {
        const T = Math.min(step, e.tokens.length - t0);
        const a = r0 + t0;
        this.write(L, rows, a, a + T, k, v);
        const qe = q.subarray(a * Hq * D, (a + T) * Hq * D);
        att.set(K.attentionDecodeF16(qe, this.k[L], this.v[L], 1, T, this.lens.length, cap, Int32Array.of(e.seq), Int32Array.of(this.lens[e.seq] + t0), Hq, Hkv, D, D, scale, window, sinks), a * Hq * D);
      }
      r0 += e.tokens.length;
    }
    return att;
  }

  /** Rows [r0, r1) of this advance into layer L's cache, each at its position's slot (mod the ring). */
  private write(L: number, rows: DecodeRows, r0: number, r1: number, k: Uint16Array, v: Uint16Array): void {
    const { kvRow } = this;
    const cap = this.rowsOf[L];
    for (let r = r0; r < r1; r++) {
      const at = (rows.rowSeq[r] * cap + (rows.rowPos[r] % cap)) * kvRow;
      this.k[L].set(k.subarray(r * kvRow, (r + 1) * kvRow), at);
      this.v[L].set(v.subarray(r * kvRow, (r + 1) * kvRow), at);
    }
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

