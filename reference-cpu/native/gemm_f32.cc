// Module `ld_reference`: the reference path's native ops: y = x·Wᵀ in FP32 (here) and the exact
// dequantization of stored weights (dequant_exact.cc).
//   x [m, k] f32, W [n, k] f32 (PyTorch Linear layout, row-major), y [m, n] f32.
// Deliberately independent of device-hip (no shared header): the reference must not inherit a device bug.
//
// Accumulation order (fixed, so the AVX-512, AVX2 and scalar kernels give the same bits): 8 partial
// sums, partial l sums x[k]·w[k] for k ≡ l (mod 8) in increasing k with fmaf, from +0; then
// ((p0+p4) + (p2+p6)) + ((p1+p5) + (p3+p7)). Its error bound is that of an 8-way split sum, ≤ ~(k/8+3)·u·Σ|x·w|.
//
// Speed: W is streamed from memory once; x is repacked once by k slice. For each block of NR W rows and
// each KB-long k slice, tiles of x rows pass over the slice; tiles of accumulators live in a per-thread
// buffer between slices, which keeps the order above. OpenMP splits the row blocks statically, so each
// thread streams a contiguous part of W.
//   AVX2:    a 3×4 tile of ymm accumulators (12 + 3 x + 1 w = 16 registers). The first tile of a slice
//            reads the W rows from memory and leaves them in a panel [KB/8][NR][8] (8 consecutive k of
//            each row side by side) that stays in L1 while the other rows of x pass over it.
//   AVX-512: x rows in pairs, 3 pairs × 8 W rows = 24 zmm (tile_pairs): each zmm holds one W row's 8-lane
//            accumulators for two x rows side by side, and each W chunk is broadcast to both halves from
//            its row, so W needs neither a panel nor a shuffle. It replaced a 6×8 tile that packed two W
//            rows per zmm into a panel (vinsertf64x4 on the FMA ports): 1.08–1.36× faster from m = 1 to
//            256 at k = n = 4096 except m = 32 (0.94×, within the noise), same bits (measured side by side).
//   Per output it is 8 lanes over k ≡ l (mod 8) at every level: the same order and the same bits as the
//   scalar loop.
#include <immintrin.h>
#include <napi.h>

#include "dequant_exact.h"
#include "ld_allocator.h"
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "simd_level.h"

namespace {

// k slice (multiple of 8): AVX2's panel [NR, KB] (16 KB at NR 4) stays in L1, x's slice [m, KB] in L2; 1.1–1.25×
// faster than 256 at m ≥ 16 with round 9's tiles, and 512, 1024 and 2048 within noise of each other with tile_pairs
// (measured, same bits)
constexpr int KB = 1024;
constexpr int XS = KB + 16;  // x's row stride in a repacked slice (see Avx2::slice_floats)

enum class Simd { Scalar, Avx2, Avx512 };
Simd g_simd = Simd::Scalar;
bool g_vbmi_allowed = true;  // setSimd('avx512') turns the VBMI kernels off (reference_vbmi)

Simd best_simd() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2 && __builtin_cpu_supports("avx512f")) return Simd::Avx512;
  return avx2 ? Simd::Avx2 : Simd::Scalar;
}

const char* simd_name(Simd s) { return s == Simd::Avx512 ? "avx512" : s == Simd::Avx2 ? "avx2" : "scalar"; }

inline float combine(const float* p) { return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7])); }

inline float dot_scalar(const float* x, const float* w, int k) {
  float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < k; i++) p[i & 7] = fmaf(x[i], w[i], p[i & 7]);
  return combine(p);
}

