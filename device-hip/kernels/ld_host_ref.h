/*
 * ld_host_ref.h — the kernels' host-side expected values: each op written the plain, sequential way from
 * the same LD_HD element functions (ld_numerics.h, ld_deepseek.h) and the documented accumulation orders.
 * This is what the `emulated` backend computes (its SIMD kernels keep those orders), written without SIMD or
 * threads inside an output, so it is easy to read against the kernels.
 *
 * Used by the device check (device-hip/check/device_check.hip: GPU output vs these, bit for bit) and by the
 * ld_hip addon's `hostRef*` functions, which a CPU test (device-hip/test/hip_kernels.test.ts) compares with
 * the emulation addon on random inputs: GPU == host reference == emulation.
 *
 * Plain C++ (no HIP), header-only; OpenMP pragmas parallelize over outputs only, never inside a reduction.
 */
#ifndef LD_HOST_REF_H
#define LD_HOST_REF_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <algorithm>
#include <numeric>
#include <vector>

#include "ld_numerics.h"
#include "ld_deepseek.h"
#include "ld_gpt_oss.h"

namespace ldref {

/* Dequantize one weight; kinds and faults as LdDequantArgs. */
inline void dequant(int kind, const uint8_t* w, const uint8_t* scale, int scale_is_f32, int out, int in, int bo, int bi,
                    int fault, uint16_t* y) {
#pragma omp parallel for schedule(static)
  for (int o = 0; o < out; o++) {
    for (int i = 0; i < in; i++) {
      uint16_t h;
      const size_t e = (size_t)o * in + i;
      if (kind == 0) h = ld_mxfp4_elem_f16(w, scale, out, in, o, i, fault);
      else if (kind == 1) h = ld_fp8_elem_f16(w, scale, scale_is_f32, out, in, bo, bi, o, i, fault);
      else if (kind == 2) h = ld_bf16_to_f16((uint16_t)(w[2 * e] | (w[2 * e + 1] << 8)));
      else if (kind == 3) h = (uint16_t)(w[2 * e] | (w[2 * e + 1] << 8));
      else h = ld_f32_to_f16(ld_load_f32le(w + 4 * e));
      y[e] = h;
    }
  }
}

/* NVFP4, element by element (ld_nvfp4_elem_f16). */
inline void dequant_nvfp4(const uint8_t* w, const uint8_t* scale, int out, int in, float global, int divisor, int fault, uint16_t* y) {
#pragma omp parallel for schedule(static)
  for (int o = 0; o < out; o++)
    for (int i = 0; i < in; i++) y[(size_t)o * in + i] = ld_nvfp4_elem_f16(w, scale, out, in, global, divisor, o, i, fault);
}

/* bitsandbytes 4-bit, element by element (ld_bnb4_absmax, ld_bnb4_code, ld_bnb4_value_f16). */
inline void dequant_bnb4(const uint8_t* w, const uint8_t* absmax, int absmax_is_codes, const float* quant_map, const float* nested_absmax,
                         const float* nested_map, float nested_offset, int nested_blocksize, long long n, int blocksize, int fault, uint16_t* y) {
#pragma omp parallel for schedule(static)
  for (long long j = 0; j < n; j++) {
    const float a = ld_bnb4_absmax(absmax, absmax_is_codes, nested_absmax, nested_map, nested_offset, nested_blocksize, (size_t)j / (size_t)blocksize, fault);
    y[j] = ld_bnb4_value_f16(ld_bnb4_code(w, (size_t)j, fault), a, quant_map, fault);
  }
}

/* One GEMM output: W row j as f16 (plain, or MXFP4 decoded by ld_mxfp4_elem_f16), ld_dot_f16. */
inline float gemm_dot(const uint16_t* x, const uint16_t* w, const uint8_t* wq, const uint8_t* wscale, int k, int n, int i,
                      int j, int fault, uint16_t* wrow /* scratch [k] */) {
  const uint16_t* wr = w != nullptr ? w + (size_t)j * k : wrow;
  if (w == nullptr)
    for (int kk = 0; kk < k; kk++) wrow[kk] = ld_mxfp4_elem_f16(wq, wscale, n, k, j, kk, fault);
  return ld_dot_f16(x + (size_t)i * k, wr, k);
}

/* y16 = f16(alpha·dot) or y32 = dot, all outputs. */
inline void gemm(const uint16_t* x, const uint16_t* w, const uint8_t* wq, const uint8_t* wscale, int m, int k, int n,
                 float alpha, int fault, uint16_t* y16, float* y32) {
#pragma omp parallel
  {
    std::vector<uint16_t> wrow((size_t)k);
#pragma omp for schedule(static)
    for (int j = 0; j < n; j++) {
      if (w == nullptr)
        for (int kk = 0; kk < k; kk++) wrow[kk] = ld_mxfp4_elem_f16(wq, wscale, n, k, j, kk, fault);
      const uint16_t* wr = w != nullptr ? w + (size_t)j * k : wrow.data();
      for (int i = 0; i < m; i++) {
        const float d = ld_dot_f16(x + (size_t)i * k, wr, k);
        if (y16 != nullptr) y16[(size_t)i * n + j] = ld_f32_to_f16(alpha * d);
        else y32[(size_t)i * n + j] = d;
      }
    }
  }
}

/* The fused FP8-block GEMM's reference: the weight dequantized element by element (dequant, kind 1), then gemm. */
inline void gemm_fp8(const uint16_t* x, const uint8_t* w, const uint8_t* scale, int scale_is_f32, int m, int k, int n, int bo,
                     int bi, float alpha, int fault, uint16_t* y) {
  std::vector<uint16_t> wf((size_t)n * k);
  dequant(1, w, scale, scale_is_f32, n, k, bo, bi, fault, wf.data());
  gemm(x, wf.data(), nullptr, nullptr, m, k, n, alpha, 0, y, nullptr);
}

/* The fused NVFP4 GEMM's reference: the weight dequantized element by element (dequant_nvfp4), then gemm. */
inline void gemm_nvfp4(const uint16_t* x, const uint8_t* w, const uint8_t* scale, int m, int k, int n, float global, int divisor,
                       float alpha, int fault, uint16_t* y) {
  std::vector<uint16_t> wf((size_t)n * k);
  dequant_nvfp4(w, scale, n, k, global, divisor, fault, wf.data());
  gemm(x, wf.data(), nullptr, nullptr, m, k, n, alpha, 0, y, nullptr);
}

/* The fused bitsandbytes 4-bit GEMM's reference: the weight dequantized element by element (dequant_bnb4), then gemm. */
inline void gemm_bnb4(const uint16_t* x, const uint8_t* w, const uint8_t* absmax, int absmax_is_codes, const float* quant_map,
                      const float* nested_absmax, const float* nested_map, float nested_offset, int nested_blocksize, int m, int k,
                      int n, int blocksize, float alpha, int fault, uint16_t* y) {
  std::vector<uint16_t> wf((size_t)n * k);
  dequant_bnb4(w, absmax, absmax_is_codes, quant_map, nested_absmax, nested_map, nested_offset, nested_blocksize, (long long)n * k,
               blocksize, fault, wf.data());
  gemm(x, wf.data(), nullptr, nullptr, m, k, n, alpha, 0, y, nullptr);
}

inline void rmsnorm(const uint16_t* x, const uint16_t* w, int rows, int dim, float eps, uint16_t* y) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const uint16_t* xr = x + (size_t)r * dim;
    const float inv = ld_rms_inv(ld_dot_f16(xr, xr, dim), dim, eps);
    for (int d = 0; d < dim; d++) y[(size_t)r * dim + d] = ld_rmsnorm_elem_f16(xr[d], inv, w[d]);
  }
}

