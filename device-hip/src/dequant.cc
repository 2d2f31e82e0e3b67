// Weight dequantization to f16, as the MI250 path does once per weight before its FP16 GEMMs.
//   kind 0 mxfp4:     packed bytes [out, in/2] (low nibble = even i) + E8M0 scales [out, in/32]
//   kind 1 fp8-block: E4M3 bytes [out, in] + scales [ceil(out/bo), ceil(in/bi)], E8M0 bytes or LE f32
//   kind 2/3/4:       bf16 / f16 / f32 little-endian bytes [out, in]
// Every value comes from the ld_numerics.h element functions. The MXFP4 path evaluates
// ld_mxfp4_value_f16 once per (scale byte, nibble) into a 256×16 table and then only looks values up:
// an element's f16 depends on nothing else, so this is the element function, made fast.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "addon.h"
#include "ops_emulated.generated.h"
#include "ld_numerics.h"
#include "ld_row_source.h"
#include "f16_products.h"
#include "fp8_rows.h"
#include "mxfp4_rows.h"

namespace ld {
namespace {

enum Kind { MXFP4 = 0, FP8 = 1, BF16 = 2, F16 = 3, F32 = 4 };

// Whether the FP8 rows use the AVX-512 VBMI byte permutes (simd_vbmi).
bool fp8_vbmi() { return simd_vbmi(); }

inline const uint8_t* mx_scale_row(const uint8_t* scales, int out, int C, int o, int c, int fault) {
  return scales + ld_scale_index((size_t)out, (size_t)C, (size_t)o, (size_t)c, fault);
}

void mxfp4_row_scalar(const uint8_t* prow, const uint8_t* scales, const Mxfp4Table& t, int out, int in, int o,
                      int fault, uint16_t* y) {
  const int C = in / 32;
  for (int c = 0; c < C; c++) {
    const uint8_t sb = *mx_scale_row(scales, out, C, o, c, fault);
    for (int j = 0; j < 16; j++) {
      const uint8_t b = prow[c * 16 + j];
      const int even = ld_mxfp4_nibble(b, 0, fault), odd = ld_mxfp4_nibble(b, 1, fault);
      y[c * 32 + 2 * j] = (uint16_t)(t.lo[sb][even] | (t.hi[sb][even] << 8));
      y[c * 32 + 2 * j + 1] = (uint16_t)(t.lo[sb][odd] | (t.hi[sb][odd] << 8));
    }
  }
}

// Whether every byte of s [n] lies in [lo, hi].
__attribute__((target("avx2"))) bool mx_bytes_within_avx2(const uint8_t* s, int n, uint8_t lo, uint8_t hi) {
  const __m256i vlo = _mm256_set1_epi8((char)lo), vhi = _mm256_set1_epi8((char)hi);
  __m256i in = _mm256_set1_epi8(-1);
  int c = 0;
  for (; c + 32 <= n; c += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + c));
    in = _mm256_and_si256(in, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_max_epu8(v, vlo), v), _mm256_cmpeq_epi8(_mm256_min_epu8(v, vhi), v)));
  }
  bool ok = _mm256_movemask_epi8(in) == -1;
  for (; c < n; c++) ok = ok && s[c] >= lo && s[c] <= hi;
  return ok;
}

// mxfp4_row_avx2 for a row of an even block count whose scales all lie in [t.hi_lo, t.hi_hi] (every value's low
// byte zero): one lookup a value instead of two, each value its high byte over a zero one (vpunpck with zero). The
// lookups give [c 0–15 | c+1 0–15] per step (each lane its block's table); vpermq 0xD8 (quadwords 0, 2, 1, 3) makes
// that [c 0–7, c+1 0–7 | c 8–15, c+1 8–15], whose low and high byte-unpacks are block c's values 0–15 and block
// c+1's, whole 256-bit stores. The same table entries as mxfp4_row_scalar, so the same bits.
__attribute__((target("avx2"))) void mxfp4_row_hi_avx2(const uint8_t* prow, const uint8_t* srow, const Mxfp4Table& t, int C, bool swap, uint16_t* y) {
  const __m256i m0f = _mm256_set1_epi8(0x0F), zero = _mm256_setzero_si256();
  for (int c = 0; c < C; c += 2) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(prow + c * 16));
    __m256i ev = _mm256_and_si256(b, m0f), od = _mm256_and_si256(_mm256_srli_epi16(b, 4), m0f);
    if (swap) std::swap(ev, od);
    const __m256i th = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[srow[c]]))),
                                               _mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[srow[c + 1]])), 1);
    const __m256i h0 = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(th, _mm256_unpacklo_epi8(ev, od)), 0xD8);  // values 0–15
    const __m256i h1 = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(th, _mm256_unpackhi_epi8(ev, od)), 0xD8);  // values 16–31
    __m256i* dst = reinterpret_cast<__m256i*>(y + c * 32);  // block c: dst[0], dst[1]; block c+1: dst[2], dst[3]
    _mm256_storeu_si256(dst + 0, _mm256_unpacklo_epi8(zero, h0));
    _mm256_storeu_si256(dst + 1, _mm256_unpacklo_epi8(zero, h1));
    _mm256_storeu_si256(dst + 2, _mm256_unpackhi_epi8(zero, h0));
    _mm256_storeu_si256(dst + 3, _mm256_unpackhi_epi8(zero, h1));
  }
}