// AVX2's acc layout: [row i][W row j][8 lanes]; the tile for x rows [i, i+R) starts at acc + i·NR·8.
// FILL: the first tile of a slice reads the W rows straight from memory, so the DRAM stream overlaps its
// FMAs, and leaves them in the panel [len/8][NR][8] for the slice's other tiles.
template <int R, bool FILL>
__attribute__((target("avx2,fma"))) void tile_avx2(const float* x, int ldx, const float* const* wr, float* panel,
                                                   int len, float* acc) {
  constexpr int NR = 4;
  const float* rows[NR];  // a local copy: the panel stores could alias wr, so loads of wr[j] would repeat
  for (int j = 0; j < NR; j++) rows[j] = FILL ? wr[j] : nullptr;
  __m256 c[R][NR];
  for (int r = 0; r < R; r++)
    for (int j = 0; j < NR; j++) c[r][j] = _mm256_loadu_ps(acc + (r * NR + j) * 8);
  for (int kk = 0; kk < len; kk += 8) {
    __m256 xv[R];
    for (int r = 0; r < R; r++) xv[r] = _mm256_loadu_ps(x + (size_t)r * ldx + kk);
    float* pw = panel + kk * NR;
    for (int j = 0; j < NR; j++) {
      __m256 wv;
      if constexpr (FILL) {
        wv = _mm256_loadu_ps(rows[j] + kk);
        _mm256_store_ps(pw + j * 8, wv);
      } else {
        wv = _mm256_load_ps(pw + j * 8);
      }
      for (int r = 0; r < R; r++) c[r][j] = _mm256_fmadd_ps(xv[r], wv, c[r][j]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int j = 0; j < NR; j++) _mm256_storeu_ps(acc + (r * NR + j) * 8, c[r][j]);
}

// AVX-512 with x rows in pairs: each zmm holds one W row's 8-lane accumulators for two x rows side by side (row
// 2q in the low half, 2q+1 in the high half). x is repacked once so that a pair's 8 k of both rows are one aligned
// zmm ([pair][k/8][16]); each W chunk of 8 k is broadcast to both halves straight from its row (vbroadcastf64x4
// from memory, a load and no shuffle), so W needs no panel: the first tile of a slice streams it from memory, the
// others find it in cache. Per output it is still 8 lanes over k ≡ l (mod 8) in increasing k: the same bits.
//   xq: pair 0 of the slice, pair r at xq + r·ldq; acc: [RP][NR][16].
template <int RP>
__attribute__((target("avx512f,avx2,fma"))) void tile_pairs(const float* xq, int ldq, const float* const* wr, int len, float* acc) {
  constexpr int NR = 8;
  const float* rows[NR];
  for (int j = 0; j < NR; j++) rows[j] = wr[j];
  __m512 c[RP][NR];
  for (int r = 0; r < RP; r++)
    for (int j = 0; j < NR; j++) c[r][j] = _mm512_loadu_ps(acc + (r * NR + j) * 16);
  for (int kk = 0; kk < len; kk += 8) {
    __m512 xv[RP];
    for (int r = 0; r < RP; r++) xv[r] = _mm512_load_ps(xq + (size_t)r * ldq + 2 * kk);
    for (int j = 0; j < NR; j++) {
      // the all-ones maskz form is the plain vbroadcastf64x4 without GCC 12's uninitialized-value warning
      const __m512 wv = _mm512_castpd_ps(_mm512_maskz_broadcast_f64x4((__mmask8)0xFF, _mm256_castps_pd(_mm256_loadu_ps(rows[j] + kk))));
      for (int r = 0; r < RP; r++) c[r][j] = _mm512_fmadd_ps(xv[r], wv, c[r][j]);
    }
  }
  for (int r = 0; r < RP; r++)
    for (int j = 0; j < NR; j++) _mm512_storeu_ps(acc + (r * NR + j) * 16, c[r][j]);
}

template <int RP>
void tile_pairs_run(int pairs, const float* xq, int ldq, const float* const* wr, int len, float* acc) {
  if constexpr (RP > 1) {
    if (pairs < RP) return tile_pairs_run<RP - 1>(pairs, xq, ldq, wr, len, acc);
  }
  tile_pairs<RP>(xq, ldq, wr, len, acc);
}

template <int R>
void tile_avx2_run(int rows, bool fill, const float* x, int ldx, const float* const* wr, float* panel, int len, float* acc) {
  if constexpr (R > 1) {
    if (rows < R) return tile_avx2_run<R - 1>(rows, fill, x, ldx, wr, panel, len, acc);
  }
  if (fill) tile_avx2<R, true>(x, ldx, wr, panel, len, acc);
  else tile_avx2<R, false>(x, ldx, wr, panel, len, acc);
}

// How each kernel lays out x and its accumulators (gemm_blocks drives both): a k slice of x repacked [rows][·],
// the tiles run over one slice, and where output (i, j)'s 8 lanes sit in the per-thread accumulator buffer.
struct Avx2 {
  static constexpr int NR = 4, MR = 3;
  static constexpr size_t kPanel = (size_t)NR * KB + 16;
  static size_t acc_floats(int m) { return (size_t)m * NR * 8; }
  // rows of a slice XS = KB + 16 floats apart instead of k: with k (or KB) a power of two, rows that far apart
  // all fall in the same L1 sets and evict each other (16 rows > 12 ways)
  static size_t slice_floats(int m) { return (size_t)m * XS; }
  static void repack(const float* x, int m, int k, int k0, int len, float* xs) {
    for (int i = 0; i < m; i++) std::memcpy(xs + (size_t)i * XS, x + (size_t)i * k + k0, (size_t)len * sizeof(float));
  }
  static void slice(int m, const float* xs, const float* const* wr, float* panel, int len, float* acc) {
    for (int i = 0; i < m; i += MR) tile_avx2_run<MR>(std::min(MR, m - i), i == 0, xs + (size_t)i * XS, XS, wr, panel, len, acc + (size_t)i * NR * 8);
  }
  static float* lanes(float* acc, int i, int j) { return acc + ((size_t)i * NR + j) * 8; }
};

struct Avx512Pairs {
  static constexpr int NR = 8, RPM = 3;
  static constexpr size_t kPanel = 0;
  // a pair's slice is [KB/8][16] floats, pairs LDQ = 2·KB + 32 floats apart (not a power of two, as XS); the odd
  // last row's partner is zeros, computed and never stored
  static constexpr int LDQ = 2 * KB + 32;
  static size_t acc_floats(int m) { return (size_t)((m + 1) / 2) * NR * 16; }
  static size_t slice_floats(int m) { return (size_t)((m + 1) / 2) * LDQ; }
  static void repack(const float* x, int m, int k, int k0, int len, float* xs) {
    for (int i = 0; i < m; i++) {
      float* d = xs + (size_t)(i / 2) * LDQ + (i % 2) * 8;
      for (int kk = 0; kk < len; kk += 8) std::memcpy(d + 2 * kk, x + (size_t)i * k + k0 + kk, 8 * sizeof(float));
    }
  }
  static void slice(int m, const float* xs, const float* const* wr, float*, int len, float* acc) {
    const int pairs = (m + 1) / 2;
    for (int q = 0; q < pairs; q += RPM) tile_pairs_run<RPM>(std::min(RPM, pairs - q), xs + (size_t)q * LDQ, LDQ, wr, len, acc + (size_t)q * NR * 16);
  }
  static float* lanes(float* acc, int i, int j) { return acc + ((size_t)(i / 2) * NR + j) * 16 + (i % 2) * 8; }
};

// Where the W rows come from. DirectRows: an FP32 matrix in memory. ExactRows (the fused linearExact): a stored
// weight, NR rows at a time decoded exactly (dequant_exact.cc) into a per-thread buffer that stays in L2 while
// the same kernel streams over it. The kernel, the tiles and the order of every sum are the same for both, so
// linearExact(x, W) has the bits of gemmF32(x, dequantExact(W)).
struct DirectRows {
  static constexpr bool kBuffered = false;
  const float* w;
  int k;
  const float* rows(int j0, int, float*) const { return w + (size_t)j0 * k; }
};

struct ExactRows {
  static constexpr bool kBuffered = true;
  ExactKind kind;
  const uint8_t* w;
  const uint8_t* s;
  int64_t in, bo, bi, r0;
  int64_t* first_nonfinite;  // lowest flat index (whole tensor) of a NaN/Inf decoded value, −1 if none
  // An MXFP4 value is E2M1 (|v| ≤ 6) × 2^(s − 127) rounded once to float32: finite for every code while s ≤ 252
  // (6 · 2^125 = 1.5 · 2^127 < FLT_MAX), Inf for |v| ≥ 4 at s = 253 (4 · 2^126 = 2^128) and for |v| ≥ 2 at
  // s = 254, NaN at s = 255.
  // A row whose scales are all ≤ 252 is therefore finite without a look at its values: 128 scale bytes read
  // instead of 4096 floats scanned (the scan was ~4 % of a wide DeepSeek-V4 diff's samples, every routed expert's
  // rows). Any other row, and every other kind, is scanned.
  static bool mxfp4_scales_finite(const uint8_t* srow, int64_t nb) {
    uint8_t top = 0;
    for (int64_t b = 0; b < nb; b++) top = srow[b] > top ? srow[b] : top;
    return top <= 252;
  }
  const float* rows(int j0, int nr, float* buf) const {
    for (int j = 0; j < nr; j++) {
      float* d = buf + (size_t)j * in;
      const int64_t o = r0 + j0 + j;
      exact_row(kind, w, s, o, in, bo, bi, d);
      if (kind == ExactKind::Mxfp4 && mxfp4_scales_finite(s + o * (in / 32), in / 32)) continue;
      const int64_t i = ::first_nonfinite(d, in);
      if (i < 0) continue;
      const int64_t at = o * in + i;
      int64_t cur = __atomic_load_n(first_nonfinite, __ATOMIC_RELAXED);
      while ((cur < 0 || at < cur) && !__atomic_compare_exchange_n(first_nonfinite, &cur, at, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      }
    }
    return buf;
  }
};

// y[i, j] for j < n (row stride n) from W rows src.rows(·), with the kernel Isa (Avx2 or Avx512Pairs).
template <class Isa, class Src>
void gemm_blocks(const float* x, const Src& src, int m, int k, int n, float* y) {
  constexpr int NR = Isa::NR;
  const int k8 = k & ~7, nblocks = (n + NR - 1) / NR, nthreads = omp_get_max_threads();
  const size_t accn = Isa::acc_floats(m), rown = Src::kBuffered ? (size_t)NR * k : 0, per_thread = Isa::kPanel + accn + rown;
  std::vector<float> scratch((size_t)nthreads * per_thread);
  // x repacked once, slice by slice, 64-byte aligned for the tiles' loads (zeros where a layout pads)
  const int nslices = (k8 + KB - 1) / KB;
  const size_t slice_n = Isa::slice_floats(m);
  std::vector<float> xbuf((size_t)nslices * slice_n + 16, 0.0f);
  float* xp = xbuf.data();
  while ((reinterpret_cast<uintptr_t>(xp) & 63) != 0) xp++;
  for (int sl = 0; sl < nslices; sl++) Isa::repack(x, m, k, sl * KB, std::min(KB, k8 - sl * KB), xp + (size_t)sl * slice_n);
#pragma omp parallel num_threads(nthreads)
  {
    float* base = scratch.data() + (size_t)omp_get_thread_num() * per_thread;
    float* panel = base;
    while (Isa::kPanel > 0 && (reinterpret_cast<uintptr_t>(panel) & 63) != 0) panel++;
    float* acc = base + Isa::kPanel;
    float* rowbuf = acc + accn;
#pragma omp for schedule(static)
    for (int nb = 0; nb < nblocks; nb++) {
      const int j0 = nb * NR, nr = std::min(NR, n - j0);
      const float* w = src.rows(j0, nr, rowbuf);  // row j0 + j is w + j·k
      std::fill(acc, acc + accn, 0.0f);
      for (int k0 = 0; k0 < k8; k0 += KB) {
        // Rows past n repeat the last row: computed, never stored, so one tile shape serves all blocks.
        const float* wr[NR];
        for (int j = 0; j < NR; j++) wr[j] = w + (size_t)std::min(j, nr - 1) * k + k0;
        Isa::slice(m, xp + (size_t)(k0 / KB) * slice_n, wr, panel, std::min(KB, k8 - k0), acc);
      }
      for (int i = 0; i < m; i++) {
        for (int j = 0; j < nr; j++) {
          float* p = Isa::lanes(acc, i, j);
          const float* xr = x + (size_t)i * k;
          const float* wrow = w + (size_t)j * k;
          for (int t = k8; t < k; t++) p[t & 7] = fmaf(xr[t], wrow[t], p[t & 7]);
          y[(size_t)i * n + j0 + j] = combine(p);
        }
      }
    }
  }
}

template <class Src>
void gemm_scalar(const float* x, const Src& src, int m, int k, int n, float* y) {
  constexpr int NR = 8;
  const int nblocks = (n + NR - 1) / NR;
#pragma omp parallel
  {
    std::vector<float> rowbuf(Src::kBuffered ? (size_t)NR * k : 0);
#pragma omp for schedule(static)
    for (int nb = 0; nb < nblocks; nb++) {
      const int j0 = nb * NR, nr = std::min(NR, n - j0);
      const float* w = src.rows(j0, nr, rowbuf.data());
      for (int j = 0; j < nr; j++)
        for (int i = 0; i < m; i++) y[(size_t)i * n + j0 + j] = dot_scalar(x + (size_t)i * k, w + (size_t)j * k, k);
    }
  }
}

template <class Src>
void gemm_any(const float* x, const Src& src, int m, int k, int n, float* y) {
  if (g_simd == Simd::Avx512) gemm_blocks<Avx512Pairs>(x, src, m, k, n, y);
  else if (g_simd == Simd::Avx2) gemm_blocks<Avx2>(x, src, m, k, n, y);
  else gemm_scalar(x, src, m, k, n, y);
}

[[noreturn]] void fail(const Napi::Env& env, bool range, const std::string& msg) {
  if (range) throw Napi::RangeError::New(env, "gemmF32: " + msg);
  throw Napi::TypeError::New(env, "gemmF32: " + msg);
}

int arg_dim(const Napi::CallbackInfo& info, size_t i, const char* name) {
  if (!info[i].IsNumber()) fail(info.Env(), false, std::string(name) + " must be a number");
  const double d = info[i].As<Napi::Number>().DoubleValue();
  if (!(d >= 1 && d <= 2147483647.0 && d == std::floor(d))) fail(info.Env(), true, std::string(name) + " must be a positive integer, got " + std::to_string(d));
  return static_cast<int>(d);
}

const float* arg_f32(const Napi::CallbackInfo& info, size_t i, const char* name, size_t want, const std::string& shape) {
  const Napi::Value v = info[i];
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) fail(info.Env(), false, std::string(name) + " must be a Float32Array");
  auto a = v.As<Napi::Float32Array>();
  if (a.ElementLength() != want) {
    fail(info.Env(), true, std::string(name) + " has " + std::to_string(a.ElementLength()) + " elements, expected " + shape + " = " + std::to_string(want));
  }
  return a.Data();
}

Napi::Value gemm_f32(const Napi::CallbackInfo& info) {
  if (info.Length() < 5) fail(info.Env(), false, "expected (x, w, m, k, n)");
  const int m = arg_dim(info, 2, "m"), k = arg_dim(info, 3, "k"), n = arg_dim(info, 4, "n");
  const float* x = arg_f32(info, 0, "x", (size_t)m * k, "m×k [" + std::to_string(m) + "×" + std::to_string(k) + "]");
  const float* w = arg_f32(info, 1, "w", (size_t)n * k, "n×k [" + std::to_string(n) + "×" + std::to_string(k) + "]");
  auto y = Napi::Float32Array::New(info.Env(), (size_t)m * n);
  gemm_any(x, DirectRows{w, k}, m, k, n, y.Data());
  return y;
}

// linearExact(x, m, kind, weight, scale, out, in, bo, bi, r0, n) → { y: Float32Array [m, n], firstNonFinite }:
// y = x · W[r0:r0+n]ᵀ with W decoded exactly, NR rows at a time, inside the GEMM (no FP32 copy of W).
// firstNonFinite ≥ 0 names a NaN/Inf decoded weight (flat index in the whole tensor); y is then not to be used.
Napi::Value linear_exact(const Napi::CallbackInfo& info) {
  if (info.Length() < 11) fail(info.Env(), false, "linearExact: expected (x, m, kind, weight, scale, out, in, bo, bi, r0, n)");
  const int m = arg_dim(info, 1, "m");
  const ExactKind kind = exact_kind_arg(info, "linearExact", 2);
  const int out = arg_dim(info, 5, "out"), in = arg_dim(info, 6, "in"), bo = arg_dim(info, 7, "bo"), bi = arg_dim(info, 8, "bi");
  const double r0d = info[9].IsNumber() ? info[9].As<Napi::Number>().DoubleValue() : -1;
  if (!(r0d >= 0 && r0d < out && r0d == std::floor(r0d))) fail(info.Env(), true, "linearExact: r0 must be an integer in [0, out)");
  const int r0 = static_cast<int>(r0d), n = arg_dim(info, 10, "n");
  if ((int64_t)r0 + n > out) fail(info.Env(), true, "linearExact: rows outside the weight");
  if (kind == ExactKind::Mxfp4 && in % 32 != 0) fail(info.Env(), true, "linearExact: mxfp4 needs in divisible by 32");
  if (kind == ExactKind::E2m1Lut && (in % bi != 0 || bi % 2 != 0)) fail(info.Env(), true, "linearExact: e2m1-lut needs an even block dividing in");
  const float* x = arg_f32(info, 0, "x", (size_t)m * in, "m×in [" + std::to_string(m) + "×" + std::to_string(in) + "]");
  size_t wbytes = 0, sbytes = 0;
  exact_sizes(kind, out, in, bo, bi, &wbytes, &sbytes);
  auto bytes_arg = [&](size_t i, const char* name, size_t want) {
    if (!info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) fail(info.Env(), false, std::string("linearExact: ") + name + " must be a Uint8Array");
    auto a = info[i].As<Napi::Uint8Array>();
    if (a.ByteLength() < want) fail(info.Env(), true, std::string("linearExact: ") + name + " holds " + std::to_string(a.ByteLength()) + " bytes, need " + std::to_string(want));
    return static_cast<const uint8_t*>(a.Data());
  };
  const uint8_t* w = bytes_arg(3, "weight", wbytes);
  const uint8_t* s = bytes_arg(4, "scale", sbytes);
  int64_t bad = -1;
  auto y = Napi::Float32Array::New(info.Env(), (size_t)m * n);
  gemm_any(x, ExactRows{kind, w, s, in, bo, bi, r0, &bad}, m, in, n, y.Data());
  Napi::Object res = Napi::Object::New(info.Env());
  res.Set("y", y);
  res.Set("firstNonFinite", static_cast<double>(bad));
  return res;
}

Napi::Value info_fn(const Napi::CallbackInfo& info) {
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("simd", simd_name(g_simd));
  o.Set("vbmi", reference_vbmi());
  o.Set("openmpThreads", omp_get_max_threads());
  return o;
}

// setSimd('auto' | 'avx512' | 'avx2' | 'scalar') → the kernel now in use ('avx512': AVX-512 without the VBMI
// kernels). Tests run every path the CPU has and check they give the same bits. A request the CPU cannot honour
// falls back to the best it can.
Napi::Value set_simd(const Napi::CallbackInfo& info) {
  const std::string mode = info.Length() > 0 && info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "";
  const Simd best = best_simd();
  if (mode == "auto" || mode == "avx512") g_simd = best;
  else if (mode == "avx2") g_simd = best == Simd::Scalar ? Simd::Scalar : Simd::Avx2;
  else if (mode == "scalar") g_simd = Simd::Scalar;
  else throw Napi::RangeError::New(info.Env(), "setSimd: mode must be 'auto', 'avx512', 'avx2' or 'scalar'");
  g_vbmi_allowed = mode != "avx512";
  return Napi::String::New(info.Env(), simd_name(g_simd));
}

}  // namespace

RefSimd reference_simd() { return g_simd == Simd::Avx512 ? RefSimd::Avx512 : g_simd == Simd::Avx2 ? RefSimd::Avx2 : RefSimd::Scalar; }

bool reference_vbmi() {
  static const bool vbmi = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
  }();
  return g_simd == Simd::Avx512 && vbmi && g_vbmi_allowed;
}

namespace {

Napi::Object init(Napi::Env env, Napi::Object exports) {
  ld_tune_allocator();  // large typed arrays reused, not re-faulted (harness/contracts/ld_allocator.h)
  g_simd = best_simd();
  exports.Set("gemmF32", Napi::Function::New(env, gemm_f32));
  exports.Set("linearExact", Napi::Function::New(env, linear_exact));
  exports.Set("info", Napi::Function::New(env, info_fn));
  exports.Set("setSimd", Napi::Function::New(env, set_simd));
  register_dequant_exact(env, exports);
  register_check_f16(env, exports);
  register_file_io(env, exports);
  register_blake3(env, exports);
  register_attention_f64(env, exports);
  register_metrics_f64(env, exports);
  return exports;
}

}  // namespace

NODE_API_MODULE(ld_reference, init)
