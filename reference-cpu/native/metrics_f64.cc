// The error metrics' per-element passes (harness/compare/metrics.ts), in float64 as the TypeScript loops compute
// them, each sum in the same order, so every metric is theirs bit for bit (tested against the TypeScript, which
// stays as the oracle and the fallback without the addon):
//   compareSums:  one pass over a stage's device and reference values: the non-finite counts, max |r|, max |d − r|
//                 and where it first occurs, and the five sums (|e|, e², r², d², d·r) over the finite pairs;
//   errorBins:    the log-binned histogram of |d − r| (bins found by comparisons with the edges TypeScript made);
//   logSumExp:    a logits row's max m and Σ exp(x − m) (the caller adds m + Math.log(s): one log a row);
//   klRow:        one token's Σ p·(lr − ld) over p = exp(lr) > 0 and both rows' argmax, lr = x − lse.
// Math.exp is V8's port of fdlibm's exp (e_exp.c, with exp(1) = Math.E its one change); exp_fdlibm below is that algorithm, so its results are
// Math.exp's bit for bit (tested on millions of arguments across every branch: a C library's exp rounds otherwise in
// the last place now and then). With AVX-512 eight arguments go through the same operations in lanes, each lane
// taking its branch by blending; a vector holding an argument outside the common ranges (|x| ≥ 709.78, NaN, Inf, a
// subnormal result) is done by the scalar code. Sums are never split across lanes: values are formed in lanes, then
// added one at a time in index order. -ffp-contract=off keeps every multiply and add separately rounded.
#include <immintrin.h>
#include <napi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dequant_exact.h"
#include "simd_level.h"

namespace {

// ---- exp, as fdlibm (and so V8's Math.exp) computes it --------------------------------------------------------

constexpr double kOne = 1.0, kHuge = 1.0e+300, kTwom1000 = 9.33263618503218878990e-302;
constexpr double kOThreshold = 7.09782712893383973096e+02, kUThreshold = -7.45133219101941108420e+02;
constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10, kInvLn2 = 1.44269504088896338700e+00;
constexpr double kP1 = 1.66666666666666019037e-01, kP2 = -2.77777777770155933842e-03, kP3 = 6.61375632143793436117e-05;
constexpr double kP4 = -1.65339022054652515390e-06, kP5 = 4.13813679705723846039e-08;
constexpr double kE = 2.718281828459045;

inline uint64_t bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
}
inline double from_bits(uint64_t u) {
  double x;
  std::memcpy(&x, &u, 8);
  return x;
}

