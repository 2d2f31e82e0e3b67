// Emulated MI250 hyper-connection kernels of DeepSeek-V4 (spec §4.3, §4.7; DeepSeek's Block.hc_pre, hc_post,
// hc_split_sinkhorn and ParallelHead.hc_head). The streams X [T, hc, D] are f16 in memory (the device keeps
// the whole residual state in FP16); the mixing math is f32 throughout, as DeepSeek's own path keeps it:
//   x̂ = f32(X_t) flattened stream-major (exact widening); ρ = ld_hc_rho(dot_ld(x̂, x̂), hc·D, norm_eps)
//   m_j = dot_ld(x̂, fn_j) · ρ                     (fn stays f32: 24 × hc·D values per layer, not worth FP16)
//   pre/post/A and Sinkhorn: ld_deepseek.h        (f32)
//   hc_pre:  u_i = f16(Σ_j pre_j·X_j[i])          (one rounding: the sublayer input)
//   hc_post: X'_k[i] = f16(post_k·F[i] + Σ_j C_jk·X_j[i])
//   hc_head: v_i = f16(Σ_j pre_j·X_j[i]) with fn [hc, hc·D], scale [1]
// One token per OpenMP iteration (a GPU kernel gives one token to a workgroup and the mixes to its lanes in
// the same dot order).
#include <immintrin.h>
#include <omp.h>

#include <vector>

#include "deepseek.h"
#include "ld_deepseek.h"
#include "ops_emulated.generated.h"

