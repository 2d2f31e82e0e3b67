// Emulated MI250 matrix products: y[i, j] = f16(alpha · dot_f32(x[i, :], W[j, :])).
//   x [m, k] f16 activations, W [n, k] f16 weights (PyTorch Linear layout, row-major), y [m, n].
// Every output follows the LD_LANES accumulation order of ld_numerics.h, so the AVX-512 and AVX2 kernels,
// the scalar fallback and a GPU thread give the same bits.
//
// Kernel layout: x is widened to f32 once (repacked by k slice); for each block of NR rows of W (the unit OpenMP splits over)
// and each KB-long k slice, the W slice is widened into a panel laid out [KB/8][NR][8] (8 consecutive k
// of each row side by side) that stays in L1 while all rows of x pass over it. Tiles of accumulators
// live in a per-thread buffer across slices, so blocking over k does not change the order: lane l of
// every accumulator still sums k ≡ l (mod 8) in increasing k.
//   AVX2:    a 3×4 tile of ymm accumulators (12 + 3 x + 1 w = 16 registers).
//   AVX-512: a 6×8 tile held as 6×4 zmm, each zmm = two W rows' 8-lane accumulators side by side (the
//            x chunk broadcast to both halves): per output the same 8 lanes, the same bits, twice the width.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "addon.h"
#include "ops_emulated.generated.h"
#include "fp8_rows.h"
#include "ld_row_source.h"
#include "ld_numerics.h"
#include "mxfp4_rows.h"

