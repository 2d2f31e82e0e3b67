/**
 * Hyper-connections (mHC), spec §4.3 and §4.7; DeepSeek's Block.hc_pre / hc_post, hc_split_sinkhorn and
 * ParallelHead.hc_head. Shapes: X [S, hc, D] (stream-major per token), mixes [S, (2+hc)·hc].
 * Two epsilons, as in model.py: the RMS factor ρ of the flattened streams uses rms_norm_eps (Block.norm_eps),
 * while pre's "+ε" and every Sinkhorn step use hc_eps.
 */
import { matmul } from '../ops.js';
import { hcCollapse, hcPostMix } from '../native.js';

export interface HcParams {
  /** [(2+hc)·hc, hc·D] (hc_head: [hc, hc·D]) */
  fn: Float32Array;
  base: Float32Array;
  scale: Float32Array;
}

export interface HcDims {
  hc: number;
  D: number;
  normEps: number;
  hcEps: number;
  iters: number;
}

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));

/**
 * Sinkhorn normalization of one hc×hc matrix A (row j, column k), §4.3 step 7: row softmax + ε, divide each
 * column by (its sum + ε), then (iters − 1) × [rows by (sum + ε), columns by (sum + ε)]. Float64 throughout.
 */
export function sinkhorn(A: ArrayLike<number>, hc: number, iters: number, eps: number): Float64Array {
  const C = Float64Array.from(A);
  for (let j = 0; j < hc; j++) {
    let m = -Infinity;
    for (let k = 0; k < hc; k++) m = Math.max(m, C[j * hc + k]);
    let sum = 0;
    for (let k = 0; k < hc; k++) sum += C[j * hc + k] = Math.exp(C[j * hc + k] - m);
    for (let k = 0; k < hc; k++) C[j * hc + k] = C[j * hc + k] / sum + eps;
  }
  const cols = () => {
    for (let k = 0; k < hc; k++) {
      let sum = 0;
      for (let j = 0; j < hc; j++) sum += C[j * hc + k];
      for (let j = 0; j < hc; j++) C[j * hc + k] /= sum + eps;
    }
  };
  cols();
  for (let it = 1; it < iters; it++) {
    for (let j = 0; j < hc; j++) {
      let sum = 0;
      for (let k = 0; k < hc; k++) sum += C[j * hc + k];
      for (let k = 0; k < hc; k++) C[j * hc + k] /= sum + eps;
    }
    cols();
  }
  return C;
}

/** m = ρ·(fn·x̂) per token, ρ = 1/sqrt(mean(x̂²) + eps) over all hc·D values (§4.3 steps 1–3). */
export function hcMixes(X: Float32Array, S: number, width: number, fn: Float32Array, nMix: number, normEps: number): Float64Array {
  const raw = matmul(X, S, width, fn, nMix);
  const m = new Float64Array(S * nMix);
  for (let t = 0; t < S; t++) {
    let ss = 0;
    for (let i = 0; i < width; i++) ss += X[t * width + i] * X[t * width + i];
    const rho = 1 / Math.sqrt(ss / width + normEps);
    for (let j = 0; j < nMix; j++) m[t * nMix + j] = raw[t * nMix + j] * rho;
  }
  return m;
}

/** u = Σ_j pre_j·X_j per token: [S, D] (native, collapseTs's sums in its order). */
function collapse(X: Float32Array, S: number, hc: number, D: number, pre: Float64Array): Float32Array {
  return hcCollapse(X, S, hc, D, pre);
}

/** collapse as a statement: the oracle the native mix is tested against. */
export function collapseTs(X: Float32Array, S: number, hc: number, D: number, pre: Float64Array): Float32Array {
  const u = new Float32Array(S * D);
  for (let t = 0; t < S; t++) {
    for (let i = 0; i < D; i++) {
      let acc = 0;
      for (let j = 0; j < hc; j++) acc += pre[t * hc + j] * X[(t * hc + j) * D + i];
      u[t * D + i] = acc;
    }
  }
  return u;
}