namespace ld {
namespace {

constexpr size_t kParallelMin = 1 << 15;

__attribute__((target("avx2,fma"))) float dot_f32_avx2(const float* x, const float* w, int k) {
  __m256 acc = _mm256_setzero_ps();
  const int k8 = k & ~7;
  for (int i = 0; i < k8; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(w + i), acc);
  float lanes[LD_LANES];
  _mm256_storeu_ps(lanes, acc);
  for (int i = k8; i < k; i++) lanes[i & 7] = fmaf(x[i], w[i], lanes[i & 7]);
  return ld_lanes_combine(lanes);
}

struct HcArgs {
  int T, hc, D, nmix;
  Span<const uint16_t> x;
  Span<const float> fn, base, scale;
  float norm_eps, hc_eps;
};

// The checked arguments of hcPreF16 / hcHeadF16 (ops_args.generated.h) with the row count of fn.
template <class A>
HcArgs hc_args(const A& g, int nmix) {
  return {g.T, g.hc, g.D, nmix, g.x, g.fn, g.base, g.scale, g.normEps, g.hcEps};
}

// m_j = dot(x̂, fn_j)·ρ for j < nmix; xf is the widened row [hc·D].
void hc_mixes(const HcArgs& a, const float* xf, float* m) {
  const int width = a.hc * a.D;
  const float rho = ld_hc_rho(dot_f32(xf, xf, width), width, a.norm_eps);
  for (int j = 0; j < a.nmix; j++) m[j] = dot_f32(xf, a.fn.data + (size_t)j * width, width) * rho;
}

void widen_row(const uint16_t* h, float* f, size_t n) {
  for (size_t i = 0; i < n; i++) f[i] = ld_f16_to_f32(h[i]);
}

// hcPreF16(x, fn, base, scale, T, hc, D, normEps, hcEps, iters) → { u: f16 [T, D], post: f32 [T, hc],
// comb: f32 [T, hc, hc] (C[t][j][k]) }.
void hc_pre(const ops::HcPreF16Args& g, ops::HcPreF16Out& o) {
  const HcArgs a = hc_args(g, (2 + g.hc) * g.hc);
  const int iters = g.iters;
  const int T = a.T, hc = a.hc, D = a.D;
  const size_t width = (size_t)hc * D;
  uint16_t* uo = o.u.Data();
  float* po = o.post.Data();
  float* co = o.comb.Data();
  const int nthreads = omp_get_max_threads();
  const size_t per = width + (size_t)a.nmix + hc;
  std::vector<float> scratch((size_t)nthreads * per);
#pragma omp parallel for schedule(static) num_threads(nthreads) if ((size_t)T * width * a.nmix >= kParallelMin)
  for (int t = 0; t < T; t++) {
    float* xf = scratch.data() + (size_t)omp_get_thread_num() * per;
    float* m = xf + width;
    float* pre = m + a.nmix;
    const uint16_t* xt = a.x.data + (size_t)t * width;
    widen_row(xt, xf, width);
    hc_mixes(a, xf, m);
    float* C = co + (size_t)t * hc * hc;
    for (int j = 0; j < hc; j++) {
      pre[j] = ld_hc_pre_weight(a.scale.data[0], m[j], a.base.data[j], a.hc_eps);
      po[(size_t)t * hc + j] = ld_hc_post_weight(a.scale.data[1], m[hc + j], a.base.data[hc + j]);
    }
    for (int q = 0; q < hc * hc; q++) C[q] = a.scale.data[2] * m[2 * hc + q] + a.base.data[2 * hc + q];
    ld_sinkhorn_f32(C, hc, iters, a.hc_eps);
    for (int i = 0; i < D; i++) uo[(size_t)t * D + i] = ld_f32_to_f16(ld_hc_collapse(pre, xt + i, hc, (size_t)D));
  }
}

// hcHeadF16(x, fn [hc, hc·D], base [hc], scale [1], T, hc, D, normEps, hcEps) → f16 [T, D].
void hc_head(const ops::HcHeadF16Args& g, ops::HcHeadF16Out& o) {
  const HcArgs a = hc_args(g, g.hc);
  const int T = a.T, hc = a.hc, D = a.D;
  const size_t width = (size_t)hc * D;
  uint16_t* vo = o.u.Data();
  const int nthreads = omp_get_max_threads();
  const size_t per = width + 2 * (size_t)hc;
  std::vector<float> scratch((size_t)nthreads * per);
#pragma omp parallel for schedule(static) num_threads(nthreads) if ((size_t)T * width * hc >= kParallelMin)
  for (int t = 0; t < T; t++) {
    float* xf = scratch.data() + (size_t)omp_get_thread_num() * per;
    float* m = xf + width;
    float* pre = m + hc;
    const uint16_t* xt = a.x.data + (size_t)t * width;
    widen_row(xt, xf, width);
    hc_mixes(a, xf, m);
    for (int j = 0; j < hc; j++) pre[j] = ld_hc_pre_weight(a.scale.data[0], m[j], a.base.data[j], a.hc_eps);
    for (int i = 0; i < D; i++) vo[(size_t)t * D + i] = ld_f32_to_f16(ld_hc_collapse(pre, xt + i, hc, (size_t)D));
  }
}

// hcPostF16(f [T, D], x [T, hc, D], post f32 [T, hc], comb f32 [T, hc, hc], T, hc, D) → f16 [T, hc, D].
void hc_post(const ops::HcPostF16Args& a, ops::HcPostF16Out& o) {
  const int T = a.T, hc = a.hc, D = a.D;
  const Span<const uint16_t> f = a.f, x = a.x;
  const Span<const float> post = a.post, comb = a.comb;
  uint16_t* yo = o.y.Data();
#pragma omp parallel for schedule(static) if (x.len * hc >= kParallelMin)
  for (int tk = 0; tk < T * hc; tk++) {
    const int t = tk / hc, k = tk % hc;
    const float pk = post.data[tk];
    const float* C = comb.data + (size_t)t * hc * hc;
    const uint16_t* xt = x.data + (size_t)t * hc * D;
    const uint16_t* ft = f.data + (size_t)t * D;
    for (int i = 0; i < D; i++) {
      yo[(size_t)tk * D + i] = ld_f32_to_f16(ld_hc_expand(pk, ld_f16_to_f32(ft[i]), C, k, xt + i, hc, (size_t)D));
    }
  }
}

}  // namespace

// The AVX2 kernel serves the Avx512 level too: a 256-bit lane vector is the LD_LANES order itself.
float dot_f32(const float* x, const float* w, int k) { return g_simd != Simd::Scalar ? dot_f32_avx2(x, w, k) : ld_dot_f32(x, w, k); }

void emu::hcPreF16(const ops::HcPreF16Args& a, ops::HcPreF16Out& o) { hc_pre(a, o); }
void emu::hcHeadF16(const ops::HcHeadF16Args& a, ops::HcHeadF16Out& o) { hc_head(a, o); }
void emu::hcPostF16(const ops::HcPostF16Args& a, ops::HcPostF16Out& o) { hc_post(a, o); }

}  // namespace ld