namespace ld {
namespace {

constexpr int KB = 256;  // k slice: x rows [m, KB] and the panel [NR, KB] stay in L1 (multiple of 8)

// Lanes of output (i, j) with the K tail folded in by the same rule, then the ld combine.
inline float finish_dot(float lanes[LD_LANES], const uint16_t* x, const uint16_t* w, int k8, int k) {
  for (int t = k8; t < k; t++) lanes[t & 7] = fmaf(ld_f16_to_f32(x[t]), ld_f16_to_f32(w[t]), lanes[t & 7]);
  return ld_lanes_combine(lanes);
}

// acc layout: [x row i][W row j][8 lanes]; the tile for x rows [i, i+R) starts at acc + i·NR·8.
template <int R>
__attribute__((target("avx2,fma,f16c"))) void tile_avx2(const float* x, int ldx, const float* panel, int len, float* acc) {
  constexpr int NR = 4;
  __m256 c[R][NR];
  for (int r = 0; r < R; r++)
    for (int j = 0; j < NR; j++) c[r][j] = _mm256_loadu_ps(acc + (r * NR + j) * 8);
  for (int kk = 0; kk < len; kk += 8) {
    __m256 xv[R];
    for (int r = 0; r < R; r++) xv[r] = _mm256_loadu_ps(x + (size_t)r * ldx + kk);
    const float* pw = panel + kk * NR;
    for (int j = 0; j < NR; j++) {
      const __m256 wv = _mm256_load_ps(pw + j * 8);
      for (int r = 0; r < R; r++) c[r][j] = _mm256_fmadd_ps(xv[r], wv, c[r][j]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int j = 0; j < NR; j++) _mm256_storeu_ps(acc + (r * NR + j) * 8, c[r][j]);
}

template <int R>
__attribute__((target("avx512f,avx2,fma,f16c"))) void tile_avx512(const float* x, int ldx, const float* panel, int len,
                                                                   float* acc) {
  constexpr int NR = 8, NP = NR / 2;
  __m512 c[R][NP];
  for (int r = 0; r < R; r++)
    for (int p = 0; p < NP; p++) c[r][p] = _mm512_loadu_ps(acc + (r * NR + 2 * p) * 8);
  for (int kk = 0; kk < len; kk += 8) {
    const float* pw = panel + kk * NR;
    __m512 wv[NP];
    for (int p = 0; p < NP; p++) wv[p] = _mm512_load_ps(pw + p * 16);
    for (int r = 0; r < R; r++) {
      // x[kk..kk+8) in both halves: vbroadcastf64x4 (AVX-512F); the all-ones maskz form is the same
      // instruction without GCC 12's uninitialized-value warning.
      const __m512 xv = _mm512_castpd_ps(
          _mm512_maskz_broadcast_f64x4((__mmask8)0xFF, _mm256_castps_pd(_mm256_loadu_ps(x + (size_t)r * ldx + kk))));
      for (int p = 0; p < NP; p++) c[r][p] = _mm512_fmadd_ps(xv, wv[p], c[r][p]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int p = 0; p < NP; p++) _mm512_storeu_ps(acc + (r * NR + 2 * p) * 8, c[r][p]);
}

struct Avx2 {
  static constexpr int NR = 4, MR = 3;
  static void tile(int R, const float* x, int ldx, const float* panel, int len, float* acc) {
    switch (R) {
      case 3: tile_avx2<3>(x, ldx, panel, len, acc); break;
      case 2: tile_avx2<2>(x, ldx, panel, len, acc); break;
      default: tile_avx2<1>(x, ldx, panel, len, acc); break;
    }
  }
};

struct Avx512 {
  static constexpr int NR = 8, MR = 6;
  static void tile(int R, const float* x, int ldx, const float* panel, int len, float* acc) {
    switch (R) {
      case 6: tile_avx512<6>(x, ldx, panel, len, acc); break;
      case 5: tile_avx512<5>(x, ldx, panel, len, acc); break;
      case 4: tile_avx512<4>(x, ldx, panel, len, acc); break;
      case 3: tile_avx512<3>(x, ldx, panel, len, acc); break;
      case 2: tile_avx512<2>(x, ldx, panel, len, acc); break;
      default: tile_avx512<1>(x, ldx, panel, len, acc); break;
    }
  }
};

__attribute__((target("avx2,fma,f16c"))) void widen_f16(const uint16_t* h, float* f, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  for (; i < n; i++) f[i] = ld_f16_to_f32(h[i]);
}

// Panel [len/8][NR][8] of a block's nr W rows (row j at w + j·k) over k [k0, k0+len), widened; rows past nr are zeros (their
// tiles are computed and never stored, so one tile shape serves every block).
__attribute__((target("avx2,fma,f16c"))) void fill_panel(const uint16_t* w, int k, int nr, int NR, int k0, int len,
                                                         float* panel) {
  for (int kk = 0; kk < len; kk += 8) {
    for (int j = 0; j < NR; j++) {
      __m256 v = _mm256_setzero_ps();
      if (j < nr) v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + (size_t)j * k + k0 + kk)));
      _mm256_store_ps(panel + kk * NR + j * 8, v);
    }
  }
}

// Where the W rows come from. F16Rows: an f16 matrix in memory. Mxfp4Rows (the fused MXFP4 GEMM): packed rows,
// a block of NR at a time decoded (mxfp4_rows.h, dequantToF16's row function) into a per-thread buffer that
// stays in L2 while the block's slices pass over it. The kernel and the order of every sum are the same for both,
// so gemmMxfp4F16(x, W) has the bits of gemmF16(x, dequantToF16(W)).
struct F16Rows {
  static constexpr bool kBuffered = false;
  const uint16_t* w;
  int k;
  const uint16_t* rows(int j0, int, uint16_t*) const { return w + (size_t)j0 * k; }
};

struct Mxfp4Rows {
  static constexpr bool kBuffered = true;
  const uint8_t* packed;
  const uint8_t* scales;
  const Mxfp4Table* t;
  int n, k, fault;
  // Before each row is decoded, the same row of the next unit (nr rows on: the thread's next unit under the static
  // schedule) is prefetched, its packed bytes and its scales: a row is 2 KiB at k = 4096, too short for the
  // hardware's stream prefetch to ramp up, and a decode step's routed experts come from page-cache pages (a wide
  // dequantized decode step 85-88 -> 75 ms).
  const uint16_t* rows(int j0, int nr, uint16_t* buf) const {
    for (int j = 0; j < nr; j++) {
      if (j0 + nr + j < n) {
        const char* ahead = reinterpret_cast<const char*>(packed + (size_t)(j0 + nr + j) * (k / 2));
        for (int b = 0; b < k / 2; b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
        const char* sahead = reinterpret_cast<const char*>(scales + (size_t)(j0 + nr + j) * (k / 32));
        for (int b = 0; b < k / 32; b += 64) _mm_prefetch(sahead + b, _MM_HINT_T0);
      }
      mxfp4_row(packed + (size_t)(j0 + j) * (k / 2), scales, *t, n, k, j0 + j, fault, buf + (size_t)j * k);
    }
    return buf;
  }
};

// Fp8Rows (the fused FP8-block GEMM): stored E4M3 rows decoded through the weight's block tables (fp8_rows.h,
// dequantToF16's row function), the same way.
struct Fp8Rows {
  static constexpr bool kBuffered = true;
  const uint8_t* w;
  const Fp8Tables* t;
  int k, bo, bi;
  const uint16_t* rows(int j0, int nr, uint16_t* buf) const {
    // row by row: each row's bytes read in order (all nr rows a block at a time stalled on 16 strided streams)
    for (int j = 0; j < nr; j++) fp8_rows(w + (size_t)(j0 + j) * k, *t, k, bo, bi, j0 + j, 1, buf + (size_t)j * k);
    return buf;
  }
};

// SourceRows (the fused NVFP4 and bitsandbytes GEMMs): rows pulled from the format's row source
// (harness/contracts/ld_row_source.h: the device's row function of dequantNvfp4ToF16 / dequantBnb4ToF16, the one the
// weights-first check compares), a unit's nr rows into the thread's buffer, the same way as Mxfp4Rows.
struct SourceRows {
  static constexpr bool kBuffered = true;
  const ::LdRowSource* s;
  const uint16_t* rows(int j0, int nr, uint16_t* buf) const {
    s->rows(s, j0, nr, buf);
    return buf;
  }
};

// out_f16 != nullptr: f16(alpha·dot) into it; else the f32 dot into out_f32.
template <class Isa, class Src>
void gemm_simd(const uint16_t* xh, const Src& src, int m, int k, int n, float alpha, uint16_t* out_f16,
               float* out_f32) {
  constexpr int NR = Isa::NR;
  // Small products (a decode step's q/k/v projections) run on one thread: waking the OpenMP pool costs more
  // than the work. Each output is computed by one thread in the same order either way, so bits don't change.
  const int k8 = k & ~7, nblocks = (n + NR - 1) / NR;
  const int nthreads = (double)m * k * n < 262144.0 ? 1 : omp_get_max_threads();
  // x widened once into [k slice][m][KB]: rows of a slice KB floats apart instead of k. With k a power of
  // two, rows k apart all fall in the same L1 sets and evict each other (16 rows > 12 ways).
  const int nslices = (k8 + KB - 1) / KB;
  std::vector<float> xp((size_t)nslices * m * KB);
  for (int sl = 0; sl < nslices; sl++) {
    const int k0 = sl * KB, len = std::min(KB, k8 - k0);
    for (int i = 0; i < m; i++) widen_f16(xh + (size_t)i * k + k0, &xp[((size_t)sl * m + i) * KB], (size_t)len);
  }
  const size_t panel_n = (size_t)NR * KB + 16, accn = (size_t)m * NR * 8;
  std::vector<float> scratch((size_t)nthreads * (panel_n + accn));
  std::vector<uint16_t> rowbufs(Src::kBuffered ? (size_t)nthreads * NR * k : 0);

#pragma omp parallel num_threads(nthreads)
  {
    float* base = scratch.data() + (size_t)omp_get_thread_num() * (panel_n + accn);
    float* panel = base;
    while ((reinterpret_cast<uintptr_t>(panel) & 63) != 0) panel++;
    float* acc = base + panel_n;
    uint16_t* rowbuf = Src::kBuffered ? rowbufs.data() + (size_t)omp_get_thread_num() * NR * k : nullptr;
#pragma omp for schedule(static)
    for (int nb = 0; nb < nblocks; nb++) {
      const int j0 = nb * NR, nr = std::min(NR, n - j0);
      const uint16_t* w = src.rows(j0, nr, rowbuf);  // row j0 + j is w + j·k
      std::fill(acc, acc + accn, 0.0f);
      for (int k0 = 0; k0 < k8; k0 += KB) {
        const int len = std::min(KB, k8 - k0);
        fill_panel(w, k, nr, NR, k0, len, panel);
        const float* xs = &xp[(size_t)(k0 / KB) * m * KB];
        for (int i = 0; i < m; i += Isa::MR)
          Isa::tile(std::min(Isa::MR, m - i), xs + (size_t)i * KB, KB, panel, len, acc + (size_t)i * NR * 8);
      }
      for (int i = 0; i < m; i++) {
        for (int j = 0; j < nr; j++) {
          float* lanes = acc + ((size_t)i * NR + j) * 8;
          const float d = finish_dot(lanes, xh + (size_t)i * k, w + (size_t)j * k, k8, k);
          if (out_f16 != nullptr) out_f16[(size_t)i * n + j0 + j] = ld_f32_to_f16(alpha * d);
          else out_f32[(size_t)i * n + j0 + j] = d;
        }
      }
    }
  }
}

// Small m (a decode step: one token, or a few sequences), f16 W: each W row is read once straight from memory into
// its m dot products, RW rows side by side so several rows' loads are in flight (the tiled kernel widens W into a
// panel first, which at m = 1 ran at a third of the memory's read speed). Lane l of every output still sums
// k ≡ l (mod 8) in increasing k from zero, then finish_dot: the tiled kernel's order, the same bits.
// w: W row j0 (row j0 + r at w + r·k). Inlined into one wrapper per instruction set (below).
// kAhead (rows read from memory): the next RW rows are prefetched as these are read. A row is 8 KiB at k = 4096, so
// the hardware's stream prefetch started cold on every row, and it stops at 4 KiB page boundaries, which the FP16
// cache's mapped files (page-cache pages) cross every 4 KiB: a wide decode step from the FP16 cache went 105 -> 68 ms
// with it, a GEMV over huge-page memory 36 -> 40 GB/s. The next rows are fetched in address order, as fast as these
// are consumed (one stream a thread, a group of rows ahead), not each at the offset being read here (RW streams):
// one thread over a wide FP16 cache's mapped experts file, 27–31 -> 32–36 GB/s at k = 1024, 2048, 4096 and 8192,
// two threads 36–39 -> 43–46 (the memory's read speed that hour). Rows decoded into a thread's L2 buffer (FP8,
// MXFP4) have none: the rows after its buffer are another thread's.
template <int M, int RW, bool kAhead>
__attribute__((always_inline, target("avx2,fma,f16c"))) inline void gemv_rows(const float* xf, const uint16_t* xh, const uint16_t* w, int k, int j0,
                                                                               int n, float alpha, uint16_t* out_f16, float* out_f32) {
  const int k8 = k & ~7;
  __m256 c[M][RW];
  for (int i = 0; i < M; i++)
    for (int r = 0; r < RW; r++) c[i][r] = _mm256_setzero_ps();
  for (int kk = 0; kk < k8; kk += 8) {
    __m256 wv[RW];
    // the next RW rows in address order, one 64-byte line each time these RW rows have consumed 64 bytes; past the
    // weight's end a prefetch is dropped, never faults (the address formed as an integer: no pointer past the array)
    if (kAhead && (kk & (32 / RW - 1)) == 0) _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(w) + ((size_t)RW * k + (size_t)kk * RW) * 2), _MM_HINT_T0);
    for (int r = 0; r < RW; r++) wv[r] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + (size_t)r * k + kk)));
    for (int i = 0; i < M; i++) {
      const __m256 xv = _mm256_loadu_ps(xf + (size_t)i * k + kk);
      for (int r = 0; r < RW; r++) c[i][r] = _mm256_fmadd_ps(xv, wv[r], c[i][r]);
    }
  }
  for (int i = 0; i < M; i++) {
    for (int r = 0; r < RW; r++) {
      float lanes[LD_LANES];
      _mm256_storeu_ps(lanes, c[i][r]);
      const float d = finish_dot(lanes, xh + (size_t)i * k, w + (size_t)r * k, k8, k);
      if (out_f16 != nullptr) out_f16[(size_t)i * n + j0 + r] = ld_f32_to_f16(alpha * d);
      else out_f32[(size_t)i * n + j0 + r] = d;
    }
  }
}

