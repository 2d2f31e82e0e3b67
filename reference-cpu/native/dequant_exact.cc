// The reference path's exact dequantization, rows [r0, r0+n) of a stored [out, in] linear weight → FP32.
// Written from the format definitions (OCP MX v1.0 for E2M1/E8M0, OCP 8-bit FP for E4M3 "fn", IEEE 754 for
// binary16/bfloat16), deliberately NOT from device-hip's ld_numerics.h: the weights-first check compares
// this decoder with the device's, so a shared bug would hide itself.
//
// Why the result is the stored value, bit for bit what reference-cpu/dequant_ts.ts computes in float64:
//   mxfp4      E2M1 (2 significant bits) · 2^(s−127): a power-of-two scaling, exact unless it leaves the
//              float32 range (6·2^127 → Inf, which the caller rejects). 2^-127 itself is a float32 subnormal.
//   fp8 E8M0   E4M3 (4 significant bits) · 2^(s−127): exact down to 2^-136 (float32 subnormals reach 2^-149).
//   fp8 F32    E4M3 · a float32 scale: the exact product has ≤ 28 significant bits, so one correctly
//              rounded float32 multiply equals TypeScript's exact float64 product rounded once to float32.
//   plain      BF16 and F16 widen exactly; F32 is copied.
//   e2m1-lut   NVFP4: E2M1 (2 significant bits) · a float32 block scale: ≤ 26 significant bits, so one correctly
//              rounded float32 multiply equals TypeScript's exact float64 product rounded once to float32.
//   table4-flat-f32  bitsandbytes: a float32 table value · a float32 absmax, one correctly rounded multiply,
//              as TypeScript's Math.fround of the float64 product (exact: 48 bits) rounds it.
// -ffp-contract=off and -fno-fast-math (binding.gyp) keep the multiply a plain IEEE multiply with subnormals.
#include "dequant_exact.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "simd_level.h"

using Kind = ExactKind;

namespace {

struct Tables {
  float e2m1[16];
  float e4m3[256];
  float e8m0[256];
};

// Built once from the bit-field definitions (no lookup copied from anywhere).
Tables make_tables() {
  Tables t{};
  // E2M1: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0; exponent 0 is subnormal (0 or 0.5).
  for (int c = 0; c < 16; c++) {
    const int e = (c >> 1) & 3, m = c & 1;
    const float mag = e == 0 ? 0.5f * m : std::ldexp(1.0f + 0.5f * m, e - 1);
    t.e2m1[c] = (c & 8) ? -mag : mag;
  }
  // E4M3 fn: sign bit 7, exponent bits 6..3 (bias 7), mantissa bits 2..0; S.1111.111 is NaN, no Inf.
  for (int b = 0; b < 256; b++) {
    const int e = (b >> 3) & 15, m = b & 7;
    float mag;
    if (e == 15 && m == 7) mag = std::numeric_limits<float>::quiet_NaN();
    else if (e == 0) mag = std::ldexp(static_cast<float>(m), -9);  // 2^-6 · m/8
    else mag = std::ldexp(1.0f + m / 8.0f, e - 7);
    t.e4m3[b] = (b & 0x80) ? -mag : mag;
  }
  // E8M0: 2^(b−127), 0xFF is NaN.
  for (int b = 0; b < 256; b++) t.e8m0[b] = b == 255 ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, b - 127);
  return t;
}

const Tables& tables() {
  static const Tables t = make_tables();
  return t;
}

}  // namespace

// IEEE binary16 → float32, from the definition (every binary16 value is a float32 value).
float exact_f16_value(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  float mag;
  if (e == 0) mag = std::ldexp(static_cast<float>(m), -24);
  else if (e == 31) mag = m == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  else mag = std::ldexp(1.0f + m / 1024.0f, e - 15);
  return (h & 0x8000) ? -mag : mag;
}

