/**
 * DeepSeek-V4 incremental decoding on the device path (spec §4.8): per sequence and layer a ring of the last
 * `window` raw kv rows, the compressor states (per-token K and Z rows of the unfinished block and of the
 * previous block — the ratio-4 overlap variant pools the previous block's first-half channels), the emitted
 * compressed entries (normed and rotated at b·r), and on ratio-4 layers the indexer's own compressor state and
 * entries. Each step runs only the new token of every active sequence through the layers.
 *
 * It computes exactly what device-hip/deepseek_v4.ts computes (the path the acceptance gate validated), with
 * the same kernels and arguments, so a cached step's logits equal a DeepseekV4Device full recompute bit for
 * bit (harness/test/generate-deepseek.test.ts):
 *   - hc_pre/hc_post, norms, RoPE, GEMMs, router, SwiGLU, the expert combine are row-local kernels (a row's
 *     bits do not depend on the other rows), so the new rows run alone, sequences stacked;
 *   - a compressed entry is emitted when its block completes ((pos+1) % r == 0) by compressPoolF16 over the
 *     cached K/Z rows of that block (and the previous one for overlap), exactly the pooling of the full path;
 *   - attention is sparseAttentionF16 with one query, fed so that the candidates come in the full path's
 *     order: the oldest window row is the kernel's raw row, the rest of the window and then the compressed
 *     candidates are "compressed" rows listed in order (the per-candidate arithmetic does not depend on which
 *     array a row comes from);
 *   - indexer picks: with at most index_topk visible entries they are all of them (what the kernel returns);
 *     otherwise indexerTopkF16 over the query's row alone with the layer's ratio and t0 = its position: the
 *     full path's call (indexer.ts, rows 0..S−1) restricted to that row — a row's scores and picks depend
 *     only on its own q, w and position, and it sees ⌊(pos+1)/r⌋ = B entries, all of them. O(B·nh·hd) per
 *     step (before t0 existed this scored B padded rows with ratio 1 to reach the last one: O(B²·nh·hd)).
 *
 * Prefill runs every position of every prompt as the rows of passes of at most PREFILL_ROWS rows (bounded
 * activations): the row-local kernels take a pass's rows at once (one GEMM per weight, each routed expert
 * once for all its rows), and the attention sublayer walks
 * the rows in order, pushing a row's kv and compressor rows into its sequence's state before that row
 * attends, so the row at position t sees exactly the state after t — what a step at t would see. Its
 * indexer calls are therefore the step's one-row calls too (O(B) per row, no padding).
 *
 * With keepLayers the head is also held, in F16 row chunks converted once (the diff path streams it per call;
 * a generation step calls it every token, and at real width converting 129,280 × 4096 BF16 rows costs
 * seconds); the chunks are the ones DeepseekV4Device.logits converts, so the logits keep their bits.
 */
import { act } from '../harness/formats/tensor.js';
import type { Decoder } from '../harness/contracts/decoder.js';
import type { DeepseekV4Attention, DeepseekV4Compressor, DeepseekV4LayerWeights, DeepseekV4Weights } from '../harness/models/deepseek_v4.js';
import type { StoredTensor } from '../harness/formats/linear.js';
import { type DeepseekNative, type DeviceNative, loadDeepseekNative } from './binding.js';
import { DeepseekV4Device } from './deepseek_v4.js';
import { groupedWoA } from './deepseek_v4/attention.js';
import { expandStreams16, hcPost, hcPre } from './deepseek_v4/hc.js';
import { Kit } from './deepseek_v4/kit.js';
import { moe } from './deepseek_v4/moe.js';
import { layerInvFreq, ropeTable } from './deepseek_v4/rope.js';
import { LinearCache, storedToF16 } from './linear.js';

/**
 * `m` with its head held: forEachHeadChunk converts each chunk to F16 on the first call and hands out the held
 * chunks after (Kit.vec16 passes F16 through), for paths that call the head every token.
 */