// Two blocks per 256-bit step (vpshufb looks up within each 128-bit lane, so each lane holds one block's table);
// an odd last block on its own. Same lookups as mxfp4_row_scalar, so the same bits.
__attribute__((target("avx2,fma,f16c"))) void mxfp4_row_avx2(const uint8_t* prow, const uint8_t* scales,
                                                             const Mxfp4Table& t, int out, int in, int o, int fault,
                                                             uint16_t* y) {
  const int C = in / 32;
  const bool swap = fault == LD_FAULT_NIBBLE_SWAP;
  // ld_scale_index is row-major (o·C + c) but under the two index faults: then it is asked per block
  const bool row_major = fault != LD_FAULT_SCALE_AXIS && fault != LD_FAULT_SCALE_STRIDE;
  const uint8_t* srow = row_major ? mx_scale_row(scales, out, C, o, 0, fault) : nullptr;
  auto scale_of = [&](int c) { return row_major ? srow[c] : *mx_scale_row(scales, out, C, o, c, fault); };
  if (row_major && C % 2 == 0 && t.hi_ranged && mx_bytes_within_avx2(srow, C, t.hi_lo, t.hi_hi)) return mxfp4_row_hi_avx2(prow, srow, t, C, swap, y);
  const __m256i m0f = _mm256_set1_epi8(0x0F);
  int c = 0;
  for (; c + 2 <= C; c += 2) {
    const uint8_t s0 = scale_of(c), s1 = scale_of(c + 1);
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(prow + c * 16));
    __m256i ev = _mm256_and_si256(b, m0f), od = _mm256_and_si256(_mm256_srli_epi16(b, 4), m0f);
    if (swap) std::swap(ev, od);
    const __m256i tl = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.lo[s0]))),
                                               _mm_load_si128(reinterpret_cast<const __m128i*>(t.lo[s1])), 1);
    const __m256i th = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[s0]))),
                                               _mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[s1])), 1);
    const __m256i i0 = _mm256_unpacklo_epi8(ev, od), i1 = _mm256_unpackhi_epi8(ev, od);  // per lane: elements 0..15, 16..31
    const __m256i L0 = _mm256_shuffle_epi8(tl, i0), H0 = _mm256_shuffle_epi8(th, i0), L1 = _mm256_shuffle_epi8(tl, i1), H1 = _mm256_shuffle_epi8(th, i1);
    const __m256i e0 = _mm256_unpacklo_epi8(L0, H0), e1 = _mm256_unpackhi_epi8(L0, H0), e2 = _mm256_unpacklo_epi8(L1, H1), e3 = _mm256_unpackhi_epi8(L1, H1);
    __m128i* dst = reinterpret_cast<__m128i*>(y + c * 32);  // block c: dst[0..3], block c+1: dst[4..7]
    _mm_storeu_si128(dst + 0, _mm256_castsi256_si128(e0));
    _mm_storeu_si128(dst + 1, _mm256_castsi256_si128(e1));
    _mm_storeu_si128(dst + 2, _mm256_castsi256_si128(e2));
    _mm_storeu_si128(dst + 3, _mm256_castsi256_si128(e3));
    _mm_storeu_si128(dst + 4, _mm256_extracti128_si256(e0, 1));
    _mm_storeu_si128(dst + 5, _mm256_extracti128_si256(e1, 1));
    _mm_storeu_si128(dst + 6, _mm256_extracti128_si256(e2, 1));
    _mm_storeu_si128(dst + 7, _mm256_extracti128_si256(e3, 1));
  }
  const __m128i m0f128 = _mm_set1_epi8(0x0F);
  for (; c < C; c++) {
    const uint8_t sb = scale_of(c);
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(prow + c * 16));
    __m128i ev = _mm_and_si128(b, m0f128), od = _mm_and_si128(_mm_srli_epi16(b, 4), m0f128);
    if (swap) std::swap(ev, od);
    lookup32_bytes(ev, od, _mm_load_si128(reinterpret_cast<const __m128i*>(t.lo[sb])), _mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[sb])), y + c * 32);
  }
}

