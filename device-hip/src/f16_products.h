// Internal to the ld_device addon: the value tables the dequantizations look codes up in, built with F16C.
// A table entry is the element function's f16 of (code value) · (block scale), ld_f32_to_f16(a · s): FP8 blocks
// (256 codes at a block's scale), NVFP4 (16 codes at each E4M3 scale byte), bitsandbytes (16 quant_map values at a
// block's absmax). With scales that are F32 in the file (DeepSeek-V3 / Qwen FP8 blocks, bitsandbytes' absmax)
// nearly every block has its own table, and building it one scalar ld_f32_to_f16 at a time cost as much as the
// whole decode: a fused FP8 GEMV at m = 1 on [2048×4096] took 0.56 ms with F32 scales against 0.32 with E8M0.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "addon.h"
#include "ld_numerics.h"

namespace ld {

// y[j] = ld_f32_to_f16(a[j] · s), j < n, n a multiple of 8, with AVX2 + F16C: the f32 product is the same IEEE
// multiply, and vcvtps2ph at round-to-nearest-even is ld_f32_to_f16 for every non-NaN f32 (binary16 rounding,
// subnormals and overflow to Inf; tested against the scalar rule on every table the dequantizations build). A NaN
// product goes through the scalar rule, whose NaN is canonical where the hardware keeps payload bits.
__attribute__((target("avx2,f16c"))) inline void f16_products_avx2(const float* a, float s, int n, uint16_t* y) {
  const __m256 vs = _mm256_set1_ps(s);
  for (int j = 0; j < n; j += 8) {
    const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(a + j), vs);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + j), _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const int nan = _mm256_movemask_ps(_mm256_cmp_ps(p, p, _CMP_UNORD_Q));
    if (nan != 0) {
      for (int l = 0; l < 8; l++) {
        if ((nan >> l) & 1) y[j + l] = ld_f32_to_f16(a[j + l] * s);
      }
    }
  }
}

// The same table, dispatched: F16C at every SIMD level but scalar (where each entry is the scalar rule).
inline void f16_products(const float* a, float s, int n, uint16_t* y) {
  if (g_avx2) return f16_products_avx2(a, s, n, y);
  for (int j = 0; j < n; j++) y[j] = ld_f32_to_f16(a[j] * s);
}

// lo[j], hi[j] = the low and high bytes of h[j], j < n (n a multiple of 16; SSE2, which every x86-64 has): a table
// split for the byte shuffles.
inline void split_bytes(const uint16_t* h, int n, uint8_t* lo, uint8_t* hi) {
  const __m128i low = _mm_set1_epi16(0xFF);
  for (int j = 0; j < n; j += 16) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + j)), b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + j + 8));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + j), _mm_packus_epi16(_mm_and_si128(a, low), _mm_and_si128(b, low)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + j), _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8)));
  }
}

// 32 f16 values (y[0..31]) of 16 packed bytes whose codes in element order are ev[j], od[j] for byte j (the nibble
// a format puts first, and the other), looked up in one block's table split into low and high bytes (tl, th: 16
// entries each) with SSSE3 byte shuffles.
__attribute__((target("avx2"))) inline void lookup32_bytes(__m128i ev, __m128i od, __m128i tl, __m128i th, uint16_t* y) {
  const __m128i idx[2] = {_mm_unpacklo_epi8(ev, od), _mm_unpackhi_epi8(ev, od)};  // element order 0..15, 16..31
  __m128i* dst = reinterpret_cast<__m128i*>(y);
  for (int q = 0; q < 2; q++) {
    const __m128i L = _mm_shuffle_epi8(tl, idx[q]), H = _mm_shuffle_epi8(th, idx[q]);
    _mm_storeu_si128(dst + 2 * q, _mm_unpacklo_epi8(L, H));
    _mm_storeu_si128(dst + 2 * q + 1, _mm_unpackhi_epi8(L, H));
  }
}

}  // namespace ld