template <int M, int RW, bool kAhead>
__attribute__((target("avx2,fma,f16c"))) void gemv_rows_avx2(const float* xf, const uint16_t* xh, const uint16_t* w, int k, int j0, int n,
                                                             float alpha, uint16_t* out_f16, float* out_f32) {
  gemv_rows<M, RW, kAhead>(xf, xh, w, k, j0, n, alpha, out_f16, out_f32);
}

// The same ymm code with AVX-512VL's 32 ymm registers: eight rows' accumulators and loads fit without spilling.
template <int M, int RW>
__attribute__((target("avx512f,avx512vl,avx2,fma,f16c"))) void gemv_rows_avx512vl(const float* xf, const uint16_t* xh, const uint16_t* w, int k, int j0,
                                                                                  int n, float alpha, uint16_t* out_f16, float* out_f32) {
  gemv_rows<M, RW, false>(xf, xh, w, k, j0, n, alpha, out_f16, out_f32);
}

// Whether the GEMV may use gemv_rows_avx512vl: the CPU has AVX-512VL and g_simd is AVX-512 (setSimd can lower it).
bool gemv_vl() {
  static const bool vl = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
  return g_simd == Simd::Avx512 && vl;
}

// Rows [j0, j0 + nr) of y for M x rows (w: W row j0, the block's rows k apart): RW at a time (four at M = 1, two
// beyond: the accumulators and loads fit the 16 ymm registers), a last odd row alone. Rows decoded into a buffer
// (Src::kBuffered: FP8, MXFP4) sit in L2, where one row's FMA chain, not the memory, bounds the product: at M = 1
// with AVX-512VL eight rows go side by side (a decode step's fused FP8/MXFP4 GEMV 1.1–1.2× faster here; rows
// read from memory gain nothing, measured, so they keep four).
template <int M, bool kBuffered>
void gemv_block(const float* xf, const uint16_t* xh, const uint16_t* w, int k, int j0, int nr, int n, float alpha, uint16_t* out_f16, float* out_f32) {
  constexpr int RW = M == 1 ? 4 : 2;
  int j = j0;
  if (M == 1 && kBuffered && gemv_vl())
    for (; j + 8 <= j0 + nr; j += 8) gemv_rows_avx512vl<M, 8>(xf, xh, w + (size_t)(j - j0) * k, k, j, n, alpha, out_f16, out_f32);
  for (; j + RW <= j0 + nr; j += RW) gemv_rows_avx2<M, RW, !kBuffered>(xf, xh, w + (size_t)(j - j0) * k, k, j, n, alpha, out_f16, out_f32);
  for (; j < j0 + nr; j++) gemv_rows_avx2<M, 1, !kBuffered>(xf, xh, w + (size_t)(j - j0) * k, k, j, n, alpha, out_f16, out_f32);
}

