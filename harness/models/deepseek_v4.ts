/**
 * DeepSeek-V4 (DeepseekV4ForCausalLM) as DeepSeek releases it: the native short tensor names of spec §2
 * (embed.weight, layers.L.attn.wq_a.weight, layers.L.ffn.experts.E.w1.weight, …), bound once per layer into
 * typed weights whose fields mirror those names. Both paths read the same bound bytes; nothing after binding
 * looks tensors up by name.
 *
 * Routed experts are the bulk of a layer (256 × 3 × ~4 MiB packed FP4 in the release): `loadLayer` binds
 * everything else, and `expert(e)` reads one expert's three linears the first time either path asks for it
 * and caches them on that layer's object, so an expert routed to by both paths is read once and an expert
 * nobody routes to is never read. The cache dies with the layer object (the runner drops it after the layer).
 *
 * `mtp.*` (the multi-token-prediction block) is not part of the forward pass (DeepSeek's Transformer.forward
 * never calls it): its tensors are ignored, and counted in `ignoredTensors`.
 */
import * as path from 'node:path';
import { InputError } from '../errors.js';
import type { DType } from '../formats/dtypes.js';
import { type LinearFormat, type LinearWeight, linearTensorNames, loadLinear, parseQuantConfig, type QuantConfig, type StoredTensor } from '../formats/linear.js';
import { FORMATS } from '../formats/registry.js';
import type { Checkpoint } from '../io/checkpoint.js';
import { assertStoredLayers } from './layers.js';
import { forEachRowChunk, readRows } from './rows.js';
import { type DeepseekV4Config, loadDeepseekV4Config } from './deepseek_v4_config.js';

export type { DeepseekV4Config, YarnConfig } from './deepseek_v4_config.js';

/** RMSNorm weights: DeepSeek stores them BF16 and computes in FP32 (model.py RMSNorm); F32 is accepted too. */
const NORM_DTYPES: DType[] = ['BF16', 'F32'];
/** hc_* mixing parameters, attn_sink, compressor.ape and gate.bias are created as float32 in model.py and stored F32. */
const F32_ONLY: DType[] = ['F32'];
/** A linear's format is what is stored (DESIGN §3): any family of the registry, not DeepSeek's own three only. */
const ANY_FORMAT: LinearFormat[] = [...new Set(FORMATS.map((f) => f.family))];
/** compressor wkv/wgate, indexer weights_proj and the router run as plain fp32/bf16 matmuls in model.py. */
const PLAIN_ONLY: LinearFormat[] = ['plain'];

export interface DeepseekV4Expert {
  w1: LinearWeight;
  w2: LinearWeight;
  w3: LinearWeight;
}

/** attn.compressor.* or attn.indexer.compressor.* (spec §4.5 step 3). */
export interface DeepseekV4Compressor {
  /** [ratio, c·d_c] F32 position bias of the gate scores */
  ape: StoredTensor;
  /** [c·d_c, hidden] */
  wkv: LinearWeight;
  wgate: LinearWeight;
  /** [d_c] */
  norm: StoredTensor;
  ratio: number;
  /** true iff ratio == 4: two channel halves, slots of the previous block (c = 2) */
  overlap: boolean;
  /** d_c: head_dim for the attention's compressor, index_head_dim for the indexer's */
  headDim: number;
}

export interface DeepseekV4Indexer {
  /** [index_n_heads·index_head_dim, q_lora_rank] */
  wq_b: LinearWeight;
  /** [index_n_heads, hidden] */
  weights_proj: LinearWeight;
  compressor: DeepseekV4Compressor;
}

export interface DeepseekV4Attention {
  /** [heads] F32 sink logit per head */
  attn_sink: StoredTensor;
  wq_a: LinearWeight;
  q_norm: StoredTensor;
  wq_b: LinearWeight;
  wkv: LinearWeight;
  kv_norm: StoredTensor;
  wo_a: LinearWeight;
  wo_b: LinearWeight;
  /** ratio > 0 */
  compressor: DeepseekV4Compressor | null;
  /** ratio == 4 */
  indexer: DeepseekV4Indexer | null;
}

