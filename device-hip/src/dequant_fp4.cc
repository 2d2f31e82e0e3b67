// NVFP4 dequantization to f16 (ModelOpt and compressed-tensors; spec/fp4-formats.md §2–3), as the MI250 path
// does once per weight before its FP16 GEMMs:
//   packed bytes [out, in/2] (low nibble = even i), E4M3 block scales [out, in/16], one f32 global scale,
//   a multiplier (ModelOpt weight_scale_2) or a divisor (compressed-tensors weight_global_scale).
// The value of (scale byte, nibble) depends on nothing else, so each call evaluates ld_nvfp4_value_f16 once
// per pair into a 256×16 table and then only looks values up, 32 at a time with AVX-512BW or AVX2: the element
// function, made fast (1.2 GB/s of packed input before, one scalar lookup per value).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "addon.h"
#include "ops_emulated.generated.h"
#include "ld_numerics.h"
#include "f16_products.h"
#include "ld_row_source.h"

namespace ld {
namespace {

// The f16 of every (scale byte, code) pair of an NVFP4 weight, as ld_nvfp4_value_f16 gives it; the low and high
// bytes apart for the AVX2 rows' byte lookups.
struct Nvfp4Table {
  alignas(32) uint16_t f16[256][16];
  alignas(16) uint8_t lo[256][16];
  alignas(16) uint8_t hi[256][16];
  Nvfp4Table(float global, int divisor, int fault) {
    float code[16];
    for (int c = 0; c < 16; c++) code[c] = ld_fp4_elem_f32(c, fault);
    for (int s = 0; s < 256; s++) {
      f16_products(code, ld_nvfp4_scale((uint8_t)s, global, divisor, fault), 16, f16[s]);  // ld_nvfp4_value_f16 of each code
      split_bytes(f16[s], 16, lo[s], hi[s]);
    }
  }
};

// Row o's scale byte for block c: row-major unless a fault moves the index (ld_nvfp4_scale_index).
struct Nvfp4Scales {
  const uint8_t* scales;
  const uint8_t* srow;  // row o's scales when row-major, else null
  size_t out, C, o;
  int fault;
  Nvfp4Scales(const uint8_t* s, int out_, int C_, int o_, int f)
      : scales(s), out((size_t)out_), C((size_t)C_), o((size_t)o_), fault(f) {
    const bool moved = f == LD_FAULT_SCALE_AXIS || f == LD_FAULT_SCALE_STRIDE || f == LD_FAULT_SCALE_BLOCK_SIZE;
    srow = moved ? nullptr : s + o * C;
  }
  uint8_t operator()(int c) const { return srow != nullptr ? srow[c] : scales[ld_nvfp4_scale_index(out, C, o, (size_t)c, fault)]; }
};

void nvfp4_row_scalar(const uint8_t* prow, const Nvfp4Scales& sc, const Nvfp4Table& t, int c0, int C, int fault, uint16_t* yrow) {
  for (int c = c0; c < C; c++) {
    const uint16_t* tab = t.f16[sc(c)];
    for (int j = 0; j < 8; j++) {
      const uint8_t b = prow[c * 8 + j];
      yrow[c * 16 + 2 * j] = tab[ld_mxfp4_nibble(b, 0, fault)];
      yrow[c * 16 + 2 * j + 1] = tab[ld_mxfp4_nibble(b, 1, fault)];
    }
  }
}

// Two blocks (16 packed bytes, 32 values) per 256-bit step: each 128-bit lane holds one block's byte tables for
// vpshufb; byte j of the block widens to a word whose low byte is element 2j's code and high byte element 2j+1's
// (low nibble first; swapped under the nibble-order fault). The same table entries as the scalar row.
__attribute__((target("avx2"))) void nvfp4_row_avx2(const uint8_t* prow, const Nvfp4Scales& sc, const Nvfp4Table& t, int C, int fault, uint16_t* yrow) {
  const bool swap = fault == LD_FAULT_NIBBLE_SWAP;
  const __m256i nib = _mm256_set1_epi16(0x0F0F);
  int c = 0;
  for (; c + 2 <= C; c += 2) {
    const uint8_t s0 = sc(c), s1 = sc(c + 1);
    const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(prow + c * 8)));
    const __m256i idx = _mm256_and_si256(swap ? _mm256_or_si256(_mm256_srli_epi16(w, 4), _mm256_slli_epi16(w, 8)) : _mm256_or_si256(w, _mm256_slli_epi16(w, 4)), nib);
    const __m256i tl = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.lo[s0]))),
                                               _mm_load_si128(reinterpret_cast<const __m128i*>(t.lo[s1])), 1);
    const __m256i th = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[s0]))),
                                               _mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[s1])), 1);
    const __m256i L = _mm256_shuffle_epi8(tl, idx), H = _mm256_shuffle_epi8(th, idx);  // per lane: the block's 16 values' bytes
    const __m256i e0 = _mm256_unpacklo_epi8(L, H), e1 = _mm256_unpackhi_epi8(L, H);       // per lane: values 0..7, 8..15
    __m128i* dst = reinterpret_cast<__m128i*>(yrow + c * 16);                             // block c: dst[0..1], c+1: dst[2..3]
    _mm_storeu_si128(dst + 0, _mm256_castsi256_si128(e0));
    _mm_storeu_si128(dst + 1, _mm256_castsi256_si128(e1));
    _mm_storeu_si128(dst + 2, _mm256_extracti128_si256(e0, 1));
    _mm_storeu_si128(dst + 3, _mm256_extracti128_si256(e1, 1));
  }
  nvfp4_row_scalar(prow, sc, t, c, C, fault, yrow);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593: _mm512_undefined_epi32 at -O3