namespace {

inline uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline float load_f32(const uint8_t* p) {
  const uint32_t u = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
                     (static_cast<uint32_t>(p[3]) << 24);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The 32 codes of a block's 16 bytes in input order (low nibble first: the even input index), as bytes.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593: immintrin's undefined-vector idiom
__attribute__((target("avx2"))) inline void mxfp4_codes(const uint8_t* p, __m128i* first16, __m128i* last16) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), nib = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(bytes, nib), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), nib);
  *first16 = _mm_unpacklo_epi8(lo, hi);
  *last16 = _mm_unpackhi_epi8(lo, hi);
}

// The same rule as the scalar row below, 16 values a step: each code looked up in this file's E2M1 table (a
// permute of the table's 16 floats), times the block's scale from the E8M0 table, one IEEE multiply each.
__attribute__((target("avx512f,avx2"))) void row_mxfp4_avx512(const uint8_t* src, const uint8_t* srow, int64_t nb, float* dst) {
  const Tables& t = tables();
  const __m512 table = _mm512_loadu_ps(t.e2m1);
  for (int64_t b = 0; b < nb; b++) {
    const __m512 s = _mm512_set1_ps(t.e8m0[srow[b]]);
    __m128i c0, c1;
    mxfp4_codes(src + b * 16, &c0, &c1);
    _mm512_storeu_ps(dst + b * 32, _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(c0), table), s));
    _mm512_storeu_ps(dst + b * 32 + 16, _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(c1), table), s));
  }
}

// AVX2: a permute reaches 8 floats, so codes 0–7 and 8–15 (the table's two halves) are looked up apart and the
// code's bit 3 picks one.
__attribute__((target("avx2"))) inline __m256 e2m1_lookup8(__m128i codes8, __m256 t_lo, __m256 t_hi) {
  const __m256i c = _mm256_cvtepu8_epi32(codes8);
  const __m256 pick_hi = _mm256_castsi256_ps(_mm256_slli_epi32(c, 28));  // bit 3 → the sign bit blendv reads
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(t_lo, c), _mm256_permutevar8x32_ps(t_hi, c), pick_hi);
}

__attribute__((target("avx2"))) void row_mxfp4_avx2(const uint8_t* src, const uint8_t* srow, int64_t nb, float* dst) {
  const Tables& t = tables();
  const __m256 t_lo = _mm256_loadu_ps(t.e2m1), t_hi = _mm256_loadu_ps(t.e2m1 + 8);
  for (int64_t b = 0; b < nb; b++) {
    const __m256 s = _mm256_set1_ps(t.e8m0[srow[b]]);
    __m128i c0, c1;
    mxfp4_codes(src + b * 16, &c0, &c1);
    float* d = dst + b * 32;
    _mm256_storeu_ps(d, _mm256_mul_ps(e2m1_lookup8(c0, t_lo, t_hi), s));
    _mm256_storeu_ps(d + 8, _mm256_mul_ps(e2m1_lookup8(_mm_srli_si128(c0, 8), t_lo, t_hi), s));
    _mm256_storeu_ps(d + 16, _mm256_mul_ps(e2m1_lookup8(c1, t_lo, t_hi), s));
    _mm256_storeu_ps(d + 24, _mm256_mul_ps(e2m1_lookup8(_mm_srli_si128(c1, 8), t_lo, t_hi), s));
  }
}
#pragma GCC diagnostic pop

// One output row o of the weight into dst[in]. The SIMD rows above at the reference's SIMD level (setSimd:
// tests compare every level's bits with the TypeScript rule and the exact-rational oracle).
// The row decoders take row o's own stored bytes (src) and the whole scale tensor.
void row_mxfp4(const uint8_t* src, const uint8_t* scales, int64_t o, int64_t in, float* dst) {
  const Tables& t = tables();
  const int64_t nb = in / 32;
  const RefSimd simd = reference_simd();
  if (simd == RefSimd::Avx512) return row_mxfp4_avx512(src, scales + o * nb, nb, dst);
  if (simd == RefSimd::Avx2) return row_mxfp4_avx2(src, scales + o * nb, nb, dst);
  for (int64_t b = 0; b < nb; b++) {
    const float s = t.e8m0[scales[o * nb + b]];
    for (int j = 0; j < 16; j++) {
      const uint8_t byte = src[b * 16 + j];
      dst[b * 32 + 2 * j] = t.e2m1[byte & 15] * s;  // low nibble: the even input index
      dst[b * 32 + 2 * j + 1] = t.e2m1[byte >> 4] * s;
    }
  }
}