export interface DeepseekV4Gate {
  /** [experts, hidden] router logits */
  weight: LinearWeight;
  /** [vocab, topk] I64 expert ids per token id: hash layers (L < num_hash_layers) only */
  tid2eid: StoredTensor | null;
  /** [experts] F32 selection-only bias: non-hash layers only */
  bias: StoredTensor | null;
}

/** One block's weights, named as in the checkpoint (layers.L.*). */
export interface DeepseekV4LayerWeights {
  index: number;
  /** compress_ratios[L] */
  ratio: number;
  /** L < num_hash_layers: experts come from tid2eid */
  hash: boolean;
  attn_norm: StoredTensor;
  ffn_norm: StoredTensor;
  hc_attn_fn: StoredTensor;
  hc_attn_base: StoredTensor;
  hc_attn_scale: StoredTensor;
  hc_ffn_fn: StoredTensor;
  hc_ffn_base: StoredTensor;
  hc_ffn_scale: StoredTensor;
  attn: DeepseekV4Attention;
  ffn: { gate: DeepseekV4Gate; shared_experts: DeepseekV4Expert };
  /** routed expert e's w1/w2/w3: read on first use, then cached for this layer (shared by both paths) */
  expert(e: number): DeepseekV4Expert;
  /**
   * The routed experts a pass is about to ask `expert` for, in that order: a source that verifies an expert on
   * first use (the FP16 cache) verifies the next few side by side. Optional: a checkpoint's experts need no hint.
   */
  expertsAhead?(es: readonly number[]): void;
  /** the experts read so far, ascending (for tests and progress lines) */
  expertsLoaded(): number[];
}

export interface DeepseekV4Head {
  /** [hc_mult, hc_mult·hidden] */
  hc_head_fn: StoredTensor;
  hc_head_base: StoredTensor;
  hc_head_scale: StoredTensor;
  /** [hidden] */
  norm: StoredTensor;
}

/**
 * What a DeepSeek-V4 forward pass reads, bound and validated: the checkpoint itself, or the FP16 cache of the
 * optimized path (harness/generate/fp16cache_deepseek_v4.ts), which binds the same fields to F16 tensors.
 */
export interface DeepseekV4Weights {
  readonly cfg: DeepseekV4Config;
  loadLayer(L: number): DeepseekV4LayerWeights;
  head(): DeepseekV4Head;
  embedRows(tokens: number[]): StoredTensor;
  forEachHeadChunk(rowsPerChunk: number, fn: (rowStart: number, chunk: StoredTensor) => void): void;
  hashExperts(w: DeepseekV4LayerWeights, token: number): number[];
}

const isLinear = (v: object): v is LinearWeight => 'format' in v && 'weight' in v;
const isStored = (v: object): v is StoredTensor => 'bytes' in v && 'dtype' in v;

export interface LayerTensorMap {
  /** `key`: the field the tensor is bound under (attn_norm, q_norm, hc_attn_fn, ape, tid2eid, …) */
  stored(key: string, t: StoredTensor): StoredTensor;
  linear(key: string, lw: LinearWeight): LinearWeight;
}

/**
 * Layer weights `w` with every bound tensor replaced by f's (fields visited in binding order, nested ones
 * included). Routed experts are read lazily through w.expert and are not visited: the caller rebinds `expert`.
 * With f returning its input, a walk over every tensor of the layer.
 */
export function mapLayerTensors(w: DeepseekV4LayerWeights, f: LayerTensorMap): DeepseekV4LayerWeights {
  const walk = (v: unknown, key: string): unknown => {
    if (v === null || typeof v !== 'object') return v; // numbers, flags, the expert functions
    if (isLinear(v)) return f.linear(key, v);
    if (isStored(v)) return f.stored(key, v);
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x, k)]));
  };
  return walk(w, '') as DeepseekV4LayerWeights;
}

