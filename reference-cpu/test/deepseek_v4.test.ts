/**
 * DeepSeek-V4 FP32 reference: each piece against a direct computation written here, the checkpoint binding's
 * strictness, and an end-to-end forward pass on a tiny checkpoint (written by this file in the release's
 * formats: FP8-block attention/shared experts, MXFP4 routed experts, BF16/F32/I64 elsewhere) against an
 * independent float64 forward written from the spec (naiveForward below), stage by stage.
 *
 * Tolerance: the reference stores FP32 and multiplies with the FP32 GEMM, the naive forward is float64 all
 * the way; over 4 layers the observed gap is ≤ 3e-7 of the stage's max |value| (the FP32 floor), so 2e-6
 * leaves headroom without hiding an indexing bug (those show at 1e-3 and above).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InputError } from '../../harness/errors.js';
import type { DType } from '../../harness/formats/dtypes.js';
import type { LinearWeight } from '../../harness/formats/linear.js';
import { Checkpoint } from '../../harness/io/checkpoint.js';
import { decodeToF32 } from '../../harness/formats/dtypes.js';
import { encodeSafetensors, SafetensorsFile, type TensorToWrite } from '../../harness/io/safetensors.js';
import { DeepseekV4Checkpoint, type DeepseekV4Expert } from '../../harness/models/deepseek_v4.js';
import { DeepseekV4Reference, deepseekV4Reference } from '../deepseek_v4.js';
import { attendWithSink, attendWithSinkTs } from '../deepseek_v4/attention.js';
import { compressBlocks } from '../deepseek_v4/compressor.js';
import { collapseTs, hcHead, hcPost, hcPostTs, hcPre, sinkhorn } from '../deepseek_v4/hc.js';
import { indexerScores, topkLowestIndex } from '../deepseek_v4/indexer.js';
import { dequantRows, linear } from '../linear.js';
import { expertForward, route, sqrtSoftplus } from '../deepseek_v4/moe.js';
import { deepseekInvFreq, layerInvFreq, yarnRange } from '../deepseek_v4/rope.js';
import { dequantLinear } from '../dequant.js';
import { attentionOutput, attentionScores, hcCollapse, setReferenceSimd } from '../native.js';
import { matmul } from '../ops.js';
import { relErr } from './rel_err.js';

// ---------------------------------------------------------------- seeded numbers

function rng(seed: number) {
  let a = seed >>> 0;
  const uniform = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const normal = () => Math.sqrt(-2 * Math.log(uniform() + 1e-12)) * Math.cos(2 * Math.PI * uniform());
  return { uniform, normal, int: (n: number) => Math.floor(uniform() * n) };
}
type Rng = ReturnType<typeof rng>;
const randn = (r: Rng, n: number, s = 1) => Float64Array.from({ length: n }, () => r.normal() * s);
const f32 = (a: ArrayLike<number>) => Float32Array.from(a);

// ---------------------------------------------------------------- number formats, written here from spec §3

function e4m3(b: number): number {
  const s = b & 0x80 ? -1 : 1;
  const e = (b >> 3) & 15;
  const m = b & 7;
  if (e === 15 && m === 7) return NaN;
  return e === 0 ? (s * m) / 8 / 64 : s * (1 + m / 8) * 2 ** (e - 7);
}
const E4M3_CODES = Array.from({ length: 256 }, (_, b) => b).filter((b) => !Number.isNaN(e4m3(b)));
const E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6];

function nearest(codes: number[], value: (c: number) => number, x: number): number {
  let best = codes[0];
  for (const c of codes) if (Math.abs(value(c) - x) < Math.abs(value(best) - x)) best = c;
  return best;
}

function bf16Bits(x: number): number {
  const u = new Uint32Array(Float32Array.of(x).buffer)[0];
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}
const bf16Value = (bits: number) => new Float32Array(Uint32Array.of(bits << 16).buffer)[0];

type Fmt = 'bf16' | 'f32' | 'fp8' | 'fp4';

/** Encode a [out, in] (or 1-D) target in a format: the tensors to write and the exact values they hold. */
function encode(name: string, shape: number[], target: Float64Array, fmt: Fmt): { tensors: TensorToWrite[]; values: Float64Array } {
  const n = target.length;
  if (fmt === 'f32') {
    const v = f32(target);
    return { tensors: [{ name, dtype: 'F32', shape, data: new Uint8Array(v.buffer) }], values: Float64Array.from(v) };
  }
  if (fmt === 'bf16') {
    const bits = Uint16Array.from(target, bf16Bits);
    return { tensors: [{ name, dtype: 'BF16', shape, data: new Uint8Array(bits.buffer) }], values: Float64Array.from(bits, bf16Value) };
  }
  const [out, inn] = shape;
  const values = new Float64Array(n);
  const base = name.replace(/\.weight$/, '');
  if (fmt === 'fp8') {
    const sr = Math.ceil(out / 128);
    const sc = Math.ceil(inn / 128);
    const scales = new Uint8Array(sr * sc);
    const codes = new Uint8Array(n);
    for (let bo = 0; bo < sr; bo++) {
      for (let bi = 0; bi < sc; bi++) {
        let amax = 1e-30;
        for (let o = bo * 128; o < Math.min(out, bo * 128 + 128); o++) for (let i = bi * 128; i < Math.min(inn, bi * 128 + 128); i++) amax = Math.max(amax, Math.abs(target[o * inn + i]));
        const k = Math.ceil(Math.log2(amax / 448));
        scales[bo * sc + bi] = k + 127;
        for (let o = bo * 128; o < Math.min(out, bo * 128 + 128); o++) {
          for (let i = bi * 128; i < Math.min(inn, bi * 128 + 128); i++) {
            const c = nearest(E4M3_CODES, e4m3, target[o * inn + i] / 2 ** k);
            codes[o * inn + i] = c;
            values[o * inn + i] = e4m3(c) * 2 ** k;
          }
        }
      }
    }
    return {
      tensors: [
        { name, dtype: 'F8_E4M3', shape, data: codes },
        { name: `${base}.scale`, dtype: 'F8_E8M0', shape: [sr, sc], data: scales },
      ],
      values,
    };
  }
  // MXFP4: [out, in/2] bytes, low nibble = even input index; [out, in/32] E8M0 scales
  const packed = new Uint8Array(n / 2);
  const scales = new Uint8Array(out * (inn / 32));
  const nib = Array.from({ length: 16 }, (_, c) => c);
  for (let o = 0; o < out; o++) {
    for (let blk = 0; blk < inn / 32; blk++) {
      let amax = 1e-30;
      for (let i = blk * 32; i < blk * 32 + 32; i++) amax = Math.max(amax, Math.abs(target[o * inn + i]));
      const k = Math.ceil(Math.log2(amax / 6));
      scales[o * (inn / 32) + blk] = k + 127;
      for (let i = blk * 32; i < blk * 32 + 32; i++) {
        const c = nearest(nib, (q) => E2M1[q], target[o * inn + i] / 2 ** k);
        packed[o * (inn / 2) + (i >> 1)] |= i % 2 === 0 ? c : c << 4;
        values[o * inn + i] = E2M1[c] * 2 ** k;
      }
    }
  }
  return {
    tensors: [
      { name, dtype: 'I8', shape: [out, inn / 2], data: packed },
      { name: `${base}.scale`, dtype: 'F8_E8M0', shape: [out, inn / 32], data: scales },
    ],
    values,
  };
}

// ---------------------------------------------------------------- the tiny checkpoint

const TINY = {
  vocab: 48, D: 32, layers: 4, H: 4, hd: 16, R: 8, qLora: 16, G: 2, oLora: 8, window: 6,
  ratios: [0, 4, 8, 4], idxH: 4, idxD: 8, idxTopk: 2, E: 6, topk: 2, I: 32, hash: 2, limit: 1.0,
  hc: 3, iters: 20, eps: 1e-6, hcEps: 1e-3, theta: 10000, ctheta: 160000, // hc_eps ≠ rms_norm_eps so mixing them up shows
  yarn: { factor: 16, original: 65536, betaFast: 32, betaSlow: 1 }, routeScale: 1.5,
};
type Tiny = typeof TINY;

function hfConfig(t: Tiny): Record<string, unknown> {
  return {
    architectures: ['DeepseekV4ForCausalLM'], model_type: 'deepseek_v4', vocab_size: t.vocab, hidden_size: t.D,
    num_hidden_layers: t.layers, num_attention_heads: t.H, num_key_value_heads: 1, head_dim: t.hd, qk_rope_head_dim: t.R,
    q_lora_rank: t.qLora, o_groups: t.G, o_lora_rank: t.oLora, sliding_window: t.window, compress_ratios: [...t.ratios, 0],
    num_nextn_predict_layers: 1, index_n_heads: t.idxH, index_head_dim: t.idxD, index_topk: t.idxTopk,
    n_routed_experts: t.E, n_shared_experts: 1, num_experts_per_tok: t.topk, moe_intermediate_size: t.I,
    scoring_func: 'sqrtsoftplus', norm_topk_prob: true, topk_method: 'noaux_tc', routed_scaling_factor: t.routeScale,
    num_hash_layers: t.hash, swiglu_limit: t.limit, hc_mult: t.hc, hc_sinkhorn_iters: t.iters, hc_eps: t.hcEps,
    rms_norm_eps: t.eps, rope_theta: t.theta, compress_rope_theta: t.ctheta,
    rope_scaling: { type: 'yarn', factor: t.yarn.factor, original_max_position_embeddings: t.yarn.original, beta_fast: t.yarn.betaFast, beta_slow: t.yarn.betaSlow },
    tie_word_embeddings: false, bos_token_id: 0, eos_token_id: 1,
    quantization_config: { quant_method: 'fp8', fmt: 'e4m3', scale_fmt: 'ue8m0', activation_scheme: 'dynamic', weight_block_size: [128, 128] },
  };
}