// The GEMV over W rows from src (F16Rows: straight from memory; Mxfp4Rows: each unit's JB rows decoded into a
// per-thread buffer, 128 KiB at k = 4096, that stays in L2 while its dot products read it). The same sums either
// way, so gemmMxfp4F16 keeps gemmF16(x, dequantToF16(W))'s bits at m ≤ 4 too.
template <class Src>
void gemv_f16(const uint16_t* xh, const Src& src, int m, int k, int n, float alpha, uint16_t* out_f16, float* out_f32) {
  std::vector<float> xf((size_t)m * k);
  for (int i = 0; i < m; i++) widen_f16(xh + (size_t)i * k, xf.data() + (size_t)i * k, (size_t)(k & ~7));
  constexpr int JB = 16;  // rows per OpenMP unit
  const int nblocks = (n + JB - 1) / JB;
  const int nthreads = (double)m * k * n < 262144.0 ? 1 : omp_get_max_threads();
  std::vector<uint16_t> rowbufs(Src::kBuffered ? (size_t)nthreads * JB * k : 0);
#pragma omp parallel for schedule(static) num_threads(nthreads)
  for (int b = 0; b < nblocks; b++) {
    const int j0 = b * JB, nr = std::min(JB, n - j0);
    uint16_t* rowbuf = Src::kBuffered ? rowbufs.data() + (size_t)omp_get_thread_num() * JB * k : nullptr;
    const uint16_t* w = src.rows(j0, nr, rowbuf);  // row j0 + j is w + j·k
    switch (m) {
      case 1: gemv_block<1, Src::kBuffered>(xf.data(), xh, w, k, j0, nr, n, alpha, out_f16, out_f32); break;
      case 2: gemv_block<2, Src::kBuffered>(xf.data(), xh, w, k, j0, nr, n, alpha, out_f16, out_f32); break;
      case 3: gemv_block<3, Src::kBuffered>(xf.data(), xh, w, k, j0, nr, n, alpha, out_f16, out_f32); break;
      default: gemv_block<4, Src::kBuffered>(xf.data(), xh, w, k, j0, nr, n, alpha, out_f16, out_f32); break;
    }
  }
}