/** Norm weights are the stored tensors the device rounds to FP16 (Kit.vec16); the others it keeps as stored. */
export const isNormKey = (key: string) => key === 'norm' || key.endsWith('_norm');

export class DeepseekV4Checkpoint implements DeepseekV4Weights {
  readonly cfg: DeepseekV4Config;
  readonly qc: QuantConfig;
  readonly embedName = 'embed.weight';
  readonly headName = 'head.weight';
  /** mtp.* tensors: present in the release, not part of the forward pass */
  readonly ignoredTensors: number;

  constructor(readonly ck: Checkpoint) {
    this.cfg = loadDeepseekV4Config(ck.dir, ck.config, ck.configFile, (n) => ck.readMeta(n));
    this.qc = parseQuantConfig(ck.config, ck.configFile);
    this.ignoredTensors = ck.names().filter((n) => n.startsWith('mtp.')).length;
    assertStoredLayers(ck, this.cfg.layers, 'layers.');
    const { vocab, hidden } = this.cfg;
    for (const name of [this.embedName, this.headName]) this.check(name, [vocab, hidden], ['BF16', 'F16', 'F32']);
  }

  fileOf(name: string): string {
    return path.join(this.ck.dir, this.ck.weightMap.get(name) ?? '?');
  }

  /** Check a non-linear tensor's dtype and shape (the message names file and tensor); with `read`, its bytes. */
  private check(name: string, shape: number[], dtypes: DType[], read = false): StoredTensor {
    if (!this.ck.has(name)) throw new InputError('tensor is missing from the checkpoint', { file: this.ck.dir, tensor: name });
    const i = this.ck.info(name);
    const where = { file: this.fileOf(name), tensor: name };
    if (!dtypes.includes(i.dtype)) throw new InputError(`dtype ${i.dtype} not allowed here (want ${dtypes.join('/')})`, where);
    if (i.shape.length !== shape.length || i.shape.some((d, k) => d !== shape[k])) {
      throw new InputError(`shape ${JSON.stringify(i.shape)} disagrees with the config's ${JSON.stringify(shape)}`, where);
    }
    return { name, dtype: i.dtype, shape: i.shape, bytes: read ? this.ck.read(name) : new Uint8Array(0), file: i.file };
  }

  private linear(name: string, shape: [number, number], formats: LinearFormat[], read: boolean): LinearWeight {
    if (!this.ck.has(name)) throw new InputError('tensor is missing from the checkpoint', { file: this.ck.dir, tensor: name });
    const lw = loadLinear(this.ck, name, shape, this.qc, read);
    if (!formats.includes(lw.format)) {
      throw new InputError(`stored as ${lw.format} (${lw.weight.dtype}) but DeepSeek-V4 keeps this linear ${formats.join('/')}`, { file: this.fileOf(name), tensor: name });
    }
    return lw;
  }

  private compressor(prefix: string, ratio: number, dc: number, read: boolean): DeepseekV4Compressor {
    const overlap = ratio === 4;
    const width = (overlap ? 2 : 1) * dc;
    const D = this.cfg.hidden;
    return {
      ape: this.check(`${prefix}.ape`, [ratio, width], F32_ONLY, read),
      wkv: this.linear(`${prefix}.wkv.weight`, [width, D], PLAIN_ONLY, read),
      wgate: this.linear(`${prefix}.wgate.weight`, [width, D], PLAIN_ONLY, read),
      norm: this.check(`${prefix}.norm.weight`, [dc], NORM_DTYPES, read),
      ratio,
      overlap,
      headDim: dc,
    };
  }