inline void rope(const uint16_t* x, const float* cs, const float* sn, int T, int H, int D, int off, int rot, int inter,
                 uint16_t* y) {
  const int half = rot / 2;
  memcpy(y, x, (size_t)T * H * D * 2);
#pragma omp parallel for schedule(static)
  for (int th = 0; th < T * H; th++) {
    const int t = th / H;
    const uint16_t* hx = x + (size_t)th * D + off;
    uint16_t* hy = y + (size_t)th * D + off;
    for (int j = 0; j < half; j++) {
      const int ia = ld_rope_index_a(j, inter), ib = ld_rope_index_b(j, half, inter);
      const float c = cs[(size_t)t * half + j], s = sn[(size_t)t * half + j];
      hy[ia] = ld_rope_a_f16(hx[ia], hx[ib], c, s);
      hy[ib] = ld_rope_b_f16(hx[ia], hx[ib], c, s);
    }
  }
}

/* One attention row over n keys in increasing position, attention.cc's order: query qv [D], key i's K row at
 * kb + i·kstride and V row at vb + i·vstride, sink logit *sink (NULL: none) → out [Dv]; p: scratch [n]. The
 * same pointer walk as the kernels' ld_attention_keys. */
inline void attention_keys(const uint16_t* qv, const uint16_t* kb, const uint16_t* vb, size_t kstride, size_t vstride, int first, int ring,
                           int n, int D, int Dv, float scale, const float* sink, uint16_t* out, float* p) {
  float m = ld_bits_f32(0xFF800000u);
  for (int i = 0; i < n; i++) {
    p[i] = ld_dot_f16(qv, kb + ld_ring_slot(first + i, ring) * kstride, D) * scale;
    m = ld_max_step(m, p[i]);
  }
  if (sink != nullptr) m = ld_max_step(m, *sink);
  float l = 0.0f;
  for (int i = 0; i < n; i++) {
    p[i] = ld_expf(p[i] - m);
    l += p[i];
  }
  if (sink != nullptr) l += ld_expf(*sink - m);
  for (int d = 0; d < Dv; d++) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc = fmaf(ld_attn_prob_f32(p[i], l), ld_f16_to_f32(vb[ld_ring_slot(first + i, ring) * vstride + d]), acc);
    out[d] = ld_f32_to_f16(acc);
  }
}