double exp_fdlibm(double x) {
  const uint64_t u = bits(x);
  const int xsb = static_cast<int>(u >> 63);
  const uint32_t hx = static_cast<uint32_t>(u >> 32) & 0x7fffffffu;
  if (hx >= 0x40862E42u) {  // |x| ≥ 709.78…: overflow, underflow, Inf, NaN
    if (hx >= 0x7ff00000u) {
      if (((hx & 0xfffffu) | static_cast<uint32_t>(u)) != 0) return x + x;  // NaN
      return xsb == 0 ? x : 0.0;                                            // exp(±Inf) = Inf, 0
    }
    if (x > kOThreshold) return kHuge * kHuge;
    if (x < kUThreshold) return kTwom1000 * kTwom1000;
  }
  double hi = 0, lo = 0;
  int k = 0;
  if (hx > 0x3fd62e42u) {    // |x| > 0.5 ln2
    if (hx < 0x3FF0A2B2u) {  // and < 1.5 ln2
      if (x == 1.0) return kE;  // V8's one change to fdlibm's exp: exp(1) is Math.E, where the reduction is a bit off
      hi = xsb == 0 ? x - kLn2Hi : x - (-kLn2Hi);
      lo = xsb == 0 ? kLn2Lo : -kLn2Lo;
      k = 1 - xsb - xsb;
    } else {
      k = static_cast<int>(kInvLn2 * x + (xsb == 0 ? 0.5 : -0.5));
      const double t = k;
      hi = x - t * kLn2Hi;  // t·ln2Hi is exact
      lo = t * kLn2Lo;
    }
    x = hi - lo;
  } else if (hx < 0x3e300000u) {  // |x| < 2^-28
    return kOne + x;
  }
  const double t = x * x;
  const double c = x - t * (kP1 + t * (kP2 + t * (kP3 + t * (kP4 + t * kP5))));
  if (k == 0) return kOne - ((x * c) / (c - 2.0) - x);
  const double y = kOne - ((lo - (x * c) / (2.0 - c)) - hi);
  if (k >= -1021) {
    if (k == 1024) return y * 2.0 * 8.98846567431157953865e+307;  // 2^1023
    return from_bits(bits(y) + (static_cast<uint64_t>(static_cast<int64_t>(k)) << 52));
  }
  return from_bits(bits(y) + (static_cast<uint64_t>(static_cast<int64_t>(k + 1000)) << 52)) * kTwom1000;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593: _mm512_undefined at -O3
#pragma GCC diagnostic ignored "-Wuninitialized"

// exp_fdlibm of eight arguments; false (out untouched) when one needs a branch the lanes do not take: |x| ≥ 709.78…,
// NaN or Inf, or a result scaled by 2^k with k outside [−1021, 1023] (subnormal results, the k = 1024 case).
__attribute__((target("avx512f"))) bool exp8_avx512(const double* xs, double* out) {
  const __m512d x = _mm512_loadu_pd(xs);
  const __m512i u = _mm512_castpd_si512(x);
  const __m512i hx = _mm512_and_si512(_mm512_srli_epi64(u, 32), _mm512_set1_epi64(0x7fffffff));
  if (_mm512_cmpge_epu64_mask(hx, _mm512_set1_epi64(0x40862E42)) != 0) return false;
  const __mmask8 neg = _mm512_cmpneq_epu64_mask(_mm512_srli_epi64(u, 63), _mm512_setzero_si512());
  const __mmask8 reduce = _mm512_cmpgt_epu64_mask(hx, _mm512_set1_epi64(0x3fd62e42));  // |x| > 0.5 ln2: k ≠ 0
  const __mmask8 mid = reduce & _mm512_cmplt_epu64_mask(hx, _mm512_set1_epi64(0x3FF0A2B2));
  const __mmask8 tiny = _mm512_cmplt_epu64_mask(hx, _mm512_set1_epi64(0x3e300000));
  // k (in double lanes): ±1 in the middle band, (int)(invln2·x ± 0.5) beyond it (truncation: |k| < 2^11 here),
  // 0 below it
  const __m512d half = _mm512_mask_blend_pd(neg, _mm512_set1_pd(0.5), _mm512_set1_pd(-0.5));
  const __m512d kbig = _mm512_roundscale_pd(_mm512_add_pd(_mm512_mul_pd(_mm512_set1_pd(kInvLn2), x), half), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512d kmid = _mm512_mask_blend_pd(neg, _mm512_set1_pd(1.0), _mm512_set1_pd(-1.0));
  const __m512d t = _mm512_maskz_mov_pd(reduce, _mm512_mask_blend_pd(mid, kbig, kmid));
  if ((_mm512_cmp_pd_mask(t, _mm512_set1_pd(-1021.0), _CMP_LT_OQ) | _mm512_cmp_pd_mask(t, _mm512_set1_pd(1023.0), _CMP_GT_OQ)) != 0) return false;
  const __m512d ln2hi = _mm512_mask_blend_pd(neg, _mm512_set1_pd(kLn2Hi), _mm512_set1_pd(-kLn2Hi));
  const __m512d ln2lo = _mm512_mask_blend_pd(neg, _mm512_set1_pd(kLn2Lo), _mm512_set1_pd(-kLn2Lo));
  const __m512d hi = _mm512_mask_blend_pd(mid, _mm512_sub_pd(x, _mm512_mul_pd(t, _mm512_set1_pd(kLn2Hi))), _mm512_sub_pd(x, ln2hi));
  const __m512d lo = _mm512_mask_blend_pd(mid, _mm512_mul_pd(t, _mm512_set1_pd(kLn2Lo)), ln2lo);
  const __m512d xr = _mm512_mask_blend_pd(reduce, x, _mm512_sub_pd(hi, lo));
  const __m512d t2 = _mm512_mul_pd(xr, xr);
  __m512d poly = _mm512_add_pd(_mm512_set1_pd(kP4), _mm512_mul_pd(t2, _mm512_set1_pd(kP5)));
  poly = _mm512_add_pd(_mm512_set1_pd(kP3), _mm512_mul_pd(t2, poly));
  poly = _mm512_add_pd(_mm512_set1_pd(kP2), _mm512_mul_pd(t2, poly));
  poly = _mm512_add_pd(_mm512_set1_pd(kP1), _mm512_mul_pd(t2, poly));
  const __m512d c = _mm512_sub_pd(xr, _mm512_mul_pd(t2, poly));
  const __m512d one = _mm512_set1_pd(kOne), two = _mm512_set1_pd(2.0);
  const __m512d xc = _mm512_mul_pd(xr, c);
  const __m512d r0 = _mm512_sub_pd(one, _mm512_sub_pd(_mm512_div_pd(xc, _mm512_sub_pd(c, two)), xr));  // k = 0
  const __m512d y = _mm512_sub_pd(one, _mm512_sub_pd(_mm512_sub_pd(lo, _mm512_div_pd(xc, _mm512_sub_pd(two, c))), hi));
  // fdlibm adds k to y's exponent field; y is normal and so is y·2^k for k in [−1021, 1023]: the same value, exactly
  const __m512d scaled = _mm512_scalef_pd(y, t);
  __m512d r = _mm512_mask_blend_pd(reduce, r0, scaled);
  r = _mm512_mask_blend_pd(tiny, r, _mm512_add_pd(one, x));
  r = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x, one, _CMP_EQ_OQ), r, _mm512_set1_pd(kE));
  _mm512_storeu_pd(out, r);
  return true;
}