  private expertAt(L: number, e: number, read: boolean, shared: boolean): DeepseekV4Expert {
    const { hidden: D, moeInter: I, expertDtype } = this.cfg;
    const p = shared ? `layers.${L}.ffn.shared_experts` : `layers.${L}.ffn.experts.${e}`;
    const ex = {
      w1: this.linear(`${p}.w1.weight`, [I, D], ANY_FORMAT, read),
      w2: this.linear(`${p}.w2.weight`, [D, I], ANY_FORMAT, read),
      w3: this.linear(`${p}.w3.weight`, [I, D], ANY_FORMAT, read),
    };
    if (!shared && expertDtype !== null) {
      // expert_dtype names the element type; which FP4 form (DeepSeek's MXFP4, a ModelOpt NVFP4 conversion…) is what is stored
      const want: LinearFormat[] = expertDtype === 'fp4' ? ['mxfp4', 'nvfp4', 'bnb4'] : ['fp8-block'];
      for (const lw of [ex.w1, ex.w2, ex.w3]) {
        if (!want.includes(lw.format)) throw new InputError(`stored as ${lw.format} but expert_dtype "${expertDtype}" declares ${want.join(' or ')}`, { file: this.fileOf(lw.name), tensor: lw.name });
      }
    }
    return ex;
  }

  /** Routed expert e of layer L, read now and not kept on any layer object (the FP16 cache writer streams experts). */
  readExpert(L: number, e: number): DeepseekV4Expert {
    if (!Number.isInteger(L) || L < 0 || L >= this.cfg.layers) throw new Error(`layer ${L} is outside [0, ${this.cfg.layers})`);
    if (!Number.isInteger(e) || e < 0 || e >= this.cfg.experts) throw new Error(`expert ${e} is outside [0, ${this.cfg.experts})`);
    return this.expertAt(L, e, true, false);
  }

  /** Read and validate layer L's tensors except routed experts (read lazily, see the file comment). `read=false` only checks. */
  loadLayer(L: number, read = true): DeepseekV4LayerWeights {
    const c = this.cfg;
    if (!Number.isInteger(L) || L < 0 || L >= c.layers) throw new Error(`layer ${L} is outside [0, ${c.layers})`);
    const p = `layers.${L}`;
    const D = c.hidden;
    const ratio = c.compressRatios[L];
    const hash = L < c.hashLayers;
    const mix = (2 + c.hcMult) * c.hcMult;
    const hcD = c.hcMult * D;
    const norm = (n: string, dim: number) => this.check(n, [dim], NORM_DTYPES, read);
    const f32 = (n: string, shape: number[]) => this.check(n, shape, F32_ONLY, read);
    const lin = (n: string, shape: [number, number], formats = ANY_FORMAT) => this.linear(n, shape, formats, read);
    const Hd = c.heads * c.headDim;

    const attn: DeepseekV4Attention = {
      attn_sink: f32(`${p}.attn.attn_sink`, [c.heads]),
      wq_a: lin(`${p}.attn.wq_a.weight`, [c.qLoraRank, D]),
      q_norm: norm(`${p}.attn.q_norm.weight`, c.qLoraRank),
      wq_b: lin(`${p}.attn.wq_b.weight`, [Hd, c.qLoraRank]),
      wkv: lin(`${p}.attn.wkv.weight`, [c.headDim, D]),
      kv_norm: norm(`${p}.attn.kv_norm.weight`, c.headDim),
      // wo_a maps one group's heads (Hd / G wide) to o_lora_rank; the G groups are stacked along its rows (§4.5 step 7)
      wo_a: lin(`${p}.attn.wo_a.weight`, [c.oGroups * c.oLoraRank, Hd / c.oGroups]),
      wo_b: lin(`${p}.attn.wo_b.weight`, [D, c.oGroups * c.oLoraRank]),
      compressor: ratio > 0 ? this.compressor(`${p}.attn.compressor`, ratio, c.headDim, read) : null,
      indexer:
        ratio === 4
          ? {
              wq_b: lin(`${p}.attn.indexer.wq_b.weight`, [c.indexHeads * c.indexHeadDim, c.qLoraRank]),
              weights_proj: lin(`${p}.attn.indexer.weights_proj.weight`, [c.indexHeads, D], PLAIN_ONLY),
              compressor: this.compressor(`${p}.attn.indexer.compressor`, ratio, c.indexHeadDim, read),
            }
          : null,
    };
    const gate: DeepseekV4Gate = {
      weight: lin(`${p}.ffn.gate.weight`, [c.experts, D], PLAIN_ONLY),
      tid2eid: hash ? this.check(`${p}.ffn.gate.tid2eid`, [c.vocab, c.topk], ['I64'], read) : null,
      bias: hash ? null : f32(`${p}.ffn.gate.bias`, [c.experts]),
    };
    const cache = new Map<number, DeepseekV4Expert>();
    return {
      index: L,
      ratio,
      hash,
      attn_norm: norm(`${p}.attn_norm.weight`, D),
      ffn_norm: norm(`${p}.ffn_norm.weight`, D),
      hc_attn_fn: f32(`${p}.hc_attn_fn`, [mix, hcD]),
      hc_attn_base: f32(`${p}.hc_attn_base`, [mix]),
      hc_attn_scale: f32(`${p}.hc_attn_scale`, [3]),
      hc_ffn_fn: f32(`${p}.hc_ffn_fn`, [mix, hcD]),
      hc_ffn_base: f32(`${p}.hc_ffn_base`, [mix]),
      hc_ffn_scale: f32(`${p}.hc_ffn_scale`, [3]),
      attn,
      ffn: { gate, shared_experts: this.expertAt(L, -1, read, true) },
      expert: (e: number) => {
        if (!Number.isInteger(e) || e < 0 || e >= c.experts) throw new Error(`expert ${e} is outside [0, ${c.experts})`);
        let ex = cache.get(e);
        if (ex === undefined) {
          ex = this.expertAt(L, e, read, false);
          cache.set(e, ex);
        }
        return ex;
      },
      expertsLoaded: () => [...cache.keys()].sort((a, b) => a - b),
    };
  }