// E4M3 "fn" codes (as dwords) → their float32 values from the bit fields, as make_tables builds the table: exponent
// e ≠ 0 is the normal 2^(e−7)·1.m (its float32 bits placed directly), e = 0 the subnormal m·2^−9 (an integer
// times a power of two, exact), S.1111.111 NaN; the sign bit 7 last.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593
__attribute__((target("avx512f,avx2"))) inline __m512 e4m3_values16(__m512i c) {
  const __m512i e = _mm512_and_si512(_mm512_srli_epi32(c, 3), _mm512_set1_epi32(15)), m = _mm512_and_si512(c, _mm512_set1_epi32(7));
  const __m512i normal = _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127 - 7)), 23), _mm512_slli_epi32(m, 20));
  const __m512i sub = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(0x1p-9f)));
  __m512i v = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()), normal, sub);
  v = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(_mm512_and_si512(c, _mm512_set1_epi32(0x7f)), _mm512_set1_epi32(0x7f)), v, _mm512_set1_epi32(0x7fc00000));
  return _mm512_castsi512_ps(_mm512_or_si512(v, _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24)));
}
__attribute__((target("avx2"))) inline __m256 e4m3_values8(__m256i c) {
  const __m256i e = _mm256_and_si256(_mm256_srli_epi32(c, 3), _mm256_set1_epi32(15)), m = _mm256_and_si256(c, _mm256_set1_epi32(7));
  const __m256i normal = _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127 - 7)), 23), _mm256_slli_epi32(m, 20));
  const __m256i sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(0x1p-9f)));
  __m256i v = _mm256_blendv_epi8(normal, sub, _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
  v = _mm256_blendv_epi8(v, _mm256_set1_epi32(0x7fc00000), _mm256_cmpeq_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x7f)), _mm256_set1_epi32(0x7f)));
  return _mm256_castsi256_ps(_mm256_or_si256(v, _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24)));
}

// Inputs [i, i1) of an FP8 block at scale s (i1 − i a multiple of 16, or of 8 for AVX2): the value of each code
// times s, one IEEE multiply each, as the scalar row.
__attribute__((target("avx512f,avx2"))) void fp8_run_avx512(const uint8_t* src, float s, int64_t i, int64_t i1, float* dst) {
  const __m512 vs = _mm512_set1_ps(s);
  for (; i < i1; i += 16) _mm512_storeu_ps(dst + i, _mm512_mul_ps(e4m3_values16(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)))), vs));
}
__attribute__((target("avx2"))) void fp8_run_avx2(const uint8_t* src, float s, int64_t i, int64_t i1, float* dst) {
  const __m256 vs = _mm256_set1_ps(s);
  for (; i < i1; i += 8) _mm256_storeu_ps(dst + i, _mm256_mul_ps(e4m3_values8(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i)))), vs));
}
#pragma GCC diagnostic pop

void row_fp8(Kind kind, const uint8_t* src, const uint8_t* scales, int64_t o, int64_t in, int64_t bo, int64_t bi,
             float* dst) {
  const Tables& t = tables();
  const int64_t nbi = (in + bi - 1) / bi, srow = (o / bo) * nbi;
  const RefSimd simd = reference_simd();
  for (int64_t b = 0; b < nbi; b++) {
    const float s = kind == Kind::Fp8E8m0 ? t.e8m0[scales[srow + b]] : load_f32(scales + 4 * (srow + b));
    const int64_t end = std::min(in, (b + 1) * bi);
    int64_t i = b * bi;
    // at the SIMD levels the codes' values come from their bit fields (e4m3_values*), 16 or 8 a step
    if (simd == RefSimd::Avx512) {
      const int64_t i16 = i + ((end - i) / 16) * 16;
      fp8_run_avx512(src, s, i, i16, dst), i = i16;
    } else if (simd == RefSimd::Avx2) {
      const int64_t i8 = i + ((end - i) / 8) * 8;
      fp8_run_avx2(src, s, i, i8, dst), i = i8;
    }
    for (; i < end; i++) dst[i] = t.e4m3[src[i]] * s;
  }
}

