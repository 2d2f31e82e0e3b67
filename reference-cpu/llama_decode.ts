/**
 * FP32 reference generation for Llama with a K/V cache: the operators of reference-cpu/llama.ts, applied
 * to the new tokens only, with attention over cached FP32 keys and values. Weights are dequantized exactly
 * once at start (dequantLinear) and kept; the head is read in row chunks each step, as LlamaReference does.
 *
 * cachedAttention below is ops.causalAttention's loop with the key range read from the cache: the same
 * float64 sums in the same order, so cached decoding reproduces a full recompute (the test allows 1e-5
 * relative; in practice the bits agree). Batching is ragged, as on the device path: one cache region per
 * sequence, no padding.
 */
import type { Decoder } from '../harness/contracts/decoder.js';
import { LLAMA_LINEARS, type LlamaCheckpoint, llamaInvFreq } from '../harness/models/llama.js';
import { dequantLinear } from './dequant.js';
import { decodeStored, headLogits } from './llama.js';
import { add, addRowBias, matmul, rmsnorm, rope, softmaxInPlace, swiglu } from './ops.js';

type LinearKey = (typeof LLAMA_LINEARS)[number];

interface F32Layer {
  input_layernorm: Float32Array;
  post_attention_layernorm: Float32Array;
  linears: Record<LinearKey, Float32Array>;
  /** attention_bias / mlp_bias: each projection's bias, decoded once; null: none */
  bias: Record<LinearKey, Float32Array | null>;
}

/**
 * Attention of `rows` new queries q [rows, Hq, D] at positions pos[r] of cache sequences seq[r] over the
 * cached K [Bc, cap, Hkv, D] / V [Bc, cap, Hkv, D]: key s visible iff s ≤ pos[r]. causalAttention's order.
 */
export function cachedAttention(
  q: Float32Array, kc: Float32Array, vc: Float32Array, rows: number, seq: readonly number[], pos: readonly number[],
  cap: number, Hq: number, Hkv: number, D: number, scale: number,
): Float32Array {
  const out = new Float32Array(rows * Hq * D);
  const group = Hq / Hkv;
  for (let r = 0; r < rows; r++) {
    const t = pos[r];
    const base = seq[r] * cap;
    for (let h = 0; h < Hq; h++) {
      const kvh = Math.floor(h / group);
      const p = new Float64Array(t + 1);
      for (let s = 0; s <= t; s++) {
        let dot = 0;
        for (let d = 0; d < D; d++) dot += q[(r * Hq + h) * D + d] * kc[((base + s) * Hkv + kvh) * D + d];
        p[s] = dot * scale;
      }
      softmaxInPlace(p);
      for (let d = 0; d < D; d++) {
        let acc = 0;
        for (let s = 0; s <= t; s++) acc += p[s] * vc[((base + s) * Hkv + kvh) * D + d];
        out[(r * Hq + h) * D + d] = acc;
      }
    }
  }
  return out;
}

export class LlamaReferenceDecoder implements Decoder {
  readonly vocab: number;
  private readonly layers: F32Layer[] = [];
  private readonly embed: (tokens: number[]) => Float32Array;
  private readonly norm: Float32Array;
  private k: Float32Array[] = [];
  private v: Float32Array[] = [];
  private cap = 0;
  private lens = new Int32Array(0);

  constructor(private readonly m: LlamaCheckpoint) {
    this.vocab = m.cfg.vocab;
    for (let L = 0; L < m.cfg.layers; L++) {
      const w = m.loadLayer(L);
      const linears = {} as Record<LinearKey, Float32Array>;
      const bias = {} as Record<LinearKey, Float32Array | null>;
      for (const key of LLAMA_LINEARS) {
        linears[key] = dequantLinear(w[key]);
        bias[key] = w.bias[key] !== null ? decodeStored(w.bias[key]) : null;
      }
      this.layers.push({ input_layernorm: decodeStored(w.input_layernorm), post_attention_layernorm: decodeStored(w.post_attention_layernorm), linears, bias });
    }
    this.embed = (tokens) => decodeStored(m.embedRows(tokens));
    this.norm = decodeStored(m.finalNorm());
  }