#pragma GCC diagnostic ignored "-Wuninitialized"
// AVX-512BW, two blocks per step through one vpermw: block c's 16 values in the low half of the table register,
// block c+1's in the high half. Packed byte j widens to a dword b | b << 12 (element 2j's code in the low word's
// bits 0..3, element 2j+1's in the high word's; b >> 4 | b << 16 under the nibble-order fault), masked to those
// bits, with bit 4 set in the second block's words to pick its half. The same table entries as the scalar row.
__attribute__((target("avx512f,avx512bw,avx2"))) void nvfp4_row_avx512(const uint8_t* prow, const Nvfp4Scales& sc, const Nvfp4Table& t, int C, int fault, uint16_t* yrow) {
  const bool swap = fault == LD_FAULT_NIBBLE_SWAP;
  const __m512i nib = _mm512_set1_epi32(0x000F000F);
  const __m512i half = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(0x00100010), 1);
  int c = 0;
  for (; c + 2 <= C; c += 2) {
    const __m512i tab = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(t.f16[sc(c)]))),
                                           _mm256_load_si256(reinterpret_cast<const __m256i*>(t.f16[sc(c + 1)])), 1);
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(prow + c * 8)));
    const __m512i codes = swap ? _mm512_or_si512(_mm512_srli_epi32(b, 4), _mm512_slli_epi32(b, 16)) : _mm512_or_si512(b, _mm512_slli_epi32(b, 12));
    const __m512i idx = _mm512_or_si512(_mm512_and_si512(codes, nib), half);
    _mm512_storeu_si512(yrow + c * 16, _mm512_permutexvar_epi16(idx, tab));
  }
  nvfp4_row_scalar(prow, sc, t, c, C, fault, yrow);
}


// The same with AVX-512 VBMI: a step's 16 packed bytes zero-extended a word to a qword (bytes p, p + 1), and one
// vpmultishiftqb takes each element's code from its bit offset into its word's low byte: 0 (p's low nibble, the
// even element), 4, 8, 12 (4, 0, 12, 8 under the nibble-order fault); masked to bits 0..3 and bit 4 set for the
// second block as above.
__attribute__((target("avx512f,avx512bw,avx512vbmi,avx2"))) void nvfp4_row_vbmi(const uint8_t* prow, const Nvfp4Scales& sc, const Nvfp4Table& t, int C, int fault, uint16_t* yrow) {
  const __m512i at = _mm512_set1_epi64(fault == LD_FAULT_NIBBLE_SWAP ? 0x0008000C00000004LL : 0x000C000800040000LL);
  const __m512i nib = _mm512_set1_epi32(0x000F000F);
  const __m512i half = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(0x00100010), 1);
  const Nvfp4Scales s = sc;  // a copy: the stores below (vectors may alias anything) would reload its fields each pair
  int c = 0;
  for (; c + 2 <= C; c += 2) {
    const __m512i tab = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(t.f16[s(c)]))),
                                           _mm256_load_si256(reinterpret_cast<const __m256i*>(t.f16[s(c + 1)])), 1);
    const __m512i codes = _mm512_multishift_epi64_epi8(at, _mm512_cvtepu16_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(prow + c * 8))));
    const __m512i idx = _mm512_ternarylogic_epi32(codes, nib, half, 0xEA);  // (codes & nib) | half
    _mm512_storeu_si512(yrow + c * 16, _mm512_permutexvar_epi16(idx, tab));
  }
  nvfp4_row_scalar(prow, sc, t, c, C, fault, yrow);
}