export function withHeldHead(m: DeepseekV4Weights, N: DeviceNative): DeepseekV4Weights {
  const held = new Map<number, Array<{ r0: number; chunk: StoredTensor }>>();
  return {
    cfg: m.cfg,
    loadLayer: (L) => m.loadLayer(L),
    head: () => m.head(),
    embedRows: (tokens) => m.embedRows(tokens),
    hashExperts: (w, token) => m.hashExperts(w, token),
    forEachHeadChunk: (rows, fn) => {
      let chunks = held.get(rows);
      if (chunks === undefined) {
        const c: Array<{ r0: number; chunk: StoredTensor }> = [];
        m.forEachHeadChunk(rows, (r0, chunk) => {
          const h = storedToF16(N, chunk);
          c.push({ r0, chunk: { ...chunk, dtype: 'F16', bytes: new Uint8Array(h.buffer, h.byteOffset, h.byteLength) } });
        });
        held.set(rows, (chunks = c));
      }
      for (const { r0, chunk } of chunks) fn(r0, chunk);
    },
  };
}

/** A compressor's decode state: cached K/Z rows (f32, c·d_c wide) of the previous and the current block, and its entries. */
class CompressorState {
  /** rows of the previous finished block (overlap only), then of the unfinished one: [n, c·d_c] */
  private K: Float32Array;
  private Z: Float32Array;
  /** rows held: prevRows + curRows */
  private prevRows = 0;
  private curRows = 0;
  /** entries f16 [count, d_c] */
  entries: Uint16Array;
  count = 0;
  private readonly w: number;
  private readonly ratio: number;
  private readonly headDim: number;
  private readonly overlap: boolean;

  /**
   * Only the compressor's shape is kept: its weights (ape, norm) come with each push from the layer being run,
   * so a state does not pin a layer's tensors when layers are re-read every step.
   */
  constructor(c: DeepseekV4Compressor, capacity: number) {
    this.ratio = c.ratio;
    this.headDim = c.headDim;
    this.overlap = c.overlap;
    this.w = (c.overlap ? 2 : 1) * c.headDim;
    this.K = new Float32Array(2 * c.ratio * this.w);
    this.Z = new Float32Array(2 * c.ratio * this.w);
    this.entries = new Uint16Array(Math.max(1, Math.floor(capacity / c.ratio)) * c.headDim);
  }

  /** Append token `pos`'s K/Z rows; when its block completes, emit entry pos//r as the full path does. */
  push(kit: Kit, c: DeepseekV4Compressor, pos: number, k: Float32Array, z: Float32Array, invFreq: Float64Array): void {
    const { ratio: r, headDim: dc, overlap } = this;
    const { w } = this;
    const at = (this.prevRows + this.curRows) * w;
    this.K.set(k, at);
    this.Z.set(z, at);
    this.curRows++;
    if ((pos + 1) % r !== 0) return;
    const b = (pos + 1) / r - 1;
    const T = this.prevRows + this.curRows;
    const pooled = kit.K.compressPoolF16(this.K.subarray(0, T * w), this.Z.subarray(0, T * w), kit.f32(c.ape), T, r, dc, overlap);
    const last = pooled.subarray((T / r - 1) * dc, (T / r) * dc);
    const normed = kit.N.rmsnormF16(last, kit.vec16(c.norm), 1, dc, kit.cfg.normEps);
    const R = kit.cfg.ropeDim;
    const tab = ropeTable([b * r], invFreq);
    const e = kit.N.ropeF16(normed, tab.cos, tab.sin, 1, 1, dc, dc - R, R, true);
    if ((this.count + 1) * dc > this.entries.length) {
      const grown = new Uint16Array(this.entries.length * 2);
      grown.set(this.entries);
      this.entries = grown;
    }
    this.entries.set(e, this.count * dc);
    this.count++;
    if (overlap) {
      // the finished block becomes the previous one
      this.K.copyWithin(0, this.prevRows * w, T * w);
      this.Z.copyWithin(0, this.prevRows * w, T * w);
      this.prevRows = r;
    }
    this.curRows = 0;
  }
}

/** One sequence's state in one layer. */
interface LayerState {
  /** the last `window` raw kv rows, oldest first: f16 [n, head_dim] */
  ring: Uint16Array[];
  comp: CompressorState | null;
  index: CompressorState | null;
}

interface SeqState {
  /** tokens fed so far (the next position) */
  len: number;
  layers: LayerState[];
}