/* One attention row (query t, head h) into out[Dv], attention.cc's order; p: scratch [T]. */
inline void attention_row(const uint16_t* q, const uint16_t* k, const uint16_t* v, const float* sinks, int T, int Hq,
                          int Hkv, int D, int Dv, float scale, int window, int t, int h, uint16_t* out, float* p) {
  const int hk = h / (Hq / Hkv), s0 = ld_attn_first_key(t, window);
  attention_keys(q + ((size_t)t * Hq + h) * D, k + (size_t)hk * D, v + (size_t)hk * Dv, (size_t)Hkv * D, (size_t)Hkv * Dv, s0, T, t - s0 + 1, D, Dv, scale, sinks != nullptr ? sinks + h : nullptr, out, p);
}

inline void attention(const uint16_t* q, const uint16_t* k, const uint16_t* v, const float* sinks, int T, int Hq, int Hkv,
                      int D, int Dv, float scale, int window, uint16_t* y) {
#pragma omp parallel
  {
    std::vector<float> p((size_t)T);
#pragma omp for schedule(dynamic, 4)
    for (int th = 0; th < T * Hq; th++)
      attention_row(q, k, v, sinks, T, Hq, Hkv, D, Dv, scale, window, th / Hq, th % Hq, y + (size_t)th * Dv, p.data());
  }
}

/* attentionDecodeF16 (src/decode.cc): row r = (b, t, h) over cache sequence slot[b]'s keys
 * ld_attn_first_key(pos, window) .. pos, pos = start[b] + t, found by ld_kv_cache_row. Shapes as LdAttentionDecodeArgs. */