#pragma GCC diagnostic pop

// exp of n arguments into out, eight at a time where the level has AVX-512
void exp_many(const double* x, double* out, size_t n) {
  size_t i = 0;
  if (reference_simd() == RefSimd::Avx512)
    for (; i + 8 <= n; i += 8)
      if (!exp8_avx512(x + i, out + i))
        for (size_t j = i; j < i + 8; j++) out[j] = exp_fdlibm(x[j]);
  for (; i < n; i++) out[i] = exp_fdlibm(x[i]);
}

// ---- arguments -----------------------------------------------------------------------------------------------

Napi::Float32Array f32_arg(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name) {
  if (i >= info.Length() || !info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    throw Napi::TypeError::New(info.Env(), std::string(fn) + ": " + name + " must be a Float32Array");
  }
  return info[i].As<Napi::Float32Array>();
}

Napi::Float64Array f64_arg(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name) {
  if (i >= info.Length() || !info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
    throw Napi::TypeError::New(info.Env(), std::string(fn) + ": " + name + " must be a Float64Array");
  }
  return info[i].As<Napi::Float64Array>();
}

double num_arg(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name) {
  if (i >= info.Length() || !info[i].IsNumber()) throw Napi::TypeError::New(info.Env(), std::string(fn) + ": " + name + " must be a number");
  return info[i].As<Napi::Number>().DoubleValue();
}

// [offset, offset + length) inside an array of len values (integers, checked before any arithmetic on them)
void row_range(const Napi::CallbackInfo& info, size_t i, const char* fn, size_t len, size_t* offset, size_t* length) {
  const double o = num_arg(info, i, fn, "offset"), l = num_arg(info, i + 1, fn, "length");
  if (!(o >= 0 && l >= 0 && std::floor(o) == o && std::floor(l) == l && o + l <= static_cast<double>(len))) {
    throw Napi::RangeError::New(info.Env(), std::string(fn) + ": [offset, offset + length) must lie inside the row array");
  }
  *offset = static_cast<size_t>(o);
  *length = static_cast<size_t>(l);
}

void same_length(const Napi::CallbackInfo& info, const char* fn, size_t a, size_t b) {
  if (a != b) throw Napi::RangeError::New(info.Env(), std::string(fn) + ": device and reference differ in length (" + std::to_string(a) + " vs " + std::to_string(b) + ")");
}

// ---- compareSums ---------------------------------------------------------------------------------------------

