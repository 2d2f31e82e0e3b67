/*
 * ld_deepseek.h — element-level numerics of the DeepSeek-V4 device kernels (spec/deepseek-v4-flash.md §4):
 * hyper-connection weights and the Sinkhorn normalization, the compressor's per-channel pooling softmax,
 * the attention softmax with a sink, the indexer's ReLU-weighted head sum, the router's sqrt-softplus and
 * the lowest-index top-k order.
 *
 * Same rules as ld_numerics.h, which it builds on: plain C-style inline code that compiles as host C++ (the
 * `emulated` backend, device-hip/src/deepseek_*.cc) and as HIP/CUDA device code, no STL, no static tables,
 * no libm transcendental (ld_logf below, like ld_numerics.h's ld_expf, is written out so every target gives
 * the same bits), every operation order written down. Compile without FP contraction (-ffp-contract=off /
 * --fmad=false); fused multiply-adds the numerics want are written as fmaf.
 *
 * Every reduction is sequential in the index order stated next to it: a GPU kernel gives each token (or
 * token × head, or channel) to one thread and walks the same order, so the emulator and the GPU agree.
 */
#ifndef LD_DEEPSEEK_H
#define LD_DEEPSEEK_H

#include "ld_numerics.h"

/* ---------------------------------------------------------------------------------------------------
 * Transcendentals
 * ------------------------------------------------------------------------------------------------- */

/* σ(x) = 1 / (1 + e^−x), through ld_expf; σ(−∞) = 0, σ(+∞) = 1, NaN stays NaN. */
LD_INLINE float ld_sigmoidf(float x) { return 1.0f / (1.0f + ld_expf(-x)); }

/*
 * Natural log for f32 (Cephes logf, error ≈ 1 ulp), Horner steps written with fmaf like ld_expf, so every
 * target gives the same bits and a test can replay it. x = m·2^e with m in [√½, √2): log x = log m + e·ln 2,
 * ln 2 split as 0.693359375 (9 bits, so e·C1 is exact) − 2.12194440e−4.
 */
LD_INLINE float ld_logf(float x) {
  if (x != x) return x;
  if (x < 0.0f) return ld_bits_f32(0x7FC00000u);
  if (x == 0.0f) return ld_bits_f32(0xFF800000u);
  if (x == ld_bits_f32(0x7F800000u)) return x;
  uint32_t u = ld_f32_bits(x);
  int e = 0;
  if ((u >> 23) == 0) { /* subnormal: scale by 2^23 (exact) first */
    x = x * ld_pow2f(23);
    u = ld_f32_bits(x);
    e = -23;
  }
  e += (int)(u >> 23) - 126;                       /* x = m·2^e, m in [0.5, 1) */
  float m = ld_bits_f32((u & 0x007FFFFFu) | 0x3F000000u);
  if (m < 0.707106781186547524f) {
    e -= 1;
    m = (m + m) - 1.0f;                             /* exact: m + m in [1, √2) */
  } else {
    m = m - 1.0f;                                   /* exact (Sterbenz) */
  }
  const float z = m * m;
  float p = 7.0376836292e-2f;
  p = fmaf(p, m, -1.1514610310e-1f);
  p = fmaf(p, m, 1.1676998740e-1f);
  p = fmaf(p, m, -1.2420140846e-1f);
  p = fmaf(p, m, 1.4249322787e-1f);
  p = fmaf(p, m, -1.6668057665e-1f);
  p = fmaf(p, m, 2.0000714765e-1f);
  p = fmaf(p, m, -2.4999993993e-1f);
  p = fmaf(p, m, 3.3333331174e-1f);
  const float fe = (float)e;
  float y = (p * m) * z;
  y = y + fe * -2.12194440e-4f;
  y = y - 0.5f * z;
  float r = m + y;
  r = r + fe * 0.693359375f;
  return r;
}

/*
 * log(1 + x) for x ≥ 0 without losing a tiny x to the rounding of 1 + x: u = 1 + x, and
 * log1p(x) = log(u) · x / (u − 1) (Goldberg), where the ratio corrects exactly for that rounding.
 */