/** Prefill rows per pass by default: at real width (hidden 4096, 4 streams, 64 heads × 512) ~1 GiB of activations. */
export const PREFILL_ROWS = 512;

export class DeepseekV4DeviceDecoder implements Decoder {
  readonly vocab: number;
  private readonly linears: LinearCache;
  private readonly dev: DeepseekV4Device;
  private readonly kept = new Map<number, DeepseekV4LayerWeights>();
  private seqs: SeqState[] = [];
  private capacity = 0;

  constructor(
    private readonly m: DeepseekV4Weights,
    private readonly N: DeviceNative,
    private readonly K: DeepseekNative = loadDeepseekNative(),
    /** keep the layers' weights between steps (else re-read each step: slow, bounded memory) */
    private readonly keepLayers = true,
    /** prefill rows per pass: bounds the activations (q, o, streams, MoE rows) whatever the prompts' length */
    private readonly prefillRows = PREFILL_ROWS,
  ) {
    if (!(Number.isInteger(prefillRows) && prefillRows > 0)) throw new Error(`prefillRows must be a positive integer, got ${prefillRows}`);
    this.vocab = m.cfg.vocab;
    this.linears = new LinearCache(N);
    this.dev = new DeepseekV4Device(keepLayers ? withHeldHead(m, N) : m, N, null, K);
  }

  /** Tokens held per sequence (prompt + fed tokens). */
  lengths(): number[] {
    return this.seqs.map((s) => s.len);
  }

  prefill(prompts: readonly (readonly number[])[], capacity: number): Float32Array[] {
    if (prompts.length === 0 || prompts.some((p) => p.length === 0)) throw new Error('prefill needs at least one non-empty prompt');
    this.capacity = Math.max(capacity, ...prompts.map((p) => p.length));
    this.seqs = this.newSeqs(prompts.length);
    // One row per prompt position, prompt after prompt; logits for each prompt's last position only. The rows
    // go in passes of at most prefillRows, in order: every kernel is row-local or walks the rows in order, and
    // a pass starts from the states the previous one left, so the bits do not depend on the pass size.
    const seqOf = prompts.flatMap((p, i) => p.map(() => i));
    const toks = prompts.flat();
    const want = prompts.flatMap((p) => p.map((_, j) => j === p.length - 1));
    const out: Float32Array[] = [];
    for (let r0 = 0; r0 < toks.length; r0 += this.prefillRows) {
      const r1 = Math.min(toks.length, r0 + this.prefillRows);
      for (const l of this.run(seqOf.slice(r0, r1), toks.slice(r0, r1), want.slice(r0, r1))) if (l !== null) out.push(l);
    }
    return out;
  }

  step(seqs: readonly number[], tokens: readonly number[]): Float32Array[] {
    if (seqs.length !== tokens.length) throw new Error(`step: ${seqs.length} sequences but ${tokens.length} tokens`);
    seqs.forEach((s) => {
      if (!Number.isInteger(s) || s < 0 || s >= this.seqs.length) throw new Error(`step: sequence ${s} is not in the prefilled batch of ${this.seqs.length}`);
    });
    if (new Set(seqs).size !== seqs.length) throw new Error('step: a sequence appears twice');
    return this.run(seqs, tokens, seqs.map(() => true)) as Float32Array[];
  }

  /** Empty states for `count` sequences (each layer read once for all of them: it may not be kept). */
  private newSeqs(count: number): SeqState[] {
    const seqs: SeqState[] = Array.from({ length: count }, () => ({ len: 0, layers: [] }));
    for (let L = 0; L < this.m.cfg.layers; L++) {
      const { compressor, indexer } = this.layer(L).attn;
      for (const s of seqs) {
        s.layers.push({
          ring: [],
          comp: compressor !== null ? new CompressorState(compressor, this.capacity) : null,
          index: indexer !== null ? new CompressorState(indexer.compressor, this.capacity) : null,
        });
      }
    }
    return seqs;
  }

  private layer(L: number): DeepseekV4LayerWeights {
    const have = this.kept.get(L);
    if (have !== undefined) return have;
    const w = this.m.loadLayer(L);
    if (this.keepLayers) this.kept.set(L, w);
    return w;
  }