// compareSums(d, r) → Float64Array [nanDevice, infDevice, nanReference, infReference, maxRef, maxAbs, maxIdx,
//   sumAbs, sumSq, refSq, devSq, dot, n, mismatched, mismatchNaN (0/1), firstMismatch]: compareActs' loop.
Napi::Value compare_sums(const Napi::CallbackInfo& info) {
  const char* fn = "compareSums";
  const auto D = f32_arg(info, 0, fn, "d"), R = f32_arg(info, 1, fn, "r");
  same_length(info, fn, D.ElementLength(), R.ElementLength());
  const float* d = D.Data();
  const float* r = R.Data();
  const size_t len = R.ElementLength();
  double nanD = 0, infD = 0, nanR = 0, infR = 0, maxRef = 0, maxAbs = 0, sumAbs = 0, sumSq = 0, refSq = 0, devSq = 0, dot = 0, n = 0;
  double mismatched = 0, mismatchNaN = 0;
  size_t maxIdx = 0;
  double firstMismatch = -1;
  for (size_t i = 0; i < len; i++) {
    const double a = d[i], b = r[i];
    const bool fa = std::isfinite(a), fb = std::isfinite(b);
    if (!fa || !fb) {
      if (std::isnan(a)) nanD++;
      else if (!fa) infD++;
      if (std::isnan(b)) nanR++;
      else if (!fb) infR++;
      else if (std::fabs(b) > maxRef) maxRef = std::fabs(b);
      // the same NaN or the same signed Inf in both paths is agreement, not error
      if (!(a == b || (std::isnan(a) && std::isnan(b)))) {
        if (firstMismatch < 0) firstMismatch = static_cast<double>(i);
        mismatched++;
        if (std::isnan(a) || std::isnan(b)) mismatchNaN = 1;
      }
      continue;
    }
    if (std::fabs(b) > maxRef) maxRef = std::fabs(b);
    const double e = std::fabs(a - b);
    if (e > maxAbs) {
      maxAbs = e;
      maxIdx = i;
    }
    sumAbs += e;
    sumSq += e * e;
    refSq += b * b;
    devSq += a * a;
    dot += a * b;
    n++;
  }
  auto out = Napi::Float64Array::New(info.Env(), 16);
  const double v[16] = {nanD, infD, nanR, infR, maxRef, maxAbs, static_cast<double>(maxIdx), sumAbs, sumSq, refSq, devSq, dot, n, mismatched, mismatchNaN, firstMismatch};
  std::memcpy(out.Data(), v, sizeof v);
  return out;
}

// ---- errorBins -----------------------------------------------------------------------------------------------

// errorBins(d, r, edges) → Float64Array [counts[B]..., zero, under, over, nonfinite], edges = the B + 1 bin edges
// (increasing). Bin of e in [edges[0], edges[B]): the last edge at or below e, as errorHistogram's search finds it.
// Found from e's binary exponent: first[E] is the last edge at or below 2^E, and an octave [2^E, 2^(E+1)) crosses
// at most one edge when edges are more than a factor 2 apart (required: other edges are refused by name).
Napi::Value error_bins(const Napi::CallbackInfo& info) {
  const char* fn = "errorBins";
  const auto D = f32_arg(info, 0, fn, "d"), R = f32_arg(info, 1, fn, "r");
  const auto Edges = f64_arg(info, 2, fn, "edges");
  same_length(info, fn, D.ElementLength(), R.ElementLength());
  const size_t B = Edges.ElementLength() > 0 ? Edges.ElementLength() - 1 : 0;
  const double* edges = Edges.Data();
  bool spaced = B >= 1 && edges[0] > 0 && std::isfinite(edges[B]);
  for (size_t k = 0; spaced && k < B; k++) spaced = edges[k + 1] > 2 * edges[k];
  if (!spaced) throw Napi::RangeError::New(info.Env(), std::string(fn) + ": edges must be positive, finite and each more than twice the last");
  // first[E + 1100]: last k in [0, B) with edges[k] ≤ 2^E (0 when none)
  int first[2200];
  for (int E = -1100, k = 0; E < 1100; E++) {  // 2^E grows with E, so k only moves up
    while (k + 1 < static_cast<int>(B) && edges[k + 1] <= std::ldexp(1.0, E)) k++;
    first[E + 1100] = k;
  }
  const float* d = D.Data();
  const float* r = R.Data();
  // four sets of integer counters, element i in set i mod 4: a run of errors in one bin is four independent
  // increments in flight, not one chain through memory
  std::vector<uint64_t> counts(4 * (B + 4), 0);
  uint64_t zero = 0, under = 0, over = 0, nonfinite = 0;
  const double lo = edges[0], top = edges[B];
  for (size_t i = 0, len = R.ElementLength(); i < len; i++) {
    const double a = d[i], b = r[i];
    if (!std::isfinite(a) || !std::isfinite(b)) {
      nonfinite++;
      continue;
    }
    const double e = std::fabs(a - b);
    if (e == 0) zero++;
    else if (e < lo) under++;
    else if (e >= top) over++;
    else {
      // e in [2^E, 2^(E+1)): E from the exponent field (frexp, a library call, for a subnormal e)
      const int field = static_cast<int>((bits(e) >> 52) & 0x7ff);
      int E = field - 1023;
      if (field == 0) {
        std::frexp(e, &E);
        E -= 1;
      }
      // k + 1 ≤ B, and e < edges[B]: no bound to check, and no branch (the step up is a coin toss on real data)
      const int k = first[E + 1100] + static_cast<int>(e >= edges[first[E + 1100] + 1]);
      counts[(i & 3) * (B + 4) + k]++;
    }
  }
  auto out = Napi::Float64Array::New(info.Env(), B + 4);
  for (size_t k = 0; k < B; k++) out[k] = static_cast<double>(counts[k] + counts[(B + 4) + k] + counts[2 * (B + 4) + k] + counts[3 * (B + 4) + k]);
  out[B] = static_cast<double>(zero);
  out[B + 1] = static_cast<double>(under);
  out[B + 2] = static_cast<double>(over);
  out[B + 3] = static_cast<double>(nonfinite);
  return out;
}