  prefill(prompts: readonly (readonly number[])[], capacity: number): Float32Array[] {
    const { layers, kvHeads, headDim } = this.m.cfg;
    if (prompts.length === 0 || prompts.some((p) => p.length === 0)) throw new Error('prefill needs at least one non-empty prompt');
    if (capacity < Math.max(...prompts.map((p) => p.length))) throw new Error(`capacity ${capacity} is below the longest prompt`);
    this.cap = capacity;
    this.lens = new Int32Array(prompts.length);
    const size = prompts.length * capacity * kvHeads * headDim;
    this.k = Array.from({ length: layers }, () => new Float32Array(size));
    this.v = Array.from({ length: layers }, () => new Float32Array(size));
    return this.advance(prompts.map((tokens, seq) => ({ seq, tokens })));
  }

  step(seqs: readonly number[], tokens: readonly number[]): Float32Array[] {
    if (seqs.length !== tokens.length) throw new Error(`step: ${seqs.length} sequences but ${tokens.length} tokens`);
    return this.advance(seqs.map((seq, i) => ({ seq, tokens: [tokens[i]] })));
  }

  private advance(entries: Array<{ seq: number; tokens: readonly number[] }>): Float32Array[] {
    const { hidden: D, heads: H, kvHeads: KV, headDim: hd, eps, vocab: V } = this.m.cfg;
    const rowSeq: number[] = [];
    const rowPos: number[] = [];
    const tokens: number[] = [];
    for (const e of entries) {
      if (e.seq < 0 || e.seq >= this.lens.length) throw new Error(`sequence ${e.seq} is not in the batch`);
      if (this.lens[e.seq] + e.tokens.length > this.cap) throw new Error(`sequence ${e.seq} would exceed the cache capacity ${this.cap}`);
      e.tokens.forEach((t, i) => {
        tokens.push(t);
        rowSeq.push(e.seq);
        rowPos.push(this.lens[e.seq] + i);
      });
    }
    const R = tokens.length;
    const invFreq = llamaInvFreq(this.m.cfg);
    const kvRow = KV * hd;
    let x = this.embed(tokens);
    for (let L = 0; L < this.layers.length; L++) {
      const lw = this.layers[L];
      const shapes = this.m.linearShapes();
      const lin = (inp: Float32Array, key: LinearKey) => addRowBias(matmul(inp, R, shapes[key][1], lw.linears[key], shapes[key][0]), R, lw.bias[key]);
      const n1 = rmsnorm(x, R, D, lw.input_layernorm, eps);
      const q = rope(lin(n1, 'q_proj'), R, H, hd, rowPos, invFreq, 'half');
      const k = rope(lin(n1, 'k_proj'), R, KV, hd, rowPos, invFreq, 'half');
      const v = lin(n1, 'v_proj');
      for (let r = 0; r < R; r++) {
        const at = (rowSeq[r] * this.cap + rowPos[r]) * kvRow;
        this.k[L].set(k.subarray(r * kvRow, (r + 1) * kvRow), at);
        this.v[L].set(v.subarray(r * kvRow, (r + 1) * kvRow), at);
      }
      const att = cachedAttention(q, this.k[L], this.v[L], R, rowSeq, rowPos, this.cap, H, KV, hd, 1 / Math.sqrt(hd));
      const h = add(x, lin(att, 'o_proj'));
      const n2 = rmsnorm(h, R, D, lw.post_attention_layernorm, eps);
      const mlp = lin(swiglu(lin(n2, 'gate_proj'), lin(n2, 'up_proj')), 'down_proj');
      x = add(h, mlp);
    }
    for (const e of entries) this.lens[e.seq] += e.tokens.length;

    const E = entries.length;
    const last = new Float32Array(E * D);
    let r = 0;
    entries.forEach((e, i) => {
      r += e.tokens.length;
      last.set(x.subarray((r - 1) * D, r * D), i * D);
    });
    const normed = rmsnorm(last, E, D, this.norm, eps);
    const all = headLogits(this.m, normed, E, D, V);
    return entries.map((_, i) => all.slice(i * V, (i + 1) * V));
  }
}