// AVX-512BW, a block per step: its 16 table values sit in both halves of one register (a broadcast), so a
// vpermw index needs only its low 4 bits right (bit 4 picks a half, both the same; bits 5..15 are ignored), and
// a block's 16 packed bytes become its 32 indices in two operations after the widening: byte j's dword b gives
// b | b << 12, element 2j's code (the low nibble) in bits 0..3 of the low word and element 2j+1's (the high
// nibble) in bits 0..3 of the high word (swapped under the nibble-order fault: b >> 4 | b << 16). Two fewer
// operations a block than masking each nibble out and a table of two blocks (~15% of the weights check's CPU,
// which runs this on every routed expert). The same table entries as mxfp4_row_scalar, so the same bits.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593: _mm512_undefined_epi32 at -O3
__attribute__((target("avx512f,avx512bw,avx2"))) void mxfp4_row_avx512(const uint8_t* prow, const uint8_t* scales,
                                                                        const Mxfp4Table& t, int out, int in, int o,
                                                                        int fault, uint16_t* y) {
  const int C = in / 32;
  const bool swap = fault == LD_FAULT_NIBBLE_SWAP;
  const bool row_major = fault != LD_FAULT_SCALE_AXIS && fault != LD_FAULT_SCALE_STRIDE;
  const uint8_t* srow = row_major ? mx_scale_row(scales, out, C, o, 0, fault) : nullptr;
  auto scale_of = [&](int c) { return row_major ? srow[c] : *mx_scale_row(scales, out, C, o, c, fault); };
  for (int c = 0; c < C; c++) {
    const __m512i tab = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(t.f16[scale_of(c)])));
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(prow + c * 16)));
    const __m512i idx = swap ? _mm512_or_si512(_mm512_srli_epi32(b, 4), _mm512_slli_epi32(b, 16)) : _mm512_or_si512(b, _mm512_slli_epi32(b, 12));
    _mm512_storeu_si512(y + c * 32, _mm512_permutexvar_epi16(idx, tab));
  }
}
#pragma GCC diagnostic pop

void dequant_mxfp4(const uint8_t* packed, const uint8_t* scales, int out, int in, int fault, uint16_t* y) {
  const Mxfp4Table& t = mxfp4_table(fault);
#pragma omp parallel for schedule(static)
  for (int o = 0; o < out; o++) mxfp4_row(packed + (size_t)o * (in / 2), scales, t, out, in, o, fault, y + (size_t)o * in);
}

}  // namespace

// The 256 E4M3 codes' values (ld_e4m3_to_f32, exact), once per process.
static const float* e4m3_values() {
  static const std::vector<float> v = [] {
    std::vector<float> t(256);
    for (int code = 0; code < 256; code++) t[(size_t)code] = ld_e4m3_to_f32((uint8_t)code);
    return t;
  }();
  return v.data();
}

// Codes prefetched this far ahead: a decode step's fused FP8 GEMV decodes 128 codes a call, block after block,
// and stalled on each block's first load (1.4× the FP16 GEMV's time at m = 1; with it 0.7–0.8×). 4 KiB measured
// best of 0.5–16 KiB here; a prefetch past the array's end is dropped, never faults.
constexpr int kFp8PrefetchBytes = 4096;
// Several rows a call (the weights check's row source, 8 rows a step) go block column by block column, so 4 KiB
// ahead is the next row's same column, already being read; four columns ahead in the same row instead: the fused
// FP8 check 9.8–10.2 → 13.0–13.3 GB/s of packed input, side by side (128: 11.6, 256: 12–13, 1024: 11.3 GB/s).
constexpr int kFp8StepPrefetchBytes = 512;

// The AVX2 decode (hosts without VBMI), used only where fp8_tables found it equal to the block's table on all
// 256 codes: the CPU has AVX2 and F16C and g_simd is not scalar, and the VBMI row is not the one in use.
static bool fp8_arith_avx2() {
  static const bool f16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return f16c && g_avx2 && !fp8_vbmi();
}

