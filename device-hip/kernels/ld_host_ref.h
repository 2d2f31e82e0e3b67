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
#include <vector>

#include "ld_numerics.h"
#include "ld_deepseek.h"

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

/* One attention row (query t, head h) into out[Dv], attention.cc's order; p: scratch [T]. */
inline void attention_row(const uint16_t* q, const uint16_t* k, const uint16_t* v, const float* sinks, int T, int Hq,
                          int Hkv, int D, int Dv, float scale, int window, int t, int h, uint16_t* out, float* p) {
  (void)T;
  const int hk = h / (Hq / Hkv), s0 = ld_attn_first_key(t, window);
  const uint16_t* qv = q + ((size_t)t * Hq + h) * D;
  float m = ld_bits_f32(0xFF800000u);
  for (int s = s0; s <= t; s++) {
    p[s] = ld_dot_f16(qv, k + ((size_t)s * Hkv + hk) * D, D) * scale;
    m = ld_max_step(m, p[s]);
  }
  if (sinks != nullptr) m = ld_max_step(m, sinks[h]);
  float l = 0.0f;
  for (int s = s0; s <= t; s++) {
    p[s] = ld_expf(p[s] - m);
    l += p[s];
  }
  if (sinks != nullptr) l += ld_expf(sinks[h] - m);
  for (int d = 0; d < Dv; d++) {
    float acc = 0.0f;
    for (int s = s0; s <= t; s++)
      acc = fmaf(ld_attn_prob_f32(p[s], l), ld_f16_to_f32(v[((size_t)s * Hkv + hk) * Dv + d]), acc);
    out[d] = ld_f32_to_f16(acc);
  }
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

}  // namespace ldref

#endif /* LD_HOST_REF_H */
