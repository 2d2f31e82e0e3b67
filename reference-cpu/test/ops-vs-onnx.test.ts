/**
 * The reference operators (reference-cpu/ops.ts) against onnxruntime's CPU execution provider, an
 * independent implementation: each op is rebuilt here from standard ONNX ops on seeded random inputs.
 *
 * Comparison order (as llama.cpp's test-backend-ops): NaN positions first, then Inf positions and signs,
 * then every element's |ref − ort| against its own bound. Bounds are per op, written as multiples of the
 * float32 unit roundoff U = 2^-24 times the magnitudes that element's rounding errors scale with; each
 * op's block says where its terms come from. The reference's non-matmul ops accumulate in float64 and
 * round once, so nearly all of the difference is ORT's float32 arithmetic. Every bound carries a safety
 * factor of about 2–4 over its estimate, and failures print the worst element and its bound.
 */
import { describe, expect, test } from 'vitest';
import { Rng } from '../../harness/rng.js';
import { GraphBuilder, linearModel, runGraph, type HostTensor } from '../../scripts/onnx/graph.js';
import { causalAttention, matmul, rmsnorm, rope, ropeInvFreq, softmaxInPlace, swiglu } from '../ops.js';

const U = 2 ** -24; // float32 unit roundoff
const SEED = 20240611;

function randn(key: string, n: number, scale = 1, mean = 0): Float32Array {
  const rng = Rng.forKey(SEED, key);
  return Float32Array.from({ length: n }, () => mean + scale * rng.normal());
}

async function runOne(bytes: Uint8Array, feeds: Record<string, HostTensor>, output = 'y'): Promise<Float32Array> {
  const out = await runGraph(bytes, feeds);
  const y = out[output].data;
  if (!(y instanceof Float32Array)) throw new TypeError(`ORT output '${output}' is not float32`);
  return y;
}

/**
 * NaN first, then Inf, then |got − want| ≤ bound(i) for every element (bound 0 demands equality).
 * Returns the worst |Δ|/bound so a caller can see the margin.
 */
function expectClose(label: string, got: ArrayLike<number>, want: ArrayLike<number>, bound: (i: number) => number,
  explain?: (i: number) => string): number {
  expect(got.length, `${label}: length`).toBe(want.length);
  for (let i = 0; i < got.length; i++) {
    if (Number.isNaN(got[i]) !== Number.isNaN(want[i])) {
      throw new Error(`${label}: NaN mismatch at [${i}]: reference ${got[i]}, onnxruntime ${want[i]}`);
    }
  }
  for (let i = 0; i < got.length; i++) {
    const infG = !Number.isFinite(got[i]) && !Number.isNaN(got[i]);
    const infW = !Number.isFinite(want[i]) && !Number.isNaN(want[i]);
    if ((infG || infW) && got[i] !== want[i]) {
      throw new Error(`${label}: Inf mismatch at [${i}]: reference ${got[i]}, onnxruntime ${want[i]}`);
    }
  }
  let worst = 0;
  let worstAt = -1;
  for (let i = 0; i < got.length; i++) {
    if (Number.isNaN(got[i]) || !Number.isFinite(got[i])) continue;
    const err = Math.abs(got[i] - want[i]);
    const b = bound(i);
    const ratio = b > 0 ? err / b : err === 0 ? 0 : Infinity;
    if (ratio > worst) {
      worst = ratio;
      worstAt = i;
    }
  }
  if (worst > 1) {
    const i = worstAt;
    throw new Error(`${label}: [${i}] reference ${got[i]} vs onnxruntime ${want[i]}: |Δ| = ${Math.abs(got[i] - want[i]).toExponential(3)} > bound ${bound(i).toExponential(3)} (${worst.toFixed(2)}×)${explain ? `; ${explain(i)}` : ''}`);
  }
  if (process.env.LAYERDIFF_SHOW_MARGINS) console.log(`${label}: worst |Δ|/bound = ${worst.toExponential(2)}`);
  return worst;
}

