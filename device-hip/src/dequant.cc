// Weight dequantization to f16, as the MI250 path does once per weight before its FP16 GEMMs.
//   kind 0 mxfp4:     packed bytes [out, in/2] (low nibble = even i) + E8M0 scales [out, in/32]
//   kind 1 fp8-block: E4M3 bytes [out, in] + scales [ceil(out/bo), ceil(in/bi)], E8M0 bytes or LE f32
//   kind 2/3/4:       bf16 / f16 / f32 little-endian bytes [out, in]
// Every value comes from the ld_numerics.h element functions. The MXFP4 path evaluates
// ld_mxfp4_value_f16 once per (scale byte, nibble) into a 256×16 table and then only looks values up:
// an element's f16 depends on nothing else, so this is the element function, made fast.
#include <immintrin.h>
#include <omp.h>

#include <cstring>
#include <utility>

#include "addon.h"
#include "ld_numerics.h"

namespace ld {
namespace {

enum Kind { MXFP4 = 0, FP8 = 1, BF16 = 2, F16 = 3, F32 = 4 };

// f16 bits of every (scale byte, nibble) pair, split into low and high bytes for pshufb lookups.
struct Mxfp4Table {
  alignas(16) uint8_t lo[256][16];
  alignas(16) uint8_t hi[256][16];
  explicit Mxfp4Table(int fault) {
    for (int s = 0; s < 256; s++) {
      for (int c = 0; c < 16; c++) {
        const uint16_t h = ld_mxfp4_value_f16(c, (uint8_t)s, fault);
        lo[s][c] = (uint8_t)(h & 0xFF);
        hi[s][c] = (uint8_t)(h >> 8);
      }
    }
  }
};

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

__attribute__((target("avx2,fma,f16c"))) void mxfp4_row_avx2(const uint8_t* prow, const uint8_t* scales,
                                                             const Mxfp4Table& t, int out, int in, int o, int fault,
                                                             uint16_t* y) {
  const int C = in / 32;
  const bool swap = fault == LD_FAULT_NIBBLE_SWAP;
  const __m128i m0f = _mm_set1_epi8(0x0F);
  for (int c = 0; c < C; c++) {
    const uint8_t sb = *mx_scale_row(scales, out, C, o, c, fault);
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(prow + c * 16));
    __m128i ev = _mm_and_si128(b, m0f), od = _mm_and_si128(_mm_srli_epi16(b, 4), m0f);
    if (swap) std::swap(ev, od);
    const __m128i tl = _mm_load_si128(reinterpret_cast<const __m128i*>(t.lo[sb]));
    const __m128i th = _mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[sb]));
    const __m128i idx[2] = {_mm_unpacklo_epi8(ev, od), _mm_unpackhi_epi8(ev, od)};  // element order 0..15, 16..31
    __m128i* dst = reinterpret_cast<__m128i*>(y + c * 32);
    for (int q = 0; q < 2; q++) {
      const __m128i L = _mm_shuffle_epi8(tl, idx[q]), H = _mm_shuffle_epi8(th, idx[q]);
      _mm_storeu_si128(dst + 2 * q, _mm_unpacklo_epi8(L, H));
      _mm_storeu_si128(dst + 2 * q + 1, _mm_unpackhi_epi8(L, H));
    }
  }
}

void dequant_mxfp4(const uint8_t* packed, const uint8_t* scales, int out, int in, int fault, uint16_t* y) {
  const Mxfp4Table t(fault);
  const bool avx2 = g_avx2;
#pragma omp parallel for schedule(static)
  for (int o = 0; o < out; o++) {
    const uint8_t* prow = packed + (size_t)o * (in / 2);
    uint16_t* yrow = y + (size_t)o * in;
    if (avx2) mxfp4_row_avx2(prow, scales, t, out, in, o, fault, yrow);
    else mxfp4_row_scalar(prow, scales, t, out, in, o, fault, yrow);
  }
}

void dequant_fp8(const uint8_t* w, const uint8_t* scales, bool f32s, int out, int in, int bo, int bi, int fault,
                 uint16_t* y) {
  const size_t R = (size_t)((out + bo - 1) / bo), C = (size_t)((in + bi - 1) / bi);
#pragma omp parallel for schedule(static)
  for (int o = 0; o < out; o++) {
    for (size_t c = 0; c < C; c++) {
      const float s = ld_fp8_scale(scales, f32s, R, C, (size_t)(o / bo), c, fault);
      const size_t i1 = (c + 1) * bi < (size_t)in ? (c + 1) * bi : (size_t)in;
      for (size_t i = c * bi; i < i1; i++) y[(size_t)o * in + i] = ld_fp8_value_f16(w[(size_t)o * in + i], s);
    }
  }
}