inline void attention_decode(const uint16_t* q, const uint16_t* k, const uint16_t* v, const int32_t* slot, const int32_t* start,
                             const float* sinks, int B, int Tq, int cap, int Hq, int Hkv, int D, int Dv, float scale, int window,
                             uint16_t* y) {
#pragma omp parallel
  {
    std::vector<float> p((size_t)cap);
#pragma omp for schedule(dynamic, 4)
    for (int r = 0; r < B * Tq * Hq; r++) {
      const int b = r / (Tq * Hq), t = (r / Hq) % Tq, h = r % Hq, hk = h / (Hq / Hkv);
      const int pos = start[b] + t, s0 = ld_attn_first_key(pos, window);
      const size_t row0 = ld_kv_cache_row(slot[b], cap, 0, Hkv, hk);
      attention_keys(q + (size_t)r * D, k + row0 * D, v + row0 * Dv, (size_t)Hkv * D, (size_t)Hkv * Dv, s0, cap, pos - s0 + 1, D, Dv, scale,
                     sinks != nullptr ? sinks + h : nullptr, y + (size_t)r * Dv, p.data());
    }
  }
}

/* Row softmax; with a sink through ld_softmax_sink_exp (ld_deepseek.h), without: the attention order. */
inline void softmax(const float* z, const float* sinks, int rows, int n, uint16_t* y) {
#pragma omp parallel
  {
    std::vector<float> e((size_t)n);
#pragma omp for schedule(static)
    for (int r = 0; r < rows; r++) {
      memcpy(e.data(), z + (size_t)r * n, (size_t)n * 4);
      float l;
      if (sinks != nullptr) {
        l = ld_softmax_sink_exp(e.data(), n, sinks[r]);
      } else {
        float m = ld_bits_f32(0xFF800000u);
        for (int i = 0; i < n; i++) m = ld_max_step(m, e[i]);
        l = 0.0f;
        for (int i = 0; i < n; i++) {
          e[i] = ld_expf(e[i] - m);
          l += e[i];
        }
      }
      for (int i = 0; i < n; i++) y[(size_t)r * n + i] = ld_f32_to_f16(e[i] / l);
    }
  }
}

/* SwiGLU through ld_deepseek.h's ld_swiglu_f32 (the kernels and ops.cc use ld_numerics.h's
 * ld_swiglu_clamp_f32): a mismatch here means the two copies of the formula diverged. */
inline void swiglu(const uint16_t* g, const uint16_t* u, long long n, float limit, uint16_t* y) {
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < n; i++) y[i] = ld_f32_to_f16(ld_swiglu_f32(ld_f16_to_f32(g[i]), ld_f16_to_f32(u[i]), limit));
}

inline void add(const uint16_t* a, const uint16_t* b, long long n, uint16_t* y) {
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < n; i++) y[i] = ld_add_f16(a[i], b[i]);
}

inline void mul_scalar(const uint16_t* a, long long n, float s, uint16_t* y) {
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < n; i++) y[i] = ld_mul_scalar_f16(a[i], s);
}

inline void moe_gather(const uint16_t* x, const int32_t* token, int R, int D, uint16_t* y) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < R; r++) memcpy(y + (size_t)r * D, x + (size_t)token[r] * D, (size_t)D * 2);
}

/* rowToken [R] → CSR (start [T+1], rows [R], increasing r within a token), as moeCombineF16 builds it. */
inline void moe_csr(const int32_t* row_token, int R, int T, int32_t* start, int32_t* rows) {
  for (int t = 0; t <= T; t++) start[t] = 0;
  for (int r = 0; r < R; r++) start[row_token[r] + 1]++;
  for (int t = 0; t < T; t++) start[t + 1] += start[t];
  std::vector<int32_t> fill(start, start + T);
  for (int r = 0; r < R; r++) rows[fill[row_token[r]]++] = r;
}

inline void moe_combine(const uint16_t* y, const int32_t* start, const int32_t* rows, const uint16_t* shared, int T, int D,
                        uint16_t* out) {
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < D; i++) {
      float acc = 0.0f;
      for (int j = start[t]; j < start[t + 1]; j++) acc = ld_acc_add_f16(acc, y[(size_t)rows[j] * D + i]);
      acc = ld_acc_add_f16(acc, shared[(size_t)t * D + i]);
      out[(size_t)t * D + i] = ld_f32_to_f16(acc);
    }
  }
}