// The 16 codes of 8 packed bytes in input order, as bytes: low nibble first (NVFP4, as MXFP4) or high nibble
// first (bitsandbytes).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593
__attribute__((target("avx2"))) inline __m128i codes16(const uint8_t* p, bool high_first) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), nib = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(bytes, nib), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), nib);
  return high_first ? _mm_unpacklo_epi8(hi, lo) : _mm_unpacklo_epi8(lo, hi);
}

// NVFP4 inputs [i, i1) of a block (i1 − i a multiple of 16) at scale s: the scalar row's rule, 16 values a step,
// each code looked up in a 16-float table (a permute) and multiplied by s once.
__attribute__((target("avx512f,avx2"))) void e2m1_run_avx512(const uint8_t* src, const float* table16, float s, int64_t i, int64_t i1, float* dst) {
  const __m512 table = _mm512_loadu_ps(table16), vs = _mm512_set1_ps(s);
  for (; i < i1; i += 16) _mm512_storeu_ps(dst + i, _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(codes16(src + i / 2, false)), table), vs));
}
__attribute__((target("avx2"))) void e2m1_run_avx2(const uint8_t* src, const float* table16, float s, int64_t i, int64_t i1, float* dst) {
  const __m256 t_lo = _mm256_loadu_ps(table16), t_hi = _mm256_loadu_ps(table16 + 8), vs = _mm256_set1_ps(s);
  for (; i < i1; i += 16) {
    const __m128i c = codes16(src + i / 2, false);
    _mm256_storeu_ps(dst + i, _mm256_mul_ps(e2m1_lookup8(c, t_lo, t_hi), vs));
    _mm256_storeu_ps(dst + i + 8, _mm256_mul_ps(e2m1_lookup8(_mm_srli_si128(c, 8), t_lo, t_hi), vs));
  }
}

// bitsandbytes flat elements [j, j1) (j even, j1 − j a multiple of 16) at absmax a into out[j − j0 ..]: the same,
// high nibble first.
__attribute__((target("avx512f,avx2"))) void table4_run_avx512(const uint8_t* packed, const float* table16, float a, int64_t j, int64_t j1, float* out) {
  const __m512 table = _mm512_loadu_ps(table16), va = _mm512_set1_ps(a);
  for (; j < j1; j += 16, out += 16) _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(codes16(packed + j / 2, true)), table), va));
}
__attribute__((target("avx2"))) void table4_run_avx2(const uint8_t* packed, const float* table16, float a, int64_t j, int64_t j1, float* out) {
  const __m256 t_lo = _mm256_loadu_ps(table16), t_hi = _mm256_loadu_ps(table16 + 8), va = _mm256_set1_ps(a);
  for (; j < j1; j += 16, out += 16) {
    const __m128i c = codes16(packed + j / 2, true);
    _mm256_storeu_ps(out, _mm256_mul_ps(e2m1_lookup8(c, t_lo, t_hi), va));
    _mm256_storeu_ps(out + 8, _mm256_mul_ps(e2m1_lookup8(_mm_srli_si128(c, 8), t_lo, t_hi), va));
  }
}
#pragma GCC diagnostic pop

