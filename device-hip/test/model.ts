/**
 * A plain-TypeScript model of the emulated device's numerics, written from the spec (ld_numerics.h's
 * comments and the binding's contract), not from the C++: the native kernels must match it bit for bit.
 *
 * f32 arithmetic: Math.fround(a ∘ b) of two f32 values is exactly the f32 operation for + − × ÷ and √,
 * since binary64 has 53 ≥ 2·24 + 2 bits (double rounding is then innocuous). Fused multiply-add is the
 * exception — a·b + c can need more than 53 bits — so fmaf() below rounds to odd in binary64 first.
 */
import { Rng } from '../../harness/rng.js';
import { f32ToF16Bits, f16ToF32 } from '../../harness/formats/dtypes.js';

export const fr = Math.fround;
export { f32ToF16Bits as toF16, f16ToF32 as fromF16 };

const f64 = new Float64Array(1);
const w32 = new Uint32Array(f64.buffer); // little-endian: w32[0] low word, w32[1] high word

/**
 * Exact fmaf(a, b, c) for f32 inputs. a·b is exact in binary64 (two 24-bit significands). s = RN64(a·b + c)
 * and its error e come from TwoSum (exact). If e ≠ 0 and s's last bit is even, s moves one binary64 ulp
 * towards the exact sum: that is round-to-odd at 53 bits, and rounding a round-to-odd value to 24 bits
 * (53 ≥ 24 + 2) gives the correctly rounded result, so Math.fround(s) is exactly fmaf.
 */
export function fmaf(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c;
  if (!Number.isFinite(s) || s === 0) return fr(s);
  const bb = s - p;
  const e = p - (s - bb) + (c - bb);
  if (e === 0) return fr(s);
  f64[0] = s;
  if ((w32[0] & 1) === 0) {
    if (e > 0 === s > 0) {
      w32[0] += 1; // low word is even, so no carry
    } else if (w32[0] === 0) {
      w32[0] = 0xffffffff;
      w32[1] -= 1;
    } else {
      w32[0] -= 1;
    }
  }
  return fr(f64[0]);
}

/** The ld lane order: 8 lanes, lane l takes k ≡ l (mod 8) by fmaf, combined ((0+4)+(2+6))+((1+5)+(3+7)). */
export function ldDot(x: ArrayLike<number>, xo: number, w: ArrayLike<number>, wo: number, k: number): number {
  const l = [0, 0, 0, 0, 0, 0, 0, 0];
  for (let i = 0; i < k; i++) l[i & 7] = fmaf(x[xo + i], w[wo + i], l[i & 7]);
  return fr(fr(fr(l[0] + l[4]) + fr(l[2] + l[6])) + fr(fr(l[1] + l[5]) + fr(l[3] + l[7])));
}

/** ld_expf, step by step (Cephes expf with explicit fmaf; see ld_numerics.h). */
export function ldExpf(x: number): number {
  if (Number.isNaN(x)) return NaN;
  if (x > 89) return Infinity;
  if (x < -104) return 0;
  const z = fr(x * fr(Math.LOG2E));
  const n = fr(fr(z + 12582912) - 12582912);
  let r = fr(x - fr(n * 0.693359375));
  r = fr(r - fr(n * fr(-2.1219444e-4)));
  let p = fr(1.98756915e-4);
  for (const c of [1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1]) p = fmaf(p, r, fr(c));
  const r2 = fr(r * r);
  const y = fr(fmaf(p, r2, r) + 1);
  if (n > 127) return fr(fr(y * 2 ** 127) * 2 ** (n - 127));
  if (n < -126) return fr(fr(y * 2 ** (n + 126)) * 2 ** -126);
  return fr(y * 2 ** n);
}

/** Widen an f16-bits array to numbers. */
export function widen(h: Uint16Array): Float64Array {
  const out = new Float64Array(h.length);
  for (let i = 0; i < h.length; i++) out[i] = f16ToF32(h[i]);
  return out;
}

export function gemmF16Model(x: Uint16Array, w: Uint16Array, m: number, k: number, n: number, alpha: number | null): Float64Array {
  const xf = widen(x), wf = widen(w);
  const y = new Float64Array(m * n);
  const a = alpha === null ? 1 : fr(alpha);
  for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) {
    const d = ldDot(xf, i * k, wf, j * k, k);
    y[i * n + j] = alpha === null ? d : fr(a * d);
  }
  return y;
}

export function toF16Array(v: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(v.length);
  for (let i = 0; i < v.length; i++) out[i] = f32ToF16Bits(v[i]);
  return out;
}

export function rmsnormModel(x: Uint16Array, w: Uint16Array, rows: number, dim: number, eps: number): Uint16Array {
  const xf = widen(x), wf = widen(w);
  const y = new Uint16Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    const ms = fr(ldDot(xf, r * dim, xf, r * dim, dim) / dim);
    const inv = fr(1 / fr(Math.sqrt(fr(ms + fr(eps)))));
    for (let d = 0; d < dim; d++) y[r * dim + d] = f32ToF16Bits(fr(fr(xf[r * dim + d] * inv) * wf[d]));
  }
  return y;
}