inline void sinkhorn(const float* A, int T, int hc, int iters, float eps, float* C) {
  const size_t q = (size_t)hc * hc;
  memcpy(C, A, (size_t)T * q * 4);
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; t++) ld_sinkhorn_f32(C + (size_t)t * q, hc, iters, eps);
}

/* ---- DeepSeek-V4 ops: the emulation's loops (src/deepseek_hc.cc, deepseek_attention.cc, deepseek_moe.cc)
 * written plainly: dot products by ld_dot_f32 / ld_dot_f16 (the LD_LANES order), everything else sequential. */

/* hcPreF16 (head = false: u, post, comb) / hcHeadF16 (head = true: u only; post, comb, iters unused). */
inline void hc_pre_head(bool head, const uint16_t* x, const float* fn, const float* base, const float* scale, int T, int hc,
                        int D, float norm_eps, float hc_eps, int iters, uint16_t* u, float* post, float* comb) {
  const int width = hc * D, nmix = head ? hc : (2 + hc) * hc;
#pragma omp parallel
  {
    std::vector<float> xf((size_t)width), m((size_t)nmix), pre((size_t)hc), C((size_t)hc * hc);
#pragma omp for schedule(static)
    for (int t = 0; t < T; t++) {
      const uint16_t* xt = x + (size_t)t * width;
      for (int i = 0; i < width; i++) xf[i] = ld_f16_to_f32(xt[i]);
      const float rho = ld_hc_rho(ld_dot_f32(xf.data(), xf.data(), width), width, norm_eps);
      for (int j = 0; j < nmix; j++) m[j] = ld_dot_f32(xf.data(), fn + (size_t)j * width, width) * rho;
      for (int j = 0; j < hc; j++) {
        pre[j] = ld_hc_pre_weight(scale[0], m[j], base[j], hc_eps);
        if (!head) post[(size_t)t * hc + j] = ld_hc_post_weight(scale[1], m[hc + j], base[hc + j]);
      }
      if (!head) {
        for (int q = 0; q < hc * hc; q++) C[q] = scale[2] * m[2 * hc + q] + base[2 * hc + q];
        ld_sinkhorn_f32(C.data(), hc, iters, hc_eps);
        for (int q = 0; q < hc * hc; q++) comb[(size_t)t * hc * hc + q] = C[q];
      }
      for (int i = 0; i < D; i++) u[(size_t)t * D + i] = ld_f32_to_f16(ld_hc_collapse(pre.data(), xt + i, hc, (size_t)D));
    }
  }
}

/* hcPostF16. */
inline void hc_post(const uint16_t* f, const uint16_t* x, const float* post, const float* comb, int T, int hc, int D,
                    uint16_t* y) {
#pragma omp parallel for schedule(static)
  for (int tk = 0; tk < T * hc; tk++) {
    const int t = tk / hc, k = tk % hc;
    for (int i = 0; i < D; i++)
      y[(size_t)tk * D + i] = ld_f32_to_f16(ld_hc_expand(post[tk], ld_f16_to_f32(f[(size_t)t * D + i]), comb + (size_t)t * hc * hc,
                                                         k, x + (size_t)t * hc * D + i, hc, (size_t)D));
  }
}

/* compressPoolF16 → y f16 [T/ratio, dc]. */
inline void compress_pool(const float* K, const float* Z, const float* ape, int T, int r, int dc, bool overlap, uint16_t* y) {
  const int w = (overlap ? 2 : 1) * dc, n = overlap ? 2 * r : r, B = T / r;
#pragma omp parallel
  {
    std::vector<float> score((size_t)n), kv((size_t)n);
#pragma omp for schedule(static)
    for (int bc = 0; bc < B * dc; bc++) {
      const int b = bc / dc, ch = bc % dc;
      for (int i = 0; i < r; i++) {
        const size_t cur = (size_t)b * r + i;
        if (overlap) {
          score[r + i] = Z[cur * w + dc + ch] + ape[(size_t)i * w + dc + ch];
          kv[r + i] = K[cur * w + dc + ch];
          score[i] = b > 0 ? Z[(cur - r) * w + ch] + ape[(size_t)i * w + ch] : ld_bits_f32(0xFF800000u);
          kv[i] = b > 0 ? K[(cur - r) * w + ch] : 0.0f;
        } else {
          score[i] = Z[cur * w + ch] + ape[(size_t)i * w + ch];
          kv[i] = K[cur * w + ch];
        }
      }
      y[bc] = ld_f32_to_f16(ld_softmax_pool(score.data(), kv.data(), n));
    }
  }
}