function rowNorms(a: Float32Array, rows: number, cols: number): Float64Array {
  const out = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let s = 0;
    for (let j = 0; j < cols; j++) s += a[r * cols + j] ** 2;
    out[r] = Math.sqrt(s);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
// matmul: y = x·Wᵀ, x [m, k], W [n, k]. Both sides accumulate in float32 (native GEMM / MLAS), in
// different orders. Higham's probabilistic bound for a length-k float32 dot product is
// ~sqrt(k)·U·Σ|x_j||w_j| ≤ sqrt(k)·U·‖x‖‖w‖ (Cauchy–Schwarz); two independent float32 results differ by
// at most the sum of their errors, hence 2·sqrt(k)·U·‖x_r‖‖w_c‖. Blocked/vector summation typically
// stays far below it, while a dropped or doubled term (≈ |x_j w_j| ~ 1) is ~100× above it at every shape.
describe('matmul vs ONNX MatMul(x, Transpose(W)) and Gemm(transB=1)', () => {
  const shapes: [number, number, number][] = [
    [1, 64, 32], [7, 192, 384], [16, 1024, 512], [3, 37, 19], [5, 1001, 13], [33, 100, 65], [64, 515, 130],
  ];
  for (const [m, k, n] of shapes) {
    test(`matmul(m=${m},k=${k},n=${n})`, async () => {
      const x = randn(`matmul.x.${m}.${k}`, m * k);
      const w = randn(`matmul.w.${k}.${n}`, n * k);
      const ref = matmul(x, m, k, w, n);

      const g = new GraphBuilder();
      const wt = g.node('Transpose', [g.input('w', [n, k])], { perm: { ints: [1, 0] } });
      g.output(g.node('MatMul', [g.input('x', [m, k]), wt]), 'y');
      const viaMatMul = await runOne(g.build(), { x: { data: x, dims: [m, k] }, w: { data: w, dims: [n, k] } });
      const viaGemm = await runOne(linearModel(w, n, k), { x: { data: x, dims: [m, k] } });

      const xn = rowNorms(x, m, k);
      const wn = rowNorms(w, n, k);
      const bound = (i: number) => 2 * Math.sqrt(k) * U * xn[Math.floor(i / n)] * wn[i % n];
      const explain = (i: number) => {
        const r = Math.floor(i / n);
        const c = i % n;
        let exact = 0;
        for (let j = 0; j < k; j++) exact += x[r * k + j] * w[c * k + j];
        return `float64 dot = ${exact}: reference off by ${Math.abs(ref[i] - exact).toExponential(3)}`;
      };
      expectClose('MatMul', ref, viaMatMul, bound, explain);
      expectClose('Gemm', ref, viaGemm, bound, explain);
    });
  }
});

// ---------------------------------------------------------------------------------------------------
// rmsnorm: y = x / sqrt(mean(x²) + eps) · w. ORT's float32 mean of `dim` positive squares has a relative
// error ~sqrt(dim)·U (random-walk summation; pairwise/vector sums do better), halved by the sqrt; Pow, Add,
// Sqrt, Div and Mul add one rounding each. Every error is relative to the element itself, so the bound
// is 2·(4 + sqrt(dim))·U·|y|. Rows are scaled from 1e-3 to 10 so that eps (inside the sqrt) matters.
describe('rmsnorm vs ONNX Pow/ReduceMean/Add/Sqrt/Div/Mul', () => {
  const cases: [number, number, boolean][] = [[1, 64, true], [5, 192, true], [5, 192, false], [3, 1000, true], [8, 4096, true]];
  const eps = 1e-6;
  for (const [rows, dim, withWeight] of cases) {
    test(`rmsnorm(rows=${rows},dim=${dim}${withWeight ? '' : ',weight=none'})`, async () => {
      const x = randn(`rmsnorm.x.${rows}.${dim}`, rows * dim);
      const rowScale = [1, 1e-3, 10, 0.05, 3];
      for (let r = 0; r < rows; r++) for (let i = 0; i < dim; i++) x[r * dim + i] *= rowScale[r % rowScale.length];
      const weight = withWeight ? randn(`rmsnorm.w.${dim}`, dim, 0.5, 1) : null;
      const ref = rmsnorm(x, rows, dim, weight, eps);

      const g = new GraphBuilder();
      const xin = g.input('x', [rows, dim]);
      const sq = g.node('Pow', [xin, g.f32(2)]);
      const ms = g.node('ReduceMean', [sq], { axes: { ints: [-1] }, keepdims: { i: 1 } });
      const rms = g.node('Sqrt', [g.node('Add', [ms, g.f32(eps)])]);
      let y = g.node('Div', [xin, rms]);
      if (weight) y = g.node('Mul', [y, g.f32(weight, [dim])]);
      g.output(y, 'y');
      const ort = await runOne(g.build(), { x: { data: x, dims: [rows, dim] } });

      expectClose('rmsnorm', ref, ort, (i) => 2 * (4 + Math.sqrt(dim)) * U * Math.abs(ref[i]) + 1e-37);
    });
  }
});

// ---------------------------------------------------------------------------------------------------
// softmax of each row (float64 in the reference). ORT: x − max is rounded (absolute error ≤ U·|x − max|,
// which exp turns into a relative error of the same size), exp costs a few ulps, the float32 sum of n
// positive terms ~sqrt(n)·U relative, the division one more. Per element: U·(8 + 2·range + 2·sqrt(n))·p,
// range = the row's max − min logit (incl. the sink); 1e-37 absolute covers float32 subnormals.
// The sink variant: an extra logit per row that takes probability mass but has no output column
// (gpt-oss attention sinks): Concat([sink, x]) → Softmax → drop column 0.
describe('softmax vs ONNX Softmax', () => {
  // masked: every third logit is −inf (an attention mask), and with a sink the last row is −inf entirely
  // (all of its mass goes to the sink, every output is exactly 0).
  const cases: { rows: number; n: number; sink?: 'random' | 'dominant' | 'negligible'; masked?: boolean }[] = [
    { rows: 4, n: 10 }, { rows: 3, n: 257 }, { rows: 2, n: 4096 }, { rows: 3, n: 64, masked: true },
    { rows: 4, n: 10, sink: 'random' }, { rows: 3, n: 257, sink: 'dominant' }, { rows: 2, n: 4096, sink: 'negligible' },
    { rows: 3, n: 64, sink: 'random', masked: true },
  ];
  for (const { rows, n, sink, masked } of cases) {
    test(`softmax(rows=${rows},n=${n}${sink ? `,sink=${sink}` : ''}${masked ? ',masked' : ''})`, async () => {
      const x = randn(`softmax.x.${rows}.${n}`, rows * n, 3);
      if (masked) {
        for (let i = 0; i < rows * n; i += 3) x[i] = -Infinity;
        if (sink) x.fill(-Infinity, (rows - 1) * n);
      }
      const sinks = randn(`softmax.sink.${rows}`, rows, 3);
      for (let r = 0; r < rows; r++) {
        let max = -Infinity;
        for (let i = 0; i < n; i++) max = Math.max(max, x[r * n + i]);
        if (sink === 'dominant') sinks[r] = Math.fround(max + 5); // most of the mass goes to the sink
        if (sink === 'negligible') sinks[r] = -1e4; // exp underflows to 0: same as no sink
      }
      const ref = new Float64Array(rows * n);
      const range = new Float64Array(rows);
      for (let r = 0; r < rows; r++) {
        const row = Float64Array.from(x.subarray(r * n, (r + 1) * n));
        softmaxInPlace(row, sink ? sinks[r] : -Infinity);
        ref.set(row, r * n);
        // A negligible sink's exp underflows to 0 and adds no error, so it stays out of the range.
        const logits = [...x.subarray(r * n, (r + 1) * n), ...(sink && sink !== 'negligible' ? [sinks[r]] : [])]
          .filter((v) => v > -Infinity);
        range[r] = Math.max(...logits) - Math.min(...logits);
      }

      const g = new GraphBuilder();
      const xin = g.input('x', [rows, n]);
      const feeds: Record<string, HostTensor> = { x: { data: x, dims: [rows, n] } };
      if (sink) {
        const cat = g.node('Concat', [g.input('sink', [rows, 1]), xin], { axis: { i: -1 } });
        g.output(g.slice(g.node('Softmax', [cat], { axis: { i: -1 } }), -1, 1, n + 1), 'y');
        feeds.sink = { data: sinks, dims: [rows, 1] };
      } else {
        g.output(g.node('Softmax', [xin], { axis: { i: -1 } }), 'y');
      }
      const ort = await runOne(g.build(), feeds);

      expectClose('softmax', ref, ort, (i) => U * (8 + 2 * range[Math.floor(i / n)] + 2 * Math.sqrt(n)) * ref[i] + 1e-37);
    });
  }
});

// ---------------------------------------------------------------------------------------------------
// rope: x [T, H, Dh]; dims [offset, offset + rot) of each head rotate by angle sign·pos[t]·f_i, the rest
// pass through untouched (bound 0: must be bit-equal). The test computes f_i and cos/sin in float64 and
// feeds ORT their float32 roundings. Each output a·c − b·s (or a·s + b·c) in float32: c and s rounded
// (U each), two products and a sum rounded: ≤ ~3U·(|a| + |b|); bound 4U·(|a| + |b|) over the pair (a, b).
// 'half' is HF rotate_half (pair i, i + rot/2); 'interleaved' is DeepSeek's (2i, 2i + 1), built in ONNX by
// reshaping the rotated slice to [T, H, rot/2, 2].
describe('rope vs ONNX Slice/Concat/Mul/Sub/Add', () => {
  interface RopeCase { style: 'half' | 'interleaved'; T: number; H: number; Dh: number; rot: number; offset: number; sign: 1 | -1; base: number }
  const cases: RopeCase[] = [
    { style: 'half', T: 5, H: 4, Dh: 64, rot: 64, offset: 0, sign: 1, base: 10000 },
    { style: 'half', T: 3, H: 2, Dh: 96, rot: 32, offset: 0, sign: 1, base: 10000 }, // partial rotary, tail passes
    { style: 'half', T: 4, H: 3, Dh: 128, rot: 64, offset: 64, sign: 1, base: 1e6 }, // last 64 dims only
    { style: 'half', T: 4, H: 3, Dh: 128, rot: 64, offset: 64, sign: -1, base: 1e6 },
    { style: 'interleaved', T: 5, H: 4, Dh: 64, rot: 64, offset: 0, sign: 1, base: 10000 },
    { style: 'interleaved', T: 4, H: 3, Dh: 192, rot: 64, offset: 128, sign: 1, base: 10000 }, // DeepSeek: nope 128 + rope 64
    { style: 'interleaved', T: 4, H: 3, Dh: 192, rot: 64, offset: 128, sign: -1, base: 10000 },
    { style: 'interleaved', T: 6, H: 2, Dh: 48, rot: 16, offset: 16, sign: 1, base: 50000 }, // untouched dims on both sides
  ];
  for (const c of cases) {
    const { style, T, H, Dh, rot, offset, sign, base } = c;
    test(`rope(style=${style},T=${T},H=${H},Dh=${Dh},rot=${rot},offset=${offset}${sign < 0 ? ',inverse' : ''})`, async () => {
      const half = rot / 2;
      const x = randn(`rope.x.${style}.${T}.${H}.${Dh}`, T * H * Dh);
      const rng = Rng.forKey(SEED, `rope.pos.${T}`);
      const pos = Array.from({ length: T }, () => rng.int(8192)); // arbitrary, unordered positions
      const invFreq = Float64Array.from({ length: half }, (_, i) => Math.pow(base, (-2 * i) / rot));
      expect(Array.from(ropeInvFreq(base, rot))).toEqual(Array.from(invFreq));
      const ref = rope(x, T, H, Dh, pos, invFreq, style, offset, sign);

      const cos = new Float32Array(T * half);
      const sin = new Float32Array(T * half);
      for (let t = 0; t < T; t++) {
        for (let i = 0; i < half; i++) {
          cos[t * half + i] = Math.cos(sign * pos[t] * invFreq[i]);
          sin[t * half + i] = Math.sin(sign * pos[t] * invFreq[i]);
        }
      }

      const g = new GraphBuilder();
      const xin = g.input('x', [T, H, Dh]);
      const cosIn = g.input('cos', [T, 1, half]);
      const sinIn = g.input('sin', [T, 1, half]);
      const rotate = (a: string, b: string, cs: string, sn: string): [string, string] => [
        g.node('Sub', [g.node('Mul', [a, cs]), g.node('Mul', [b, sn])]),
        g.node('Add', [g.node('Mul', [a, sn]), g.node('Mul', [b, cs])]),
      ];
      let rotated: string[];
      if (style === 'half') {
        rotated = rotate(g.slice(xin, 2, offset, offset + half), g.slice(xin, 2, offset + half, offset + rot), cosIn, sinIn);
      } else {
        const pairs = g.node('Reshape', [g.slice(xin, 2, offset, offset + rot), g.i64([T, H, half, 2])]);
        const cs = g.node('Reshape', [cosIn, g.i64([T, 1, half, 1])]);
        const sn = g.node('Reshape', [sinIn, g.i64([T, 1, half, 1])]);
        const [ya, yb] = rotate(g.slice(pairs, 3, 0, 1), g.slice(pairs, 3, 1, 2), cs, sn);
        rotated = [g.node('Reshape', [g.node('Concat', [ya, yb], { axis: { i: 3 } }), g.i64([T, H, rot])])];
      }
      const parts = [...(offset > 0 ? [g.slice(xin, 2, 0, offset)] : []), ...rotated,
        ...(offset + rot < Dh ? [g.slice(xin, 2, offset + rot, Dh)] : [])];
      g.output(g.node('Concat', parts, { axis: { i: 2 } }), 'y');
      const ort = await runOne(g.build(), {
        x: { data: x, dims: [T, H, Dh] }, cos: { data: cos, dims: [T, 1, half] }, sin: { data: sin, dims: [T, 1, half] },
      });

      // Index of the element paired with i, or −1 for a pass-through dim.
      const partner = (i: number): number => {
        const d = i % Dh;
        if (d < offset || d >= offset + rot) return -1;
        const j = d - offset;
        const pj = style === 'half' ? (j < half ? j + half : j - half) : j ^ 1;
        return i - d + offset + pj;
      };
      const bound = (i: number) => {
        const p = partner(i);
        return p < 0 ? 0 : 4 * U * (Math.abs(x[i]) + Math.abs(x[p]));
      };
      expectClose('rope', ref, ort, bound);
      if (sign < 0) {
        // The inverse undoes the forward rotation (both reference, float64 inside, two float32 roundings).
        const back = rope(rope(x, T, H, Dh, pos, invFreq, style, offset, 1), T, H, Dh, pos, invFreq, style, offset, -1);
        expectClose('rope∘rope⁻¹', back, x, bound);
      }
    });
  }
});

// ---------------------------------------------------------------------------------------------------
// swiglu: silu(g)·u = g·sigmoid(g)·u, optionally g ← min(g, L), u ← clip(u, −L, L). The reference rounds
// once from float64. ORT 1.30's float32 Sigmoid (MLAS) is accurate in absolute, not relative, terms:
// measured over [−20, 20] in steps of 0.01 its worst absolute error is 1.94U (near x = 8.4), and for
// x ≲ −17 it returns 0 or ~9e-8 where σ is 4e-8 (relative error ≥ 1). So the bound carries 4U·|g·u| for
// the Sigmoid plus 8U·|y| for the two Muls and the reference's own rounding.
describe('swiglu vs ONNX Sigmoid/Mul with Min/Clip', () => {
  const cases: [number, number][] = [[1, 0], [37, 0], [4096, 0], [37, 7], [4096, 7], [1000, 10]];
  for (const [n, limit] of cases) {
    test(`swiglu(n=${n},limit=${limit || 'none'})`, async () => {
      const gate = randn(`swiglu.gate.${n}`, n, 5);
      const up = randn(`swiglu.up.${n}`, n, 5);
      const ref = swiglu(gate, up, limit);

      const g = new GraphBuilder();
      let gi = g.input('gate', [n]);
      let ui = g.input('up', [n]);
      if (limit > 0) {
        gi = g.node('Min', [gi, g.f32(limit)]);
        ui = g.node('Clip', [ui, g.f32(-limit), g.f32(limit)]);
      }
      g.output(g.node('Mul', [g.node('Mul', [gi, g.node('Sigmoid', [gi])]), ui]), 'y');
      const ort = await runOne(g.build(), { gate: { data: gate, dims: [n] }, up: { data: up, dims: [n] } });

      const bound = (i: number) => {
        const gc = limit > 0 ? Math.min(gate[i], limit) : gate[i];
        const uc = limit > 0 ? Math.min(Math.max(up[i], -limit), limit) : up[i];
        return 8 * U * Math.abs(ref[i]) + 4 * U * Math.abs(gc * uc) + 1e-37;
      };
      expectClose('swiglu', ref, ort, bound);
    });
  }
});

// ---------------------------------------------------------------------------------------------------
// causal GQA attention: q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, Dv]; query head h reads kv head
// ⌊h/(Hq/Hkv)⌋, built in ONNX by Unsqueeze/Expand/Reshape of k and v to Hq heads; the causal (and
// sliding-window) mask is an additive 0/−inf [T, T] constant. Error budget of ORT's float32 path:
//   scores: a float32 dot product, δs ≤ 2·sqrt(D)·U·scale·max‖q‖·max‖k‖ (as matmul);
//   softmax: relative U·(8 + 2·range + 2·sqrt(T)) on each p, plus 2·δs from the perturbed scores;
//   p·v: a float32 sum of T terms, sqrt(T)·U relative to Σ p|v| ≤ max|v|.
// Bound: max|v|·(2·δs + U·(8 + 2·range + 4·sqrt(T))), range ≤ 2·scale·max‖q‖·max‖k‖ (Cauchy–Schwarz).
// These worst-case norms leave ~100× margin on random data; a wrong mask edge, kv-head map or scale
// moves outputs by ~0.1, far above it.
describe('causalAttention vs ONNX MatMul/Mul/Add(mask)/Softmax/MatMul', () => {
  interface AttnCase { T: number; Hq: number; Hkv: number; D: number; Dv: number; window: number }
  const cases: AttnCase[] = [
    { T: 9, Hq: 6, Hkv: 2, D: 32, Dv: 32, window: 0 },
    { T: 17, Hq: 4, Hkv: 4, D: 64, Dv: 48, window: 0 },
    { T: 20, Hq: 3, Hkv: 1, D: 16, Dv: 16, window: 5 },
    { T: 12, Hq: 2, Hkv: 2, D: 32, Dv: 32, window: 1 },
    { T: 8, Hq: 6, Hkv: 2, D: 64, Dv: 64, window: 11 }, // window ≥ T: plain causal
  ];
  for (const { T, Hq, Hkv, D, Dv, window } of cases) {
    test(`causalAttention(T=${T},Hq=${Hq},Hkv=${Hkv},D=${D},Dv=${Dv}${window ? `,window=${window}` : ''})`, async () => {
      const G = Hq / Hkv;
      const q = randn(`attn.q.${T}.${Hq}.${D}`, T * Hq * D);
      const k = randn(`attn.k.${T}.${Hkv}.${D}`, T * Hkv * D);
      const v = randn(`attn.v.${T}.${Hkv}.${Dv}`, T * Hkv * Dv);
      const scale = 1 / Math.sqrt(D);
      const ref = causalAttention(q, k, v, T, Hq, Hkv, D, Dv, scale, window);

      const mask = new Float32Array(T * T);
      for (let t = 0; t < T; t++) {
        for (let s = 0; s < T; s++) mask[t * T + s] = s <= t && (window === 0 || t - s < window) ? 0 : -Infinity;
      }
      const g = new GraphBuilder();
      const toHq = (x: string, dh: number): string => {
        const heads = g.node('Transpose', [x], { perm: { ints: [1, 0, 2] } }); // [Hkv, T, dh]
        if (G === 1) return heads;
        const expanded = g.node('Expand', [g.node('Unsqueeze', [heads, g.i64([1])]), g.i64([Hkv, G, T, dh])]);
        return g.node('Reshape', [expanded, g.i64([Hq, T, dh])]);
      };
      const qh = g.node('Transpose', [g.input('q', [T, Hq, D])], { perm: { ints: [1, 0, 2] } });
      const kh = toHq(g.input('k', [T, Hkv, D]), D);
      const vh = toHq(g.input('v', [T, Hkv, Dv]), Dv);
      const scores = g.node('MatMul', [qh, g.node('Transpose', [kh], { perm: { ints: [0, 2, 1] } })]);
      const masked = g.node('Add', [g.node('Mul', [scores, g.f32(scale)]), g.f32(mask, [T, T])]);
      const o = g.node('MatMul', [g.node('Softmax', [masked], { axis: { i: -1 } }), vh]);
      g.output(g.node('Transpose', [o], { perm: { ints: [1, 0, 2] } }), 'y');
      const ort = await runOne(g.build(), {
        q: { data: q, dims: [T, Hq, D] }, k: { data: k, dims: [T, Hkv, D] }, v: { data: v, dims: [T, Hkv, Dv] },
      });

      const qMax = Math.max(...rowNorms(q, T * Hq, D));
      const kMax = Math.max(...rowNorms(k, T * Hkv, D));
      let vMax = 0;
      for (const e of v) vMax = Math.max(vMax, Math.abs(e));
      const range = 2 * scale * qMax * kMax; // scores lie in ±scale·‖q‖‖k‖
      const ds = 2 * Math.sqrt(D) * U * scale * qMax * kMax;
      const b = vMax * (2 * ds + U * (8 + 2 * range + 4 * Math.sqrt(T)));
      expectClose('attention', ref, ort, () => b);
    });
  }
});