  /**
   * Feed tokens[i] to sequence seqs[i] at its next position; logits for the rows that want them (else null).
   * A sequence may own several rows (a prompt): they are its next positions, in row order.
   */
  private run(seqs: readonly number[], tokens: readonly number[], want: readonly boolean[]): Array<Float32Array | null> {
    const c = this.m.cfg;
    const { hidden: D, hcMult: hc } = c;
    const { N } = this;
    const n = seqs.length;
    const states = seqs.map((s) => this.seqs[s]);
    const next = new Map<SeqState, number>();
    const positions = states.map((s) => {
      const p = next.get(s) ?? s.len;
      next.set(s, p + 1);
      return p;
    });
    const toks = [...tokens];
    let X = expandStreams16(N.f32ToF16(this.dev.embed(toks).data), n, hc, D);
    for (let L = 0; L < c.layers; L++) {
      const w = this.layer(L);
      const kit = new Kit(N, this.K, c, this.linears, null);
      const pa = hcPre(kit, X, n, { fn: w.hc_attn_fn, base: w.hc_attn_base, scale: w.hc_attn_scale });
      const a = N.rmsnormF16(pa.u, kit.vec16(w.attn_norm), n, D, c.normEps);
      const att = this.attention(kit, a, n, w.attn, w.ratio, positions, states.map((s) => s.layers[L]));
      X = hcPost(kit, att, X, n, pa);
      const pf = hcPre(kit, X, n, { fn: w.hc_ffn_fn, base: w.hc_ffn_base, scale: w.hc_ffn_scale });
      const f = N.rmsnormF16(pf.u, kit.vec16(w.ffn_norm), n, D, c.normEps);
      const given = w.hash ? toks.map((t) => this.m.hashExperts(w, t)) : null;
      X = hcPost(kit, moe(kit, f, n, w, given).out, X, n, pf);
    }
    for (const [s, len] of next) s.len = len;
    const rows = want.flatMap((x, i) => (x ? [i] : []));
    const out: Array<Float32Array | null> = want.map(() => null);
    if (rows.length === 0) return out;
    const row = hc * D;
    const Xw = new Uint16Array(rows.length * row);
    rows.forEach((i, r) => Xw.set(X.subarray(i * row, (i + 1) * row), r * row));
    const logits = this.dev.logits(this.dev.finalNorm(act([rows.length, hc, D], N.f16ToF32(Xw))));
    const V = c.vocab;
    rows.forEach((i, r) => (out[i] = logits.data.slice(r * V, (r + 1) * V)));
    return out;
  }

