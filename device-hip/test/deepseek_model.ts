/**
 * A plain-TypeScript model of the DeepSeek-V4 device kernels (device-hip/src/deepseek_*.cc), written from the
 * numerics their comments and include/ld_deepseek.h state: every f32 operation as Math.fround of the exact
 * result (see ./model.ts), fused multiply-adds through its exact fmaf, the LD_LANES dot order through ldDot.
 * The native kernels must match it bit for bit.
 */
import { fmaf, fr, fromF16, ldDot, ldExpf, toF16, widen } from './model.js';

const dv = new DataView(new ArrayBuffer(4));
const bitsOf = (x: number) => (dv.setFloat32(0, x, true), dv.getUint32(0, true));
const ofBits = (u: number) => (dv.setUint32(0, u >>> 0, true), dv.getFloat32(0, true));

/** ld_logf: Cephes logf with fmaf Horner steps. */
export function ldLogf(xIn: number): number {
  let x = fr(xIn);
  if (Number.isNaN(x)) return NaN;
  if (x < 0) return NaN;
  if (x === 0) return -Infinity;
  if (x === Infinity) return Infinity;
  let u = bitsOf(x);
  let e = 0;
  if (u >>> 23 === 0) {
    x = fr(x * 2 ** 23);
    u = bitsOf(x);
    e = -23;
  }
  e += (u >>> 23) - 126;
  let m = ofBits((u & 0x007fffff) | 0x3f000000);
  if (m < fr(0.7071067811865476)) { // √½ (ld_logf's 0.707106781186547524f rounds to the same f32)
    e -= 1;
    m = fr(fr(m + m) - 1);
  } else {
    m = fr(m - 1);
  }
  const z = fr(m * m);
  let p = fr(7.0376836292e-2);
  for (const c of [-1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1]) {
    p = fmaf(p, m, fr(c));
  }
  let y = fr(fr(p * m) * z);
  y = fr(y + fr(e * fr(-2.12194440e-4)));
  y = fr(y - fr(0.5 * z));
  let r = fr(m + y);
  r = fr(r + fr(e * 0.693359375));
  return r;
}

export function ldLog1pf(x: number): number {
  const u = fr(1 + x);
  if (u === 1) return x;
  if (u === Infinity) return u;
  return fr(ldLogf(u) * fr(x / fr(u - 1)));
}

export const ldSoftplusf = (x: number) => (x > 20 ? x : ldLog1pf(ldExpf(x)));
export const ldSqrtSoftplusf = (x: number) => fr(Math.sqrt(ldSoftplusf(x)));
export const ldSigmoidf = (x: number) => fr(1 / fr(1 + ldExpf(-x)));

/** ld_topk_before: larger value first, NaN before numbers, equal values → lower index first. */
export function topkBefore(va: number, ia: number, vb: number, ib: number): boolean {
  const na = Number.isNaN(va), nb = Number.isNaN(vb);
  if (na !== nb) return na;
  if (!na && va !== vb) return va > vb;
  return ia < ib;
}

/** The k first indices of `values` in the topkBefore order, returned ascending. */
export function topkModel(values: ArrayLike<number>, k: number): number[] {
  const idx = Array.from({ length: values.length }, (_, i) => i);
  idx.sort((a, b) => (topkBefore(values[a], a, values[b], b) ? -1 : 1));
  return idx.slice(0, k).sort((a, b) => a - b);
}

export function sinkhornModel(A: ArrayLike<number>, hc: number, iters: number, epsIn: number): Float64Array {
  const eps = fr(epsIn);
  const C = Float64Array.from(A);
  for (let j = 0; j < hc; j++) {
    let m = C[j * hc];
    for (let k = 1; k < hc; k++) if (C[j * hc + k] > m) m = C[j * hc + k];
    let sum = 0;
    for (let k = 0; k < hc; k++) {
      C[j * hc + k] = ldExpf(fr(C[j * hc + k] - m));
      sum = fr(sum + C[j * hc + k]);
    }
    for (let k = 0; k < hc; k++) C[j * hc + k] = fr(fr(C[j * hc + k] / sum) + eps);
  }
  const cols = () => {
    for (let k = 0; k < hc; k++) {
      let sum = 0;
      for (let j = 0; j < hc; j++) sum = fr(sum + C[j * hc + k]);
      const d = fr(sum + eps);
      for (let j = 0; j < hc; j++) C[j * hc + k] = fr(C[j * hc + k] / d);
    }
  };
  for (let it = 0; it < iters; it++) {
    if (it > 0) {
      for (let j = 0; j < hc; j++) {
        let sum = 0;
        for (let k = 0; k < hc; k++) sum = fr(sum + C[j * hc + k]);
        const d = fr(sum + eps);
        for (let k = 0; k < hc; k++) C[j * hc + k] = fr(C[j * hc + k] / d);
      }
    }
    cols();
  }
  return C;
}