export interface HcPreResult {
  /** sublayer input [S, D] */
  u: Float32Array;
  /** [S, hc] */
  post: Float64Array;
  /** [S, hc, hc], C[t][j][k] */
  comb: Float64Array;
}

/** §4.3: pre_j = σ(scale₀·m_j + base_j) + ε, post_j = 2σ(scale₁·m_{hc+j} + base_{hc+j}), C = Sinkhorn(A). */
export function hcPre(X: Float32Array, S: number, p: HcParams, d: HcDims): HcPreResult {
  const { hc, D } = d;
  const nMix = (2 + hc) * hc;
  const m = hcMixes(X, S, hc * D, p.fn, nMix, d.normEps);
  const pre = new Float64Array(S * hc);
  const post = new Float64Array(S * hc);
  const comb = new Float64Array(S * hc * hc);
  for (let t = 0; t < S; t++) {
    const mt = (j: number) => m[t * nMix + j];
    for (let j = 0; j < hc; j++) {
      pre[t * hc + j] = sigmoid(p.scale[0] * mt(j) + p.base[j]) + d.hcEps;
      post[t * hc + j] = 2 * sigmoid(p.scale[1] * mt(hc + j) + p.base[hc + j]);
    }
    const A = new Float64Array(hc * hc);
    for (let q = 0; q < hc * hc; q++) A[q] = p.scale[2] * mt(2 * hc + q) + p.base[2 * hc + q];
    comb.set(sinkhorn(A, hc, d.iters, d.hcEps), t * hc * hc);
  }
  return { u: collapse(X, S, hc, D, pre), post, comb };
}

/**
 * X'_k = post_k·F + Σ_j C_jk·X_j (X' = Cᵀ·X; the only residual path, §4.3/§4.4). F [S, D] → [S, hc, D]. Native
 * (reference-cpu/native/attention_f64.cc): each element's float64 sum in hcPostTs's order, so its bits.
 */
export function hcPost(F: Float32Array, X: Float32Array, S: number, hc: number, D: number, post: Float64Array, comb: Float64Array): Float32Array {
  return hcPostMix(F, X, S, hc, D, post, comb);
}

/** hcPost as a statement: the oracle the native mix is tested against. */
export function hcPostTs(F: Float32Array, X: Float32Array, S: number, hc: number, D: number, post: Float64Array, comb: Float64Array): Float32Array {
  const Y = new Float32Array(S * hc * D);
  for (let t = 0; t < S; t++) {
    for (let k = 0; k < hc; k++) {
      for (let i = 0; i < D; i++) {
        let acc = post[t * hc + k] * F[t * D + i];
        for (let j = 0; j < hc; j++) acc += comb[(t * hc + j) * hc + k] * X[(t * hc + j) * D + i];
        Y[(t * hc + k) * D + i] = acc;
      }
    }
  }
  return Y;
}

/** §4.7: pre_j = σ(m_j·scale₀ + base_j) + ε with fn [hc, hc·D]; v = Σ_j pre_j·X_j → [S, D]. */
export function hcHead(X: Float32Array, S: number, p: HcParams, d: Omit<HcDims, 'iters'>): Float32Array {
  const { hc, D } = d;
  const m = hcMixes(X, S, hc * D, p.fn, hc, d.normEps);
  const pre = new Float64Array(S * hc);
  for (let q = 0; q < S * hc; q++) pre[q] = sigmoid(m[q] * p.scale[0] + p.base[q % hc]) + d.hcEps;
  return collapse(X, S, hc, D, pre);
}

/** The block input from the embedding: hc identical copies of each row (`unsqueeze(2).repeat`, §4.2). */
export function expandStreams(h: Float32Array, S: number, hc: number, D: number): Float32Array {
  const X = new Float32Array(S * hc * D);
  for (let t = 0; t < S; t++) for (let j = 0; j < hc; j++) X.set(h.subarray(t * D, (t + 1) * D), (t * hc + j) * D);
  return X;
}