/* routerF32 (bias, given may be NULL): ids ascending, weights, scores. Top-k by std::partial_sort in the
 * ld_topk_before order, as the emulation (the kernel selects differently: the comparison holds them equal). */
inline void router(const float* logits, const float* bias, const int32_t* given, int T, int E, int k, float route_scale,
                   int32_t* ids, float* weights, float* scores) {
#pragma omp parallel
  {
    std::vector<float> sel((size_t)E);
    std::vector<int> ix((size_t)E);
#pragma omp for schedule(static)
    for (int t = 0; t < T; t++) {
      float* s = scores + (size_t)t * E;
      for (int e = 0; e < E; e++) s[e] = ld_sqrt_softplusf(logits[(size_t)t * E + e]);
      int32_t* it = ids + (size_t)t * k;
      if (given != nullptr) {
        std::copy(given + (size_t)t * k, given + (size_t)(t + 1) * k, it);
      } else {
        for (int e = 0; e < E; e++) sel[e] = bias != nullptr ? s[e] + bias[e] : s[e];
        std::iota(ix.begin(), ix.end(), 0);
        const float* sv = sel.data();
        std::partial_sort(ix.begin(), ix.begin() + k, ix.end(), [sv](int a, int b) { return ld_topk_before(sv[a], a, sv[b], b) != 0; });
        std::copy(ix.begin(), ix.begin() + k, it);
      }
      std::sort(it, it + k);
      float sum = 0.0f;
      for (int j = 0; j < k; j++) sum += s[it[j]];
      for (int j = 0; j < k; j++) weights[(size_t)t * k + j] = (route_scale * s[it[j]]) / sum;
    }
  }
}

/* swigluRowsF16 (rw may be NULL). */
inline void swiglu_rows(const uint16_t* g, const uint16_t* u, const float* rw, int rows, int cols, float limit, uint16_t* y) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      const size_t i = (size_t)r * cols + c;
      float v = ld_swiglu_f32(ld_f16_to_f32(g[i]), ld_f16_to_f32(u[i]), limit);
      if (rw != nullptr) v = v * rw[r];
      y[i] = ld_f32_to_f16(v);
    }
}

/* ossRouterF32 (gpt-oss; bias, given may be NULL): ids ascending, weights = softmax over the chosen biased logits. */
inline void oss_router(const float* logits, const float* bias, const int32_t* given, int T, int E, int k, int32_t* ids, float* weights) {
#pragma omp parallel
  {
    std::vector<float> z((size_t)E);
    std::vector<int> ix((size_t)E);
#pragma omp for schedule(static)
    for (int t = 0; t < T; t++) {
      const float* row = logits + (size_t)t * E;
      int32_t* it = ids + (size_t)t * k;
      if (given != nullptr) {
        std::copy(given + (size_t)t * k, given + (size_t)(t + 1) * k, it);
      } else {
        for (int e = 0; e < E; e++) z[e] = ld_oss_router_z(row, bias, e);
        std::iota(ix.begin(), ix.end(), 0);
        const float* zv = z.data();
        std::partial_sort(ix.begin(), ix.begin() + k, ix.end(), [zv](int a, int b) { return ld_topk_before(zv[a], a, zv[b], b) != 0; });
        std::copy(ix.begin(), ix.begin() + k, it);
      }
      std::sort(it, it + k);
      ld_oss_router_weights(row, bias, it, k, weights + (size_t)t * k);
    }
  }
}