/** mixes m_j = f32(dot(x̂, fn_j)·ρ) of token t. */
function mixesModel(xf: Float64Array, t: number, width: number, fn: Float32Array, nmix: number, normEps: number): number[] {
  const rho = fr(1 / fr(Math.sqrt(fr(fr(ldDot(xf, t * width, xf, t * width, width) / width) + fr(normEps)))));
  return Array.from({ length: nmix }, (_, j) => fr(ldDot(xf, t * width, fn, j * width, width) * rho));
}

function collapseModel(xf: Float64Array, t: number, hc: number, D: number, pre: number[], out: Uint16Array): void {
  for (let i = 0; i < D; i++) {
    let acc = 0;
    for (let j = 0; j < hc; j++) acc = fmaf(pre[j], xf[(t * hc + j) * D + i], acc);
    out[t * D + i] = toF16(acc);
  }
}

export function hcPreModel(x: Uint16Array, fn: Float32Array, base: Float32Array, scale: Float32Array, T: number, hc: number, D: number, normEps: number, hcEps: number, iters: number) {
  const xf = widen(x);
  const width = hc * D, nmix = (2 + hc) * hc;
  const u = new Uint16Array(T * D), post = new Float32Array(T * hc), comb = new Float32Array(T * hc * hc);
  const eps = fr(hcEps);
  for (let t = 0; t < T; t++) {
    const m = mixesModel(xf, t, width, fn, nmix, normEps);
    const pre = Array.from({ length: hc }, (_, j) => fr(ldSigmoidf(fr(fr(scale[0] * m[j]) + base[j])) + eps));
    for (let j = 0; j < hc; j++) post[t * hc + j] = fr(2 * ldSigmoidf(fr(fr(scale[1] * m[hc + j]) + base[hc + j])));
    const A = Array.from({ length: hc * hc }, (_, q) => fr(fr(scale[2] * m[2 * hc + q]) + base[2 * hc + q]));
    comb.set(sinkhornModel(A, hc, iters, hcEps), t * hc * hc);
    collapseModel(xf, t, hc, D, pre, u);
  }
  return { u, post, comb };
}

export function hcHeadModel(x: Uint16Array, fn: Float32Array, base: Float32Array, scale: Float32Array, T: number, hc: number, D: number, normEps: number, hcEps: number): Uint16Array {
  const xf = widen(x);
  const v = new Uint16Array(T * D);
  for (let t = 0; t < T; t++) {
    const m = mixesModel(xf, t, hc * D, fn, hc, normEps);
    const pre = Array.from({ length: hc }, (_, j) => fr(ldSigmoidf(fr(fr(scale[0] * m[j]) + base[j])) + fr(hcEps)));
    collapseModel(xf, t, hc, D, pre, v);
  }
  return v;
}

export function hcPostModel(f: Uint16Array, x: Uint16Array, post: Float32Array, comb: Float32Array, T: number, hc: number, D: number): Uint16Array {
  const y = new Uint16Array(T * hc * D);
  for (let t = 0; t < T; t++) for (let k = 0; k < hc; k++) for (let i = 0; i < D; i++) {
    let acc = fr(post[t * hc + k] * fromF16(f[t * D + i]));
    for (let j = 0; j < hc; j++) acc = fmaf(comb[(t * hc + j) * hc + k], fromF16(x[(t * hc + j) * D + i]), acc);
    y[(t * hc + k) * D + i] = toF16(acc);
  }
  return y;
}

export function compressPoolModel(K: Float32Array, Z: Float32Array, ape: Float32Array, T: number, r: number, dc: number, overlap: boolean): Uint16Array {
  const B = Math.floor(T / r), w = (overlap ? 2 : 1) * dc, n = overlap ? 2 * r : r;
  const out = new Uint16Array(B * dc);
  for (let b = 0; b < B; b++) for (let ch = 0; ch < dc; ch++) {
    const score: number[] = [], kv: number[] = [];
    for (let i = 0; i < r; i++) {
      const cur = b * r + i;
      if (overlap) {
        score[r + i] = fr(Z[cur * w + dc + ch] + ape[i * w + dc + ch]);
        kv[r + i] = K[cur * w + dc + ch];
        score[i] = b > 0 ? fr(Z[(cur - r) * w + ch] + ape[i * w + ch]) : -Infinity;
        kv[i] = b > 0 ? K[(cur - r) * w + ch] : 0;
      } else {
        score[i] = fr(Z[cur * w + ch] + ape[i * w + ch]);
        kv[i] = K[cur * w + ch];
      }
    }
    let m = score[0];
    for (let i = 1; i < n; i++) if (score[i] > m) m = score[i];
    let sum = 0, acc = 0;
    for (let i = 0; i < n; i++) {
      const e = ldExpf(fr(score[i] - m));
      sum = fr(sum + e);
      acc = fmaf(e, kv[i], acc);
    }
    out[b * dc + ch] = toF16(fr(acc / sum));
  }
  return out;
}