function inferenceConfig(t: Tiny): Record<string, unknown> {
  return {
    vocab_size: t.vocab, dim: t.D, moe_inter_dim: t.I, n_layers: t.layers, n_hash_layers: t.hash, n_heads: t.H,
    n_routed_experts: t.E, n_shared_experts: 1, n_activated_experts: t.topk, score_func: 'sqrtsoftplus',
    route_scale: t.routeScale, swiglu_limit: t.limit, q_lora_rank: t.qLora, head_dim: t.hd, rope_head_dim: t.R,
    o_groups: t.G, o_lora_rank: t.oLora, window_size: t.window, original_seq_len: t.yarn.original, rope_theta: t.theta,
    rope_factor: t.yarn.factor, beta_fast: t.yarn.betaFast, beta_slow: t.yarn.betaSlow, index_n_heads: t.idxH,
    index_head_dim: t.idxD, index_topk: t.idxTopk, hc_mult: t.hc, hc_sinkhorn_iters: t.iters, dtype: 'fp8',
    scale_fmt: 'ue8m0', expert_dtype: 'fp4', compress_rope_theta: t.ctheta, compress_ratios: [...t.ratios, 0],
  };
}

interface Written {
  dir: string;
  /** exact stored values by tensor name (linears: the logical [out, in]) */
  V: Map<string, Float64Array>;
  /** tid2eid rows by layer */
  tid2eid: Map<number, number[][]>;
}

interface WriteOpts {
  /** edit the tensor list / configs before writing (negative tests) */
  edit?: (tensors: TensorToWrite[], cfg: Record<string, unknown>, inf: Record<string, unknown>) => void;
  seed?: number;
}

