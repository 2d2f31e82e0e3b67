// The reference's DeepSeek-V4 attention core (reference-cpu/deepseek_v4/attention.ts, attendWithSink): its two
// O(candidates · head_dim) parts for one token, in float64 as the TypeScript loops compute them, each sum in the
// same order, so the result is theirs bit for bit (tested against attendWithSinkTs):
//   attentionScores: z[h][c] = (Σ_i q[t,h,i] · k_c[i]) · scale, the sum over i from 0 up, each product of two
//     float32s exact in float64;
//   attentionOutput: o[t,h,i] = float32(Σ_c p[h][c] · k_c[i]), the sum over c from 0 up, each product rounded to
//     float64, the total rounded once to float32 by the store.
//   hcPostMix / hcCollapse: the hyper-connections' stream mixes (reference-cpu/deepseek_v4/hc.ts hcPost and the pre
//     collapse), each element's float64 sum over the hc streams in the TypeScript loops' order.
// The softmax between them stays in TypeScript (Math.exp: a C library's exp may round differently in the last bit).
// The candidates of token t are the raw rows kv[first..last], then the compressed rows comp[picks[...]], in that
// order. SIMD lanes run across candidates (scores, over rows transposed once per token for all heads) or across
// dimensions (output), never across a sum: every lane adds in the scalar order. -ffp-contract=off keeps every
// multiply and add separately rounded.
#include <immintrin.h>
#include <napi.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dequant_exact.h"
#include "simd_level.h"

namespace {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593: _mm512_undefined at -O3 (cvtps_pd)

[[noreturn]] void range(const Napi::Env& env, const std::string& fn, const std::string& msg) {
  throw Napi::RangeError::New(env, fn + ": " + msg);
}

Napi::Float32Array f32_arg(const Napi::CallbackInfo& info, size_t i, const std::string& fn, const char* name) {
  if (i >= info.Length() || !info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    throw Napi::TypeError::New(info.Env(), fn + ": " + name + " must be a Float32Array");
  }
  return info[i].As<Napi::Float32Array>();
}

// An integer argument in [lo, 2^31 − 1]: products of two of them (and of a count of rows) stay far inside int64.
int64_t int_arg(const Napi::CallbackInfo& info, size_t i, const std::string& fn, const char* name, int64_t lo) {
  const double v = i < info.Length() && info[i].IsNumber() ? info[i].As<Napi::Number>().DoubleValue() : NAN;
  if (!(v >= static_cast<double>(lo) && v <= 2147483647.0 && std::floor(v) == v)) range(info.Env(), fn, std::string(name) + " must be an integer in [" + std::to_string(lo) + ", 2^31)");
  return static_cast<int64_t>(v);
}

// a · b, or a RangeError when it passes 2^40 (no array of that many values exists to index)
int64_t product(const Napi::Env& env, const std::string& fn, int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r) || r > (int64_t{1} << 40)) range(env, fn, std::string(what) + " is too large");
  return r;
}

// Whether an array of len values holds token t of [·, H, d] rows (t, H, d ≤ 2^31 − 1, H, d ≥ 1: no product overflows).
bool holds_token(size_t len, int64_t t, int64_t H, int64_t d) { return t < static_cast<int64_t>(len) / (H * d); }

// The candidate rows of one token: kv rows [first, last] (none when last < first), then comp rows picks[...].
// Arguments (kv, first, last, comp, picks) at info[k..k+4], d the row length.
std::vector<const float*> candidates(const Napi::CallbackInfo& info, size_t k, int64_t d, const std::string& fn) {
  const auto kv = f32_arg(info, k, fn, "kv"), comp = f32_arg(info, k + 3, fn, "comp");
  const int64_t first = int_arg(info, k + 1, fn, "first", 0), last = int_arg(info, k + 2, fn, "last", -1);
  if (!info[k + 4].IsTypedArray() || info[k + 4].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) throw Napi::TypeError::New(info.Env(), fn + ": picks must be an Int32Array");
  const auto picks = info[k + 4].As<Napi::Int32Array>();
  const int64_t kvRows = static_cast<int64_t>(kv.ElementLength()) / d, compRows = static_cast<int64_t>(comp.ElementLength()) / d;
  if (last >= kvRows) range(info.Env(), fn, "raw rows [" + std::to_string(first) + ", " + std::to_string(last) + "] outside the " + std::to_string(kvRows) + " of kv");
  std::vector<const float*> rows;
  rows.reserve(static_cast<size_t>(std::max<int64_t>(0, last - first + 1)) + picks.ElementLength());
  for (int64_t s = first; s <= last; s++) rows.push_back(kv.Data() + s * d);
  for (size_t j = 0; j < picks.ElementLength(); j++) {
    const int32_t b = picks[j];
    if (b < 0 || b >= compRows) range(info.Env(), fn, "pick " + std::to_string(b) + " outside the " + std::to_string(compRows) + " compressed rows");
    rows.push_back(comp.Data() + static_cast<int64_t>(b) * d);
  }
  return rows;
}