#pragma GCC diagnostic pop

// Row o of an NVFP4 weight [out, in] (prow: its packed bytes) → yrow [in] f16 bits, at the SIMD level g_simd picks.
void nvfp4_row(const uint8_t* prow, const uint8_t* scales, const Nvfp4Table& t, int out, int in, int o, int fault, uint16_t* yrow) {
  static const bool bw = __builtin_cpu_supports("avx512bw");
  const int C = in / 16;
  const Nvfp4Scales sc(scales, out, C, o, fault);
  if (simd_vbmi()) nvfp4_row_vbmi(prow, sc, t, C, fault, yrow);
  else if (g_simd == Simd::Avx512 && bw) nvfp4_row_avx512(prow, sc, t, C, fault, yrow);
  else if (g_avx2) nvfp4_row_avx2(prow, sc, t, C, fault, yrow);
  else nvfp4_row_scalar(prow, sc, t, 0, C, fault, yrow);
}

void dequant_nvfp4(const uint8_t* packed, const uint8_t* scales, int out, int in, float global, int divisor, int fault,
                   uint16_t* y) {
  const Nvfp4Table t(global, divisor, fault);
#pragma omp parallel for schedule(static) if ((long long)out * in >= (1 << 15))
  for (int o = 0; o < out; o++) nvfp4_row(packed + (size_t)o * (in / 2), scales, t, out, in, o, fault, y + (size_t)o * in);
}

// The weights-first check's row source for an NVFP4 weight (harness/contracts/ld_row_source.h, as dequant.cc's for
// dequantToF16's formats): the same row function as dequantNvfp4ToF16, pulled by the reference's compare, so the
// device's FP16 tensor is never materialised.
struct Nvfp4SourceState {
  LdRowSource src;
  ops::DequantNvfp4ToF16Args a;
  Nvfp4Table t;
  explicit Nvfp4SourceState(const ops::DequantNvfp4ToF16Args& args) : src{}, a(args), t(args.globalScale, args.globalIsDivisor ? 1 : 0, args.fault) {}
};

void nvfp4_rows_from(const LdRowSource* self, const uint8_t* weight, int64_t row0, int64_t n, uint16_t* dst) {
  const Nvfp4SourceState* st = static_cast<const Nvfp4SourceState*>(self->state);
  const ops::DequantNvfp4ToF16Args& a = st->a;
  for (int64_t r = 0; r < n; r++) nvfp4_row(weight + (size_t)r * (a.inDim / 2), a.scale.data, st->t, a.out, a.inDim, (int)(row0 + r), a.fault, dst + (size_t)r * a.inDim);
}

void nvfp4_rows(const LdRowSource* self, int64_t row0, int64_t n, uint16_t* dst) {
  const Nvfp4SourceState* st = static_cast<const Nvfp4SourceState*>(self->state);
  nvfp4_rows_from(self, st->a.weight.data + (size_t)row0 * (st->a.inDim / 2), row0, n, dst);
}

// One bitsandbytes block's 16 values (ld_bnb4_value_f16 of each code at absmax a), and their low and high bytes.
struct Bnb4Block {
  alignas(32) uint16_t f16[16];
  alignas(16) uint8_t lo[16];
  alignas(16) uint8_t hi[16];
};

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593
#pragma GCC diagnostic ignored "-Wuninitialized"
// A bitsandbytes block's absmax, as ld_bnb4_absmax forms it (double-dequantized when stored as codes).
struct Bnb4Absmax {
  const uint8_t* absmax;
  int absmax_is_codes;
  const float* nested_absmax;
  const float* nested_map;
  float nested_offset;
  int nested_blocksize;
  int fault;
  float operator()(long long b) const {
    return ld_bnb4_absmax(absmax, absmax_is_codes, nested_absmax, nested_map, nested_offset, nested_blocksize, (size_t)b, fault);
  }
};