void gemm_scalar(const uint16_t* x, const uint16_t* w, int m, int k, int n, float alpha, uint16_t* out_f16,
                 float* out_f32) {
#pragma omp parallel for schedule(static)
  for (int j = 0; j < n; j++) {
    for (int i = 0; i < m; i++) {
      const float d = ld_dot_f16(x + (size_t)i * k, w + (size_t)j * k, k);
      if (out_f16 != nullptr) out_f16[(size_t)i * n + j] = ld_f32_to_f16(alpha * d);
      else out_f32[(size_t)i * n + j] = d;
    }
  }
}

__attribute__((target("avx2,fma,f16c"))) float dot_f16_avx2(const uint16_t* x, const uint16_t* w, int k) {
  __m256 acc = _mm256_setzero_ps();
  const int k8 = k & ~7;
  for (int i = 0; i < k8; i += 8) {
    const __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    const __m256 wv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i)));
    acc = _mm256_fmadd_ps(xv, wv, acc);
  }
  float lanes[LD_LANES];
  _mm256_storeu_ps(lanes, acc);
  for (int i = k8; i < k; i++) lanes[i & 7] = fmaf(ld_f16_to_f32(x[i]), ld_f16_to_f32(w[i]), lanes[i & 7]);
  return ld_lanes_combine(lanes);
}