// 8 codes (the low 8 bytes of c) → f16 bits of their values at scale vs: a code's E4M3 value as an exact f32 (a
// normal one's magnitude bits shifted into place with the exponent rebiased, 7 → 127; a subnormal one, magnitude
// < 8, its integer magnitude · 2^-9; then the sign), times the scale, rounded by vcvtps2ph, as f16_products
// computes its table's entries. The NaN codes (magnitude 0x7f) come out as 480 · s: fp8_nan_avx2 replaces them.
// Exact for a block only where fp8_arith_matches said so.
static __attribute__((target("avx2,f16c"))) inline __m128i fp8x8_avx2(__m128i c, __m256 vs) {
  const __m256i x = _mm256_cvtepu8_epi32(c);
  const __m256i mag = _mm256_and_si256(x, _mm256_set1_epi32(0x7f));
  const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(1.0f / 512));
  const __m256 v = _mm256_blendv_ps(_mm256_castsi256_ps(normal), sub, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag)));
  const __m256 sv = _mm256_or_ps(v, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x80)), 24)));
  return _mm256_cvtps_ph(_mm256_mul_ps(sv, vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// h (8 f16 of the low 8 codes of c) with the NaN codes' entries taken from the table (nan_pos for 0x7f, nan_neg
// for 0xff; broadcast).
static __attribute__((target("avx2"))) inline __m128i fp8_nan_avx2(__m128i h, __m128i c, __m128i nan_pos, __m128i nan_neg) {
  const __m128i c16 = _mm_cvtepu8_epi16(c);
  const __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(c16, _mm_set1_epi16(0x7f)), _mm_set1_epi16(0x7f));
  return _mm_blendv_epi8(h, _mm_blendv_epi8(nan_pos, nan_neg, _mm_cmpgt_epi16(c16, _mm_set1_epi16(0x7f))), nan);
}

// n codes of one block (scale s, table t for its NaN codes) for `rows` rows, codes and outputs `in` apart: 16 a
// step (a step holding a NaN code, which no real checkpoint's weights have, patched after), the rest one lookup
// each.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Waggressive-loop-optimizations"  // a false alarm on fp8_arith_matches' clone (n = 256)
static __attribute__((target("avx2,f16c"), noinline)) void fp8_blocks_avx2(const uint8_t* codes, const uint16_t* t, float s, size_t n, int rows, size_t in, uint16_t* y) {
  const __m256 vs = _mm256_set1_ps(s);
  const __m128i np = _mm_set1_epi16((short)t[0x7f]), nn = _mm_set1_epi16((short)t[0xff]), m7f = _mm_set1_epi8(0x7f);
  const size_t ahead = rows > 1 ? kFp8StepPrefetchBytes : kFp8PrefetchBytes;
  for (int r = 0; r < rows; r++) {
    const uint8_t* c = codes + (size_t)r * in;
    uint16_t* yr = y + (size_t)r * in;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i) + ahead, _MM_HINT_T0);
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + i)), hi = _mm_srli_si128(b, 8);
      __m128i h0 = fp8x8_avx2(b, vs), h1 = fp8x8_avx2(hi, vs);
      if (_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(b, m7f), m7f)) != 0) h0 = fp8_nan_avx2(h0, b, np, nn), h1 = fp8_nan_avx2(h1, hi, np, nn);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(yr + i), h0);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(yr + i + 8), h1);
    }
    for (; i < n; i++) yr[i] = t[c[i]];
  }
}
#pragma GCC diagnostic pop

// Whether fp8_blocks_avx2 at scale s gives table h on every one of the 256 codes.
static bool fp8_arith_matches(const uint16_t* h, float s) {
  uint8_t codes[256];
  uint16_t got[256];
  for (int c = 0; c < 256; c++) codes[c] = (uint8_t)c;
  fp8_blocks_avx2(codes, h, s, 256, 1, 256, got);
  return std::memcmp(got, h, sizeof got) == 0;
}