// A bitsandbytes block's 16 values with AVX-512: one f32 multiply of the codes' values by its absmax a and one
// vcvtps2ph (ld_f32_to_f16 for every non-NaN product, as f16_products; a NaN product through the scalar rule),
// held in both halves of a register, so a vpermw index needs only its low 4 bits right.
__attribute__((target("avx512f,avx512bw,avx2,f16c"), always_inline)) inline __m512i bnb4_block_table_avx512(const __m512 codes, const float* code, float a) {
  const __m512 p = _mm512_mul_ps(codes, _mm512_set1_ps(a));
  __m256i h = _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  if (_mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q) != 0) {
    alignas(32) uint16_t t[16];
    for (int c = 0; c < 16; c++) t[c] = ld_f32_to_f16(code[c] * a);
    h = _mm256_load_si256(reinterpret_cast<const __m256i*>(t));
  }
  return _mm512_broadcast_i64x4(h);
}

// Blocks [b0, b1) of a bitsandbytes weight whose block size is a multiple of 32, with AVX-512BW, 32 values a step
// (bnb4_block_table_avx512's tables, as mxfp4_row_avx512): b >> 4 | b << 16 puts element 2j's code (the high
// nibble) in the low word's bits 0..3 and element 2j+1's in the high word's (b | b << 12 under the nibble-order
// fault). The same values as the scalar loop. pb: block b0's packed bytes; y: its first value.
__attribute__((target("avx512f,avx512bw,avx2,f16c"))) void bnb4_blocks_avx512(const uint8_t* pb0, const Bnb4Absmax& am, const float* code, long long b0,
                                                                               long long b1, int blocksize, bool swap, uint16_t* y) {
  const Bnb4Absmax a = am;  // a copy: the stores below (vectors may alias anything) would reload its fields each block
  const __m512 codes = _mm512_loadu_ps(code);
  for (long long b = b0; b < b1; b++) {
    const __m512i tab = bnb4_block_table_avx512(codes, code, a(b));
    const uint8_t* pb = pb0 + (size_t)(b - b0) * (size_t)(blocksize / 2);
    uint16_t* yb = y + (size_t)(b - b0) * (size_t)blocksize;
    for (int q = 0; q < blocksize / 32; q++) {
      const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + q * 16)));
      const __m512i idx = swap ? _mm512_or_si512(v, _mm512_slli_epi32(v, 12)) : _mm512_or_si512(_mm512_srli_epi32(v, 4), _mm512_slli_epi32(v, 16));
      _mm512_storeu_si512(yb + q * 32, _mm512_permutexvar_epi16(idx, tab));
    }
  }
}