// ---- scores: kt [d][Cp] the candidates transposed (Cp = C rounded up to 8, zero-padded), per head z[c] ----------

void scores_scalar(const float* qh, const float* kt, int64_t d, int64_t C, int64_t Cp, double scale, double* z) {
  for (int64_t c = 0; c < C; c++) {
    double dot = 0;
    for (int64_t i = 0; i < d; i++) dot += static_cast<double>(qh[i]) * static_cast<double>(kt[i * Cp + c]);
    z[c] = dot * scale;
  }
}

__attribute__((target("avx2"))) void scores_avx2(const float* qh, const float* kt, int64_t d, int64_t C, int64_t Cp, double scale, double* z) {
  int64_t c = 0;
  for (; c + 16 <= C; c += 16) {  // four accumulators of 4 candidates: independent chains
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < d; i++) {
      const __m256d qv = _mm256_set1_pd(static_cast<double>(qh[i]));
      const float* k = kt + i * Cp + c;
      a0 = _mm256_add_pd(a0, _mm256_mul_pd(qv, _mm256_cvtps_pd(_mm_loadu_ps(k))));
      a1 = _mm256_add_pd(a1, _mm256_mul_pd(qv, _mm256_cvtps_pd(_mm_loadu_ps(k + 4))));
      a2 = _mm256_add_pd(a2, _mm256_mul_pd(qv, _mm256_cvtps_pd(_mm_loadu_ps(k + 8))));
      a3 = _mm256_add_pd(a3, _mm256_mul_pd(qv, _mm256_cvtps_pd(_mm_loadu_ps(k + 12))));
    }
    const __m256d s = _mm256_set1_pd(scale);
    _mm256_storeu_pd(z + c, _mm256_mul_pd(a0, s));
    _mm256_storeu_pd(z + c + 4, _mm256_mul_pd(a1, s));
    _mm256_storeu_pd(z + c + 8, _mm256_mul_pd(a2, s));
    _mm256_storeu_pd(z + c + 12, _mm256_mul_pd(a3, s));
  }
  for (; c + 4 <= C; c += 4) {
    __m256d a = _mm256_setzero_pd();
    for (int64_t i = 0; i < d; i++) a = _mm256_add_pd(a, _mm256_mul_pd(_mm256_set1_pd(static_cast<double>(qh[i])), _mm256_cvtps_pd(_mm_loadu_ps(kt + i * Cp + c))));
    _mm256_storeu_pd(z + c, _mm256_mul_pd(a, _mm256_set1_pd(scale)));
  }
  if (c < C) scores_scalar(qh, kt + c, d, C - c, Cp, scale, z + c);
}

__attribute__((target("avx512f"))) void scores_avx512(const float* qh, const float* kt, int64_t d, int64_t C, int64_t Cp, double scale, double* z) {
  int64_t c = 0;
  for (; c + 32 <= C; c += 32) {
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < d; i++) {
      const __m512d qv = _mm512_set1_pd(static_cast<double>(qh[i]));
      const float* k = kt + i * Cp + c;
      a0 = _mm512_add_pd(a0, _mm512_mul_pd(qv, _mm512_cvtps_pd(_mm256_loadu_ps(k))));
      a1 = _mm512_add_pd(a1, _mm512_mul_pd(qv, _mm512_cvtps_pd(_mm256_loadu_ps(k + 8))));
      a2 = _mm512_add_pd(a2, _mm512_mul_pd(qv, _mm512_cvtps_pd(_mm256_loadu_ps(k + 16))));
      a3 = _mm512_add_pd(a3, _mm512_mul_pd(qv, _mm512_cvtps_pd(_mm256_loadu_ps(k + 24))));
    }
    const __m512d s = _mm512_set1_pd(scale);
    _mm512_storeu_pd(z + c, _mm512_mul_pd(a0, s));
    _mm512_storeu_pd(z + c + 8, _mm512_mul_pd(a1, s));
    _mm512_storeu_pd(z + c + 16, _mm512_mul_pd(a2, s));
    _mm512_storeu_pd(z + c + 24, _mm512_mul_pd(a3, s));
  }
  for (; c + 8 <= C; c += 8) {
    __m512d a = _mm512_setzero_pd();
    for (int64_t i = 0; i < d; i++) a = _mm512_add_pd(a, _mm512_mul_pd(_mm512_set1_pd(static_cast<double>(qh[i])), _mm512_cvtps_pd(_mm256_loadu_ps(kt + i * Cp + c))));
    _mm512_storeu_pd(z + c, _mm512_mul_pd(a, _mm512_set1_pd(scale)));
  }
  if (c < C) scores_scalar(qh, kt + c, d, C - c, Cp, scale, z + c);
}