export function ropeModel(x: Uint16Array, cos: Float32Array, sin: Float32Array, T: number, H: number, D: number, off: number, rot: number, inter: boolean): Uint16Array {
  const y = Uint16Array.from(x);
  const half = rot / 2;
  for (let t = 0; t < T; t++) for (let h = 0; h < H; h++) {
    const base = (t * H + h) * D + off;
    for (let j = 0; j < half; j++) {
      const ia = base + (inter ? 2 * j : j), ib = base + (inter ? 2 * j + 1 : j + half);
      const a = f16ToF32(x[ia]), b = f16ToF32(x[ib]);
      const c = cos[t * half + j], s = sin[t * half + j];
      y[ia] = f32ToF16Bits(fr(fr(a * c) - fr(b * s)));
      y[ib] = f32ToF16Bits(fr(fr(a * s) + fr(b * c)));
    }
  }
  return y;
}

export function swigluModel(g: Uint16Array, u: Uint16Array, limit: number): Uint16Array {
  const y = new Uint16Array(g.length);
  const lim = fr(limit);
  for (let i = 0; i < g.length; i++) {
    let gv = f16ToF32(g[i]), uv = f16ToF32(u[i]);
    if (lim > 0) {
      if (gv > lim) gv = lim;
      if (uv > lim) uv = lim;
      if (uv < -lim) uv = -lim;
    }
    y[i] = f32ToF16Bits(fr(fr(gv / fr(1 + ldExpf(-gv))) * uv));
  }
  return y;
}

export function attentionModel(q: Uint16Array, k: Uint16Array, v: Uint16Array, T: number, Hq: number, Hkv: number, D: number, Dv: number, scale: number, window: number, sinks: Float32Array | null): Uint16Array {
  const qf = widen(q), kf = widen(k), vf = widen(v);
  const out = new Uint16Array(T * Hq * Dv);
  const sc = fr(scale);
  for (let t = 0; t < T; t++) for (let h = 0; h < Hq; h++) {
    const hk = Math.floor(h / (Hq / Hkv));
    const keys: number[] = [];
    for (let s = 0; s <= t; s++) if (window === 0 || s > t - window) keys.push(s);
    const z = keys.map((s) => fr(ldDot(qf, (t * Hq + h) * D, kf, (s * Hkv + hk) * D, D) * sc));
    let m = -Infinity;
    for (const zi of z) if (zi > m) m = zi;
    if (sinks !== null && sinks[h] > m) m = sinks[h];
    const p = z.map((zi) => ldExpf(fr(zi - m)));
    let l = 0;
    for (const pi of p) l = fr(l + pi);
    if (sinks !== null) l = fr(l + ldExpf(fr(sinks[h] - m)));
    const P = p.map((pi) => f16ToF32(f32ToF16Bits(fr(pi / l))));
    for (let d = 0; d < Dv; d++) {
      let acc = 0;
      keys.forEach((s, j) => {
        acc = fmaf(P[j], vf[(s * Hkv + hk) * Dv + d], acc);
      });
      out[(t * Hq + h) * Dv + d] = f32ToF16Bits(acc);
    }
  }
  return out;
}

/** Seeded uniform [0, 1) from the project's PRNG: tests name their seed, so a failure is reproducible. */
export function rng(seed: number): () => number {
  const r = new Rng(seed);
  return () => r.uniform();
}

/** f16 bits of uniform values in [-amp, amp). */
export function randomF16(rand: () => number, n: number, amp = 1): Uint16Array {
  const out = new Uint16Array(n);
  for (let i = 0; i < n; i++) out[i] = f32ToF16Bits((rand() * 2 - 1) * amp);
  return out;
}

export function randomBytes(rand: () => number, n: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.floor(rand() * 256);
  return out;
}

/** Index of the first element whose bits differ (NaN equal to any NaN), or −1. */
export function firstF16Mismatch(a: Uint16Array, b: Uint16Array): number {
  if (a.length !== b.length) return 0;
  const isNaN16 = (h: number) => (h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i] && !(isNaN16(a[i]) && isNaN16(b[i]))) return i;
  return -1;
}

/** Bitwise equality of f32 arrays (every NaN equal). */
export function firstF32Mismatch(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) return 0;
  for (let i = 0; i < a.length; i++) {
    if (Number.isNaN(a[i]) && Number.isNaN(b[i])) continue;
    if (!Object.is(fr(a[i]), fr(b[i]))) return i;
  }
  return -1;
}

export function countNonFinite16(h: Uint16Array): number {
  let c = 0;
  for (let i = 0; i < h.length; i++) if ((h[i] & 0x7c00) === 0x7c00) c++;
  return c;
}