/* ossSwigluF16 (gpt-oss): h [rows, 2I] interleaved gate/up → y [rows, I]. */
inline void oss_swiglu(const uint16_t* h, int rows, int I, float limit, float alpha, uint16_t* y) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++)
    for (int i = 0; i < I; i++) y[(size_t)r * I + i] = ld_oss_swiglu_f16(h[(size_t)r * 2 * I + 2 * i], h[(size_t)r * 2 * I + 2 * i + 1], limit, alpha);
}

/* indexerTopkF16 → scores f32 [T, B], picks int32 [T, topk] (ascending, −1 padded); row t is position t0 + t. */
inline void indexer_topk(const uint16_t* q, const uint16_t* w, const uint16_t* e, int T, int nh, int hd, int B, int r, int t0, int topk,
                         float scale, float* scores, int32_t* picks) {
#pragma omp parallel
  {
    std::vector<float> wt((size_t)nh);
    std::vector<int> ix((size_t)(B > 0 ? B : 1));
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < T; t++) {
      const int vis = ld_index_visible(t0, t, r, B);
      for (int h = 0; h < nh; h++) wt[h] = ld_f16_to_f32(w[(size_t)t * nh + h]) * scale;
      float* st = scores + (size_t)t * B;
      for (int b = 0; b < B; b++) {
        if (b >= vis) {
          st[b] = ld_bits_f32(0xFF800000u);
          continue;
        }
        float total = 0.0f;
        for (int h = 0; h < nh; h++) total = ld_index_term(total, wt[h], ld_dot_f16(q + ((size_t)t * nh + h) * hd, e + (size_t)b * hd, hd));
        st[b] = total;
      }
      const int k = std::min(topk, vis);
      std::iota(ix.begin(), ix.begin() + vis, 0);
      std::partial_sort(ix.begin(), ix.begin() + k, ix.begin() + vis, [st](int a, int b) { return ld_topk_before(st[a], a, st[b], b) != 0; });
      std::sort(ix.begin(), ix.begin() + k);
      for (int j = 0; j < topk; j++) picks[(size_t)t * topk + j] = j < k ? ix[j] : -1;
    }
  }
}

/* sparseAttentionF16 → y f16 [T, H, D]: raw rows then cand's compressed rows, ld_softmax_sink_exp, P·V with K = V. */
inline void sparse_attention(const uint16_t* q, const uint16_t* kv, const uint16_t* comp, const int32_t* cand, const float* sinks,
                             int T, int H, int D, int window, int K, float scale, uint16_t* y) {
#pragma omp parallel
  {
    std::vector<const uint16_t*> rw((size_t)T + K);
    std::vector<float> z((size_t)T + K), acc((size_t)D);
#pragma omp for schedule(dynamic, 4)
    for (int th = 0; th < T * H; th++) {
      const int t = th / H, h = th % H;
      int n = 0;
      for (int s = ld_attn_first_key(t, window); s <= t; s++) rw[n++] = kv + (size_t)s * D;
      for (int j = 0; j < K; j++) {
        const int b = cand[(size_t)t * K + j];
        if (b >= 0) rw[n++] = comp + (size_t)b * D;
      }
      for (int c = 0; c < n; c++) z[c] = ld_dot_f16(q + (size_t)th * D, rw[c], D) * scale;
      const float l = ld_softmax_sink_exp(z.data(), n, sinks[h]);
      for (int d = 0; d < D; d++) acc[d] = 0.0f;
      for (int c = 0; c < n; c++) {
        const float p = ld_attn_prob_f32(z[c], l);
        for (int d = 0; d < D; d++) acc[d] = fmaf(p, ld_f16_to_f32(rw[c][d]), acc[d]);
      }
      for (int d = 0; d < D; d++) y[(size_t)th * D + d] = ld_f32_to_f16(acc[d]);
    }
  }
}

}  // namespace ldref

#endif /* LD_HOST_REF_H */