export function indexerModel(q: Uint16Array, w: Uint16Array, e: Uint16Array, T: number, nh: number, hd: number, B: number, r: number, topk: number, scale: number) {
  const qf = widen(q), ef = widen(e);
  const scores = new Float32Array(T * B).fill(-Infinity);
  const picks = new Int32Array(T * topk).fill(-1);
  for (let t = 0; t < T; t++) {
    const vis = Math.min(B, Math.floor((t + 1) / r));
    const wt = Array.from({ length: nh }, (_, h) => fr(fromF16(w[t * nh + h]) * fr(scale)));
    for (let b = 0; b < vis; b++) {
      let total = 0;
      for (let h = 0; h < nh; h++) {
        const dot = ldDot(qf, (t * nh + h) * hd, ef, b * hd, hd);
        total = fmaf(wt[h], dot < 0 ? 0 : dot, total);
      }
      scores[t * B + b] = total;
    }
    picks.set(topkModel(scores.subarray(t * B, t * B + vis), Math.min(topk, vis)), t * topk);
  }
  return { scores, picks };
}

export function sparseAttentionModel(q: Uint16Array, kv: Uint16Array, comp: Uint16Array, T: number, H: number, D: number, window: number, cand: Int32Array, K: number, sinks: Float32Array, scale: number): Uint16Array {
  const qf = widen(q), kf = widen(kv), cf = widen(comp);
  const out = new Uint16Array(T * H * D);
  for (let t = 0; t < T; t++) {
    const rows: Array<[Float64Array, number]> = [];
    for (let s = window > 0 ? Math.max(0, t - window + 1) : 0; s <= t; s++) rows.push([kf, s * D]);
    for (let j = 0; j < K; j++) if (cand[t * K + j] >= 0) rows.push([cf, cand[t * K + j] * D]);
    for (let h = 0; h < H; h++) {
      const z = rows.map(([a, o]) => fr(ldDot(qf, (t * H + h) * D, a, o, D) * fr(scale)));
      let m = sinks[h];
      for (const zi of z) if (zi > m) m = zi;
      let l = 0;
      const p = z.map((zi) => ldExpf(fr(zi - m)));
      for (const pi of p) l = fr(l + pi);
      l = fr(l + ldExpf(fr(sinks[h] - m)));
      const P = p.map((pi) => fromF16(toF16(fr(pi / l))));
      for (let d = 0; d < D; d++) {
        let acc = 0;
        rows.forEach(([a, o], c) => (acc = fmaf(P[c], a[o + d], acc)));
        out[(t * H + h) * D + d] = toF16(acc);
      }
    }
  }
  return out;
}

export function routerModel(logits: Float32Array, bias: Float32Array | null, T: number, E: number, k: number, routeScale: number, given: Int32Array | null) {
  const ids = new Int32Array(T * k), weights = new Float32Array(T * k), scores = new Float32Array(T * E);
  for (let t = 0; t < T; t++) {
    const s = Array.from({ length: E }, (_, e) => ldSqrtSoftplusf(logits[t * E + e]));
    scores.set(s, t * E);
    const chosen = given !== null ? Array.from(given.subarray(t * k, (t + 1) * k)).sort((a, b) => a - b) : topkModel(s.map((v, e) => (bias !== null ? fr(v + bias[e]) : v)), k);
    ids.set(chosen, t * k);
    let sum = 0;
    for (const e of chosen) sum = fr(sum + s[e]);
    chosen.forEach((e, j) => (weights[t * k + j] = fr(fr(fr(routeScale) * s[e]) / sum)));
  }
  return { ids, weights, scores };
}

export function swigluRowsModel(g: Uint16Array, u: Uint16Array, rows: number, cols: number, rw: Float32Array | null, limit: number): Uint16Array {
  const y = new Uint16Array(rows * cols);
  const lim = fr(limit);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) {
    const i = r * cols + c;
    let gv = fromF16(g[i]), uv = fromF16(u[i]);
    if (lim > 0) {
      if (gv > lim) gv = lim;
      if (uv > lim) uv = lim;
      if (uv < -lim) uv = -lim;
    }
    let v = fr(fr(gv / fr(1 + ldExpf(-gv))) * uv);
    if (rw !== null) v = fr(v * rw[r]);
    y[i] = toF16(v);
  }
  return y;
}

export function moeCombineModel(y: Uint16Array, rowToken: Int32Array, shared: Uint16Array, T: number, D: number): Uint16Array {
  const out = new Uint16Array(T * D);
  for (let t = 0; t < T; t++) for (let i = 0; i < D; i++) {
    let acc = 0;
    for (let r = 0; r < rowToken.length; r++) if (rowToken[r] === t) acc = fr(acc + fromF16(y[r * D + i]));
    out[t * D + i] = toF16(fr(acc + fromF16(shared[t * D + i])));
  }
  return out;
}