// NVFP4 row o: byte j of the row holds inputs 2j (low nibble) and 2j+1; block (o, ⌊i/bi⌋)'s scale is the float32
// table entry of its stored byte (scales: 256 float32s, then the bytes, [out, in/bi]). At the SIMD levels a block's
// whole 16-value steps go through e2m1_run_*, the rest one pair at a time.
void row_e2m1_lut(const uint8_t* src, const uint8_t* scales, int64_t o, int64_t in, int64_t bi, float* dst) {
  const Tables& t = tables();
  const int64_t nb = in / bi;
  const RefSimd simd = reference_simd();
  const uint8_t* code = scales + 4 * 256 + o * nb;
  for (int64_t b = 0; b < nb; b++) {  // block b: inputs [b·bi, (b+1)·bi), one scale
    const float s = load_f32(scales + 4 * code[b]);
    int64_t i = b * bi;
    const int64_t i16 = i + (bi / 16) * 16;
    if (simd == RefSimd::Avx512) e2m1_run_avx512(src, t.e2m1, s, i, i16, dst), i = i16;
    else if (simd == RefSimd::Avx2) e2m1_run_avx2(src, t.e2m1, s, i, i16, dst), i = i16;
    for (; i < (b + 1) * bi; i += 2) {
      const uint8_t byte = src[i / 2];
      dst[i] = t.e2m1[byte & 15] * s;
      dst[i + 1] = t.e2m1[byte >> 4] * s;
    }
  }
}

// bitsandbytes row o: flat element j = o·in + i is code j, byte (j − k0)/2 of packed, the even element in the HIGH
// nibble (packed: the codes from flat element k0 on, k0 even: the whole weight's with k0 = 0, a fused read's chunk
// of rows with k0 its first row's first element); table = the first 16 float32s of the scale buffer, absmax of
// block ⌊j/bi⌋ after them. At the SIMD levels a run's whole 16-value steps from an even element go through
// table4_run_*, the rest one at a time.
void row_table4_flat(const uint8_t* packed, int64_t k0, const uint8_t* scales, int64_t o, int64_t in, int64_t bi, float* dst) {
  float table[16];
  for (int c = 0; c < 16; c++) table[c] = load_f32(scales + 4 * c);
  const uint8_t* absmax = scales + 64;
  const RefSimd simd = reference_simd();
  const int64_t j0 = o * in, j1 = j0 + in;
  for (int64_t j = j0; j < j1;) {  // the run of the row inside block ⌊j/bi⌋, one absmax
    const int64_t end = std::min(j1, (j / bi + 1) * bi);
    const float a = load_f32(absmax + 4 * (j / bi));
    if (simd != RefSimd::Scalar && (j & 1) == 0) {
      const int64_t j16 = j + ((end - j) / 16) * 16;
      if (simd == RefSimd::Avx512) table4_run_avx512(packed + (j - k0) / 2, table, a, 0, j16 - j, dst + (j - j0));
      else table4_run_avx2(packed + (j - k0) / 2, table, a, 0, j16 - j, dst + (j - j0));
      j = j16;
    }
    for (; j < end; j++) {
      const uint8_t byte = packed[(j - k0) / 2];
      const int code = (j & 1) == 0 ? byte >> 4 : byte & 15;
      dst[j - j0] = table[code] * a;
    }
  }
}

void row_plain(Kind kind, const uint8_t* src, int64_t in, float* dst) {
  if (kind == Kind::F32) {
    std::memcpy(dst, src, in * 4);  // little-endian host (x86-64), as safetensors stores
    return;
  }
  if (kind == Kind::Bf16) {
    for (int64_t i = 0; i < in; i++) {
      const uint32_t u = static_cast<uint32_t>(load_u16(src + 2 * i)) << 16;  // bfloat16 = top half of binary32
      std::memcpy(dst + i, &u, 4);
    }
  } else {
    for (int64_t i = 0; i < in; i++) dst[i] = exact_f16_value(load_u16(src + 2 * i));
  }
}

[[noreturn]] void fail(const Napi::Env& env, bool range, const std::string& msg) {
  if (range) throw Napi::RangeError::New(env, "dequantExact: " + msg);
  throw Napi::TypeError::New(env, "dequantExact: " + msg);
}

int64_t arg_int(const Napi::CallbackInfo& info, size_t i, const char* name, int64_t lo) {
  if (!info[i].IsNumber()) fail(info.Env(), false, std::string(name) + " must be a number");
  const double d = info[i].As<Napi::Number>().DoubleValue();
  if (!(d >= lo && d <= 2147483647.0 && d == std::floor(d))) fail(info.Env(), true, std::string(name) + " must be an integer ≥ " + std::to_string(lo));
  return static_cast<int64_t>(d);
}