void dequant_plain(Kind kind, const uint8_t* b, size_t n, uint16_t* y) {
  const long long nn = (long long)n;
  if (kind == F16) {
    std::memcpy(y, b, n * 2);  // little-endian host: the stored bytes are the f16 bits
    return;
  }
#pragma omp parallel for schedule(static) if (n >= (1 << 15))
  for (long long i = 0; i < nn; i++) {
    y[i] = kind == BF16 ? ld_bf16_to_f16((uint16_t)(b[2 * i] | (b[2 * i + 1] << 8))) : ld_f32_to_f16(ld_load_f32le(b + 4 * i));
  }
}

Napi::Value dequant(const Napi::CallbackInfo& info) {
  const char* fn = "dequantToF16";
  const Napi::Env env = info.Env();
  need_args(info, 9, fn);
  const int kind = arg_int(info, 0, fn, "kind", 0);
  if (kind > F32) throw_range(env, std::string(fn) + ": kind must be 0..4 (mxfp4, fp8-block, bf16, f16, f32), got " + std::to_string(kind));
  const bool f32s = arg_bool(info, 3, fn, "scaleIsF32");
  const int out = arg_int(info, 4, fn, "out", 1), in = arg_int(info, 5, fn, "in", 1);
  const int bo = arg_int(info, 6, fn, "blockOut", 1), bi = arg_int(info, 7, fn, "blockIn", 1);
  const int fault = arg_int(info, 8, fn, "fault", 0);
  if (fault >= LD_FAULT_COUNT) throw_range(env, std::string(fn) + ": fault must be 0.." + std::to_string(LD_FAULT_COUNT - 1) + ", got " + std::to_string(fault));
  const size_t count = (size_t)out * in;
  const std::string shape = dims({out, in});
  const bool has_scale = !info[2].IsNull() && !info[2].IsUndefined();

  if (kind == MXFP4) {
    if (in % 32 != 0) throw_range(env, std::string(fn) + ": mxfp4 weight " + shape + ": in must be a multiple of 32");
    if (bo != 1 || bi != 32) throw_range(env, std::string(fn) + ": mxfp4 block must be [1, 32], got " + dims({bo, bi}));
    if (!has_scale || f32s) throw_type(env, std::string(fn) + ": mxfp4 weight " + shape + " needs E8M0 scale bytes (scaleIsF32 false)");
    auto w = arg_array_len<uint8_t>(info, 1, fn, "weight", count / 2, "packed " + dims({out, in / 2}));
    auto s = arg_array_len<uint8_t>(info, 2, fn, "scale", count / 32, "E8M0 " + dims({out, in / 32}));
    auto y = new_array<uint16_t>(env, count);
    dequant_mxfp4(w.data, s.data, out, in, fault, y.Data());
    return y;
  }
  if (kind == FP8) {
    if (!has_scale) throw_type(env, std::string(fn) + ": fp8-block weight " + shape + " needs a scale");
    const long long R = (out + (long long)bo - 1) / bo, C = (in + (long long)bi - 1) / bi;
    auto w = arg_array_len<uint8_t>(info, 1, fn, "weight", count, "E4M3 " + shape);
    auto s = arg_array_len<uint8_t>(info, 2, fn, "scale", (size_t)(R * C) * (f32s ? 4 : 1),
                                    std::string(f32s ? "4 bytes × F32 " : "E8M0 ") + dims({R, C}));
    auto y = new_array<uint16_t>(env, count);
    dequant_fp8(w.data, s.data, f32s, out, in, bo, bi, fault, y.Data());
    return y;
  }
  if (has_scale) throw_type(env, std::string(fn) + ": plain weight " + shape + " takes no scale (pass null)");
  const size_t esz = kind == F32 ? 4 : 2;
  auto w = arg_array_len<uint8_t>(info, 1, fn, "weight", count * esz,
                                  std::to_string(esz) + " bytes × " + shape);
  auto y = new_array<uint16_t>(env, count);
  dequant_plain(static_cast<Kind>(kind), w.data, count, y.Data());
  return y;
}

}  // namespace

void init_dequant(Napi::Env env, Napi::Object exports) { exports.Set("dequantToF16", Napi::Function::New(env, dequant)); }

}  // namespace ld