__attribute__((target("avx2,fma,f16c"))) void axpy_f16_avx2(float p, const uint16_t* v, float* acc, int n) {
  const __m256 pv = _mm256_set1_ps(p);
  int d = 0;
  for (; d + 8 <= n; d += 8) {
    const __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + d)));
    _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(pv, vv, _mm256_loadu_ps(acc + d)));
  }
  for (; d < n; d++) acc[d] = fmaf(p, ld_f16_to_f32(v[d]), acc[d]);
}

void gemm_dispatch(const uint16_t* x, const uint16_t* w, int m, int k, int n, float alpha, uint16_t* out_f16,
                   float* out_f32) {
  const F16Rows src{w, k};
  if (g_avx2 && m <= 4) return gemv_f16(x, src, m, k, n, alpha, out_f16, out_f32);
  if (g_simd == Simd::Avx512) gemm_simd<Avx512>(x, src, m, k, n, alpha, out_f16, out_f32);
  else if (g_simd == Simd::Avx2) gemm_simd<Avx2>(x, src, m, k, n, alpha, out_f16, out_f32);
  else gemm_scalar(x, w, m, k, n, alpha, out_f16, out_f32);
}

// The fused GEMMs (W rows decoded by src inside the product): the GEMV at m ≤ 4, the tiled kernel of the SIMD level
// above; the scalar level decodes the whole weight first (a test level: same bits, no speed asked).
template <class Src>
void gemm_fused(const uint16_t* x, const Src& src, int m, int k, int n, float alpha, uint16_t* out_f16) {
  if (g_avx2 && m <= 4) return gemv_f16(x, src, m, k, n, alpha, out_f16, nullptr);
  if (g_simd == Simd::Avx512) return gemm_simd<Avx512>(x, src, m, k, n, alpha, out_f16, nullptr);
  if (g_simd == Simd::Avx2) return gemm_simd<Avx2>(x, src, m, k, n, alpha, out_f16, nullptr);
  std::vector<uint16_t> w((size_t)n * k);
  src.rows(0, n, w.data());
  gemm_scalar(x, w.data(), m, k, n, alpha, out_f16, nullptr);
}