LD_INLINE float ld_log1pf(float x) {
  const float u = 1.0f + x;
  if (u == 1.0f) return x;
  if (u == ld_bits_f32(0x7F800000u)) return u;
  return ld_logf(u) * (x / (u - 1.0f));
}

/* PyTorch's softplus (beta 1, threshold 20): x above 20, else log(1 + e^x). NaN stays NaN. */
LD_INLINE float ld_softplusf(float x) { return x > 20.0f ? x : ld_log1pf(ld_expf(x)); }

/* The router score of DeepSeek-V4 (§4.6 step 1): sqrt(softplus(l)); sqrtf is correctly rounded everywhere. */
LD_INLINE float ld_sqrt_softplusf(float x) { return sqrtf(ld_softplusf(x)); }

/* ---------------------------------------------------------------------------------------------------
 * Hyper-connections (§4.3, §4.7)
 * ------------------------------------------------------------------------------------------------- */

/* ρ = 1 / sqrt(Σx² / n + eps), Σx² already accumulated (in the LD_LANES order by the caller). */
LD_INLINE float ld_hc_rho(float sum_sq, int n, float eps) { return 1.0f / sqrtf(sum_sq / (float)n + eps); }

/* pre_j = σ(scale·m + base) + eps (hc_pre and hc_head). */
LD_INLINE float ld_hc_pre_weight(float scale, float m, float base, float eps) {
  return ld_sigmoidf(scale * m + base) + eps;
}

/* post_j = 2·σ(scale·m + base). */
LD_INLINE float ld_hc_post_weight(float scale, float m, float base) { return 2.0f * ld_sigmoidf(scale * m + base); }

/*
 * Sinkhorn normalization of the hc×hc matrix C (row j, column k; in: A, out: C), §4.3 step 7, all in f32:
 *   C = row-softmax(A) + eps   (max-subtracted, ld_expf, row sum in increasing k, then e/sum + eps)
 *   columns: C_jk /= (Σ_j C_jk + eps)             (sum in increasing j)
 *   (iters − 1) × [rows: C_jk /= (Σ_k C_jk + eps); columns as above]
 */
LD_INLINE void ld_sinkhorn_f32(float* C, int hc, int iters, float eps) {
  for (int j = 0; j < hc; j++) {
    float* row = C + j * hc;
    float m = row[0];
    for (int k = 1; k < hc; k++)
      if (row[k] > m) m = row[k];
    float sum = 0.0f;
    for (int k = 0; k < hc; k++) {
      row[k] = ld_expf(row[k] - m);
      sum += row[k];
    }
    for (int k = 0; k < hc; k++) row[k] = row[k] / sum + eps;
  }
  for (int it = 0; it < iters; it++) {
    if (it > 0) {
      for (int j = 0; j < hc; j++) {
        float sum = 0.0f;
        for (int k = 0; k < hc; k++) sum += C[j * hc + k];
        const float d = sum + eps;
        for (int k = 0; k < hc; k++) C[j * hc + k] = C[j * hc + k] / d;
      }
    }
    for (int k = 0; k < hc; k++) {
      float sum = 0.0f;
      for (int j = 0; j < hc; j++) sum += C[j * hc + k];
      const float d = sum + eps;
      for (int j = 0; j < hc; j++) C[j * hc + k] = C[j * hc + k] / d;
    }
  }
}

/* u_i = Σ_j pre_j·X_j[i], j increasing, fmaf from +0 (x: stream j's element at x[j·stride]). */
LD_INLINE float ld_hc_collapse(const float* pre, const uint16_t* x, int hc, size_t stride) {
  float acc = 0.0f;
  for (int j = 0; j < hc; j++) acc = fmaf(pre[j], ld_f16_to_f32(x[(size_t)j * stride]), acc);
  return acc;
}

/* X'_k[i] = post_k·F[i] + Σ_j C_jk·X_j[i]: post_k·F rounded first, then fmaf over j increasing. */
LD_INLINE float ld_hc_expand(float post_k, float f, const float* comb, int k, const uint16_t* x, int hc,
                             size_t stride) {
  float acc = post_k * f;
  for (int j = 0; j < hc; j++) acc = fmaf(comb[j * hc + k], ld_f16_to_f32(x[(size_t)j * stride]), acc);
  return acc;
}