function writeTiny(dir: string, t: Tiny = TINY, opts: WriteOpts = {}): Written {
  const r = rng(opts.seed ?? 7);
  const tensors: TensorToWrite[] = [];
  const V = new Map<string, Float64Array>();
  const tid2eid = new Map<number, number[][]>();
  const put = (name: string, shape: number[], target: Float64Array, fmt: Fmt) => {
    const e = encode(name, shape, target, fmt);
    tensors.push(...e.tensors);
    V.set(name, e.values);
  };
  const lin = (name: string, out: number, inn: number, fmt: Fmt) => put(name, [out, inn], randn(r, out * inn, 1 / Math.sqrt(inn)), fmt);
  const norm = (name: string, n: number) => put(name, [n], Float64Array.from({ length: n }, () => 1 + 0.2 * r.normal()), 'bf16');
  const { D, H, hd, hc } = t;
  const mix = (2 + hc) * hc;

  put('embed.weight', [t.vocab, D], randn(r, t.vocab * D), 'bf16');
  put('head.weight', [t.vocab, D], randn(r, t.vocab * D, 1 / Math.sqrt(D)), 'bf16');
  norm('norm.weight', D);
  put('hc_head_fn', [hc, hc * D], randn(r, hc * hc * D, 0.5 / Math.sqrt(hc * D)), 'f32');
  put('hc_head_base', [hc], randn(r, hc, 0.5), 'f32');
  put('hc_head_scale', [1], Float64Array.of(0.8), 'f32');

  for (let L = 0; L < t.layers; L++) {
    const p = `layers.${L}`;
    const ratio = t.ratios[L];
    norm(`${p}.attn_norm.weight`, D);
    norm(`${p}.ffn_norm.weight`, D);
    for (const k of ['attn', 'ffn']) {
      put(`${p}.hc_${k}_fn`, [mix, hc * D], randn(r, mix * hc * D, 1 / Math.sqrt(hc * D)), 'f32');
      put(`${p}.hc_${k}_base`, [mix], randn(r, mix, 0.5), 'f32');
      put(`${p}.hc_${k}_scale`, [3], Float64Array.from({ length: 3 }, () => 0.5 + 0.5 * r.uniform()), 'f32');
    }
    put(`${p}.attn.attn_sink`, [H], randn(r, H), 'f32');
    lin(`${p}.attn.wq_a.weight`, t.qLora, D, 'fp8');
    norm(`${p}.attn.q_norm.weight`, t.qLora);
    lin(`${p}.attn.wq_b.weight`, H * hd, t.qLora, 'fp8');
    lin(`${p}.attn.wkv.weight`, hd, D, 'fp8');
    norm(`${p}.attn.kv_norm.weight`, hd);
    lin(`${p}.attn.wo_a.weight`, t.G * t.oLora, (H * hd) / t.G, 'fp8');
    lin(`${p}.attn.wo_b.weight`, D, t.G * t.oLora, 'fp8');
    const compressor = (q: string, dc: number) => {
      const w = (ratio === 4 ? 2 : 1) * dc;
      put(`${q}.ape`, [ratio, w], randn(r, ratio * w), 'f32');
      lin(`${q}.wkv.weight`, w, D, 'bf16');
      lin(`${q}.wgate.weight`, w, D, 'bf16');
      norm(`${q}.norm.weight`, dc);
    };
    if (ratio > 0) compressor(`${p}.attn.compressor`, hd);
    if (ratio === 4) {
      lin(`${p}.attn.indexer.wq_b.weight`, t.idxH * t.idxD, t.qLora, 'fp8');
      lin(`${p}.attn.indexer.weights_proj.weight`, t.idxH, D, 'bf16');
      compressor(`${p}.attn.indexer.compressor`, t.idxD);
    }
    lin(`${p}.ffn.gate.weight`, t.E, D, 'bf16');
    if (L < t.hash) {
      // distinct ids per token, deliberately unsorted
      const rows = Array.from({ length: t.vocab }, () => {
        const ids: number[] = [];
        while (ids.length < t.topk) {
          const e = r.int(t.E);
          if (!ids.includes(e)) ids.push(e);
        }
        return ids;
      });
      tid2eid.set(L, rows);
      const data = BigInt64Array.from(rows.flat(), (e) => BigInt(e));
      tensors.push({ name: `${p}.ffn.gate.tid2eid`, dtype: 'I64', shape: [t.vocab, t.topk], data: new Uint8Array(data.buffer) });
    } else {
      put(`${p}.ffn.gate.bias`, [t.E], randn(r, t.E, 0.1), 'f32');
    }
    for (const [q, fmt] of [[`${p}.ffn.shared_experts`, 'fp8'], ...Array.from({ length: t.E }, (_, e) => [`${p}.ffn.experts.${e}`, 'fp4'])] as Array<[string, Fmt]>) {
      lin(`${q}.w1.weight`, t.I, D, fmt);
      lin(`${q}.w2.weight`, D, t.I, fmt);
      lin(`${q}.w3.weight`, t.I, D, fmt);
    }
  }
  // the MTP block is not part of the forward pass: present, ignored
  put('mtp.0.enorm.weight', [D], randn(r, D), 'bf16');

  const cfg = hfConfig(t);
  const inf = inferenceConfig(t);
  opts.edit?.(tensors, cfg, inf);
  fs.mkdirSync(path.join(dir, 'inference'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(cfg, null, 2));
  fs.writeFileSync(path.join(dir, 'inference', 'config.json'), JSON.stringify(inf, null, 2));
  fs.writeFileSync(path.join(dir, 'model.safetensors'), encodeSafetensors(tensors));
  return { dir, V, tid2eid };
}

// ---------------------------------------------------------------- an independent float64 forward (spec §4)

interface NaiveLayer {
  out: Float64Array;
  attn: Float64Array;
  moe: Float64Array;
  router: number[][];
  experts: number[][];
  indexer: number[][] | null;
}

function naiveForward(t: Tiny, w: Written, tokens: number[], forcedExperts: Map<number, number[][]> = new Map()) {
  const V = (n: string) => w.V.get(n)!;
  const { D, H, hd, R, hc } = t;
  const S = tokens.length;
  const sig = (x: number) => 1 / (1 + Math.exp(-x));
  const mv = (W: Float64Array, out: number, x: ArrayLike<number>) => {
    const inn = x.length;
    return Float64Array.from({ length: out }, (_, o) => {
      let s = 0;
      for (let i = 0; i < inn; i++) s += W[o * inn + i] * x[i];
      return s;
    });
  };
  const rms = (x: ArrayLike<number>, g: Float64Array | null) => {
    let ss = 0;
    for (let i = 0; i < x.length; i++) ss += x[i] * x[i];
    const k = 1 / Math.sqrt(ss / x.length + t.eps);
    return Float64Array.from(x, (v, i) => v * k * (g ? g[i] : 1));
  };
  const freqs = (compressed: boolean) => {
    const base = compressed ? t.ctheta : t.theta;
    const f = Array.from({ length: R / 2 }, (_, i) => base ** ((-2 * i) / R));
    if (!compressed) return f;
    const c = (beta: number) => (R * Math.log(t.yarn.original / (2 * Math.PI * beta))) / (2 * Math.log(base));
    const lo = Math.max(Math.floor(c(t.yarn.betaFast)), 0);
    const hi = Math.min(Math.ceil(c(t.yarn.betaSlow)), R - 1);
    return f.map((fi, i) => {
      const s = 1 - Math.min(Math.max((i - lo) / (hi - lo), 0), 1);
      return fi * (s + (1 - s) / t.yarn.factor);
    });
  };
  /** rotate the last R dims of v (length width) in place, interleaved pairs */
  const rot = (v: Float64Array, width: number, pos: number, f: number[], sign = 1) => {
    for (let i = 0; i < R / 2; i++) {
      const ia = width - R + 2 * i;
      const a = v[ia];
      const b = v[ia + 1];
      const phi = sign * pos * f[i];
      v[ia] = a * Math.cos(phi) - b * Math.sin(phi);
      v[ia + 1] = a * Math.sin(phi) + b * Math.cos(phi);
    }
  };
  const hcPreN = (X: Float64Array[][], p: string) => {
    const fn = V(`${p}_fn`);
    const base = V(`${p}_base`);
    const sc = V(`${p}_scale`);
    return X.map((Xt) => {
      const xf: number[] = [];
      for (let j = 0; j < hc; j++) xf.push(...Xt[j]);
      const m = mv(fn, (2 + hc) * hc, xf);
      let ss = 0;
      for (const v of xf) ss += v * v;
      const rho = 1 / Math.sqrt(ss / xf.length + t.eps);
      for (let i = 0; i < m.length; i++) m[i] *= rho;
      const pre = Array.from({ length: hc }, (_, j) => sig(sc[0] * m[j] + base[j]) + t.hcEps);
      const post = Array.from({ length: hc }, (_, j) => 2 * sig(sc[1] * m[hc + j] + base[hc + j]));
      let C = Array.from({ length: hc }, (_, j) => Array.from({ length: hc }, (_, k) => sc[2] * m[2 * hc + j * hc + k] + base[2 * hc + j * hc + k]));
      C = C.map((row) => {
        const mx = Math.max(...row);
        const e = row.map((v) => Math.exp(v - mx));
        const s = e.reduce((a, b) => a + b, 0);
        return e.map((v) => v / s + t.hcEps);
      });
      const colNorm = () => {
        for (let k = 0; k < hc; k++) {
          let s = 0;
          for (let j = 0; j < hc; j++) s += C[j][k];
          for (let j = 0; j < hc; j++) C[j][k] /= s + t.hcEps;
        }
      };
      colNorm();
      for (let it = 0; it < t.iters - 1; it++) {
        for (let j = 0; j < hc; j++) {
          const s = C[j].reduce((a, b) => a + b, 0);
          for (let k = 0; k < hc; k++) C[j][k] /= s + t.hcEps;
        }
        colNorm();
      }
      const u = new Float64Array(D);
      for (let j = 0; j < hc; j++) for (let i = 0; i < D; i++) u[i] += pre[j] * Xt[j][i];
      return { u, post, C };
    });
  };
  const hcPostN = (F: Float64Array[], X: Float64Array[][], pc: ReturnType<typeof hcPreN>) =>
    X.map((Xt, s) =>
      Array.from({ length: hc }, (_, k) => {
        const y = new Float64Array(D);
        for (let i = 0; i < D; i++) {
          y[i] = pc[s].post[k] * F[s][i];
          for (let j = 0; j < hc; j++) y[i] += pc[s].C[j][k] * Xt[j][i];
        }
        return y;
      }),
    );
  /** compressed entries of one compressor over a [S][D] input */
  const compressN = (a: Float64Array[], q: string, ratio: number, dc: number, f: number[]) => {
    const ov = ratio === 4;
    const K = a.map((x) => mv(V(`${q}.wkv.weight`), (ov ? 2 : 1) * dc, x));
    const Z = a.map((x) => mv(V(`${q}.wgate.weight`), (ov ? 2 : 1) * dc, x));
    const ape = V(`${q}.ape`);
    const aw = (ov ? 2 : 1) * dc;
    const out: Float64Array[] = [];
    for (let b = 0; b < Math.floor(S / ratio); b++) {
      const e = new Float64Array(dc);
      for (let ch = 0; ch < dc; ch++) {
        const slots: Array<[number, number]> = []; // [score, kv]
        if (ov && b > 0) for (let i = 0; i < ratio; i++) slots.push([Z[(b - 1) * ratio + i][ch] + ape[i * aw + ch], K[(b - 1) * ratio + i][ch]]);
        const off = ov ? dc : 0;
        for (let i = 0; i < ratio; i++) slots.push([Z[b * ratio + i][off + ch] + ape[i * aw + off + ch], K[b * ratio + i][off + ch]]);
        const mx = Math.max(...slots.map((s) => s[0]));
        const den = slots.reduce((acc, s) => acc + Math.exp(s[0] - mx), 0);
        e[ch] = slots.reduce((acc, s) => acc + (Math.exp(s[0] - mx) / den) * s[1], 0);
      }
      const en = rms(e, V(`${q}.norm.weight`));
      rot(en, dc, b * ratio, f);
      out.push(en);
    }
    return out;
  };
  const swigluExpert = (q: string, x: Float64Array, limit: number, omega: number) => {
    const g = mv(V(`${q}.w1.weight`), t.I, x);
    const v = mv(V(`${q}.w3.weight`), t.I, x);
    const h = g.map((gi, i) => {
      const gg = limit > 0 ? Math.min(gi, limit) : gi;
      const vv = limit > 0 ? Math.min(Math.max(v[i], -limit), limit) : v[i];
      return omega * (gg * sig(gg)) * vv;
    });
    return mv(V(`${q}.w2.weight`), D, h);
  };
  const byScoreThenIndex = (sc: ArrayLike<number>, k: number) =>
    Array.from({ length: sc.length }, (_, i) => i).sort((a, b) => sc[b] - sc[a] || a - b).slice(0, k).sort((a, b) => a - b);

  const emb = tokens.map((tok) => V('embed.weight').slice(tok * D, (tok + 1) * D));
  let X: Float64Array[][] = emb.map((h) => Array.from({ length: hc }, () => Float64Array.from(h)));
  const layers: NaiveLayer[] = [];
  for (let L = 0; L < t.layers; L++) {
    const p = `layers.${L}`;
    const ratio = t.ratios[L];
    const f = freqs(ratio > 0);
    // attention
    const pa = hcPreN(X, `${p}.hc_attn`);
    const a = pa.map((x) => rms(x.u, V(`${p}.attn_norm.weight`)));
    const qr = a.map((x) => rms(mv(V(`${p}.attn.wq_a.weight`), t.qLora, x), V(`${p}.attn.q_norm.weight`)));
    const q = qr.map((x, s) => {
      const all = mv(V(`${p}.attn.wq_b.weight`), H * hd, x);
      return Array.from({ length: H }, (_, h) => {
        const qh = rms(all.subarray(h * hd, (h + 1) * hd), null);
        rot(qh, hd, s, f);
        return qh;
      });
    });
    const kv = a.map((x, s) => {
      const k = rms(mv(V(`${p}.attn.wkv.weight`), hd, x), V(`${p}.attn.kv_norm.weight`));
      rot(k, hd, s, f);
      return k;
    });
    const comp = ratio > 0 ? compressN(a, `${p}.attn.compressor`, ratio, hd, f) : [];
    let picks: number[][] | null = null;
    if (ratio === 4) {
      const eI = compressN(a, `${p}.attn.indexer.compressor`, 4, t.idxD, f);
      picks = a.map((x, s) => {
        const qi = mv(V(`${p}.attn.indexer.wq_b.weight`), t.idxH * t.idxD, qr[s]);
        const heads = Array.from({ length: t.idxH }, (_, h) => {
          const v = qi.slice(h * t.idxD, (h + 1) * t.idxD);
          rot(v, t.idxD, s, f);
          return v;
        });
        const wt = mv(V(`${p}.attn.indexer.weights_proj.weight`), t.idxH, x).map((v) => v / Math.sqrt(t.idxD) / Math.sqrt(t.idxH));
        const vis = Math.floor((s + 1) / 4);
        const sc = Array.from({ length: vis }, (_, b) => heads.reduce((acc, qh, h) => acc + wt[h] * Math.max(0, qh.reduce((d, v, i) => d + v * eI[b][i], 0)), 0));
        return byScoreThenIndex(sc, Math.min(t.idxTopk, vis));
      });
    }
    const sink = V(`${p}.attn.attn_sink`);
    const o = q.map((qs, s) => {
      const cands: Float64Array[] = [];
      for (let j = Math.max(0, s - t.window + 1); j <= s; j++) cands.push(kv[j]);
      const blocks = picks ? picks[s] : ratio > 0 ? Array.from({ length: Math.floor((s + 1) / ratio) }, (_, b) => b) : [];
      for (const b of blocks) cands.push(comp[b]);
      return qs.map((qh, h) => {
        const z = cands.map((k) => k.reduce((d, v, i) => d + v * qh[i], 0) / Math.sqrt(hd));
        const den = z.reduce((acc, v) => acc + Math.exp(v), 0) + Math.exp(sink[h]);
        const oh = new Float64Array(hd);
        cands.forEach((k, c) => k.forEach((v, i) => (oh[i] += (Math.exp(z[c]) / den) * v)));
        rot(oh, hd, s, f, -1);
        return oh;
      });
    });
    const hpg = H / t.G;
    const attnOut = o.map((os) => {
      const y: number[] = [];
      for (let g = 0; g < t.G; g++) {
        const og: number[] = [];
        for (let j = 0; j < hpg; j++) og.push(...os[g * hpg + j]);
        const Wg = V(`${p}.attn.wo_a.weight`).subarray(g * t.oLora * og.length, (g + 1) * t.oLora * og.length);
        y.push(...mv(Wg, t.oLora, og));
      }
      return mv(V(`${p}.attn.wo_b.weight`), D, y);
    });
    X = hcPostN(attnOut, X, pa);
    // MoE
    const pf = hcPreN(X, `${p}.hc_ffn`);
    const fIn = pf.map((x) => rms(x.u, V(`${p}.ffn_norm.weight`)));
    const experts: number[][] = [];
    const router: number[][] = [];
    const moeOut = fIn.map((x, s) => {
      const sc = mv(V(`${p}.ffn.gate.weight`), t.E, x).map((l) => Math.sqrt(l > 20 ? l : Math.log(1 + Math.exp(l))));
      let ids: number[];
      const forced = forcedExperts.get(L);
      if (forced) ids = forced[s];
      else if (L < t.hash) ids = w.tid2eid.get(L)![tokens[s]];
      else {
        const bias = V(`${p}.ffn.gate.bias`);
        ids = byScoreThenIndex(sc.map((v, e) => v + bias[e]), t.topk);
      }
      ids = [...ids].sort((a2, b2) => a2 - b2);
      const tot = ids.reduce((acc, e) => acc + sc[e], 0);
      const om = ids.map((e) => (t.routeScale * sc[e]) / tot);
      experts.push(ids);
      router.push(om);
      const y = swigluExpert(`${p}.ffn.shared_experts`, x, 0, 1);
      ids.forEach((e, i) => swigluExpert(`${p}.ffn.experts.${e}`, x, t.limit, om[i]).forEach((v, k) => (y[k] += v)));
      return y;
    });
    X = hcPostN(moeOut, X, pf);
    const flat = (rows: Float64Array[][]) => Float64Array.from(rows.flatMap((r2) => r2.flatMap((v) => [...v])));
    layers.push({ out: flat(X), attn: Float64Array.from(attnOut.flatMap((v) => [...v])), moe: Float64Array.from(moeOut.flatMap((v) => [...v])), router, experts, indexer: picks });
  }
  // head
  const fnH = V('hc_head_fn');
  const finalNorm = X.map((Xt) => {
    const xf: number[] = [];
    for (let j = 0; j < hc; j++) xf.push(...Xt[j]);
    let ss = 0;
    for (const v of xf) ss += v * v;
    const rho = 1 / Math.sqrt(ss / xf.length + t.eps);
    const m = mv(fnH, hc, xf).map((v) => v * rho);
    const pre = Array.from({ length: hc }, (_, j) => sig(m[j] * V('hc_head_scale')[0] + V('hc_head_base')[j]) + t.hcEps);
    const v = new Float64Array(D);
    for (let j = 0; j < hc; j++) for (let i = 0; i < D; i++) v[i] += pre[j] * Xt[j][i];
    return rms(v, V('norm.weight'));
  });
  const logits = finalNorm.map((x) => mv(V('head.weight'), t.vocab, x));
  return {
    embed: Float64Array.from(emb.flatMap((v) => [...v])),
    layers,
    finalNorm: Float64Array.from(finalNorm.flatMap((v) => [...v])),
    logits: Float64Array.from(logits.flatMap((v) => [...v])),
  };
}

// ---------------------------------------------------------------- unit tests of the pieces

describe('deepseek_v4 rope (§4.1, §10.3)', () => {
  const release = { factor: 16, originalSeqLen: 65536, betaFast: 32, betaSlow: 1 };

  it('YaRN lo/hi = 15/25 for the release (R 64, compress_rope_theta 160000)', () => {
    expect(yarnRange(64, 160000, release)).toEqual({ lo: 15, hi: 25 });
  });

  it('frequencies follow f_i·(s_i + (1 − s_i)/factor) with the linear ramp between lo and hi', () => {
    const f = deepseekInvFreq(64, 160000, release);
    expect(f).toHaveLength(32);
    for (let i = 0; i < 32; i++) {
      const base = 160000 ** (-(2 * i) / 64);
      const ramp = i <= 15 ? 0 : i >= 25 ? 1 : (i - 15) / 10;
      const want = base * (1 - ramp) + (base / 16) * ramp;
      expect(f[i]).toBeCloseTo(want, 15);
    }
    expect(f[0]).toBe(1); // high-frequency dims untouched
    expect(f[31]).toBeCloseTo(160000 ** (-62 / 64) / 16, 18); // low-frequency dims divided by the factor
  });

  it('layers without a compressor use rope_theta without YaRN; compressed layers use compress_rope_theta + YaRN', () => {
    const cfg = { ropeDim: 64, ropeTheta: 10000, compressRopeTheta: 160000, yarn: release } as Parameters<typeof layerInvFreq>[0];
    const plain = layerInvFreq(cfg, 0);
    for (let i = 0; i < 32; i++) expect(plain[i]).toBeCloseTo(10000 ** (-(2 * i) / 64), 15);
    expect(Array.from(layerInvFreq(cfg, 4))).toEqual(Array.from(deepseekInvFreq(64, 160000, release)));
    expect(Array.from(layerInvFreq(cfg, 128))).toEqual(Array.from(layerInvFreq(cfg, 4)));
  });
});

describe('deepseek_v4 hyper-connections (§4.3, §4.7)', () => {
  /** Sinkhorn with 2-D arrays, spelled out from §4.3 step 7. */
  function sinkhornRef(A: number[][], iters: number, eps: number): number[][] {
    const n = A.length;
    let C = A.map((row) => {
      const e = row.map((v) => Math.exp(v));
      const s = e.reduce((a, b) => a + b, 0);
      return e.map((v) => v / s + eps);
    });
    const col = () => {
      const sums = Array.from({ length: n }, (_, k) => C.reduce((a, row) => a + row[k], 0));
      C = C.map((row) => row.map((v, k) => v / (sums[k] + eps)));
    };
    col();
    for (let i = 1; i < iters; i++) {
      C = C.map((row) => {
        const s = row.reduce((a, b) => a + b, 0);
        return row.map((v) => v / (s + eps));
      });
      col();
    }
    return C;
  }

  it('sinkhorn(hc=4, iters=20): rows and columns sum to ≈1 and match a hand-rolled float64 version', () => {
    const r = rng(1);
    for (let trial = 0; trial < 20; trial++) {
      // logits ~N(0,1): 20 iterations bring the rows within 2e-4 of 1 (numpy, 5000 draws); spikier logits
      // converge more slowly, and the last step normalizes columns, so columns are 1 up to ε regardless.
      const A = Array.from({ length: 4 }, () => Array.from({ length: 4 }, () => r.normal()));
      const C = sinkhorn(A.flat(), 4, 20, 1e-6);
      const ref = sinkhornRef(A, 20, 1e-6);
      for (let j = 0; j < 4; j++) for (let k = 0; k < 4; k++) expect(C[j * 4 + k]).toBeCloseTo(ref[j][k], 14);
      for (let j = 0; j < 4; j++) expect(Math.abs(C.slice(j * 4, j * 4 + 4).reduce((a, b) => a + b, 0) - 1)).toBeLessThan(1e-3);
      for (let k = 0; k < 4; k++) expect(Math.abs([0, 1, 2, 3].reduce((a, j) => a + C[j * 4 + k], 0) - 1)).toBeLessThan(1e-5);
    }
  });

  it('sinkhorn(iters=1) is row softmax + ε then one column division', () => {
    const A = [[0, 1], [2, 3]];
    const C = sinkhorn(A.flat(), 2, 1, 1e-6);
    const sm = A.map((row) => row.map((v) => Math.exp(v) / (Math.exp(row[0]) + Math.exp(row[1])) + 1e-6));
    const col = [0, 1].map((k) => sm[0][k] + sm[1][k] + 1e-6);
    expect(Array.from(C)).toEqual([0, 1, 2, 3].map((q) => expect.closeTo(sm[q >> 1][q & 1] / col[q & 1], 15)));
  });

  it('hcPre / hcPost / hcHead match the formulas on a small case', () => {
    const r = rng(2);
    const S = 3, hc = 2, D = 5, nMix = (2 + hc) * hc;
    const X = f32(randn(r, S * hc * D));
    const p = { fn: f32(randn(r, nMix * hc * D, 0.3)), base: f32(randn(r, nMix)), scale: f32([0.7, 1.3, 0.9]) };
    const d = { hc, D, normEps: 1e-6, hcEps: 1e-6, iters: 20 };
    const got = hcPre(X, S, p, d);
    const sig = (x: number) => 1 / (1 + Math.exp(-x));
    for (let t = 0; t < S; t++) {
      const xs = Array.from(X.subarray(t * hc * D, (t + 1) * hc * D));
      const rho = 1 / Math.sqrt(xs.reduce((a, v) => a + v * v, 0) / xs.length + 1e-6);
      const m = Array.from({ length: nMix }, (_, j) => rho * xs.reduce((a, v, i) => a + v * p.fn[j * hc * D + i], 0));
      const pre = [0, 1].map((j) => sig(p.scale[0] * m[j] + p.base[j]) + 1e-6);
      const post = [0, 1].map((j) => 2 * sig(p.scale[1] * m[2 + j] + p.base[2 + j]));
      const A = [0, 1].map((j) => [0, 1].map((k) => p.scale[2] * m[4 + 2 * j + k] + p.base[4 + 2 * j + k]));
      const C = sinkhornRef(A, 20, 1e-6);
      for (let j = 0; j < 2; j++) expect(got.post[t * 2 + j]).toBeCloseTo(post[j], 6);
      for (let j = 0; j < 2; j++) for (let k = 0; k < 2; k++) expect(got.comb[t * 4 + j * 2 + k]).toBeCloseTo(C[j][k], 6);
      for (let i = 0; i < D; i++) expect(got.u[t * D + i]).toBeCloseTo(pre[0] * xs[i] + pre[1] * xs[D + i], 5);
    }
    // post: X'_k = post_k·F + Σ_j C_jk·X_j (C transposed)
    const F = f32(randn(r, S * D));
    const Y = hcPost(F, X, S, hc, D, got.post, got.comb);
    for (let t = 0; t < S; t++) {
      for (let k = 0; k < hc; k++) {
        for (let i = 0; i < D; i++) {
          let want = got.post[t * hc + k] * F[t * D + i];
          for (let j = 0; j < hc; j++) want += got.comb[t * hc * hc + j * hc + k] * X[(t * hc + j) * D + i];
          expect(Y[(t * hc + k) * D + i]).toBeCloseTo(want, 5);
        }
      }
    }
    // head: pre only, fn [hc, hc·D], one scale
    const ph = { fn: f32(randn(r, hc * hc * D, 0.3)), base: f32(randn(r, hc)), scale: f32([1.1]) };
    const v = hcHead(X, S, ph, d);
    for (let t = 0; t < S; t++) {
      const xs = Array.from(X.subarray(t * hc * D, (t + 1) * hc * D));
      const rho = 1 / Math.sqrt(xs.reduce((a, u) => a + u * u, 0) / xs.length + 1e-6);
      const pre = [0, 1].map((j) => sig(rho * xs.reduce((a, u, i) => a + u * ph.fn[j * hc * D + i], 0) * ph.scale[0] + ph.base[j]) + 1e-6);
      for (let i = 0; i < D; i++) expect(v[t * D + i]).toBeCloseTo(pre[0] * xs[i] + pre[1] * xs[D + i], 5);
    }
  });
});

describe('deepseek_v4 compressor (§4.5 step 3)', () => {
  it('ratio 4 overlap: 8 slots per channel, previous block on the first half, nothing before block 0', () => {
    const r = rng(3);
    const S = 10, ratio = 4, dc = 3, w = 2 * dc;
    const K = f32(randn(r, S * w));
    const Z = f32(randn(r, S * w));
    const ape = f32(randn(r, ratio * w));
    const e = compressBlocks(K, Z, ape, S, ratio, dc, true);
    expect(e).toHaveLength(2 * dc); // ⌊10/4⌋ = 2 blocks; tokens 8, 9 wait
    for (let b = 0; b < 2; b++) {
      for (let ch = 0; ch < dc; ch++) {
        const sc: number[] = [];
        const kv: number[] = [];
        for (let i = 0; i < ratio; i++) {
          if (b > 0) {
            sc.push(Z[((b - 1) * ratio + i) * w + ch] + ape[i * w + ch]);
            kv.push(K[((b - 1) * ratio + i) * w + ch]);
          }
        }
        for (let i = 0; i < ratio; i++) {
          sc.push(Z[(b * ratio + i) * w + dc + ch] + ape[i * w + dc + ch]);
          kv.push(K[(b * ratio + i) * w + dc + ch]);
        }
        const den = sc.reduce((a, s) => a + Math.exp(s), 0);
        const want = sc.reduce((a, s, i) => a + (Math.exp(s) / den) * kv[i], 0);
        expect(e[b * dc + ch]).toBeCloseTo(want, 6);
      }
    }
  });

  it('ratio without overlap: per-channel softmax over the block', () => {
    const r = rng(4);
    const S = 7, ratio = 3, dc = 2;
    const K = f32(randn(r, S * dc));
    const Z = f32(randn(r, S * dc));
    const ape = f32(randn(r, ratio * dc));
    const e = compressBlocks(K, Z, ape, S, ratio, dc, false);
    expect(e).toHaveLength(2 * dc);
    for (let b = 0; b < 2; b++) {
      for (let ch = 0; ch < dc; ch++) {
        const sc = [0, 1, 2].map((i) => Z[(b * 3 + i) * dc + ch] + ape[i * dc + ch]);
        const den = sc.reduce((a, s) => a + Math.exp(s), 0);
        expect(e[b * dc + ch]).toBeCloseTo(sc.reduce((a, s, i) => a + (Math.exp(s) / den) * K[(b * 3 + i) * dc + ch], 0), 6);
      }
    }
    expect(compressBlocks(K.subarray(0, 2 * dc), Z.subarray(0, 2 * dc), ape, 2, 3, dc, false)).toHaveLength(0);
  });
});

describe('deepseek_v4 indexer (§4.5 step 6, §10.1)', () => {
  it('top-k breaks ties by the lowest index and returns ids ascending', () => {
    expect(topkLowestIndex([1, 3, 3, 2, 3], 2)).toEqual([1, 2]);
    expect(topkLowestIndex([0, 0, 0, 0], 2)).toEqual([0, 1]);
    expect(topkLowestIndex([5, 0, 0, 7, 0], 3)).toEqual([0, 1, 3]);
    expect(topkLowestIndex([2, 1], 5)).toEqual([0, 1]);
    expect(topkLowestIndex([], 2)).toEqual([]);
    expect(topkLowestIndex([-Infinity, 1, -Infinity], 2)).toEqual([0, 1]);
  });

  it('scores: Σ_h w_h·ReLU(q_h·e_b) over visible blocks b < ⌊(t+1)/r⌋, exact zeros tie', () => {
    const r = rng(5);
    const S = 9, nh = 2, hd = 3, ratio = 4;
    const qI = f32(randn(r, S * nh * hd));
    const w = randn(r, S * nh);
    const eI = f32(randn(r, 2 * hd));
    const sc = indexerScores(qI, w, eI, S, { heads: nh, headDim: hd, ratio });
    expect(sc.map((s) => s.length)).toEqual([0, 0, 0, 1, 1, 1, 1, 2, 2]);
    for (let t = 0; t < S; t++) {
      for (let b = 0; b < sc[t].length; b++) {
        let want = 0;
        for (let h = 0; h < nh; h++) want += w[t * nh + h] * Math.max(0, [0, 1, 2].reduce((a, i) => a + qI[(t * nh + h) * hd + i] * eI[b * hd + i], 0));
        expect(sc[t][b]).toBeCloseTo(want, 6);
      }
    }
    // all index heads negative against every block → every score is exactly 0 → lowest blocks win
    const neg = indexerScores(f32(Array(nh * hd).fill(-1)), [1, 1], f32(Array(3 * hd).fill(1)), 1, { heads: nh, headDim: hd, ratio: 1 });
    expect(Array.from(neg[0])).toEqual([0]);
  });
});

describe('deepseek_v4 MoE (§4.6)', () => {
  it('sqrt(softplus) with PyTorch’s threshold 20', () => {
    expect(sqrtSoftplus(0)).toBeCloseTo(Math.sqrt(Math.LN2), 15);
    expect(sqrtSoftplus(25)).toBe(5);
    expect(sqrtSoftplus(-30)).toBeCloseTo(Math.sqrt(Math.log1p(Math.exp(-30))), 25);
    expect(sqrtSoftplus(3)).toBeCloseTo(Math.sqrt(Math.log(1 + Math.exp(3))), 14);
  });

  const scores = Float64Array.from([0.5, 0.9, 0.1, 0.7, /* token 1 */ 0.3, 0.3, 0.8, 0.3]);
  const base = { scores, S: 2, experts: 4, topk: 2, routeScale: 1.5, bias: null, hashIds: null, forced: null };

  it('hash routing: tid2eid ids, sorted; weights from the unbiased scores, bias ignored', () => {
    const r = route({ ...base, bias: f32([100, 0, 0, 0]), hashIds: [[3, 0], [1, 2]] });
    expect(r.ids).toEqual([[0, 3], [1, 2]]);
    expect(r.weights[0][0]).toBeCloseTo((1.5 * 0.5) / 1.2, 14);
    expect(r.weights[0][1]).toBeCloseTo((1.5 * 0.7) / 1.2, 14);
    expect(r.weights[1][1]).toBeCloseTo((1.5 * 0.8) / 1.1, 14);
  });

  it('top-k on score + bias, weights on the score; ties → lowest expert id', () => {
    const r = route({ ...base, bias: f32([0.5, 0, 0, 0]) });
    expect(r.ids[0]).toEqual([0, 1]); // 0.5+0.5 = 1.0 beats 0.7
    expect(r.weights[0][0]).toBeCloseTo((1.5 * 0.5) / 1.4, 14);
    expect(r.ids[1]).toEqual([0, 2]); // 0.3+0.5 = 0.8 ties expert 2's 0.8: both in
    const tie = route({ ...base, bias: f32([0, 0, 0, 0]) });
    expect(tie.ids[1]).toEqual([0, 2]); // 0.8, then three 0.3s → expert 0
  });

  it('forced ids replace the choice; weights still from this path’s scores', () => {
    const r = route({ ...base, bias: f32([0, 0, 0, 0]), forced: [[2, 3], [3, 1]] });
    expect(r.ids).toEqual([[2, 3], [1, 3]]);
    expect(r.weights[1][0]).toBeCloseTo((1.5 * 0.3) / 0.6, 14);
    expect(() => route({ ...base, bias: f32([0, 0, 0, 0]), forced: [[2, 9], [3, 1]] })).toThrow(/outside/);
    expect(() => route({ ...base, bias: f32([0, 0, 0, 0]), forced: [[2], [3, 1]] })).toThrow(/holds 1 ids/);
  });

  function plain(name: string, out: number, inn: number, data: Float32Array): LinearWeight {
    return { name, format: 'plain', out, in: inn, weight: { name, dtype: 'F32', shape: [out, inn], bytes: new Uint8Array(data.buffer) }, scale: null, block: [1, 1] };
  }

  it('routed experts clamp (gate ≤ limit, |up| ≤ limit), the shared expert does not', () => {
    const r = rng(6);
    const D = 4, I = 3;
    const W1 = f32(randn(r, I * D, 3));
    const W2 = f32(randn(r, D * I));
    const W3 = f32(randn(r, I * D, 3));
    const ex: DeepseekV4Expert = { w1: plain('w1', I, D, W1), w2: plain('w2', D, I, W2), w3: plain('w3', I, D, W3) };
    const x = f32(randn(r, 2 * D));
    const direct = (limit: number, omega: number[]) => {
      const y: number[] = [];
      for (let t = 0; t < 2; t++) {
        const h = Array.from({ length: I }, (_, i) => {
          let g = 0;
          let u = 0;
          for (let k = 0; k < D; k++) {
            g += W1[i * D + k] * x[t * D + k];
            u += W3[i * D + k] * x[t * D + k];
          }
          if (limit > 0) {
            g = Math.min(g, limit);
            u = Math.min(Math.max(u, -limit), limit);
          }
          return (omega[t] * g) / (1 + Math.exp(-g)) * u;
        });
        for (let o = 0; o < D; o++) y.push(h.reduce((a, hv, i) => a + W2[o * I + i] * hv, 0));
      }
      return y;
    };
    const clamped = expertForward(x, 2, ex, 0.5, [0.3, 1.2]);
    const free = expertForward(x, 2, ex, 0, null);
    expect(relErr(clamped, direct(0.5, [0.3, 1.2]))).toBeLessThan(1e-6);
    expect(relErr(free, direct(0, [1, 1]))).toBeLessThan(1e-6);
    expect(relErr(free, direct(0.5, [1, 1]))).toBeGreaterThan(1e-3); // the clamp bites on this input
  });
});

describe('deepseek_v4 hyper-connection mixes (native float64 sums)', () => {
  it('hcPost and the pre collapse (hcPre, hcHead) are hcPostTs and collapseTs bit for bit at every SIMD level, with sums whose order shows', () => {
    const r = rng(83);
    const same = (F: Float32Array, X: Float32Array, S: number, hc: number, D: number, post: Float64Array, comb: Float64Array, pre: Float64Array, what: string) => {
      const wantPost = new Uint32Array(hcPostTs(F, X, S, hc, D, post, comb).buffer);
      const wantU = new Uint32Array(collapseTs(X, S, hc, D, pre).buffer);
      for (const level of ['auto', 'avx2', 'scalar'] as const) {
        setReferenceSimd(level);
        expect(Array.from(new Uint32Array(hcPost(F, X, S, hc, D, post, comb).buffer)), `hcPost ${what} ${level}`).toEqual(Array.from(wantPost));
        expect(Array.from(new Uint32Array(hcCollapse(X, S, hc, D, pre).buffer)), `collapse ${what} ${level}`).toEqual(Array.from(wantU));
      }
    };
    try {
      for (const [S, hc, D] of [[7, 4, 4099], [3, 3, 40], [2, 1, 5], [0, 4, 16], [2, 0, 5], [2, 3, 0]] as const) {
        // ±1e20 stream values that cancel between streams, with small ones a different order would absorb
        const PAT = [1e20, 1, -1e20, 3];
        const X = f32(Array.from({ length: S * hc * D }, (_, k) => (k % 11 === 0 ? PAT[Math.floor(k / D) % 4] : randn(r, 1)[0] * 10 ** ((k % 9) - 4))));
        const F = f32(randn(r, S * D).map((v, i) => (i % 13 === 0 ? -0 : v)));
        const post = Float64Array.from(randn(r, S * hc), (v, i) => (i % 5 === 0 ? 0 : v));
        const comb = Float64Array.from(randn(r, S * hc * hc), (v) => Math.abs(v));
        const pre = Float64Array.from(randn(r, S * hc), (v, i) => (i % 4 === 1 ? -0 : v));
        same(F, X, S, hc, D, post, comb, pre, `[${S}, ${hc}, ${D}]`);
      }
      // the data above make order matter: summing the streams in reverse changes some output
      const S = 2, hc = 4, D = 64;
      const X = f32(Array.from({ length: S * hc * D }, (_, k) => { const v = [1e20, 1, -1e20, 3][Math.floor(k / D) % 4]; return Math.abs(v) > 10 ? v : v * (1 + (k % 7) / 8); }));
      const ones = new Float64Array(S * hc).fill(1);
      const fwd = collapseTs(X, S, hc, D, ones);
      const rev = collapseTs(f32(Array.from({ length: S * hc * D }, (_, k) => X[Math.floor(k / (hc * D)) * hc * D + (hc - 1 - (Math.floor(k / D) % hc)) * D + (k % D)])), S, hc, D, ones);
      expect(Array.from(fwd)).not.toEqual(Array.from(rev));
      // and the native mixes keep the forward order on them, over every lane width and a tail (D = 64 + 7)
      const D2 = D + 7;
      const X2 = f32(Array.from({ length: S * hc * D2 }, (_, k) => { const v = [1e20, 1, -1e20, 3][Math.floor(k / D2) % 4]; return Math.abs(v) > 10 ? v : v * (1 + (k % 7) / 8); }));
      same(f32(new Array(S * D2).fill(0.5)), X2, S, hc, D2, new Float64Array(S * hc).fill(1), new Float64Array(S * hc * hc).fill(1), new Float64Array(S * hc).fill(1), 'cancelling streams');
    } finally {
      setReferenceSimd('auto');
    }
    expect(() => hcPost(f32([1]), f32([1, 2]), 1, 1, 1, Float64Array.of(1), Float64Array.of(1))).toThrow(/must hold/);
    expect(() => hcCollapse(f32([1, 2]), 2 ** 40, 1, 2 ** 20, Float64Array.of(1))).toThrow(/S must be an integer|too large/);
  });
});

describe('deepseek_v4 attention core (§4.5 step 5)', () => {
  it('attendWithSink (native float64 sums) is attendWithSinkTs bit for bit at every SIMD level: head dims off the SIMD widths, empty windows and pick lists, -Inf and large sinks, large values', () => {
    const r = rng(81);
    try {
      for (const [S, H, d, B] of [[37, 5, 72, 11], [20, 3, 512, 40], [9, 2, 7, 3]] as const) {
        const q = f32(randn(r, S * H * d).map((v, i) => (i % 97 === 0 ? v * 3e4 : v)));
        const kv = f32(randn(r, S * d).map((v, i) => (i % 89 === 0 ? v * 1e3 : v)));
        const comp = f32(randn(r, B * d));
        const sink = f32(Array.from({ length: H }, (_, h) => [-Infinity, 0.7, 40, -3][h % 4]));
        // windows of 0..7 raw rows (none for every 5th token), picks of 0..B compressed rows in any order
        const window = (t: number): [number, number] => (t % 5 === 4 ? [t + 1, t] : [Math.max(0, t - 6), t]);
        const picksOf = Array.from({ length: S }, (_, t) => Array.from({ length: (t * 7) % (B + 1) }, (_, j) => (j * 5 + t) % B));
        const want = new Uint32Array(attendWithSinkTs(q, kv, comp, S, H, d, window, (t) => picksOf[t], sink).buffer);
        for (const level of ['auto', 'avx2', 'scalar'] as const) {
          setReferenceSimd(level);
          const got = new Uint32Array(attendWithSink(q, kv, comp, S, H, d, window, (t) => picksOf[t], sink).buffer);
          let bad = -1;
          for (let i = 0; i < got.length && bad < 0; i++) if (got[i] !== want[i]) bad = i;
          expect(bad, `[S ${S}, H ${H}, d ${d}] ${level}: first differing output`).toBe(-1);
        }
      }
      // sums whose order shows in float32: ±1e20 terms that cancel, with small ones between that one order absorbs
      // into 1e20 and another keeps (the pattern 1e20, 1, −1e20, 3), along the head dimension (q all ones: the
      // scores) and along the candidates (q all zeros, so every p is the same: the output)
      const S = 40, H = 2, d = 48, B = 6;
      const PAT = [1e20, 1, -1e20, 3];
      const along = (n: number, at: (k: number) => number) => f32(Array.from({ length: n }, (_, k) => PAT[at(k) % 4] * (Math.abs(PAT[at(k) % 4]) > 10 ? 1 : 1 + (k % 7) / 8)));
      for (const [what, q, kv, comp] of [
        ['scores', f32(new Array(S * H * d).fill(1)), along(S * d, (k) => k % d), along(B * d, (k) => k % d)],
        ['output', f32(new Array(S * H * d).fill(0)), along(S * d, (k) => Math.floor(k / d)), along(B * d, (k) => Math.floor(k / d) + 1)],
      ] as const) {
        const sink = f32([0.5, -2]);
        // up to 30 raw rows and 4 picks: every SIMD block width of candidates (32, 16, 8, 4) and a scalar tail
        const window = (t: number): [number, number] => [Math.max(0, t - 29), t];
        const picks = (t: number) => (t > 12 ? [0, 1, 2, 3] : []);
        const want = new Uint32Array(attendWithSinkTs(q, kv, comp, S, H, d, window, picks, sink).buffer);
        for (const level of ['auto', 'avx2', 'scalar'] as const) {
          setReferenceSimd(level);
          const got = new Uint32Array(attendWithSink(q, kv, comp, S, H, d, window, picks, sink).buffer);
          let bad = -1;
          for (let i = 0; i < got.length && bad < 0; i++) if (got[i] !== want[i]) bad = i;
          expect(bad, `cancelling ${what}, ${level}: first differing output`).toBe(-1);
        }
      }
    } finally {
      setReferenceSimd('auto');
    }
  });

  it('attentionScores and attentionOutput refuse, by name, a token their arrays do not hold, however large the numbers (no product wraps), and picks outside the compressed rows', () => {
    const big = new Float32Array(8192);
    const o = big.subarray(4096);
    const none = new Int32Array(0);
    // t · H · d past 2^64 would wrap to a small offset: refused before any product
    expect(() => attentionOutput(new Float64Array(2048), f32([3]), 0, 0, f32([]), none, 2 ** 53 - 1, 2048, 1, o)).toThrow(/t must be an integer in \[0, 2\^31\)/);
    expect(() => attentionScores(big, 2 ** 53 - 1, 2048, 1, f32([3]), 0, 0, f32([]), none, 1)).toThrow(/t must be an integer/);
    expect(() => attentionOutput(new Float64Array(2), new Float32Array(1024), 0, 0, f32([]), none, 2, 2, 1024, o)).toThrow(/o holds no token 2/);
    expect(() => attentionScores(f32(new Array(8).fill(1)), 2, 2, 2, f32([1, 1]), 0, 0, f32([]), none, 1)).toThrow(/q holds no token 2/);
    expect(() => attentionScores(f32(new Array(8).fill(1)), 0, 2, 2, f32([1, 1]), 0, 0, f32([1, 1]), Int32Array.of(1), 1)).toThrow(/pick 1 outside the 1 compressed rows/);
    expect(() => attentionScores(f32(new Array(8).fill(1)), 0, 2, 2, f32([1, 1]), 0, 1, f32([]), none, 1)).toThrow(/raw rows \[0, 1\] outside the 1 of kv/);
  });

  it('softmax over the candidates with the sink only in the denominator', () => {
    const r = rng(8);
    const S = 3, H = 2, d = 4;
    const q = f32(randn(r, S * H * d));
    const kv = f32(randn(r, S * d));
    const comp = f32(randn(r, 2 * d));
    const sink = f32([0.3, -1.2]);
    const o = attendWithSink(q, kv, comp, S, H, d, (t) => [Math.max(0, t - 1), t], (t) => (t === 2 ? [1] : []), sink);
    for (let t = 0; t < S; t++) {
      const rows: number[][] = [];
      for (let s = Math.max(0, t - 1); s <= t; s++) rows.push(Array.from(kv.subarray(s * d, (s + 1) * d)));
      if (t === 2) rows.push(Array.from(comp.subarray(d, 2 * d)));
      for (let h = 0; h < H; h++) {
        const z = rows.map((k) => k.reduce((a, v, i) => a + v * q[(t * H + h) * d + i], 0) / Math.sqrt(d));
        const den = z.reduce((a, v) => a + Math.exp(v), 0) + Math.exp(sink[h]);
        for (let i = 0; i < d; i++) expect(o[(t * H + h) * d + i]).toBeCloseTo(rows.reduce((a, k, c) => a + (Math.exp(z[c]) / den) * k[i], 0), 6);
      }
    }
  });
});

describe('deepseek_v4 tiled dequantization (linear.ts)', () => {
  const r = rng(9);
  const out = 300, inn = 160;
  const fp8 = encode('x.weight', [out, inn], randn(r, out * inn), 'fp8');
  const [w, s] = fp8.tensors;
  const lw: LinearWeight = {
    name: 'x.weight', format: 'fp8-block', out, in: inn,
    weight: { name: w.name, dtype: w.dtype, shape: w.shape, bytes: w.data },
    scale: { name: s.name, dtype: s.dtype, shape: s.shape, bytes: s.data },
    block: [128, 128],
  };
  const whole = dequantLinear(lw);

  it('fp8_rows(out=300,in=160): any row range equals the same rows of the whole dequantization', () => {
    expect(Array.from(whole)).toEqual(Array.from(fp8.values, (v) => Math.fround(v)));
    for (const [r0, n] of [[0, 300], [0, 128], [100, 60], [127, 2], [250, 50], [299, 1], [5, 290]]) {
      expect(Array.from(dequantRows(lw, r0, n))).toEqual(Array.from(whole.subarray(r0 * inn, (r0 + n) * inn)));
    }
  });

  it('fp8_linear(m=3,k=160,n=300) and mxfp4_linear(m=3,k=64,n=70) in tiles equal one untiled product', () => {
    const x = f32(randn(r, 3 * inn));
    expect(Array.from(linear(x, 3, lw, 128))).toEqual(Array.from(matmul(x, 3, inn, whole, out)));
    const fp4 = encode('y.weight', [70, 64], randn(r, 70 * 64), 'fp4');
    const [pw, ps] = fp4.tensors;
    const mx: LinearWeight = {
      name: 'y.weight', format: 'mxfp4', out: 70, in: 64,
      weight: { name: pw.name, dtype: pw.dtype, shape: pw.shape, bytes: pw.data },
      scale: { name: ps.name, dtype: ps.dtype, shape: ps.shape, bytes: ps.data },
      block: [1, 32],
    };
    const x2 = f32(randn(r, 3 * 64));
    const ref = matmul(x2, 3, 64, dequantLinear(mx), 70);
    expect(Array.from(dequantLinear(mx))).toEqual(Array.from(fp4.values, (v) => Math.fround(v)));
    for (const tile of [1, 16, 33, 256]) expect(Array.from(linear(x2, 3, mx, tile))).toEqual(Array.from(ref));
  });
});

// ---------------------------------------------------------------- the tiny checkpoint: binding and forward

describe('deepseek_v4 tiny checkpoint', () => {
  let root: string;
  let good: Written;
  const tokens = [0, 5, 17, 3, 3, 42, 11, 7, 29, 30, 2, 9, 14, 47, 21, 8, 5, 36, 19, 1, 25, 40];

  beforeAll(() => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'ld-dsv4-'));
    good = writeTiny(path.join(root, 'good'));
  });
  afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

  const open = (dir: string) => new DeepseekV4Checkpoint(Checkpoint.open(dir));
  function variant(name: string, edit: WriteOpts['edit']): string {
    return writeTiny(path.join(root, name), TINY, { edit }).dir;
  }
  function retype(tensors: TensorToWrite[], name: string, dtype: DType, shape?: number[]) {
    const t = tensors.find((x) => x.name === name)!;
    t.dtype = dtype;
    if (shape) t.shape = shape;
    const bytes = (shape ?? t.shape).reduce((a, b) => a * b, 1) * ({ F32: 4, BF16: 2, I64: 8, I32: 4 } as Record<string, number>)[dtype];
    t.data = new Uint8Array(bytes);
  }

  it('binds the official names; conformance passes without reading data; mtp.* is ignored', () => {
    const m = open(good.dir);
    expect(m.cfg.sources.inference).toBe(path.join(good.dir, 'inference', 'config.json'));
    expect(m.ignoredTensors).toBe(1);
    m.conformance();
    expect(m.ck.bytesRead).toBe(0);
    expect(m.quantizedLayers()).toEqual([0, 1, 2, 3]);
    const w = m.loadLayer(1);
    expect(w.ratio).toBe(4);
    expect(w.hash).toBe(true);
    expect(w.attn.compressor?.overlap).toBe(true);
    expect(w.attn.indexer?.compressor.headDim).toBe(TINY.idxD);
    expect(w.attn.wq_a.format).toBe('fp8-block');
    expect(w.ffn.gate.tid2eid?.dtype).toBe('I64');
    expect(w.ffn.gate.bias).toBeNull();
    expect(w.expertsLoaded()).toEqual([]);
    const e3 = w.expert(3);
    expect(e3.w1.format).toBe('mxfp4');
    expect(w.expert(3)).toBe(e3); // cached: both paths get the same bound object
    expect(w.expertsLoaded()).toEqual([3]);
    const w2 = m.loadLayer(2);
    expect(w2.attn.indexer).toBeNull();
    expect(w2.attn.compressor?.overlap).toBe(false);
    expect(w2.ffn.gate.tid2eid).toBeNull();
    expect(m.loadLayer(0).attn.compressor).toBeNull();
    expect(m.hashExperts(w, 5)).toEqual(good.tid2eid.get(1)![5]);
  });

  it("refuses a tid2eid row naming an expert twice (DeepSeek's code would apply it once, weigh it twice), and an id out of range", () => {
    const row = (edit: (ids: BigInt64Array) => void) => (ts: TensorToWrite[]) => {
      const t = ts.find((x) => x.name === 'layers.1.ffn.gate.tid2eid')!;
      const ids = new BigInt64Array(t.data.slice().buffer);
      edit(ids);
      t.data = new Uint8Array(ids.buffer);
    };
    const k = TINY.topk;
    const twice = open(variant('tid2eid-twice', row((ids) => (ids[5 * k + 1] = ids[5 * k]))));
    const w = twice.loadLayer(1);
    expect(() => twice.hashExperts(w, 5)).toThrow(InputError);
    expect(() => twice.hashExperts(w, 5)).toThrow(new RegExp(`tensor 'layers\\.1\\.ffn\\.gate\\.tid2eid': row 5 lists expert ${good.tid2eid.get(1)![5][0]} twice`));
    expect(twice.hashExperts(w, 6)).toEqual(good.tid2eid.get(1)![6]); // only the rows used are read
    const far = open(variant('tid2eid-far', row((ids) => (ids[5 * k] = 1000n))));
    expect(() => far.hashExperts(far.loadLayer(1), 5)).toThrow(/row 5 holds expert id 1000, outside \[0, /);
  });

  it('rejects wrong dtypes, shapes, missing and unexpected tensors, naming file and tensor', () => {
    const cases: Array<[string, WriteOpts['edit'], RegExp]> = [
      ['hc-bf16', (ts) => retype(ts, 'layers.0.hc_attn_fn', 'BF16'), /model\.safetensors: tensor 'layers\.0\.hc_attn_fn': dtype BF16 not allowed/],
      ['sink-shape', (ts) => retype(ts, 'layers.2.attn.attn_sink', 'F32', [5]), /tensor 'layers\.2\.attn\.attn_sink': shape \[5\] disagrees/],
      ['tid-i32', (ts) => retype(ts, 'layers.0.ffn.gate.tid2eid', 'I32'), /tensor 'layers\.0\.ffn\.gate\.tid2eid': dtype I32/],
      ['no-bias', (ts) => ts.splice(ts.findIndex((t) => t.name === 'layers.3.ffn.gate.bias'), 1), /tensor 'layers\.3\.ffn\.gate\.bias': tensor is missing/],
      ['renamed', (ts) => (ts.find((t) => t.name === 'layers.3.ffn.gate.bias')!.name = 'layers.3.ffn.gate.e_score_correction_bias'), /gate\.bias/],
      ['extra', (ts) => ts.push({ name: 'layers.9.attn_norm.weight', dtype: 'BF16', shape: [2], data: new Uint8Array(4) }), /num_hidden_layers 4 disagrees with the checkpoint, which stores layers 0-9/],
      ['expert-shape', (ts) => retype(ts, 'layers.2.ffn.experts.4.w2.weight', 'BF16', [TINY.D, TINY.I + 1]), /tensor 'layers\.2\.ffn\.experts\.4\.w2\.weight': shape/],
      ['gate-fp8', (ts) => {
        const i = ts.findIndex((t) => t.name === 'layers.3.ffn.gate.weight');
        const e = encode('layers.3.ffn.gate.weight', [TINY.E, TINY.D], randn(rng(1), TINY.E * TINY.D), 'fp8');
        ts.splice(i, 1, ...e.tensors);
      }, /tensor 'layers\.3\.ffn\.gate\.weight': stored as fp8-block .* keeps this linear plain/],
    ];
    for (const [name, edit, want] of cases) {
      const dir = variant(name, edit);
      let err: unknown = null;
      try {
        open(dir).conformance();
      } catch (e) {
        err = e;
      }
      expect(err, name).toBeInstanceOf(InputError);
      expect((err as Error).message, name).toMatch(want);
    }
  });

  it('expert_dtype "fp4" with BF16 experts is bad input; without expert_dtype the stored format decides', () => {
    const bf16Experts: WriteOpts['edit'] = (ts) => {
      for (let k = ts.length - 1; k >= 0; k--) {
        const m = /^layers\.(\d+)\.ffn\.experts\.(\d+)\.(w[123])\.(weight|scale)$/.exec(ts[k].name);
        if (m === null) continue;
        if (m[4] === 'scale') ts.splice(k, 1);
        else {
          const shape = m[3] === 'w2' ? [TINY.D, TINY.I] : [TINY.I, TINY.D];
          ts[k] = { name: ts[k].name, dtype: 'BF16', shape, data: new Uint8Array(shape[0] * shape[1] * 2) };
        }
      }
    };
    expect(() => open(variant('bf16-experts', bf16Experts)).conformance()).toThrow(/expert_dtype "fp4" declares mxfp4/);
    const dir = variant('bf16-experts-undeclared', (ts, cfg, inf) => {
      bf16Experts(ts, cfg, inf);
      delete inf.expert_dtype;
    });
    expect(() => open(dir).conformance()).not.toThrow();
  });

  it('a disagreement between config.json and inference/config.json is bad input naming both', () => {
    const dir = variant('disagree', (_ts, _cfg, inf) => {
      inf.index_topk = 3;
    });
    expect(() => open(dir)).toThrow(/config\.json has index_topk = 2 but .*inference\/config\.json has index_topk = 3/);
  });

  it('forward matches an independent float64 forward at every stage', () => {
    const m = open(good.dir);
    const ref = new DeepseekV4Reference(m);
    const naive = naiveForward(TINY, good, tokens);
    const S = tokens.length;
    const ctx = { tokens, positions: tokens.map((_, i) => i), forcedSelections: null };
    const emb = ref.embed(tokens);
    expect(emb.shape).toEqual([S, TINY.D]);
    expect(relErr(emb.data, naive.embed)).toBe(0);
    let x = emb;
    for (let L = 0; L < TINY.layers; L++) {
      const w = m.loadLayer(L);
      const res = ref.layer(L, x, w, ctx);
      const nl = naive.layers[L];
      expect(res.out.shape).toEqual([S, TINY.hc, TINY.D]);
      expect(res.selections?.experts, `layer ${L} experts`).toEqual(nl.experts);
      if (TINY.ratios[L] === 4) {
        expect(res.selections?.indexer, `layer ${L} indexer`).toEqual(nl.indexer);
        // the trap of §6: the indexer must actually drop visible blocks somewhere
        expect(nl.indexer!.some((p, t) => p.length < Math.floor((t + 1) / 4))).toBe(true);
      } else {
        expect(res.selections?.indexer).toBeUndefined();
      }
      expect(res.substages?.attn.shape).toEqual([S, TINY.D]);
      expect(res.substages?.['moe.router'].shape).toEqual([S, TINY.topk]);
      expect(relErr(res.substages!.attn.data, nl.attn), `layer ${L} attn`).toBeLessThan(2e-6);
      expect(relErr(res.substages!.moe.data, nl.moe), `layer ${L} moe`).toBeLessThan(2e-6);
      expect(relErr(res.substages!['moe.router'].data, nl.router.flat()), `layer ${L} router`).toBeLessThan(2e-6);
      expect(relErr(res.out.data, nl.out), `layer ${L}`).toBeLessThan(2e-6);
      // unrouted experts are never read
      expect(w.expertsLoaded()).toEqual([...new Set(nl.experts.flat())].sort((a, b) => a - b));
      x = res.out;
    }
    const fnorm = ref.finalNorm(x);
    expect(fnorm.shape).toEqual([S, TINY.D]);
    expect(relErr(fnorm.data, naive.finalNorm)).toBeLessThan(2e-6);
    const logits = ref.logits(fnorm);
    expect(logits.shape).toEqual([S, TINY.vocab]);
    expect(relErr(logits.data, naive.logits)).toBeLessThan(2e-6);
  });

  it('forced selections: its own choices reproduce the output exactly; other expert ids get weights from its scores', () => {
    const m = open(good.dir);
    const ref = new DeepseekV4Reference(m);
    const S = tokens.length;
    const base = { tokens, positions: tokens.map((_, i) => i), forcedSelections: null };
    const naive = naiveForward(TINY, good, tokens);
    // the reference's input of layer 3 (CSA, routed by score)
    const x3 = { shape: [S, TINY.hc, TINY.D], data: f32(naive.layers[2].out) };
    const w = m.loadLayer(3);
    const free = ref.layer(3, x3, w, base);
    const again = ref.layer(3, x3, w, { ...base, forcedSelections: free.selections });
    expect(Array.from(again.out.data)).toEqual(Array.from(free.out.data));
    // force experts [0, 5] everywhere and a different indexer pick; compare with the naive forward given the same experts
    const forcedExperts = tokens.map(() => [5, 0]);
    const forced = ref.layer(3, x3, w, { ...base, forcedSelections: { experts: forcedExperts, indexer: free.selections!.indexer! } });
    expect(forced.selections?.experts).toEqual(tokens.map(() => [0, 5]));
    const nf = naiveForward(TINY, good, tokens, new Map([[3, forcedExperts]]));
    expect(relErr(forced.out.data, nf.layers[3].out)).toBeLessThan(2e-6);
    expect(relErr(forced.substages!['moe.router'].data, nf.layers[3].router.flat())).toBeLessThan(2e-6);
    expect(() => ref.layer(3, x3, w, { ...base, forcedSelections: { experts: forcedExperts.slice(1) } })).toThrow(/hold 21 tokens/);
    expect(() => ref.layer(3, x3, w, { ...base, forcedSelections: { experts: forcedExperts, indexer: tokens.map(() => [4]) } })).toThrow(/not a visible block/);
  });

  it('a short prompt reads only the experts it routes to; the ModelDef parts wire up', () => {
    const m = open(good.dir);
    const def = deepseekV4Reference(m);
    expect(def).toMatchObject({ architecture: 'deepseek_v4', numLayers: 4, vocab: TINY.vocab });
    const w = def.loadLayer(0);
    const before = m.ck.bytesRead;
    const res = def.reference.layer(0, def.reference.embed([9]), w, { tokens: [9], positions: [0], forcedSelections: null });
    expect(w.expertsLoaded()).toEqual([...good.tid2eid.get(0)![9]].sort((a, b) => a - b));
    expect(res.selections?.experts).toEqual([w.expertsLoaded()]);
    // two experts × (w1, w2, w3 packed + scales) and the embedding row; nothing else
    const expertBytes = 2 * 3 * (TINY.I * TINY.D / 2 + TINY.I * TINY.D / 32);
    expect(m.ck.bytesRead - before).toBe(expertBytes + TINY.D * 2);
    expect(() => def.reference.layer(0, def.reference.embed([9, 9]), w, { tokens: [9, 9], positions: [0, 5], forcedSelections: null })).toThrow(/positions 0..S−1/);
  });
});

