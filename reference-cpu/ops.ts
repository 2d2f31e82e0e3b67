/**
 * The reference's operators: plain loops over float32 storage, accumulating in float64 (JS numbers), so each
 * reads like its formula. The one exception is the matrix product, a native FP32 kernel (reference-cpu/native),
 * because a JS loop is 100× too slow for real widths; it is tested against a float64 loop and onnxruntime.
 * Shapes: rows × dim, row-major; W is [out, in] and y = x·Wᵀ.
 */
import { gemmF32, roundF16Values } from './native.js';

export function matmul(x: Float32Array, rows: number, inDim: number, w: Float32Array, outDim: number): Float32Array {
  return gemmF32(x, w, rows, inDim, outDim);
}

export function rmsnorm(x: Float32Array, rows: number, dim: number, weight: Float32Array | null, eps: number): Float32Array {
  const y = new Float32Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    let ss = 0;
    for (let i = 0; i < dim; i++) ss += x[r * dim + i] * x[r * dim + i];
    const inv = 1 / Math.sqrt(ss / dim + eps);
    for (let i = 0; i < dim; i++) y[r * dim + i] = x[r * dim + i] * inv * (weight ? weight[i] : 1);
  }
  return y;
}

export function add(a: Float32Array, b: Float32Array): Float32Array {
  const y = new Float32Array(a.length);
  for (let i = 0; i < a.length; i++) y[i] = a[i] + b[i];
  return y;
}

export function silu(x: number): number {
  return x / (1 + Math.exp(-x));
}

/** SwiGLU: silu(gate)·up, with the optional clamp (DeepSeek-V4 routed experts: gate ≤ limit, |up| ≤ limit). */
export function swiglu(gate: Float32Array, up: Float32Array, limit = 0): Float32Array {
  const y = new Float32Array(gate.length);
  for (let i = 0; i < gate.length; i++) {
    let g = gate[i];
    let u = up[i];
    if (limit > 0) {
      g = Math.min(g, limit);
      u = Math.min(Math.max(u, -limit), limit);
    }
    y[i] = silu(g) * u;
  }
  return y;
}

/** Numerically stable softmax of one row in place (float64 sums). */
export function softmaxInPlace(v: Float64Array, extraLogit = -Infinity): void {
  let m = extraLogit;
  for (const s of v) if (s > m) m = s;
  let sum = Math.exp(extraLogit - m);
  for (let i = 0; i < v.length; i++) {
    v[i] = Math.exp(v[i] - m);
    sum += v[i];
  }
  for (let i = 0; i < v.length; i++) v[i] /= sum;
}

/** RoPE inverse frequencies f_i = base^(−2i/rotDim), i < rotDim/2. */
export function ropeInvFreq(base: number, rotDim: number): Float64Array {
  return Float64Array.from({ length: rotDim / 2 }, (_, i) => base ** (-(2 * i) / rotDim));
}

/**
 * Rotate dims [offset, offset+rotDim) of every head of x [tokens, heads, headDim] at positions pos[t].
 * style 'half' is Hugging Face's rotate_half (pairs i, i+rotDim/2); 'interleaved' pairs (2i, 2i+1), as
 * DeepSeek. sign −1 applies the inverse rotation.
 */
export function rope(
  x: Float32Array, tokens: number, heads: number, headDim: number, pos: ArrayLike<number>,
  invFreq: ArrayLike<number>, style: 'half' | 'interleaved', offset = 0, sign = 1,
): Float32Array {
  const y = Float32Array.from(x);
  const half = invFreq.length;
  for (let t = 0; t < tokens; t++) {
    for (let h = 0; h < heads; h++) {
      const base = (t * heads + h) * headDim + offset;
      for (let i = 0; i < half; i++) {
        const phi = sign * pos[t] * invFreq[i];
        const c = Math.cos(phi);
        const s = Math.sin(phi);
        const ia = style === 'half' ? base + i : base + 2 * i;
        const ib = style === 'half' ? base + i + half : base + 2 * i + 1;
        const a = x[ia];
        const b = x[ib];
        y[ia] = a * c - b * s;
        y[ib] = a * s + b * c;
      }
    }
  }
  return y;
}

/**
 * Causal grouped-query attention: q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, Dv] → [T, Hq, Dv].
 * Query head h reads kv head ⌊h / (Hq/Hkv)⌋. Key s is visible to query t iff s ≤ t (and t − s < window).
 * sinks[h] (gpt-oss), when given, is one more logit in head h's softmax denominator with no value.
 */
export function causalAttention(
  q: Float32Array, k: Float32Array, v: Float32Array, T: number, Hq: number, Hkv: number, D: number, Dv: number,
  scale: number, window = 0, sinks: ArrayLike<number> | null = null,
): Float32Array {
  const out = new Float32Array(T * Hq * Dv);
  const group = Hq / Hkv;
  for (let t = 0; t < T; t++) {
    const first = window > 0 ? Math.max(0, t - window + 1) : 0;
    for (let h = 0; h < Hq; h++) {
      const kvh = Math.floor(h / group);
      const p = new Float64Array(t - first + 1);
      for (let s = first; s <= t; s++) {
        let dot = 0;
        for (let d = 0; d < D; d++) dot += q[(t * Hq + h) * D + d] * k[(s * Hkv + kvh) * D + d];
        p[s - first] = dot * scale;
      }
      softmaxInPlace(p, sinks !== null ? sinks[h] : -Infinity);
      for (let d = 0; d < Dv; d++) {
        let acc = 0;
        for (let s = first; s <= t; s++) acc += p[s - first] * v[(s * Hkv + kvh) * Dv + d];
        out[(t * Hq + h) * Dv + d] = acc;
      }
    }
  }
  return out;
}

/**
 * `x` as the device path stores it between sublayers when `fp16` (LayerContext.fp16Storage, the floor pass:
 * round to nearest even binary16), else `x` itself.
 */
export function stored(x: Float32Array, fp16: boolean | undefined): Float32Array {
  if (fp16 !== true) return x;
  return roundF16Values(x); // roundToF16 of each value, natively
}

/** y [rows, n] + b per row, in place (a linear layer's bias after its product); y itself when b is null. */
export function addRowBias(y: Float32Array, rows: number, b: Float32Array | null): Float32Array {
  if (b === null) return y;
  if (y.length !== rows * b.length) throw new Error(`bias of ${b.length} values for rows of ${y.length / rows}`);
  for (let r = 0; r < rows; r++) for (let i = 0; i < b.length; i++) y[r * b.length + i] += b[i];
  return y;
}