/* ---------------------------------------------------------------------------------------------------
 * Softmaxes
 * ------------------------------------------------------------------------------------------------- */

/*
 * The compressor's gated pooling of one channel over n slots (§4.5 step 3): softmax over the slot scores,
 * then the weighted sum of the slots' kv, normalized once at the end:
 *   m = max_i score_i; e_i = ld_expf(score_i − m); sum = Σ e_i; acc = Σ fmaf(e_i, kv_i, ·); result acc / sum
 * (i increasing). An empty slot has score −∞ and contributes e = 0.
 */
LD_INLINE float ld_softmax_pool(const float* score, const float* kv, int n) {
  float m = score[0];
  for (int i = 1; i < n; i++)
    if (score[i] > m) m = score[i];
  float sum = 0.0f, acc = 0.0f;
  for (int i = 0; i < n; i++) {
    const float e = ld_expf(score[i] - m);
    sum += e;
    acc = fmaf(e, kv[i], acc);
  }
  return acc / sum;
}

/*
 * Softmax with a sink logit (§4.5 step 5), in place over the n scores z: m = max(z_i, sink) (a NaN score
 * does not win the max; it propagates through its own term), z_i ← ld_expf(z_i − m), and the return value
 * is the denominator l = ((e_0 + e_1) + …) + ld_expf(sink − m) — the sink added last, with no value.
 * The caller forms P_i = z_i / l.
 */
LD_INLINE float ld_softmax_sink_exp(float* z, int n, float sink) {
  float m = sink;
  for (int i = 0; i < n; i++)
    if (z[i] > m) m = z[i];
  float l = 0.0f;
  for (int i = 0; i < n; i++) {
    z[i] = ld_expf(z[i] - m);
    l += z[i];
  }
  return l + ld_expf(sink - m);
}

/* ---------------------------------------------------------------------------------------------------
 * Indexer and router
 * ------------------------------------------------------------------------------------------------- */

/* One index head's term of score(t, b) (§4.5 step 6): acc + w·ReLU(dot), as fmaf. ReLU is written so a NaN
 * dot stays NaN (torch.relu propagates it; `dot > 0 ? dot : 0` would hide it). */
LD_INLINE float ld_index_term(float acc, float w, float dot) { return fmaf(w, dot < 0.0f ? 0.0f : dot, acc); }

/* How many of the B compressed blocks the query at absolute position pos sees: block b (rows b·r .. b·r+r−1)
 * is finished once pos ≥ b·r + r − 1, so min(B, ⌊(pos+1)/r⌋). indexerTopkF16's row t is pos = t0 + t: a
 * caller scoring late queries alone (a decode step) passes their position as t0 instead of padding with rows
 * 0..t0−1. pos + 1 is formed in 64 bits, so t0 + T may reach 2^31 without overflow. */
LD_INLINE int ld_index_visible(int t0, int t, int r, int B) {
  const long long v = ((long long)t0 + t + 1) / r;
  return v < B ? (int)v : B;
}

/*
 * The top-k order shared by the indexer and the router: a precedes b iff a's value is larger, or the values
 * are equal and a's index is lower (DESIGN §5: ties → lowest index). NaN ranks before every number, as in
 * torch.topk, so a NaN score is picked rather than silently skipped.
 */
LD_INLINE int ld_topk_before(float va, int ia, float vb, int ib) {
  const int na = va != va, nb = vb != vb;
  if (na != nb) return na;
  if (!na && va != vb) return va > vb;
  return ia < ib;
}

/* SwiGLU of one element in f32 (§4.6 step 4): with limit > 0, g ≤ limit and |u| ≤ limit (comparisons, so
 * NaN passes); silu(g)·u = (g / (1 + e^−g))·u — the same formula as swigluF16 (ops.cc). */
LD_INLINE float ld_swiglu_f32(float g, float u, float limit) {
  if (limit > 0.0f) {
    if (g > limit) g = limit;
    if (u > limit) u = limit;
    if (u < -limit) u = -limit;
  }
  return (g / (1.0f + ld_expf(-g))) * u;
}

#endif /* LD_DEEPSEEK_H */