  /** hc_head_* and norm.weight, read (small: hc_mult × hc_mult·hidden F32 plus one norm). */
  head(read = true): DeepseekV4Head {
    const { hcMult: hc, hidden: D } = this.cfg;
    return {
      hc_head_fn: this.check('hc_head_fn', [hc, hc * D], F32_ONLY, read),
      hc_head_base: this.check('hc_head_base', [hc], F32_ONLY, read),
      hc_head_scale: this.check('hc_head_scale', [1], F32_ONLY, read),
      norm: this.check('norm.weight', [D], NORM_DTYPES, read),
    };
  }

  /**
   * Expert ids of hash layer weights `w` for token id `token` (a tid2eid row), range-checked. A row naming one
   * expert twice is refused: DeepSeek's MoE.forward adds it once (`y[idx] += …` keeps one write per token) while
   * its weights are normalised over every slot, a model no clean rule describes (the release's rows are distinct).
   */
  hashExperts(w: DeepseekV4LayerWeights, token: number): number[] {
    const t = w.ffn.gate.tid2eid;
    if (t === null) throw new Error(`layer ${w.index} is not a hash layer`);
    const { topk, experts, vocab } = this.cfg;
    if (!Number.isInteger(token) || token < 0 || token >= vocab) throw new InputError(`token id ${token} is outside the vocabulary [0, ${vocab})`);
    const dv = new DataView(t.bytes.buffer, t.bytes.byteOffset, t.bytes.byteLength);
    const ids: number[] = [];
    for (let k = 0; k < topk; k++) {
      const e = Number(dv.getBigInt64((token * topk + k) * 8, true));
      if (!Number.isInteger(e) || e < 0 || e >= experts) {
        throw new InputError(`row ${token} holds expert id ${e}, outside [0, ${experts})`, { file: t.file, tensor: t.name });
      }
      if (ids.includes(e)) throw new InputError(`row ${token} lists expert ${e} twice (DeepSeek's code would apply it once but weigh it twice)`, { file: t.file, tensor: t.name });
      ids.push(e);
    }
    return ids;
  }