Fp8Tables fp8_tables(const uint8_t* scales, bool f32s, int out, int in, int bo, int bi, int fault, bool team) {
  const size_t R = (size_t)((out + bo - 1) / bo), C = (size_t)((in + bi - 1) / bi);
  Fp8Tables t;
  t.id.resize(R * C);
  std::vector<float> value;  // the distinct scales, in order of first use
  std::unordered_map<uint32_t, uint32_t> seen;
  for (size_t b = 0; b < R * C; b++) {
    const float s = ld_fp8_scale(scales, f32s, R, C, b / C, b % C, fault);
    uint32_t bits;
    std::memcpy(&bits, &s, 4);
    const auto it = seen.emplace(bits, (uint32_t)value.size());
    if (it.second) value.push_back(s);
    t.id[b] = it.first->second;
  }
  const size_t T = value.size();
  t.f16.resize(T * 256);
  t.lo.resize(T * 256);
  t.hi.resize(T * 256);
  t.avx2.assign(T, 0);
  const float* e4m3 = e4m3_values();
  const bool arith = fp8_arith_avx2();
#pragma omp parallel for schedule(static) if (team && T >= 64)
  for (long long k = 0; k < (long long)T; k++) {
    // ld_fp8_value_f16(code, s) = ld_f32_to_f16(e4m3(code) · s) for each code
    uint16_t* h = t.f16.data() + (size_t)k * 256;
    f16_products(e4m3, value[(size_t)k], 256, h);
    split_bytes(h, 256, t.lo.data() + (size_t)k * 256, t.hi.data() + (size_t)k * 256);
    if (arith) t.avx2[(size_t)k] = fp8_arith_matches(h, value[(size_t)k]);
  }
  t.scale = std::move(value);
  return t;
}


// n codes of one block through its table (lo, hi: 256 bytes each), for `rows` rows (codes and outputs `in`
// apart; the tables loaded once for all of them), with AVX-512 VBMI, 64 per step: a code's low 7 bits index two
// 128-byte halves with vpermi2b, its top bit picks the half; the low and high bytes are then interleaved into
// f16 words in element order. The same lookups as the scalar row.
static __attribute__((target("avx512f,avx512bw,avx512vbmi"))) void fp8_blocks_vbmi(const uint8_t* codes, const uint8_t* lo, const uint8_t* hi, size_t n,
                                                                             int rows, size_t in, uint16_t* y) {
  const __m512i L0 = _mm512_loadu_si512(lo), L1 = _mm512_loadu_si512(lo + 64), L2 = _mm512_loadu_si512(lo + 128), L3 = _mm512_loadu_si512(lo + 192);
  const __m512i H0 = _mm512_loadu_si512(hi), H1 = _mm512_loadu_si512(hi + 64), H2 = _mm512_loadu_si512(hi + 128), H3 = _mm512_loadu_si512(hi + 192);
  const __m512i first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
  const size_t ahead = rows > 1 ? kFp8StepPrefetchBytes : kFp8PrefetchBytes;
  for (int r = 0; r < rows; r++) {
    const uint8_t* c = codes + (size_t)r * in;
    uint16_t* yr = y + (size_t)r * in;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i) + ahead, _MM_HINT_T0);
      const __m512i idx = _mm512_loadu_si512(c + i);
      const __mmask64 top = _mm512_movepi8_mask(idx);
      const __m512i l = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(L0, idx, L1), _mm512_permutex2var_epi8(L2, idx, L3));
      const __m512i h = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(H0, idx, H1), _mm512_permutex2var_epi8(H2, idx, H3));
      const __m512i a = _mm512_unpacklo_epi8(l, h), b = _mm512_unpackhi_epi8(l, h);
      _mm512_storeu_si512(yr + i, _mm512_permutex2var_epi64(a, first, b));
      _mm512_storeu_si512(yr + i + 32, _mm512_permutex2var_epi64(a, second, b));
    }
    for (; i < n; i++) yr[i] = (uint16_t)(lo[c[i]] | (hi[c[i]] << 8));
  }
}

// Rows [o0, o0 + rows) of an FP8-block weight into y ([rows][in]) with VBMI: block by block, each block's tables
// loaded once for the rows of the range that share its block row. w0: the stored bytes of row o0 onwards.
static void fp8_rows_vbmi(const uint8_t* w0, const Fp8Tables& tab, int in, int bo, int bi, int o0, int rows, uint16_t* y) {
  const size_t C = (size_t)((in + bi - 1) / bi);
  for (int a = o0; a < o0 + rows;) {
    const int br = a / bo, e = std::min(o0 + rows, (br + 1) * bo);  // rows [a, e) share block row br
    for (size_t c = 0; c < C; c++) {
      const size_t b = (size_t)tab.id[(size_t)br * C + c] * 256;
      const size_t i0 = c * bi, i1 = (c + 1) * bi < (size_t)in ? (c + 1) * bi : (size_t)in;
      fp8_blocks_vbmi(w0 + (size_t)(a - o0) * in + i0, tab.lo.data() + b, tab.hi.data() + b, i1 - i0, e - a, (size_t)in, y + (size_t)(a - o0) * in + i0);
    }
    a = e;
  }
}