const uint8_t* arg_bytes(const Napi::CallbackInfo& info, size_t i, const char* name, size_t want) {
  if (!info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) fail(info.Env(), false, std::string(name) + " must be a Uint8Array");
  auto a = info[i].As<Napi::Uint8Array>();
  if (a.ByteLength() < want) fail(info.Env(), true, std::string(name) + " holds " + std::to_string(a.ByteLength()) + " bytes, need " + std::to_string(want));
  return a.Data();
}

// dequantExact(kind, weight: Uint8Array, scale: Uint8Array, out, in, bo, bi, r0, n) → Float32Array [n, in].
// weight and scale are the whole stored tensors; (bo, bi) is the FP8 scale block (ignored otherwise).
Napi::Value dequant_exact(const Napi::CallbackInfo& info) {
  if (info.Length() < 9) fail(info.Env(), false, "expected (kind, weight, scale, out, in, bo, bi, r0, n)");
  const Kind kind = exact_kind_arg(info, "dequantExact");
  const int64_t out = arg_int(info, 3, "out", 1), in = arg_int(info, 4, "in", 1);
  const int64_t bo = arg_int(info, 5, "bo", 1), bi = arg_int(info, 6, "bi", 1);
  const int64_t r0 = arg_int(info, 7, "r0", 0), n = arg_int(info, 8, "n", 0);
  if (r0 + n > out) fail(info.Env(), true, "rows [" + std::to_string(r0) + ", " + std::to_string(r0 + n) + ") outside [0, " + std::to_string(out) + ")");
  if (kind == Kind::Mxfp4 && in % 32 != 0) fail(info.Env(), true, "mxfp4 needs in divisible by 32");
  if (kind == Kind::E2m1Lut && (in % bi != 0 || bi % 2 != 0)) fail(info.Env(), true, "e2m1-lut needs an even block dividing in");
  size_t wbytes = 0, sbytes = 0;
  exact_sizes(kind, out, in, bo, bi, &wbytes, &sbytes);
  const uint8_t* w = arg_bytes(info, 1, "weight", wbytes);
  const uint8_t* s = arg_bytes(info, 2, "scale", sbytes);
  auto y = Napi::Float32Array::New(info.Env(), static_cast<size_t>(n * in));
  float* dst = y.Data();
  // Rows are independent: split them over the threads when the work is worth a fork.
  const bool par = n * in >= (1 << 18);
#pragma omp parallel for schedule(static) if (par)
  for (int64_t r = 0; r < n; r++) exact_row(kind, w, s, r0 + r, in, bo, bi, dst + r * in);
  return y;
}

// firstNonFinite(Float32Array) → the lowest flat index holding NaN or ±Inf, or −1.
Napi::Value first_non_finite(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    throw Napi::TypeError::New(info.Env(), "firstNonFinite: expected a Float32Array");
  }
  auto a = info[0].As<Napi::Float32Array>();
  return Napi::Number::New(info.Env(), static_cast<double>(first_nonfinite(a.Data(), static_cast<int64_t>(a.ElementLength()))));
}