// attentionScores(q [S,H,d], t, H, d, kv, first, last, comp, picks, scale) → Float64Array [H, C]
Napi::Value attention_scores(const Napi::CallbackInfo& info) {
  const std::string fn = "attentionScores";
  const auto q = f32_arg(info, 0, fn, "q");
  const int64_t t = int_arg(info, 1, fn, "t", 0), H = int_arg(info, 2, fn, "H", 1), d = int_arg(info, 3, fn, "d", 1);
  if (!holds_token(q.ElementLength(), t, H, d)) range(info.Env(), fn, "q holds no token " + std::to_string(t));
  const std::vector<const float*> rows = candidates(info, 4, d, fn);
  if (info.Length() < 10 || !info[9].IsNumber()) throw Napi::TypeError::New(info.Env(), fn + ": scale must be a number");
  const double scale = info[9].As<Napi::Number>().DoubleValue();
  const int64_t C = static_cast<int64_t>(rows.size()), Cp = (C + 7) / 8 * 8;
  const int64_t HC = product(info.Env(), fn, H, C, "H·C");
  std::vector<float> kt(static_cast<size_t>(product(info.Env(), fn, d, Cp, "d·C")), 0.0f);  // the candidates transposed, once for every head
  for (int64_t c = 0; c < C; c++)
    for (int64_t i = 0; i < d; i++) kt[static_cast<size_t>(i * Cp + c)] = rows[static_cast<size_t>(c)][i];
  auto z = Napi::Float64Array::New(info.Env(), static_cast<size_t>(HC));
  const float* qt = q.Data() + t * H * d;
  double* zd = z.Data();
  const RefSimd simd = reference_simd();
#pragma omp parallel for schedule(static) if (static_cast<double>(HC) * static_cast<double>(d) >= 65536.0)
  for (int64_t h = 0; h < H; h++) {
    if (simd == RefSimd::Avx512) scores_avx512(qt + h * d, kt.data(), d, C, Cp, scale, zd + h * C);
    else if (simd == RefSimd::Avx2) scores_avx2(qt + h * d, kt.data(), d, C, Cp, scale, zd + h * C);
    else scores_scalar(qt + h * d, kt.data(), d, C, Cp, scale, zd + h * C);
  }
  return z;
}

// ---- output: o[i] = float32(Σ_c p[c] · k_c[i]) for i of one head -----------------------------------------------

void output_scalar(const double* p, const float* const* rows, int64_t C, int64_t i0, int64_t i1, float* o) {
  for (int64_t i = i0; i < i1; i++) {
    double acc = 0;
    for (int64_t c = 0; c < C; c++) acc += p[c] * static_cast<double>(rows[c][i]);
    o[i] = static_cast<float>(acc);
  }
}

__attribute__((target("avx2"))) void output_avx2(const double* p, const float* const* rows, int64_t C, int64_t d, float* o) {
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t c = 0; c < C; c++) {
      const __m256d pv = _mm256_set1_pd(p[c]);
      const float* r = rows[c] + i;
      a0 = _mm256_add_pd(a0, _mm256_mul_pd(pv, _mm256_cvtps_pd(_mm_loadu_ps(r))));
      a1 = _mm256_add_pd(a1, _mm256_mul_pd(pv, _mm256_cvtps_pd(_mm_loadu_ps(r + 4))));
      a2 = _mm256_add_pd(a2, _mm256_mul_pd(pv, _mm256_cvtps_pd(_mm_loadu_ps(r + 8))));
      a3 = _mm256_add_pd(a3, _mm256_mul_pd(pv, _mm256_cvtps_pd(_mm_loadu_ps(r + 12))));
    }
    _mm_storeu_ps(o + i, _mm256_cvtpd_ps(a0));
    _mm_storeu_ps(o + i + 4, _mm256_cvtpd_ps(a1));
    _mm_storeu_ps(o + i + 8, _mm256_cvtpd_ps(a2));
    _mm_storeu_ps(o + i + 12, _mm256_cvtpd_ps(a3));
  }
  output_scalar(p, rows, C, i, d, o);
}