// Row o of an FP8-block weight (its stored bytes: wrow) through its blocks' tables: VBMI where its kernels may run
// (simd_vbmi), else one lookup per element.
static void fp8_row(const uint8_t* wrow, const Fp8Tables& tab, int in, int bo, int bi, int o, uint16_t* yrow) {
  const size_t C = (size_t)((in + bi - 1) / bi);
  for (size_t c = 0; c < C; c++) {
    const size_t b = (size_t)tab.id[(size_t)(o / bo) * C + c] * 256;
    const size_t i0 = c * bi, i1 = (c + 1) * bi < (size_t)in ? (c + 1) * bi : (size_t)in;
    if (fp8_vbmi()) {
      fp8_blocks_vbmi(wrow + i0, tab.lo.data() + b, tab.hi.data() + b, i1 - i0, 1, (size_t)in, yrow + i0);
      continue;
    }
    if (tab.avx2[b / 256] != 0 && fp8_arith_avx2()) {
      fp8_blocks_avx2(wrow + i0, tab.f16.data() + b, tab.scale[b / 256], i1 - i0, 1, (size_t)in, yrow + i0);
      continue;
    }
    const uint16_t* t = tab.f16.data() + b;
    for (size_t i = i0; i < i1; i++) yrow[i] = t[wrow[i]];
  }
}

// Rows [o0, o0 + rows) (w0: row o0's stored bytes, rows `in` apart) into y [rows][in]: VBMI where its kernels may
// run (simd_vbmi), else row by row through fp8_row.
void fp8_rows(const uint8_t* w0, const Fp8Tables& tab, int in, int bo, int bi, int o0, int rows, uint16_t* y) {
  if (fp8_vbmi()) return fp8_rows_vbmi(w0, tab, in, bo, bi, o0, rows, y);
  for (int r = 0; r < rows; r++) fp8_row(w0 + (size_t)r * in, tab, in, bo, bi, o0 + r, y + (size_t)r * in);
}

namespace {

void dequant_fp8(const uint8_t* w, const uint8_t* scales, bool f32s, int out, int in, int bo, int bi, int fault,
                 uint16_t* y) {
  const Fp8Tables tab = fp8_tables(scales, f32s, out, in, bo, bi, fault);
#pragma omp parallel for schedule(static)
  for (int o = 0; o < out; o++) fp8_row(w + (size_t)o * in, tab, in, bo, bi, o, y + (size_t)o * in);
}

// BF16 → f16 eight at a time: the widening is a shift (exact), the narrowing the hardware's round to nearest even
// (vcvtps2ph), which is ld_f32_to_f16 for every non-NaN value (IEEE 754 binary16 rounding, subnormals and overflow
// to Inf included; tested on all 65,536 patterns against the scalar rule). A group holding a NaN goes through
// ld_bf16_to_f16, whose NaN is canonical where the hardware would keep payload bits.
__attribute__((target("avx2,f16c"))) void bf16_to_f16_avx2(const uint8_t* b, size_t n, uint16_t* y) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 * i))), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    if (!_mm256_testz_si256(nan, nan)) {
      for (size_t j = i; j < i + 8; j++) y[j] = ld_bf16_to_f16((uint16_t)(b[2 * j] | (b[2 * j + 1] << 8)));
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_castsi256_ps(u), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; i++) y[i] = ld_bf16_to_f16((uint16_t)(b[2 * i] | (b[2 * i + 1] << 8)));
}

// n stored plain elements → f16 on the calling thread (a row of the row source: no OpenMP region of its own, which
// nested in a product's threads once a row cost more than the row's conversion). dequant_plain's element rule.
void plain_elements(Kind kind, const uint8_t* b, size_t n, uint16_t* y) {
  if (kind == F16) {
    std::memcpy(y, b, n * 2);
    return;
  }
  if (kind == BF16 && g_avx2) return bf16_to_f16_avx2(b, n, y);
  for (size_t i = 0; i < n; i++) y[i] = kind == BF16 ? ld_bf16_to_f16((uint16_t)(b[2 * i] | (b[2 * i + 1] << 8))) : ld_f32_to_f16(ld_load_f32le(b + 4 * i));
}