// 32 values of a block (p: their packed bytes) looked up in its table by the indices `at` makes (below) into y.
__attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) inline void bnb4_step_vbmi(const __m512i at, const __m512i tab, const uint8_t* p, uint16_t* y) {
  const __m512i idx = _mm512_multishift_epi64_epi8(at, _mm512_cvtepu16_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  _mm512_storeu_si512(y, _mm512_permutexvar_epi16(idx, tab));
}

// The same with AVX-512 VBMI: a step's 16 packed bytes zero-extended a word to a qword (bytes p, p + 1), and one
// vpmultishiftqb takes each element's code from its bit offset into its word's low byte: 4 (p's high nibble, the
// even element), 0, 12, 8 (0, 4, 8, 12 under the nibble-order fault). Bit 4 then holds the next nibble's low bit,
// which picks between the table's two equal halves.
__attribute__((target("avx512f,avx512bw,avx512vbmi,avx2,f16c"))) void bnb4_blocks_vbmi(const uint8_t* pb0, const Bnb4Absmax& am, const float* code, long long b0,
                                                                                         long long b1, int blocksize, bool swap, uint16_t* y) {
  const Bnb4Absmax a = am;  // a copy: the stores below (vectors may alias anything) would reload its fields each block
  const __m512 codes = _mm512_loadu_ps(code);
  const __m512i at = _mm512_set1_epi64(swap ? 0x000C000800040000LL : 0x0008000C00000004LL);
  for (long long b = b0; b < b1; b++) {
    const __m512i tab = bnb4_block_table_avx512(codes, code, a(b));
    const uint8_t* pb = pb0 + (size_t)(b - b0) * (size_t)(blocksize / 2);
    uint16_t* yb = y + (size_t)(b - b0) * (size_t)blocksize;
    if (blocksize == 64) {  // bitsandbytes' default, its loop unrolled
      bnb4_step_vbmi(at, tab, pb, yb);
      bnb4_step_vbmi(at, tab, pb + 16, yb + 32);
    } else {
      for (int q = 0; q < blocksize / 32; q++) bnb4_step_vbmi(at, tab, pb + q * 16, yb + q * 32);
    }
  }
}
#pragma GCC diagnostic pop

// The same 32 values at a time with AVX2's byte lookups (the table's low and high bytes, one 128-bit lane each).
__attribute__((target("avx2"))) void bnb4_span_avx2(const uint8_t* p, const Bnb4Block& t, size_t n32, bool swap, uint16_t* y) {
  const __m128i tl = _mm_load_si128(reinterpret_cast<const __m128i*>(t.lo)), th = _mm_load_si128(reinterpret_cast<const __m128i*>(t.hi));
  const __m128i m0f = _mm_set1_epi8(0x0F);
  for (size_t q = 0; q < n32; q++) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + q * 16));
    const __m128i high = _mm_and_si128(_mm_srli_epi16(b, 4), m0f), low = _mm_and_si128(b, m0f);
    lookup32_bytes(swap ? low : high, swap ? high : low, tl, th, y + q * 32);
  }
}

// Blocks [b0, b1) of a bitsandbytes weight whose block size is a multiple of 64, with AVX2, 64 values a step (where
// bnb4_span_avx2 takes 32 with 128-bit shuffles): the block's table made in registers (f16_products' multiply and
// vcvtps2ph, a NaN product through the scalar rule) and split into its low and high bytes, each in both lanes. One
// vpermd puts the step's packed dwords 0, 2, 4, 6 in the low lane and 1, 3, 5, 7 in the high, so that the in-lane
// byte unpacks of codes, then of looked-up bytes, give the 64 values in order (elements 0..15, 16..31, 32..47,
// 48..63, one store each). The same values as bnb4_span_avx2.
__attribute__((target("avx2,f16c"))) void bnb4_blocks_avx2(const uint8_t* pb0, const Bnb4Absmax& am, const float* code, long long b0, long long b1,
                                                           int blocksize, bool swap, uint16_t* y) {
  const Bnb4Absmax a = am;  // a copy: the stores below (vectors may alias anything) would reload its fields each block
  const __m256 c0 = _mm256_loadu_ps(code), c1 = _mm256_loadu_ps(code + 8);
  const __m128i split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m256i order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7), m0f = _mm256_set1_epi8(0x0F);
  for (long long b = b0; b < b1; b++) {
    const float ab = a(b);
    const __m256 va = _mm256_set1_ps(ab);
    const __m256 p0 = _mm256_mul_ps(c0, va), p1 = _mm256_mul_ps(c1, va);
    __m128i h0 = _mm256_cvtps_ph(p0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), h1 = _mm256_cvtps_ph(p1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (_mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(p0, p0, _CMP_UNORD_Q), _mm256_cmp_ps(p1, p1, _CMP_UNORD_Q))) != 0) {
      alignas(16) uint16_t t[16];
      for (int c = 0; c < 16; c++) t[c] = ld_f32_to_f16(code[c] * ab);
      h0 = _mm_load_si128(reinterpret_cast<const __m128i*>(t)), h1 = _mm_load_si128(reinterpret_cast<const __m128i*>(t + 8));
    }
    // [low bytes of values 0..7 | their high bytes], the same for 8..15; then all 16 low bytes, all 16 high bytes
    const __m128i s0 = _mm_shuffle_epi8(h0, split), s1 = _mm_shuffle_epi8(h1, split);
    const __m256i tl = _mm256_broadcastsi128_si256(_mm_unpacklo_epi64(s0, s1)), th = _mm256_broadcastsi128_si256(_mm_unpackhi_epi64(s0, s1));
    const uint8_t* pb = pb0 + (size_t)(b - b0) * (size_t)(blocksize / 2);
    uint16_t* yb = y + (size_t)(b - b0) * (size_t)blocksize;
    for (int q = 0; q < blocksize / 64; q++) {
      const __m256i v = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + q * 32)), order);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(v, 4), m0f), low = _mm256_and_si256(v, m0f);
      const __m256i ev = swap ? low : high, od = swap ? high : low;  // the element each byte puts first, and the other
      __m256i* dst = reinterpret_cast<__m256i*>(yb + q * 64);
      const auto store32 = [&](__m256i idx, __m256i* out) __attribute__((target("avx2"))) {
        const __m256i L = _mm256_shuffle_epi8(tl, idx), H = _mm256_shuffle_epi8(th, idx);
        _mm256_storeu_si256(out, _mm256_unpacklo_epi8(L, H));
        _mm256_storeu_si256(out + 1, _mm256_unpackhi_epi8(L, H));
      };
      store32(_mm256_unpacklo_epi8(ev, od), dst);
      store32(_mm256_unpackhi_epi8(ev, od), dst + 2);
    }
  }
}