__attribute__((target("avx512f"))) void output_avx512(const double* p, const float* const* rows, int64_t C, int64_t d, float* o) {
  int64_t i = 0;
  for (; i + 32 <= d; i += 32) {
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t c = 0; c < C; c++) {
      const __m512d pv = _mm512_set1_pd(p[c]);
      const float* r = rows[c] + i;
      a0 = _mm512_add_pd(a0, _mm512_mul_pd(pv, _mm512_cvtps_pd(_mm256_loadu_ps(r))));
      a1 = _mm512_add_pd(a1, _mm512_mul_pd(pv, _mm512_cvtps_pd(_mm256_loadu_ps(r + 8))));
      a2 = _mm512_add_pd(a2, _mm512_mul_pd(pv, _mm512_cvtps_pd(_mm256_loadu_ps(r + 16))));
      a3 = _mm512_add_pd(a3, _mm512_mul_pd(pv, _mm512_cvtps_pd(_mm256_loadu_ps(r + 24))));
    }
    _mm256_storeu_ps(o + i, _mm512_cvtpd_ps(a0));
    _mm256_storeu_ps(o + i + 8, _mm512_cvtpd_ps(a1));
    _mm256_storeu_ps(o + i + 16, _mm512_cvtpd_ps(a2));
    _mm256_storeu_ps(o + i + 24, _mm512_cvtpd_ps(a3));
  }
  output_scalar(p, rows, C, i, d, o);
}

// attentionOutput(p [H, C], kv, first, last, comp, picks, t, H, d, o [S,H,d]): writes o[t, h, :] for every h
Napi::Value attention_output(const Napi::CallbackInfo& info) {
  const std::string fn = "attentionOutput";
  if (info.Length() < 10 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) throw Napi::TypeError::New(info.Env(), fn + ": p must be a Float64Array");
  const auto p = info[0].As<Napi::Float64Array>();
  const int64_t t = int_arg(info, 6, fn, "t", 0), H = int_arg(info, 7, fn, "H", 1), d = int_arg(info, 8, fn, "d", 1);
  const std::vector<const float*> rows = candidates(info, 1, d, fn);
  const int64_t C = static_cast<int64_t>(rows.size()), HC = product(info.Env(), fn, H, C, "H·C");
  if (static_cast<int64_t>(p.ElementLength()) != HC) range(info.Env(), fn, "p holds " + std::to_string(p.ElementLength()) + " values, want H·C = " + std::to_string(HC));
  auto o = f32_arg(info, 9, fn, "o");
  if (!holds_token(o.ElementLength(), t, H, d)) range(info.Env(), fn, "o holds no token " + std::to_string(t));
  float* ot = o.Data() + t * H * d;
  const double* pd = p.Data();
  const RefSimd simd = reference_simd();
#pragma omp parallel for schedule(static) if (static_cast<double>(HC) * static_cast<double>(d) >= 65536.0)
  for (int64_t h = 0; h < H; h++) {
    if (simd == RefSimd::Avx512) output_avx512(pd + h * C, rows.data(), C, d, ot + h * d);
    else if (simd == RefSimd::Avx2) output_avx2(pd + h * C, rows.data(), C, d, ot + h * d);
    else output_scalar(pd + h * C, rows.data(), C, 0, d, ot + h * d);
  }
  return info.Env().Undefined();
}

// ---- hyper-connection mixes (reference-cpu/deepseek_v4/hc.ts): one output row of D values ---------------------
// o[i] = float32(acc) with acc = a·f[i] (f given) or 0, then acc += w[j]·x_j[i] for j from 0 up, in float64: hc.ts's
// loops, lanes across i (never across the sum over j).