// ---- logits --------------------------------------------------------------------------------------------------

// logSumExp(x, offset, length) → Float64Array [m, s]: m = max of the row (−Infinity when none is above it, NaN
// skipped), s = Σ exp(x[i] − m) in index order.
Napi::Value log_sum_exp(const Napi::CallbackInfo& info) {
  const char* fn = "logSumExp";
  const auto X = f32_arg(info, 0, fn, "x");
  size_t off = 0, n = 0;
  row_range(info, 1, fn, X.ElementLength(), &off, &n);
  const float* x = X.Data() + off;
  double m = -INFINITY;
  for (size_t i = 0; i < n; i++)
    if (x[i] > m) m = x[i];
  double s = 0;
  double arg[256], e[256];
  for (size_t i0 = 0; i0 < n; i0 += 256) {
    const size_t c = std::min<size_t>(256, n - i0);
    for (size_t j = 0; j < c; j++) arg[j] = static_cast<double>(x[i0 + j]) - m;
    exp_many(arg, e, c);
    for (size_t j = 0; j < c; j++) s += e[j];
  }
  auto out = Napi::Float64Array::New(info.Env(), 2);
  out[0] = m;
  out[1] = s;
  return out;
}

// klRow(r, lseR, d, lseD, offset, length) → Float64Array [kl, argmax lr, argmax ld]: lr = r − lseR, ld = d − lseD
// (each in float64), kl = Σ p·(lr − ld) over p = exp(lr) > 0 in index order; argmax the first index of the largest.
Napi::Value kl_row(const Napi::CallbackInfo& info) {
  const char* fn = "klRow";
  const auto R = f32_arg(info, 0, fn, "r"), D = f32_arg(info, 2, fn, "d");
  const double lseR = num_arg(info, 1, fn, "lseR"), lseD = num_arg(info, 3, fn, "lseD");
  same_length(info, fn, D.ElementLength(), R.ElementLength());
  size_t off = 0, n = 0;
  row_range(info, 4, fn, R.ElementLength(), &off, &n);
  const float* r = R.Data() + off;
  const float* d = D.Data() + off;
  double kl = 0, bestR = 0, bestD = 0;
  size_t argR = 0, argD = 0;
  double lr[256], ld[256], p[256];
  for (size_t i0 = 0; i0 < n; i0 += 256) {
    const size_t c = std::min<size_t>(256, n - i0);
    for (size_t j = 0; j < c; j++) {
      lr[j] = static_cast<double>(r[i0 + j]) - lseR;
      ld[j] = static_cast<double>(d[i0 + j]) - lseD;
    }
    exp_many(lr, p, c);
    for (size_t j = 0; j < c; j++) {
      const size_t i = i0 + j;
      if (i == 0) {
        bestR = lr[0];
        bestD = ld[0];
      } else {
        if (lr[j] > bestR) bestR = lr[j], argR = i;
        if (ld[j] > bestD) bestD = ld[j], argD = i;
      }
      if (p[j] > 0) kl += p[j] * (lr[j] - ld[j]);
    }
  }
  auto out = Napi::Float64Array::New(info.Env(), 3);
  out[0] = kl;
  out[1] = static_cast<double>(argR);
  out[2] = static_cast<double>(argD);
  return out;
}

// expF64(x) → exp of every element, as the passes above form it (tests hold it to Math.exp)
Napi::Value exp_f64(const Napi::CallbackInfo& info) {
  const auto X = f64_arg(info, 0, "expF64", "x");
  auto out = Napi::Float64Array::New(info.Env(), X.ElementLength());
  exp_many(X.Data(), out.Data(), X.ElementLength());
  return out;
}

}  // namespace

void register_metrics_f64(Napi::Env env, Napi::Object exports) {
  exports.Set("compareSums", Napi::Function::New(env, compare_sums));
  exports.Set("errorBins", Napi::Function::New(env, error_bins));
  exports.Set("logSumExp", Napi::Function::New(env, log_sum_exp));
  exports.Set("klRow", Napi::Function::New(env, kl_row));
  exports.Set("expF64", Napi::Function::New(env, exp_f64));
}