// bitsandbytes 4-bit (spec/fp4-formats.md §5): one block of `blocksize` flat elements at a time; its absmax
// (double-dequantized when stored as codes) is formed once and the block's 16 values looked up. With AVX-512BW and a
// block size that is a multiple of 32 (bitsandbytes' are powers of two from 32), every whole block runs through
// bnb4_blocks_vbmi (where simd_vbmi) or bnb4_blocks_avx512; with AVX2 and a multiple of 64, bnb4_blocks_avx2; otherwise the block's table is built by f16_products and its values looked up 32 at a time with
// AVX2 from an even element on, the rest (a block size off 32, the last block's tail and padding nibble) one at a time.
void dequant_bnb4(const uint8_t* packed, const uint8_t* absmax, int absmax_is_codes, const float* quant_map, const float* nested_absmax,
                  const float* nested_map, float nested_offset, int nested_blocksize, size_t n, int blocksize, int fault, uint16_t* y) {
  const long long nblocks = (long long)((n + blocksize - 1) / blocksize);
  const Bnb4Absmax am{absmax, absmax_is_codes, nested_absmax, nested_map, nested_offset, nested_blocksize, fault};
  alignas(64) float code[16];
  for (int c = 0; c < 16; c++) code[c] = fault == LD_FAULT_CODE_TABLE ? ld_element_to_f32(LD_ELEM_E2M1, c) : quant_map[c];
  static const bool bw = __builtin_cpu_supports("avx512bw");
  const bool swap = fault == LD_FAULT_NIBBLE_SWAP;
  long long first = 0;  // the blocks before it are done
  if (g_simd == Simd::Avx512 && bw && blocksize % 32 == 0) {
    const long long whole = (long long)(n / (size_t)blocksize), chunk = 256;
#pragma omp parallel for schedule(static) if (n >= (1 << 15))
    for (long long b0 = 0; b0 < whole; b0 += chunk) {
      (simd_vbmi() ? bnb4_blocks_vbmi : bnb4_blocks_avx512)(packed + (size_t)b0 * (blocksize / 2), am, code, b0, std::min(whole, b0 + chunk), blocksize, swap, y + (size_t)b0 * blocksize);
    }
    first = whole;
  } else if (g_avx2 && blocksize % 64 == 0) {
    const long long whole = (long long)(n / (size_t)blocksize), chunk = 256;
#pragma omp parallel for schedule(static) if (n >= (1 << 15))
    for (long long b0 = 0; b0 < whole; b0 += chunk) {
      bnb4_blocks_avx2(packed + (size_t)b0 * (blocksize / 2), am, code, b0, std::min(whole, b0 + chunk), blocksize, swap, y + (size_t)b0 * blocksize);
    }
    first = whole;
  }
#pragma omp parallel for schedule(static) if ((size_t)(nblocks - first) * blocksize >= (1 << 15))
  for (long long b = first; b < nblocks; b++) {
    Bnb4Block t;
    f16_products(code, am(b), 16, t.f16);  // ld_bnb4_value_f16 of each code
    size_t j = (size_t)b * blocksize;
    const size_t j1 = std::min(n, (size_t)(b + 1) * blocksize);
    if (g_avx2 && j % 2 == 0) {
      const size_t n32 = (j1 - j) / 32;
      split_bytes(t.f16, 16, t.lo, t.hi);
      bnb4_span_avx2(packed + j / 2, t, n32, swap, y + j);
      j += n32 * 32;
    }
    for (; j < j1; j++) y[j] = t.f16[ld_bnb4_code(packed, j, fault)];
  }
}