void mix_scalar(const float* f, double a, const float* const* xs, const double* w, int64_t hc, int64_t i0, int64_t D, float* o) {
  for (int64_t i = i0; i < D; i++) {
    double acc = f != nullptr ? a * static_cast<double>(f[i]) : 0.0;
    for (int64_t j = 0; j < hc; j++) acc += w[j] * static_cast<double>(xs[j][i]);
    o[i] = static_cast<float>(acc);
  }
}

__attribute__((target("avx2"))) void mix_avx2(const float* f, double a, const float* const* xs, const double* w, int64_t hc, int64_t D, float* o) {
  int64_t i = 0;
  for (; i + 8 <= D; i += 8) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0;
    if (f != nullptr) {
      a0 = _mm256_mul_pd(_mm256_set1_pd(a), _mm256_cvtps_pd(_mm_loadu_ps(f + i)));
      a1 = _mm256_mul_pd(_mm256_set1_pd(a), _mm256_cvtps_pd(_mm_loadu_ps(f + i + 4)));
    }
    for (int64_t j = 0; j < hc; j++) {
      const __m256d wv = _mm256_set1_pd(w[j]);
      a0 = _mm256_add_pd(a0, _mm256_mul_pd(wv, _mm256_cvtps_pd(_mm_loadu_ps(xs[j] + i))));
      a1 = _mm256_add_pd(a1, _mm256_mul_pd(wv, _mm256_cvtps_pd(_mm_loadu_ps(xs[j] + i + 4))));
    }
    _mm_storeu_ps(o + i, _mm256_cvtpd_ps(a0));
    _mm_storeu_ps(o + i + 4, _mm256_cvtpd_ps(a1));
  }
  mix_scalar(f, a, xs, w, hc, i, D, o);
}

__attribute__((target("avx512f"))) void mix_avx512(const float* f, double a, const float* const* xs, const double* w, int64_t hc, int64_t D, float* o) {
  int64_t i = 0;
  for (; i + 16 <= D; i += 16) {
    __m512d a0 = _mm512_setzero_pd(), a1 = a0;
    if (f != nullptr) {
      a0 = _mm512_mul_pd(_mm512_set1_pd(a), _mm512_cvtps_pd(_mm256_loadu_ps(f + i)));
      a1 = _mm512_mul_pd(_mm512_set1_pd(a), _mm512_cvtps_pd(_mm256_loadu_ps(f + i + 8)));
    }
    for (int64_t j = 0; j < hc; j++) {
      const __m512d wv = _mm512_set1_pd(w[j]);
      a0 = _mm512_add_pd(a0, _mm512_mul_pd(wv, _mm512_cvtps_pd(_mm256_loadu_ps(xs[j] + i))));
      a1 = _mm512_add_pd(a1, _mm512_mul_pd(wv, _mm512_cvtps_pd(_mm256_loadu_ps(xs[j] + i + 8))));
    }
    _mm256_storeu_ps(o + i, _mm512_cvtpd_ps(a0));
    _mm256_storeu_ps(o + i + 8, _mm512_cvtpd_ps(a1));
  }
  mix_scalar(f, a, xs, w, hc, i, D, o);
}

void mix_row(RefSimd simd, const float* f, double a, const float* const* xs, const double* w, int64_t hc, int64_t D, float* o) {
  if (simd == RefSimd::Avx512) mix_avx512(f, a, xs, w, hc, D, o);
  else if (simd == RefSimd::Avx2) mix_avx2(f, a, xs, w, hc, D, o);
  else mix_scalar(f, a, xs, w, hc, 0, D, o);
}

Napi::Float64Array f64_arg(const Napi::CallbackInfo& info, size_t i, const std::string& fn, const char* name) {
  if (i >= info.Length() || !info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
    throw Napi::TypeError::New(info.Env(), fn + ": " + name + " must be a Float64Array");
  }
  return info[i].As<Napi::Float64Array>();
}