// ---------------------------------------------------------------- the committed fixture against its numpy golden

const FIXTURES_DIR = path.join(import.meta.dirname, '..', '..', 'fixtures');
/** The committed fixture, and its variant whose routed experts are ModelOpt NVFP4 (`fixture deepseek-v4-tiny --format modelopt-nvfp4`). */
const GOLDEN_PAIRS = [
  { name: 'deepseek-v4-tiny', fixture: path.join(FIXTURES_DIR, 'deepseek-v4-tiny'), golden: path.join(FIXTURES_DIR, 'deepseek-v4-tiny-golden', 'golden.safetensors') },
  {
    name: 'deepseek-v4-tiny with NVFP4 experts',
    fixture: path.join(FIXTURES_DIR, 'formats', 'deepseek-v4-tiny-modelopt-nvfp4'),
    golden: path.join(FIXTURES_DIR, 'formats', 'deepseek-v4-tiny-modelopt-nvfp4-golden', 'golden.safetensors'),
  },
];

/**
 * fixtures/deepseek-v4-tiny (FP8/FP4 weights, 3 shards) against scripts/golden/deepseek_v4_numpy.py, a float64
 * numpy forward written independently from the same spec. Same tolerance argument as above: FP32 floor vs
 * float64, so 2e-6 of the stage's max |value|; selections must agree exactly (the fixture generator keeps every
 * router and indexer choice ≥ 1% of the score scale ahead of its runner-up, and the golden checks that).
 * Both are committed: a missing file fails here, it does not skip.
 */