// Blocks [b0, b1) of a bitsandbytes weight of an even block size (each block starts on a byte) into y, from block
// b0's first value; pb: block b0's packed bytes. The kernels and order of dequant_bnb4 for those blocks, so the
// same bits (for the row source, whose rows hold whole blocks).
void bnb4_whole_blocks(const uint8_t* pb, const Bnb4Absmax& am, const float* code, long long b0, long long b1, int blocksize, int fault, uint16_t* y) {
  static const bool bw = __builtin_cpu_supports("avx512bw");
  const bool swap = fault == LD_FAULT_NIBBLE_SWAP;
  if (g_simd == Simd::Avx512 && bw && blocksize % 32 == 0) return (simd_vbmi() ? bnb4_blocks_vbmi : bnb4_blocks_avx512)(pb, am, code, b0, b1, blocksize, swap, y);
  if (g_avx2 && blocksize % 64 == 0) return bnb4_blocks_avx2(pb, am, code, b0, b1, blocksize, swap, y);
  for (long long b = b0; b < b1; b++) {
    Bnb4Block t;
    f16_products(code, am(b), 16, t.f16);  // ld_bnb4_value_f16 of each code
    const uint8_t* p = pb + (size_t)(b - b0) * (blocksize / 2);
    uint16_t* yb = y + (size_t)(b - b0) * blocksize;
    size_t k = 0;
    if (g_avx2) {
      const size_t n32 = (size_t)blocksize / 32;
      split_bytes(t.f16, 16, t.lo, t.hi);
      bnb4_span_avx2(p, t, n32, swap, yb);
      k = n32 * 32;
    }
    for (; k < (size_t)blocksize; k++) yb[k] = t.f16[ld_bnb4_code(p, k, fault)];  // k's parity is the flat index's
  }
}

// The weights-first check's row source for a bitsandbytes weight whose rows hold whole blocks (in a multiple of an
// even block size: every bitsandbytes checkpoint's linears), as dequantBnb4ToF16 decodes them. The small tables
// (code values under the fault, the nested absmax and map) are copied in; the weight and absmax stay referenced.
struct Bnb4SourceState {
  LdRowSource src;
  ops::DequantBnb4ToF16Args a;
  std::vector<float> nested_absmax, nested_map;
  alignas(64) float code[16];
  Bnb4Absmax am;
  long long per_row;  // blocks a row
  explicit Bnb4SourceState(const ops::DequantBnb4ToF16Args& args)
      : src{}, a(args), nested_absmax(args.nestedAbsmax.data, args.nestedAbsmax.data + args.nestedAbsmax.len),
        nested_map(args.nestedQuantMap.data, args.nestedQuantMap.data + args.nestedQuantMap.len),
        am{args.absmax.data, args.absmaxIsCodes ? 1 : 0, nested_absmax.data(), nested_map.data(), args.nestedOffset, (int)args.nestedBlocksize, (int)args.fault},
        per_row(args.inDim / args.blocksize) {
    for (int c = 0; c < 16; c++) code[c] = a.fault == LD_FAULT_CODE_TABLE ? ld_element_to_f32(LD_ELEM_E2M1, c) : a.quantMap.data[c];
    // the arrays copied above are not referenced by the External: no pointer into them is kept
    a.quantMap = {nullptr, 0}, a.nestedAbsmax = {nullptr, 0}, a.nestedQuantMap = {nullptr, 0};
  }
};

void bnb4_rows_from(const LdRowSource* self, const uint8_t* weight, int64_t row0, int64_t n, uint16_t* dst) {
  const Bnb4SourceState* st = static_cast<const Bnb4SourceState*>(self->state);
  bnb4_whole_blocks(weight, st->am, st->code, row0 * st->per_row, (row0 + n) * st->per_row, (int)st->a.blocksize, (int)st->a.fault, dst);
}