void dequant_plain(Kind kind, const uint8_t* b, size_t n, uint16_t* y) {
  const long long nn = (long long)n;
  if (kind == F16) {
    std::memcpy(y, b, n * 2);  // little-endian host: the stored bytes are the f16 bits
    return;
  }
  if (kind == BF16 && g_avx2) {
    // chunks of 64 Ki elements over the threads (a head chunk of 4096 rows is 16 Mi elements)
    const long long chunk = 1 << 16, chunks = (nn + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n >= (1 << 17))
    for (long long c = 0; c < chunks; c++) {
      const long long i0 = c * chunk, len = std::min(chunk, nn - i0);
      bf16_to_f16_avx2(b + 2 * i0, (size_t)len, y + i0);
    }
    return;
  }
#pragma omp parallel for schedule(static) if (n >= (1 << 15))
  for (long long i = 0; i < nn; i++) {
    y[i] = kind == BF16 ? ld_bf16_to_f16((uint16_t)(b[2 * i] | (b[2 * i + 1] << 8))) : ld_f32_to_f16(ld_load_f32le(b + 4 * i));
  }
}

// ---- the weights-first check's row source (harness/contracts/ld_row_source.h) ------------------------------
// The same row functions as dequantToF16, pulled row range by row range by the reference's compare
// (reference-cpu/native/check_f16.cc), so the device's FP16 tensor is never materialised.
struct RowSourceState {
  LdRowSource src;
  ops::DequantToF16Args a;
  const Mxfp4Table* mx = nullptr;   // MXFP4 only
  Fp8Tables fp8;                   // FP8 blocks only
};

// one row's stored bytes: MXFP4 packs two codes a byte; FP8 one; plain F32 / BF16 / F16 their width
size_t stored_row_bytes(const ops::DequantToF16Args& a) {
  return a.kind == MXFP4 ? (size_t)a.inDim / 2 : a.kind == FP8 ? (size_t)a.inDim : (size_t)a.inDim * (a.kind == F32 ? 4 : 2);
}

// rows_from: rows row0.. decoded from `weight`, the stored bytes of those rows (the fused read's chunk), with the
// bound tensor's scales and fault; rows: the same from the bound tensor's own bytes.
void source_rows_from(const LdRowSource* self, const uint8_t* weight, int64_t row0, int64_t n, uint16_t* dst) {
  const RowSourceState* st = static_cast<const RowSourceState*>(self->state);
  const ops::DequantToF16Args& a = st->a;
  const size_t row_bytes = stored_row_bytes(a);
  if (a.kind == FP8) return fp8_rows(weight, st->fp8, a.inDim, a.blockOut, a.blockIn, (int)row0, (int)n, dst);
  for (int64_t r = 0; r < n; r++) {
    const int o = (int)(row0 + r);
    const uint8_t* wrow = weight + (size_t)r * row_bytes;
    uint16_t* yrow = dst + (size_t)r * a.inDim;
    if (a.kind == MXFP4) mxfp4_row(wrow, a.scale.data, *st->mx, a.out, a.inDim, o, a.fault, yrow);
    else plain_elements(static_cast<Kind>(a.kind), wrow, (size_t)a.inDim, yrow);
  }
}

void source_rows(const LdRowSource* self, int64_t row0, int64_t n, uint16_t* dst) {
  const RowSourceState* st = static_cast<const RowSourceState*>(self->state);
  const ops::DequantToF16Args& a = st->a;
  const size_t row_bytes = stored_row_bytes(a);
  source_rows_from(self, a.weight.data + (size_t)row0 * row_bytes, row0, n, dst);
}

// dequantRowSource(dequantToF16's arguments) → an External LdRowSource (type-tagged). It holds references to the
// weight and scale arrays, so they live as long as it does.
Napi::Value dequant_row_source(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  auto* st = new RowSourceState{};
  try {
    st->a = ops::read_dequantToF16(info, "dequantRowSource");
  } catch (...) {
    delete st;
    throw;
  }
  if (st->a.kind == MXFP4) st->mx = &mxfp4_table(st->a.fault);
  // on the caller's thread alone: the weights check makes its row sources on the JS thread while its worker's team
  // checks the batch before (an OpenMP team here too put four threads on its two cores: 48 FP8 [2048×4096] at
  // float32 scales, 512 tables each, checked in batches of 8 in 50–58 ms with it, 48–49 ms without)
  if (st->a.kind == FP8) st->fp8 = fp8_tables(st->a.scale.data, st->a.scaleIsF32, st->a.out, st->a.inDim, st->a.blockOut, st->a.blockIn, st->a.fault, false);
  st->src = LdRowSource{source_rows, source_rows_from, st->a.out, st->a.inDim, st};
  return row_source_external(env, &st->src, [](void* p) { delete static_cast<RowSourceState*>(p); }, st, info[1], info[2], "dequantRowSource");
}

}  // namespace