// bnbAbsmax(dst, nestedQuantMap, codes, nestedAbsmax, nestedBlocksize, offset): bitsandbytes' double-quantized
// absmax of every block, by the rule reference-cpu/dequant.ts states:
//   dst[b] = fl(fl(nestedQuantMap[codes[b]] · nestedAbsmax[⌊b/nestedBlocksize⌋]) + offset)
// two float32 operations, each rounded (no contraction: -ffp-contract=off), as TypeScript's Math.fround of each
// float64 result (the product of two float32s is exact in float64; the sum of two float32s rounded once more to
// float32 is the float32 sum). In TypeScript the per-block loop cost ~0.5 ms on a [2048×4096] weight.
Napi::Value bnb_absmax(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  auto f32 = [&](size_t i, const char* name) {
    if (i >= info.Length() || !info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
      throw Napi::TypeError::New(env, std::string("bnbAbsmax: ") + name + " must be a Float32Array");
    }
    return info[i].As<Napi::Float32Array>();
  };
  if (info.Length() < 6) throw Napi::TypeError::New(env, "bnbAbsmax: expected 6 arguments");
  auto dst = f32(0, "dst");
  auto map = f32(1, "nestedQuantMap");
  if (!info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) throw Napi::TypeError::New(env, "bnbAbsmax: codes must be a Uint8Array");
  auto codes = info[2].As<Napi::Uint8Array>();
  auto nested = f32(3, "nestedAbsmax");
  const int64_t n = static_cast<int64_t>(codes.ElementLength());
  if (static_cast<int64_t>(dst.ElementLength()) != n) throw Napi::RangeError::New(env, "bnbAbsmax: dst has " + std::to_string(dst.ElementLength()) + " values for " + std::to_string(n) + " codes");
  if (map.ElementLength() != 256) throw Napi::RangeError::New(env, "bnbAbsmax: nestedQuantMap must hold 256 values");
  const double nbs_d = info[4].IsNumber() ? info[4].As<Napi::Number>().DoubleValue() : 0;
  if (!(nbs_d >= 1 && nbs_d <= 1e15 && std::floor(nbs_d) == nbs_d)) throw Napi::RangeError::New(env, "bnbAbsmax: nestedBlocksize must be a positive integer");
  const int64_t nbs = static_cast<int64_t>(nbs_d);
  if (static_cast<int64_t>(nested.ElementLength()) < (n + nbs - 1) / nbs) throw Napi::RangeError::New(env, "bnbAbsmax: nestedAbsmax holds " + std::to_string(nested.ElementLength()) + " values, want " + std::to_string((n + nbs - 1) / nbs));
  if (!info[5].IsNumber()) throw Napi::TypeError::New(env, "bnbAbsmax: offset must be a number");
  const float offset = static_cast<float>(info[5].As<Napi::Number>().DoubleValue());
  const uint8_t* c = codes.Data();
  const float *t = map.Data(), *a = nested.Data();
  float* y = dst.Data();
  // one thread, nested block by nested block (no division a block): the weights check calls this on the JS thread
  // while its worker's team compares, where a parallel region of its own put four threads on two cores
  for (int64_t j = 0, b = 0; b < n; j++) {
    const float aj = a[j];
    for (const int64_t end = std::min(n, b + nbs); b < end; b++) {
      const float p = t[c[b]] * aj;
      y[b] = p + offset;
    }
  }
  return env.Undefined();
}

// The exponent field all ones: NaN or ±Inf, tested on the bits (no float compare, no FP flags).
constexpr uint32_t kExpMask = 0x7f800000u;

int64_t first_nonfinite_scalar(const float* p, int64_t from, int64_t n) {
  for (int64_t i = from; i < n; i++) {
    uint32_t u;
    std::memcpy(&u, p + i, 4);
    if ((u & kExpMask) == kExpMask) return i;
  }
  return -1;
}

__attribute__((target("avx512f"))) int64_t first_nonfinite_avx512(const float* p, int64_t n) {
  const __m512i e = _mm512_set1_epi32(static_cast<int>(kExpMask));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __mmask16 hit = _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_loadu_si512(p + i), e), e);
    if (hit != 0) return i + __builtin_ctz(hit);
  }
  return first_nonfinite_scalar(p, i, n);
}

__attribute__((target("avx2"))) int64_t first_nonfinite_avx2(const float* p, int64_t n) {
  const __m256i e = _mm256_set1_epi32(static_cast<int>(kExpMask));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
    const int hit = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(v, e), e)));
    if (hit != 0) return i + __builtin_ctz(hit);
  }
  return first_nonfinite_scalar(p, i, n);
}

}  // namespace

int64_t first_nonfinite(const float* p, int64_t n) {
  const RefSimd simd = reference_simd();
  if (simd == RefSimd::Avx512) return first_nonfinite_avx512(p, n);
  if (simd == RefSimd::Avx2) return first_nonfinite_avx2(p, n);
  return first_nonfinite_scalar(p, 0, n);
}