describe.each(GOLDEN_PAIRS)('deepseek_v4 fixture vs numpy golden: $name', ({ fixture: FIXTURE, golden: GOLDEN }) => {
  it('the committed fixture and golden exist', () => {
    const missing = [FIXTURE, GOLDEN].filter((p) => !fs.existsSync(p));
    expect(
      missing,
      'missing committed files: fixtures/deepseek-v4-tiny is written by `LAYERDIFF_REGEN_FIXTURES=1 npx vitest run fixtures/test/deepseek_v4_tiny.test.ts`, ' +
        'its golden by `python3 scripts/golden/deepseek_v4_numpy.py` (the NVFP4 variant: `layerdiff fixture deepseek-v4-tiny fixtures/formats/deepseek-v4-tiny-modelopt-nvfp4 --format modelopt-nvfp4`, ' +
        'then `python3 scripts/golden/deepseek_v4_numpy.py --fixture fixtures/formats/deepseek-v4-tiny-modelopt-nvfp4 --out fixtures/formats/deepseek-v4-tiny-modelopt-nvfp4-golden`)',
    ).toEqual([]);
  });

  it('every stage and every selection agrees with the float64 golden', () => {
    for (const p of [FIXTURE, GOLDEN]) if (!fs.existsSync(p)) throw new Error(`missing committed ${p} (see the test above)`);
    const g = SafetensorsFile.open(GOLDEN);
    const read = (name: string) => {
      const i = g.get(name)!;
      return { shape: i.shape, data: decodeToF32(i.dtype, g.read(i), i.shape.reduce((a, b) => a * b, 1)) };
    };
    const ids = (name: string) => {
      const t = read(name);
      const k = t.shape[1];
      return Array.from({ length: t.shape[0] }, (_, r) => Array.from(t.data.subarray(r * k, (r + 1) * k)).filter((v) => v >= 0));
    };
    try {
      const tokens = Array.from(read('tokens').data);
      const m = new DeepseekV4Checkpoint(Checkpoint.open(FIXTURE));
      m.conformance();
      const ref = new DeepseekV4Reference(m);
      const ctx = { tokens, positions: tokens.map((_, i) => i), forcedSelections: null };
      let x = ref.embed(tokens);
      expect(relErr(x.data, read('embed').data)).toBe(0);
      for (let L = 0; L < m.cfg.layers; L++) {
        const res = ref.layer(L, x, m.loadLayer(L), ctx);
        expect(res.out.shape).toEqual(read(`layer.${L}`).shape);
        expect(res.selections?.experts, `layer.${L}.experts`).toEqual(ids(`layer.${L}.experts`));
        if (g.get(`layer.${L}.indexer`) !== undefined) expect(res.selections?.indexer, `layer.${L}.indexer`).toEqual(ids(`layer.${L}.indexer`));
        expect(relErr(res.out.data, read(`layer.${L}`).data), `layer.${L}`).toBeLessThan(2e-6);
        x = res.out;
      }
      const fn = ref.finalNorm(x);
      expect(relErr(fn.data, read('final_norm').data)).toBeLessThan(2e-6);
      expect(relErr(ref.logits(fn).data, read('logits').data)).toBeLessThan(2e-6);
    } finally {
      g.close();
    }
  });
});