// hcPostMix(F [S, D], X [S, hc, D], S, hc, D, post [S, hc], comb [S, hc, hc]) → Y [S, hc, D]:
// Y[t,k,i] = post[t,k]·F[t,i] + Σ_j comb[t,j,k]·X[t,j,i] (hc.ts hcPost)
Napi::Value hc_post_mix(const Napi::CallbackInfo& info) {
  const std::string fn = "hcPostMix";
  const auto F = f32_arg(info, 0, fn, "F"), X = f32_arg(info, 1, fn, "X");
  const int64_t S = int_arg(info, 2, fn, "S", 0), hc = int_arg(info, 3, fn, "hc", 0), D = int_arg(info, 4, fn, "D", 0);
  const auto post = f64_arg(info, 5, fn, "post"), comb = f64_arg(info, 6, fn, "comb");
  const Napi::Env env = info.Env();
  const int64_t Shc = product(env, fn, S, hc, "S·hc"), SD = product(env, fn, S, D, "S·D"), SHD = product(env, fn, Shc, D, "S·hc·D"), Shh = product(env, fn, Shc, hc, "S·hc·hc");
  if (static_cast<int64_t>(F.ElementLength()) != SD || static_cast<int64_t>(X.ElementLength()) != SHD || static_cast<int64_t>(post.ElementLength()) != Shc || static_cast<int64_t>(comb.ElementLength()) != Shh) {
    range(env, fn, "F, X, post and comb must hold S·D, S·hc·D, S·hc and S·hc·hc values");
  }
  auto Y = Napi::Float32Array::New(env, static_cast<size_t>(SHD));
  const float* f = F.Data();
  const float* x = X.Data();
  const double* pp = post.Data();
  const double* cc = comb.Data();
  float* y = Y.Data();
  const RefSimd simd = reference_simd();
  // per-thread rows and weights, allocated before the threads start (nothing inside a parallel region throws)
  const int threads = static_cast<double>(SHD) * static_cast<double>(hc) >= 65536.0 ? omp_get_max_threads() : 1;
  std::vector<const float*> xs_all(static_cast<size_t>(threads * hc));
  std::vector<double> w_all(static_cast<size_t>(threads * hc));
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t tk = 0; tk < Shc; tk++) {
    const int64_t t = tk / hc, k = tk % hc;
    const float** xs = xs_all.data() + omp_get_thread_num() * hc;
    double* w = w_all.data() + omp_get_thread_num() * hc;
    for (int64_t j = 0; j < hc; j++) {
      xs[j] = x + (t * hc + j) * D;
      w[j] = cc[(t * hc + j) * hc + k];
    }
    mix_row(simd, f + t * D, pp[tk], xs, w, hc, D, y + tk * D);
  }
  return Y;
}

// hcCollapse(X [S, hc, D], S, hc, D, pre [S, hc]) → u [S, D]: u[t,i] = Σ_j pre[t,j]·X[t,j,i] from 0 (hc.ts collapse)
Napi::Value hc_collapse(const Napi::CallbackInfo& info) {
  const std::string fn = "hcCollapse";
  const auto X = f32_arg(info, 0, fn, "X");
  const int64_t S = int_arg(info, 1, fn, "S", 0), hc = int_arg(info, 2, fn, "hc", 0), D = int_arg(info, 3, fn, "D", 0);
  const auto pre = f64_arg(info, 4, fn, "pre");
  const Napi::Env env = info.Env();
  const int64_t Shc = product(env, fn, S, hc, "S·hc"), SD = product(env, fn, S, D, "S·D"), SHD = product(env, fn, Shc, D, "S·hc·D");
  if (static_cast<int64_t>(X.ElementLength()) != SHD || static_cast<int64_t>(pre.ElementLength()) != Shc) range(env, fn, "X and pre must hold S·hc·D and S·hc values");
  auto U = Napi::Float32Array::New(env, static_cast<size_t>(SD));
  const float* x = X.Data();
  const double* pp = pre.Data();
  float* u = U.Data();
  const RefSimd simd = reference_simd();
  const int threads = static_cast<double>(SHD) >= 65536.0 ? omp_get_max_threads() : 1;
  std::vector<const float*> xs_all(static_cast<size_t>(threads * hc));
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t t = 0; t < S; t++) {
    const float** xs = xs_all.data() + omp_get_thread_num() * hc;
    for (int64_t j = 0; j < hc; j++) xs[j] = x + (t * hc + j) * D;
    mix_row(simd, nullptr, 0.0, xs, pp + t * hc, hc, D, u + t * D);
  }
  return U;
}

#pragma GCC diagnostic pop

}  // namespace

void register_attention_f64(Napi::Env env, Napi::Object exports) {
  exports.Set("attentionScores", Napi::Function::New(env, attention_scores));
  exports.Set("attentionOutput", Napi::Function::New(env, attention_output));
  exports.Set("hcPostMix", Napi::Function::New(env, hc_post_mix));
  exports.Set("hcCollapse", Napi::Function::New(env, hc_collapse));
}