  /**
   * The attention sublayer for the new rows (attention.ts, position by position). a f16 [n, hidden] → f16
   * [n, hidden]; st[i] is row i's sequence state (rows of one sequence are consecutive positions, in order).
   */
  private attention(kit: Kit, a: Uint16Array, n: number, w: DeepseekV4Attention, ratio: number, positions: number[], st: LayerState[]): Uint16Array {
    const { N, K, cfg } = kit;
    const { heads: H, headDim: d, ropeDim: R, normEps: eps, qLoraRank, oGroups: G, oLoraRank } = cfg;
    const invFreq = layerInvFreq(cfg, ratio);
    const tab = ropeTable(positions, invFreq);

    const qr = N.rmsnormF16(kit.lin(a, n, w.wq_a), kit.vec16(w.q_norm), n, qLoraRank, eps);
    const qn = N.rmsnormF16(kit.lin(qr, n, w.wq_b), new Uint16Array(d).fill(0x3c00), n * H, d, eps);
    const q = N.ropeF16(qn, tab.cos, tab.sin, n, H, d, d - R, R, true);
    const kvn = N.rmsnormF16(kit.lin(a, n, w.wkv), kit.vec16(w.kv_norm), n, d, eps);
    const kv = N.ropeF16(kvn, tab.cos, tab.sin, n, 1, d, d - R, R, true);

    // compressor projections (f32) of the new rows; each row enters its state (which emits on block
    // completion) just before it attends
    const cw = w.compressor;
    const pushComp = cw !== null ? this.projections(kit, a, n, cw) : null;
    let qI: Uint16Array | null = null;
    let wI: Uint16Array | null = null;
    const iw = w.indexer;
    const { indexHeads: nh, indexHeadDim: hd, indexTopk: topk } = cfg;
    const pushIndex = iw !== null ? this.projections(kit, a, n, iw.compressor) : null;
    if (iw !== null) {
      qI = N.ropeF16(kit.lin(qr, n, iw.wq_b), tab.cos, tab.sin, n, nh, hd, hd - R, R, true);
      wI = kit.lin(a, n, iw.weights_proj);
    }

    const sinks = kit.f32(w.attn_sink);
    const o = new Uint16Array(n * H * d);
    for (let i = 0; i < n; i++) {
      const s = st[i];
      pushComp?.(s.comp!, i, positions[i], invFreq);
      pushIndex?.(s.index!, i, positions[i], invFreq);
      s.ring.push(kv.slice(i * d, (i + 1) * d));
      if (cfg.window > 0 && s.ring.length > cfg.window) s.ring.shift();
      const Bc = s.comp?.count ?? 0;
      // compressed candidates: the indexer's picks (CSA) or every finished block (HCA); all visible here
      let list: number[];
      if (iw !== null && Bc > topk) {
        const idx = s.index!;
        const pos = positions[i];
        if (idx.count !== Bc || Bc !== Math.floor((pos + 1) / ratio)) {
          throw new Error(`at position ${pos} the indexer holds ${idx.count} entries, the compressor ${Bc}; ratio ${ratio} makes ${Math.floor((pos + 1) / ratio)}`);
        }
        // The layer's ratio and the absolute position, as the full path passes them (rather than ratio 1 and
        // t0 = Bc − 1, which sees the same Bc entries): the call is then visibly indexer.ts's row `pos` alone.
        const qi = qI!.subarray(i * nh * hd, (i + 1) * nh * hd), wi = wI!.subarray(i * nh, (i + 1) * nh);
        const { picks } = K.indexerTopkF16(qi, wi, idx.entries.subarray(0, Bc * hd), 1, nh, hd, Bc, ratio, pos, topk, hd ** -0.5 * nh ** -0.5);
        list = [];
        for (let j = 0; j < topk; j++) if (picks[j] >= 0) list.push(picks[j]);
      } else {
        list = Array.from({ length: Bc }, (_, b) => b);
      }
      // the oldest window row is the kernel's raw row; the rest of the window, then the compressed rows
      const W = s.ring.length;
      const rows = W - 1 + Bc;
      const comp = new Uint16Array(rows * d);
      for (let r = 1; r < W; r++) comp.set(s.ring[r], (r - 1) * d);
      if (Bc > 0) comp.set(s.comp!.entries.subarray(0, Bc * d), (W - 1) * d);
      const cand = new Int32Array(W - 1 + list.length);
      for (let r = 0; r < W - 1; r++) cand[r] = r;
      list.forEach((b, j) => (cand[W - 1 + j] = W - 1 + b));
      const oi = K.sparseAttentionF16(q.subarray(i * H * d, (i + 1) * H * d), s.ring[0], comp, 1, H, d, rows, cfg.window, cand, cand.length, sinks, 1 / Math.sqrt(d));
      o.set(oi, i * H * d);
    }
    const oRot = N.ropeF16(o, tab.cos, tab.sinNeg, n, H, d, d - R, R, true);

    return kit.lin(groupedWoA(kit, oRot, n, H, d, G, oLoraRank, w.wo_a), n, w.wo_b);
  }

  /** K/Z projections (f32) of all rows at once; the returned function pushes row i into a state. */
  private projections(kit: Kit, a: Uint16Array, n: number, c: DeepseekV4Compressor) {
    const wc = (c.overlap ? 2 : 1) * c.headDim;
    const Kc = kit.lin32(a, n, c.wkv);
    const Zc = kit.lin32(a, n, c.wgate);
    return (state: CompressorState, i: number, pos: number, invFreq: Float64Array) => state.push(kit, c, pos, Kc.subarray(i * wc, (i + 1) * wc), Zc.subarray(i * wc, (i + 1) * wc), invFreq);
  }
}