  /** Every tensor checked against the config without reading data (routed experts included); unknown names are bad input. */
  conformance(): void {
    const seen = new Set<string>();
    const note = (lw: LinearWeight) => {
      for (const n of linearTensorNames(this.ck, lw)) seen.add(n);
    };
    const noteStored = (t: StoredTensor | null) => t !== null && seen.add(t.name);
    for (const n of [this.embedName, this.headName]) seen.add(n);
    const h = this.head(false);
    for (const t of Object.values(h)) noteStored(t);
    for (let L = 0; L < this.cfg.layers; L++) {
      const w = this.loadLayer(L, false);
      for (const t of [w.attn_norm, w.ffn_norm, w.hc_attn_fn, w.hc_attn_base, w.hc_attn_scale, w.hc_ffn_fn, w.hc_ffn_base, w.hc_ffn_scale]) noteStored(t);
      const a = w.attn;
      for (const t of [a.attn_sink, a.q_norm, a.kv_norm]) noteStored(t);
      for (const lw of [a.wq_a, a.wq_b, a.wkv, a.wo_a, a.wo_b, w.ffn.gate.weight]) note(lw);
      for (const cmp of [a.compressor, a.indexer?.compressor ?? null]) {
        if (cmp === null) continue;
        noteStored(cmp.ape);
        noteStored(cmp.norm);
        note(cmp.wkv);
        note(cmp.wgate);
      }
      if (a.indexer !== null) [a.indexer.wq_b, a.indexer.weights_proj].forEach(note);
      noteStored(w.ffn.gate.tid2eid);
      noteStored(w.ffn.gate.bias);
      const sh = w.ffn.shared_experts;
      [sh.w1, sh.w2, sh.w3].forEach(note);
      for (let e = 0; e < this.cfg.experts; e++) {
        const ex = w.expert(e);
        [ex.w1, ex.w2, ex.w3].forEach(note);
      }
    }
    for (const name of this.ck.names()) {
      if (!seen.has(name) && !name.startsWith('mtp.')) {
        throw new InputError('unexpected tensor: not part of the DeepSeek-V4 layout for this config (renamed, or a layer beyond num_hidden_layers?)', { file: this.fileOf(name), tensor: name });
      }
    }
  }

  /** Layers holding FP4/FP8 weights (any linear, routed experts included), ascending. */
  quantizedLayers(): number[] {
    const out: number[] = [];
    for (let L = 0; L < this.cfg.layers; L++) {
      const w = this.loadLayer(L, false);
      const a = w.attn;
      const lins = [a.wq_a, a.wq_b, a.wkv, a.wo_a, a.wo_b, w.ffn.shared_experts.w1, w.ffn.shared_experts.w2, w.ffn.shared_experts.w3];
      if (a.indexer !== null) lins.push(a.indexer.wq_b);
      let q = lins.some((lw) => lw.format !== 'plain');
      for (let e = 0; !q && e < this.cfg.experts; e++) {
        const ex = w.expert(e);
        q = [ex.w1, ex.w2, ex.w3].some((lw) => lw.format !== 'plain');
      }
      if (q) out.push(L);
    }
    return out;
  }

  /** Embedding rows for the given tokens only (the vocab × hidden table is never read whole). */
  embedRows(tokens: number[]): StoredTensor {
    return readRows(this.ck, this.embedName, this.cfg.vocab, this.cfg.hidden, tokens);
  }

  /** Visit the head in row chunks so the vocab × hidden matrix is never held whole. */
  forEachHeadChunk(rowsPerChunk: number, fn: (rowStart: number, chunk: StoredTensor) => void): void {
    forEachRowChunk(this.ck, this.headName, this.cfg.vocab, this.cfg.hidden, rowsPerChunk, fn);
  }

}