Napi::Value row_source_external(Napi::Env env, LdRowSource* src, void (*release)(void*), void* state, const Napi::Value& weight,
                                const Napi::Value& scale, const char* fn) {
  struct Held {
    void (*release)(void*);
    void* state;
    Napi::Reference<Napi::Value> w, s;
  };
  auto* held = new Held{release, state, Napi::Persistent(weight), scale.IsNull() || scale.IsUndefined() ? Napi::Reference<Napi::Value>() : Napi::Persistent(scale)};
  auto ext = Napi::External<LdRowSource>::New(env, src, [held](Napi::Env, LdRowSource*) {
    held->release(held->state);
    delete held;
  });
  static const napi_type_tag tag = {LD_ROW_SOURCE_TAG_LOWER, LD_ROW_SOURCE_TAG_UPPER};
  if (napi_type_tag_object(env, ext, &tag) != napi_ok) throw Napi::Error::New(env, std::string(fn) + ": cannot tag the row source");
  return ext;
}

const Mxfp4Table& mxfp4_table(int fault) {
  static std::once_flag once[LD_FAULT_COUNT];
  static std::unique_ptr<Mxfp4Table> tables[LD_FAULT_COUNT];
  if (fault < 0 || fault >= LD_FAULT_COUNT) fault = LD_FAULT_NONE;  // unreachable: every reader checks fault's range
  std::call_once(once[fault], [fault] { tables[fault] = std::make_unique<Mxfp4Table>(fault); });
  return *tables[fault];
}

void mxfp4_row(const uint8_t* prow, const uint8_t* scales, const Mxfp4Table& t, int out, int in, int o, int fault, uint16_t* y) {
  static const bool bw = __builtin_cpu_supports("avx512bw");
  if (g_simd == Simd::Avx512 && bw) mxfp4_row_avx512(prow, scales, t, out, in, o, fault, y);
  else if (g_avx2) mxfp4_row_avx2(prow, scales, t, out, in, o, fault, y);
  else mxfp4_row_scalar(prow, scales, t, out, in, o, fault, y);
}

Napi::Value nvfp4_row_source(const Napi::CallbackInfo& info);  // dequant_fp4.cc
Napi::Value bnb4_row_source(const Napi::CallbackInfo& info);   // dequant_fp4.cc

// fp8ArithExact(scale) → whether an FP8 block at this f32 scale is decoded arithmetically (fp8_blocks_avx2: the SIMD
// level and CPU allow it, and it equals the block's table on every code). Test hook: the AVX2 decode checks itself
// against the table and falls back to lookups, so a wrong decode would cost speed, not bits; the tests hold it to
// being used where it should be.
Napi::Value fp8_arith_exact(const Napi::CallbackInfo& info) {
  need_args(info, 1, "fp8ArithExact");
  if (!info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "fp8ArithExact: scale must be a number");
  const float s = info[0].As<Napi::Number>().FloatValue();
  if (!fp8_arith_avx2()) return Napi::Boolean::New(info.Env(), false);
  uint16_t h[256];
  f16_products(e4m3_values(), s, 256, h);
  return Napi::Boolean::New(info.Env(), fp8_arith_matches(h, s));
}

void init_row_source(Napi::Env env, Napi::Object exports) {
  exports.Set("fp8ArithExact", Napi::Function::New(env, fp8_arith_exact));
  exports.Set("dequantRowSource", Napi::Function::New(env, dequant_row_source));
  exports.Set("nvfp4RowSource", Napi::Function::New(env, nvfp4_row_source));
  exports.Set("bnb4RowSource", Napi::Function::New(env, bnb4_row_source));
}

// The checks (kind, block, scale presence, lengths) are the reader's: here kind picks the kernel.
void emu::dequantToF16(const ops::DequantToF16Args& a, ops::DequantToF16Out& o) {
  if (a.kind == MXFP4) dequant_mxfp4(a.weight.data, a.scale.data, a.out, a.inDim, a.fault, o.y.Data());
  else if (a.kind == FP8) dequant_fp8(a.weight.data, a.scale.data, a.scaleIsF32, a.out, a.inDim, a.blockOut, a.blockIn, a.fault, o.y.Data());
  else dequant_plain(static_cast<Kind>(a.kind), a.weight.data, (size_t)a.out * a.inDim, o.y.Data());
}

}  // namespace ld