void bnb4_rows(const LdRowSource* self, int64_t row0, int64_t n, uint16_t* dst) {
  const Bnb4SourceState* st = static_cast<const Bnb4SourceState*>(self->state);
  bnb4_rows_from(self, st->a.weight.data + (size_t)row0 * (st->a.inDim / 2), row0, n, dst);
}

}  // namespace

// nvfp4RowSource(dequantNvfp4ToF16's arguments) → an External LdRowSource (type-tagged), holding references to the
// weight and scale arrays so they live as long as it does.
Napi::Value nvfp4_row_source(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  auto* st = new Nvfp4SourceState(ops::read_dequantNvfp4ToF16(info, "nvfp4RowSource"));
  st->src = LdRowSource{nvfp4_rows, nvfp4_rows_from, st->a.out, st->a.inDim, st};
  return row_source_external(env, &st->src, [](void* p) { delete static_cast<Nvfp4SourceState*>(p); }, st, info[0], info[1], "nvfp4RowSource");
}

// bnb4RowSource(dequantBnb4ToF16's arguments) → an External LdRowSource (type-tagged) over a weight whose rows hold
// whole blocks of an even size, holding references to the weight and absmax arrays.
Napi::Value bnb4_row_source(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  const ops::DequantBnb4ToF16Args a = ops::read_dequantBnb4ToF16(info, "bnb4RowSource");
  if (a.blocksize % 2 != 0 || a.inDim % a.blocksize != 0) {
    throw Napi::RangeError::New(env, "bnb4RowSource: rows must hold whole blocks of an even size (in " + std::to_string(a.inDim) + ", blocksize " + std::to_string(a.blocksize) + ")");
  }
  auto* st = new Bnb4SourceState(a);
  st->src = LdRowSource{bnb4_rows, bnb4_rows_from, st->a.out, st->a.inDim, st};
  return row_source_external(env, &st->src, [](void* p) { delete static_cast<Bnb4SourceState*>(p); }, st, info[0], info[1], "bnb4RowSource");
}

// The fused NVFP4 and bitsandbytes GEMMs: the format's row source over the weight (the rows of its dequantization,
// the same row functions), multiplied by gemm_rows_f16 a unit of rows at a time, so no f16 copy of W is made.
void emu::gemmNvfp4F16(const ops::GemmNvfp4F16Args& a, ops::GemmNvfp4F16Out& o) {
  Nvfp4SourceState st(ops::DequantNvfp4ToF16Args{a.weight, a.scale, a.n, a.k, a.globalScale, a.globalIsDivisor, a.fault});
  st.src = LdRowSource{nvfp4_rows, nvfp4_rows_from, a.n, a.k, &st};
  gemm_rows_f16(a.x.data, st.src, a.m, a.alpha, o.y.Data());
}

void emu::gemmBnb4F16(const ops::GemmBnb4F16Args& a, ops::GemmBnb4F16Out& o) {
  Bnb4SourceState st(ops::DequantBnb4ToF16Args{a.weight, a.absmax, a.absmaxIsCodes, a.quantMap, a.nestedAbsmax, a.nestedQuantMap, a.nestedOffset,
                                               a.nestedBlocksize, a.n, a.k, a.blocksize, a.fault});
  st.src = LdRowSource{bnb4_rows, bnb4_rows_from, a.n, a.k, &st};
  gemm_rows_f16(a.x.data, st.src, a.m, a.alpha, o.y.Data());
}

void emu::dequantNvfp4ToF16(const ops::DequantNvfp4ToF16Args& a, ops::DequantNvfp4ToF16Out& o) {
  dequant_nvfp4(a.weight.data, a.scale.data, a.out, a.inDim, a.globalScale, a.globalIsDivisor ? 1 : 0, a.fault, o.y.Data());
}

void emu::dequantBnb4ToF16(const ops::DequantBnb4ToF16Args& a, ops::DequantBnb4ToF16Out& o) {
  dequant_bnb4(a.weight.data, a.absmax.data, a.absmaxIsCodes ? 1 : 0, a.quantMap.data, a.nestedAbsmax.data, a.nestedQuantMap.data, a.nestedOffset,
               a.nestedBlocksize, (size_t)a.out * a.inDim, a.blocksize, a.fault, o.y.Data());
}

}  // namespace ld