void exact_row_at(ExactKind kind, const uint8_t* wrow, const uint8_t* s, int64_t o, int64_t in, int64_t bo, int64_t bi, float* dst) {
  if (kind == Kind::Mxfp4) row_mxfp4(wrow, s, o, in, dst);
  else if (kind == Kind::E2m1Lut) row_e2m1_lut(wrow, s, o, in, bi, dst);
  else if (kind == Kind::Fp8E8m0 || kind == Kind::Fp8F32) row_fp8(kind, wrow, s, o, in, bo, bi, dst);
  else row_plain(kind, wrow, in, dst);
}

void exact_row(ExactKind kind, const uint8_t* w, const uint8_t* s, int64_t o, int64_t in, int64_t bo, int64_t bi, float* dst) {
  if (kind == Kind::Table4FlatF32) return row_table4_flat(w, 0, s, o, in, bi, dst);  // flat blocks: no row of its own
  const int64_t row_bytes = kind == Kind::Mxfp4 || kind == Kind::E2m1Lut ? in / 2 : kind == Kind::Fp8E8m0 || kind == Kind::Fp8F32 ? in : kind == Kind::F32 ? in * 4 : in * 2;
  exact_row_at(kind, w + o * row_bytes, s, o, in, bo, bi, dst);
}

void exact_row_table4_from(const uint8_t* w, int64_t k0, const uint8_t* s, int64_t o, int64_t in, int64_t bi, float* dst) {
  row_table4_flat(w, k0, s, o, in, bi, dst);
}

void exact_sizes(ExactKind kind, int64_t out, int64_t in, int64_t bo, int64_t bi, size_t* wbytes, size_t* sbytes) {
  *wbytes = 0, *sbytes = 0;
  switch (kind) {
    case Kind::Mxfp4: *wbytes = out * in / 2, *sbytes = out * (in / 32); break;
    case Kind::Fp8E8m0:
    case Kind::Fp8F32:
      *wbytes = out * in, *sbytes = ((out + bo - 1) / bo) * ((in + bi - 1) / bi) * (kind == Kind::Fp8F32 ? 4 : 1);
      break;
    case Kind::Bf16:
    case Kind::F16: *wbytes = out * in * 2; break;
    case Kind::F32: *wbytes = out * in * 4; break;
    case Kind::E2m1Lut: *wbytes = out * in / 2, *sbytes = 4 * 256 + out * (in / bi); break;
    case Kind::Table4FlatF32: *wbytes = (out * in + 1) / 2, *sbytes = (16 + (out * in + bi - 1) / bi) * 4; break;
  }
}

ExactKind exact_kind_arg(const Napi::CallbackInfo& info, const char* fn, size_t i) { return exact_kind_name(info.Env(), info[i], fn); }

ExactKind exact_kind_name(Napi::Env env, const Napi::Value& v, const char* fn) {
  const std::string k = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
  if (k == "mxfp4") return Kind::Mxfp4;
  if (k == "fp8-e8m0") return Kind::Fp8E8m0;
  if (k == "fp8-f32") return Kind::Fp8F32;
  if (k == "bf16") return Kind::Bf16;
  if (k == "f16") return Kind::F16;
  if (k == "f32") return Kind::F32;
  if (k == "e2m1-lut") return Kind::E2m1Lut;
  if (k == "table4-flat-f32") return Kind::Table4FlatF32;
  throw Napi::TypeError::New(env, std::string(fn) + ": kind must be one of mxfp4, fp8-e8m0, fp8-f32, bf16, f16, f32, e2m1-lut, table4-flat-f32");
}

void register_dequant_exact(Napi::Env env, Napi::Object exports) {
  exports.Set("dequantExact", Napi::Function::New(env, dequant_exact));
  exports.Set("firstNonFinite", Napi::Function::New(env, first_non_finite));
  exports.Set("bnbAbsmax", Napi::Function::New(env, bnb_absmax));
}