void gemm_mxfp4(const uint16_t* x, const uint8_t* packed, const uint8_t* scales, int m, int k, int n, float alpha, int fault,
                uint16_t* out_f16) {
  gemm_fused(x, Mxfp4Rows{packed, scales, &mxfp4_table(fault), n, k, fault}, m, k, n, alpha, out_f16);
}

void gemm_fp8(const uint16_t* x, const uint8_t* w, const uint8_t* scales, bool f32s, int m, int k, int n, int bo, int bi,
              float alpha, int fault, uint16_t* out_f16) {
  const Fp8Tables t = fp8_tables(scales, f32s, n, k, bo, bi, fault);
  gemm_fused(x, Fp8Rows{w, &t, k, bo, bi}, m, k, n, alpha, out_f16);
}

}  // namespace

// The fused GEMM over a row source's rows (SourceRows).
void gemm_rows_f16(const uint16_t* x, const ::LdRowSource& rows, int m, float alpha, uint16_t* out_f16) {
  gemm_fused(x, SourceRows{&rows}, m, (int)rows.in, (int)rows.out, alpha, out_f16);
}

float dot_f16(const uint16_t* x, const uint16_t* w, int k) {
  return g_avx2 ? dot_f16_avx2(x, w, k) : ld_dot_f16(x, w, k);
}

void axpy_f16(float p, const uint16_t* v, float* acc, int n) {
  if (g_avx2) {
    axpy_f16_avx2(p, v, acc, n);
    return;
  }
  for (int d = 0; d < n; d++) acc[d] = fmaf(p, ld_f16_to_f32(v[d]), acc[d]);
}

void emu::gemmF16(const ops::GemmF16Args& a, ops::GemmF16Out& o) { gemm_dispatch(a.x.data, a.w.data, a.m, a.k, a.n, a.alpha, o.y.Data(), nullptr); }

void emu::gemmMxfp4F16(const ops::GemmMxfp4F16Args& a, ops::GemmMxfp4F16Out& o) {
  gemm_mxfp4(a.x.data, a.packed.data, a.scale.data, a.m, a.k, a.n, a.alpha, a.fault, o.y.Data());
}

void emu::gemmFp8F16(const ops::GemmFp8F16Args& a, ops::GemmFp8F16Out& o) {
  gemm_fp8(a.x.data, a.weight.data, a.scale.data, a.scaleIsF32, a.m, a.k, a.n, a.blockOut, a.blockIn, a.alpha, a.fault, o.y.Data());
}

void emu::gemmF16F32(const ops::GemmF16F32Args& a, ops::GemmF16F32Out& o) { gemm_dispatch(a.x.data, a.w.data, a.m, a.k, a.n, 1.0f, nullptr, o.y.Data()); }

}  // namespace ld
