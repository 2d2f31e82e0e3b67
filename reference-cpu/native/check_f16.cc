// The weights-first check's compare loop (harness/weights/check.ts), fused with the reference's exact decode:
// row by row, decode the stored weight exactly (exact_row, dequant_exact.cc), round each value once to FP16
// with the reference side's own rounding (below, from IEEE 754: nearest, ties to even, subnormals, overflow to
// Inf — the rule of harness/formats/dtypes.ts f32ToF16Bits, not device-hip's), and compare with the device's
// FP16 weights. No FP32 copy of the tensor exists: each thread holds one decoded row.
//
// Per element, exactly as the TypeScript loop it replaces (kept in check.ts's comments and tested against it):
//   value-equal (f16(d) == r)            → fine (covers ±0 and every exact, FP16-representable value)
//   h = round_f16(r); h is ±Inf          → the block overflows FP16; r ≠ 0 and h is ±0 → the block underflows
//   d is Inf/NaN                         → counted in nonFinite
//   same FP16 (bits, ±0, or both NaN)    → fine; otherwise the block is bad, |f16(d) − f16(h)| enters max_abs
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include <cerrno>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <immintrin.h>

#include "dequant_exact.h"
#include "huge_map.h"
#include "simd_level.h"
#include "ld_row_source.h"

namespace {

// float32 → binary16 bits, round to nearest even (IEEE 754 §4.3.1), overflow to Inf, subnormals kept.
uint16_t round_f16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t sign = (u >> 16) & 0x8000;
  const int exp = static_cast<int>((u >> 23) & 0xff);
  uint32_t mant = u & 0x7fffff;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mant != 0 ? 0x200 : 0));
  const int e = exp - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    mant |= 0x800000;
    const int shift = 14 - e;
    const uint32_t half = 1u << (shift - 1), rest = mant & ((1u << shift) - 1);
    uint32_t q = mant >> shift;
    if (rest > half || (rest == half && (q & 1))) q += 1;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t q = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (q & 1))) q += 1;  // a carry into the exponent is correct
  return static_cast<uint16_t>(sign | q);
}

// The CPU's vector extensions (the SIMD level in use is reference_simd(), simd_level.h).
bool g_avx2 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
}();
bool g_avx512bw = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512bw") != 0;
}();

// round_f16 on 16 (AVX-512F) or 8 (AVX2) float32 lanes at once, from the same definition, the cases as lane masks:
// a normal result (e = exp − 112 ≥ 1) keeps mant >> 13 under exponent e; a subnormal one (e ≤ 0) is the
// significand with its implicit bit shifted right by 14 − e; both are q = (max(e − 1, 0) << 10) + (m >> shift)
// with m = mant | 2^23 and shift = 13 or 14 − e, rounded up when the bits shifted out exceed half or equal it
// with q odd (a carry into the exponent is correct, as in round_f16). The shift stops at 31: every e below −10
// then leaves q = 0 and rest < half, round_f16's signed zero. e ≥ 31 overflows to Inf; exponent 255 is Inf or a
// quiet NaN. Equal to round_f16 on every float32 (tested against harness/formats/dtypes.ts through roundF16).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593: _mm512_undefined_epi32 at -O3
// The lanes of |x|'s bits `abs` with an exponent of 113…142 (a normal binary16, or ±Inf where it rounds past 65504).
__attribute__((target("avx512f"))) inline __mmask16 f16_normal_lanes(__m512i abs) {
  return _mm512_cmplt_epu32_mask(_mm512_sub_epi32(abs, _mm512_set1_epi32(113 << 23)), _mm512_set1_epi32(30 << 23));
}
// The shorter form's binary16 magnitude bits of those lanes (`normal`), 0 in the others (±0 where it is used).
__attribute__((target("avx512f"))) inline __m512i round_f16_normal(__m512i abs, __mmask16 normal) {
  const __m512i up = _mm512_add_epi32(_mm512_set1_epi32(0xfff), _mm512_and_si512(_mm512_srli_epi32(abs, 13), _mm512_set1_epi32(1)));
  return _mm512_maskz_sub_epi32(normal, _mm512_srli_epi32(_mm512_add_epi32(abs, up), 13), _mm512_set1_epi32(112 << 10));
}
// When every lane is ±0 or such a lane, the rule takes a shorter form (the bitsandbytes check's tables, one a block,
// are such lanes): mant >> 13 under exponent exp − 112 is |x|'s bits >> 13 less 112 << 10, and rounding to nearest,
// ties to even, adds 0xfff plus the kept last bit before the shift (a carry runs into the exponent, up to 31 << 10:
// Inf); ±0 keeps its sign.
__attribute__((target("avx512f"))) inline __m256i round_f16_avx512(__m512 x) {
  const __m512i u = _mm512_castps_si512(x), one = _mm512_set1_epi32(1);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000));
  const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 normal = f16_normal_lanes(abs);
  if ((normal | _mm512_testn_epi32_mask(abs, abs)) == 0xffff) return _mm512_cvtepi32_epi16(_mm512_or_si512(sign, round_f16_normal(abs, normal)));
  const __m512i exp = _mm512_and_si512(_mm512_srli_epi32(u, 23), _mm512_set1_epi32(0xff));
  const __m512i mant = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffff));
  const __m512i e = _mm512_sub_epi32(exp, _mm512_set1_epi32(112));
  const __m512i shift = _mm512_min_epi32(_mm512_max_epi32(_mm512_sub_epi32(_mm512_set1_epi32(14), e), _mm512_set1_epi32(13)), _mm512_set1_epi32(31));
  const __m512i m = _mm512_or_si512(mant, _mm512_set1_epi32(0x800000));
  __m512i q = _mm512_add_epi32(_mm512_slli_epi32(_mm512_max_epi32(_mm512_sub_epi32(e, one), _mm512_setzero_si512()), 10), _mm512_srlv_epi32(m, shift));
  const __m512i rest = _mm512_and_si512(m, _mm512_sub_epi32(_mm512_sllv_epi32(one, shift), one));
  const __m512i half = _mm512_sllv_epi32(one, _mm512_sub_epi32(shift, one));
  const __mmask16 up = _mm512_cmpgt_epi32_mask(rest, half) | (_mm512_cmpeq_epi32_mask(rest, half) & _mm512_test_epi32_mask(q, one));
  q = _mm512_mask_add_epi32(q, up, q, one);
  q = _mm512_mask_mov_epi32(q, _mm512_cmpge_epi32_mask(e, _mm512_set1_epi32(31)), _mm512_set1_epi32(0x7c00));
  const __m512i special = _mm512_or_si512(_mm512_set1_epi32(0x7c00), _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(mant, mant), _mm512_set1_epi32(0x200)));
  q = _mm512_mask_mov_epi32(q, _mm512_cmpeq_epi32_mask(exp, _mm512_set1_epi32(255)), special);
  return _mm512_cvtepi32_epi16(_mm512_or_si512(sign, q));
}
#pragma GCC diagnostic pop
// The lanes of |x|'s bits `abs` with an exponent of 113…142 (0 ≤ abs − 113·2^23 < 30·2^23, as two signed compares),
// and (short_form) whether every lane is such a lane or ±0.
__attribute__((target("avx2"))) inline __m256i f16_normal_lanes_avx2(__m256i abs, bool& short_form) {
  const __m256i rel = _mm256_sub_epi32(abs, _mm256_set1_epi32(113 << 23));
  const __m256i normal = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), rel), _mm256_cmpgt_epi32(_mm256_set1_epi32(30 << 23), rel));
  short_form = _mm256_movemask_epi8(_mm256_or_si256(normal, _mm256_cmpeq_epi32(abs, _mm256_setzero_si256()))) == -1;
  return normal;
}
// The shorter form's binary16 bits of x (|x|'s bits abs, its `normal` lanes; sign and ±0 kept).
__attribute__((target("avx2"))) inline __m256i round_f16_normal_avx2(__m256i u, __m256i abs, __m256i normal) {
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000));
  const __m256i up = _mm256_add_epi32(_mm256_set1_epi32(0xfff), _mm256_and_si256(_mm256_srli_epi32(abs, 13), _mm256_set1_epi32(1)));
  const __m256i q = _mm256_and_si256(normal, _mm256_sub_epi32(_mm256_srli_epi32(_mm256_add_epi32(abs, up), 13), _mm256_set1_epi32(112 << 10)));
  return _mm256_or_si256(sign, q);
}
// round_f16_avx512 on 8 lanes, as 32-bit results (each below 2^16), with the same shorter form where every lane is
// ±0 or has an exponent of 113…142.
__attribute__((target("avx2"))) inline __m256i round_f16_avx2_32(__m256 x) {
  const __m256i u = _mm256_castps_si256(x), one = _mm256_set1_epi32(1);
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  bool short_form;
  const __m256i normal = f16_normal_lanes_avx2(abs, short_form);
  if (short_form) return round_f16_normal_avx2(u, abs, normal);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000));
  const __m256i exp = _mm256_and_si256(_mm256_srli_epi32(u, 23), _mm256_set1_epi32(0xff));
  const __m256i mant = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffff));
  const __m256i e = _mm256_sub_epi32(exp, _mm256_set1_epi32(112));
  const __m256i shift = _mm256_min_epi32(_mm256_max_epi32(_mm256_sub_epi32(_mm256_set1_epi32(14), e), _mm256_set1_epi32(13)), _mm256_set1_epi32(31));
  const __m256i m = _mm256_or_si256(mant, _mm256_set1_epi32(0x800000));
  __m256i q = _mm256_add_epi32(_mm256_slli_epi32(_mm256_max_epi32(_mm256_sub_epi32(e, one), _mm256_setzero_si256()), 10), _mm256_srlv_epi32(m, shift));
  const __m256i rest = _mm256_and_si256(m, _mm256_sub_epi32(_mm256_sllv_epi32(one, shift), one));
  const __m256i half = _mm256_sllv_epi32(one, _mm256_sub_epi32(shift, one));
  // rest and half are below 2^31, so the signed compares are the unsigned ones
  const __m256i odd = _mm256_cmpeq_epi32(_mm256_and_si256(q, one), one);
  const __m256i up = _mm256_or_si256(_mm256_cmpgt_epi32(rest, half), _mm256_and_si256(_mm256_cmpeq_epi32(rest, half), odd));
  q = _mm256_sub_epi32(q, up);  // up is −1 in the lanes that round up
  q = _mm256_blendv_epi8(q, _mm256_set1_epi32(0x7c00), _mm256_cmpgt_epi32(e, _mm256_set1_epi32(30)));
  const __m256i nan = _mm256_andnot_si256(_mm256_cmpeq_epi32(mant, _mm256_setzero_si256()), _mm256_set1_epi32(0x200));
  q = _mm256_blendv_epi8(q, _mm256_or_si256(_mm256_set1_epi32(0x7c00), nan), _mm256_cmpeq_epi32(exp, _mm256_set1_epi32(255)));
  return _mm256_or_si256(sign, q);
}
// 16 lanes (two groups of 8) → 16 binary16 bits in order.
__attribute__((target("avx2"))) inline __m256i round_f16_avx2(__m256 x0, __m256 x1) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(round_f16_avx2_32(x0), round_f16_avx2_32(x1)), 0xd8);
}

inline bool is_nan16(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
inline bool same_f16(uint16_t a, uint16_t b) { return a == b || ((a | b) & 0x7fff) == 0 || (is_nan16(a) && is_nan16(b)); }

struct Partial {
  int64_t first_bad = -1;
  double max_abs = 0;
  int64_t non_finite = 0;
  int64_t first_ref_nonfinite = -1;  // an exact value outside float32 (bad input, reported by the caller)
  int64_t bad_blocks = 0, over_blocks = 0, under_blocks = 0;  // flags this thread set first
  int64_t weight_nan = 0;  // E4M3 NaN codes among the FP8 weight bytes this thread read (the fused read only)
  int64_t filled = 0;      // weight bytes this thread read (the fused read only)
  int64_t mapped = 0;      // of those, the bytes compared where they lay in the page cache (mapped_rows)
};

// Every binary16 value as float32, from exact_f16_value (the definition), built once: the compare reads it
// per element, where a call of the definition (ldexp) cost most of the check's time.
const float* f16_values() {
  static const std::vector<float> t = [] {
    std::vector<float> v(65536);
    for (uint32_t h = 0; h < 65536; h++) v[h] = exact_f16_value(static_cast<uint16_t>(h));
    return v;
  }();
  return t.data();
}

// The three block flags of one tensor, allocated when a thread first sets one: a clean tensor (every tensor of a
// correct checkpoint) allocates none. Zero-filled arrays of ~262,144 flags each per routed expert, faulted in and
// cleared per call, cost a clean check more than a tenth of its time.
class FlagSet {
 public:
  explicit FlagSet(int64_t blocks) : blocks_(blocks) {}
  FlagSet(const FlagSet&) = delete;
  FlagSet& operator=(const FlagSet&) = delete;
  ~FlagSet() { std::free(p_.load()); }
  // Set flag i; counted by the thread that set it first, so the block counts need no pass over the flags.
  void set(int64_t i, int64_t& count) {
    uint8_t* a = p_.load(std::memory_order_acquire);
    if (a == nullptr) {
      uint8_t* fresh = static_cast<uint8_t*>(std::calloc(static_cast<size_t>(blocks_), 1));
      // no exception may leave an OpenMP region (it would abort the process): the failure is recorded and
      // result() throws it as one error once the threads are done
      if (fresh == nullptr) {
        failed_.store(true, std::memory_order_relaxed);
        return;
      }
      if (p_.compare_exchange_strong(a, fresh, std::memory_order_acq_rel)) a = fresh;
      else std::free(fresh);  // another thread's array won; a holds it
    }
    count += __atomic_exchange_n(a + i, static_cast<uint8_t>(1), __ATOMIC_RELAXED) == 0;
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  // a Uint8Array [blocks] of the flags, or null when none was set
  Napi::Value array(Napi::Env env) const {
    const uint8_t* a = p_.load();
    if (a == nullptr) return env.Null();
    auto out = Napi::Uint8Array::New(env, static_cast<size_t>(blocks_));
    std::memcpy(out.Data(), a, static_cast<size_t>(blocks_));
    return out;
  }

 private:
  int64_t blocks_;
  std::atomic<uint8_t*> p_{nullptr};
  std::atomic<bool> failed_{false};
};

struct Flags {
  FlagSet bad, over, under;
  explicit Flags(int64_t blocks) : bad(blocks), over(blocks), under(blocks), n(blocks) {}
  int64_t blocks() const { return n; }
  int64_t n;
};

// One element: the reference's exact value r against the device's FP16 bits dv (flat index k, scale block blk),
// by the rule at the top of this file.
inline void compare_elem(float r, uint16_t dv, int64_t k, int64_t blk, const float* f16v, Flags& f, Partial& p) {
  if (!std::isfinite(r) && p.first_ref_nonfinite < 0) p.first_ref_nonfinite = k;
  if (f16v[dv] == r) return;
  const uint16_t h = round_f16(r);
  if ((h & 0x7c00) == 0x7c00) f.over.set(blk, p.over_blocks);
  else if (r != 0 && (h & 0x7fff) == 0) f.under.set(blk, p.under_blocks);
  if ((dv & 0x7c00) == 0x7c00) p.non_finite++;
  if (same_f16(h, dv)) return;
  f.bad.set(blk, p.bad_blocks);
  if (p.first_bad < 0 || k < p.first_bad) p.first_bad = k;
  const double e = std::fabs(static_cast<double>(f16v[dv]) - static_cast<double>(f16v[h]));
  p.max_abs = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(p.max_abs, e);
}

// The threads' partial results merged into checkF16's result object.
Napi::Object result(Napi::Env env, const std::vector<Partial>& parts, const Flags& flags, bool weight_nan = false) {
  if (flags.bad.failed() || flags.over.failed() || flags.under.failed()) {
    throw Napi::Error::New(env, "weights check: out of memory for the block flags of a " + std::to_string(flags.blocks()) + "-block tensor");
  }
  Partial all;
  for (const Partial& p : parts) {
    if (p.first_bad >= 0 && (all.first_bad < 0 || p.first_bad < all.first_bad)) all.first_bad = p.first_bad;
    all.max_abs = std::max(all.max_abs, p.max_abs);
    all.non_finite += p.non_finite;
    if (p.first_ref_nonfinite >= 0 && (all.first_ref_nonfinite < 0 || p.first_ref_nonfinite < all.first_ref_nonfinite)) all.first_ref_nonfinite = p.first_ref_nonfinite;
    all.bad_blocks += p.bad_blocks, all.over_blocks += p.over_blocks, all.under_blocks += p.under_blocks;
    all.weight_nan += p.weight_nan;
    all.mapped += p.mapped;
  }
  Napi::Object res = Napi::Object::New(env);
  res.Set("firstBad", static_cast<double>(all.first_bad));
  res.Set("maxAbs", all.max_abs);
  res.Set("nonFinite", static_cast<double>(all.non_finite));
  res.Set("firstReferenceNonFinite", static_cast<double>(all.first_ref_nonfinite));
  res.Set("bad", flags.bad.array(env));
  res.Set("over", flags.over.array(env));
  res.Set("under", flags.under.array(env));
  res.Set("badBlocks", static_cast<double>(all.bad_blocks));
  res.Set("overBlocks", static_cast<double>(all.over_blocks));
  res.Set("underBlocks", static_cast<double>(all.under_blocks));
  if (weight_nan) {
    res.Set("weightNanCodes", static_cast<double>(all.weight_nan));
    res.Set("mappedBytes", static_cast<double>(all.mapped));
  }
  return res;
}

// The arguments both compares share: (kind, weight, scale, out, in, bo, bi) at positions 0..6, checked.
struct WeightArgs {
  ExactKind kind;
  int64_t out, in, bo, bi;
  const uint8_t *w, *s;
};

WeightArgs weight_args(Napi::Env env, const Napi::Value* info, const char* fn) {
  WeightArgs a{};
  a.kind = exact_kind_name(env, info[0], fn);
  int64_t d[4];
  const char* names[4] = {"out", "in", "bo", "bi"};
  for (int k = 0; k < 4; k++) {
    const Napi::Value v = info[3 + k];
    const double x = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : 0;
    if (!(x >= 1 && x <= 2147483647.0 && x == std::floor(x))) throw Napi::RangeError::New(env, std::string(fn) + ": " + names[k] + " must be a positive integer");
    d[k] = static_cast<int64_t>(x);
  }
  a.out = d[0], a.in = d[1], a.bo = d[2], a.bi = d[3];
  if (a.kind == ExactKind::Mxfp4 && a.in % 32 != 0) throw Napi::RangeError::New(env, std::string(fn) + ": mxfp4 needs in divisible by 32");
  // bitsandbytes' blocks are runs of bi elements of the flattened weight: the flags count them flat, whatever bo says
  if (a.kind == ExactKind::Table4FlatF32 && a.bo != 1) throw Napi::RangeError::New(env, std::string(fn) + ": table4-flat-f32 blocks are [1, bi] runs of the flattened weight; bo must be 1");
  // as dequantExact: NVFP4's rows hold whole blocks (exact_sizes counts in/bi scales a row; a ragged last block
  // would be read past its row and its scales)
  if (a.kind == ExactKind::E2m1Lut && (a.in % a.bi != 0 || a.bi % 2 != 0)) throw Napi::RangeError::New(env, std::string(fn) + ": e2m1-lut needs an even block dividing in");
  size_t wbytes = 0, sbytes = 0;
  exact_sizes(a.kind, a.out, a.in, a.bo, a.bi, &wbytes, &sbytes);
  auto bytes_arg = [&](size_t i, const char* name, size_t want) {
    if (!info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) throw Napi::TypeError::New(env, std::string(fn) + ": " + name + " must be a Uint8Array");
    auto b = info[i].As<Napi::Uint8Array>();
    if (b.ByteLength() < want) throw Napi::RangeError::New(env, std::string(fn) + ": " + name + " holds " + std::to_string(b.ByteLength()) + " bytes, need " + std::to_string(want));
    return static_cast<const uint8_t*>(b.Data());
  };
  a.w = bytes_arg(1, "weight", wbytes);
  a.s = bytes_arg(2, "scale", sbytes);
  return a;
}

// NVFP4 (e2m1-lut, 16-value blocks whose scale is one of 256 float32s, picked by the block's stored E4M3 byte): per
// byte, the reference's FP16 values of the 16 codes at that byte's scale (exact_row over a block holding codes
// 0..15, then round_f16) and whether that scale can lose range (a code's value rounds to Inf, to ±0 from non-zero,
// or leaves float32). A block's table is its stored byte's: no search over the tensor's scales. (Tables kept per
// thread and found per block cost the fused check ~20% more, and a pass that found each block's distinct float32
// scale by hashing it was a serial fifth of the check, with the other thread waiting.)
struct E2m1Ref {
  alignas(16) uint8_t lo[256][16], hi[256][16];  // [byte][code]: the FP16 bits' low and high bytes, for pshufb
  alignas(32) uint16_t f16[256][16];             // the same bits whole, for vpermw (AVX-512BW)
  bool lossy[256];
};

// The tables of the 256 scales of an e2m1-lut scale buffer s.
void e2m1_ref(const uint8_t* s, E2m1Ref& t) {
  uint8_t codes[8];
  for (int j = 0; j < 8; j++) codes[j] = static_cast<uint8_t>((2 * j) | ((2 * j + 1) << 4));  // low nibble = the even value
  std::vector<uint8_t> one(4 * 256 + 1);  // a one-block scale buffer: the table, then the block's byte
  std::memcpy(one.data(), s, 4 * 256);
  for (int k = 0; k < 256; k++) {
    one[4 * 256] = static_cast<uint8_t>(k);
    float v[16];
    exact_row(ExactKind::E2m1Lut, codes, one.data(), 0, 16, 1, 16, v);
    bool lossy = false;
    for (int c = 0; c < 16; c++) {
      const uint16_t h = round_f16(v[c]);
      t.lo[k][c] = static_cast<uint8_t>(h & 0xff), t.hi[k][c] = static_cast<uint8_t>(h >> 8), t.f16[k][c] = h;
      if (!std::isfinite(v[c]) || (h & 0x7c00) == 0x7c00 || (v[c] != 0 && (h & 0x7fff) == 0)) lossy = true;
    }
    t.lossy[k] = lossy;
  }
}

// Whether the 16 device values d of a block equal the table's FP16 bits for its 8 packed bytes (AVX2/SSSE3: the
// codes in element order, low nibble first, looked up in the table's low and high bytes with pshufb).
__attribute__((target("avx2"))) inline bool e2m1_block_same(const uint8_t* packed, const uint8_t* lo, const uint8_t* hi, const uint16_t* d) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed)), m0f = _mm_set1_epi8(0x0f);
  const __m128i idx = _mm_unpacklo_epi8(_mm_and_si128(b, m0f), _mm_and_si128(_mm_srli_epi16(b, 4), m0f));
  const __m128i L = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo)), idx);
  const __m128i H = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)), idx);
  const __m128i e0 = _mm_cmpeq_epi16(_mm_unpacklo_epi8(L, H), _mm_loadu_si128(reinterpret_cast<const __m128i*>(d)));
  const __m128i e1 = _mm_cmpeq_epi16(_mm_unpackhi_epi8(L, H), _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + 8)));
  return _mm_movemask_epi8(_mm_and_si128(e0, e1)) == 0xffff;
}

// Row o of an NVFP4 weight against the device's row drow: a block whose scale cannot lose range and whose 16 FP16
// bits all equal the reference's passes (compare_elem would find nothing in it: every value equal or the same
// FP16, none non-finite); any other block goes element by element through compare_elem over the exact row,
// decoded only then. So the result is the element-by-element compare's exactly.
// wrow: row o's packed bytes. AVX2 (its callers check), so that the block test inlines.
// Block c of row o (its stored scale byte id) as e2m1_row takes it: passes on its bits, else element by element.
__attribute__((target("avx2"))) inline void e2m1_block(const E2m1Ref& t, const uint8_t* wrow, const uint8_t* s, int64_t o, int64_t in, int64_t c, uint8_t id,
                                                      const uint16_t* drow, float* row, bool& decoded, const float* f16v, Flags& flags, Partial& p) {
  if (!t.lossy[id] && e2m1_block_same(wrow + c * 8, t.lo[id], t.hi[id], drow + c * 16)) return;
  if (!decoded) exact_row_at(ExactKind::E2m1Lut, wrow, s, o, in, 1, 16, row), decoded = true;
  const int64_t C = in / 16;
  for (int64_t i = c * 16; i < (c + 1) * 16; i++) compare_elem(row[i], drow[i], o * in + i, o * C + c, f16v, flags, p);
}

// Whether every block of the row passes on its bits and no scale of it can lose range (AVX2, two blocks a step: each
// 128-bit lane holds one block's table, as mxfp4_pair_eq does), with no branch a block: the rows of a correct device.
__attribute__((target("avx2"))) bool e2m1_row_clean_avx2(const E2m1Ref& t, const uint8_t* wrow, const uint8_t* code, int64_t C, const uint16_t* drow) {
  if (C % 2 != 0) return false;
  const __m128i m0f = _mm_set1_epi8(0x0f);
  __m256i differ = _mm256_setzero_si256();  // the or of every reference ^ device: zero when all bits agree
  uint8_t lossy = 0;
  for (int64_t c = 0; c < C; c += 2) {
    const uint8_t k0 = code[c], k1 = code[c + 1];
    lossy |= static_cast<uint8_t>(t.lossy[k0] | t.lossy[k1]);
    // blocks c, c + 1: 8 bytes each, the low nibble first
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wrow + c * 8));
    const __m128i ln = _mm_and_si128(b, m0f), hn = _mm_and_si128(_mm_srli_epi16(b, 4), m0f);
    const __m256i idx = _mm256_set_m128i(_mm_unpackhi_epi8(ln, hn), _mm_unpacklo_epi8(ln, hn));
    const __m256i L = _mm256_shuffle_epi8(_mm256_set_m128i(_mm_load_si128(reinterpret_cast<const __m128i*>(t.lo[k1])), _mm_load_si128(reinterpret_cast<const __m128i*>(t.lo[k0]))), idx);
    const __m256i H = _mm256_shuffle_epi8(_mm256_set_m128i(_mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[k1])), _mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[k0]))), idx);
    // the unpacks give each block's values 0–7 (then 8–15) in its lane: the device's halves of both blocks likewise
    const __m256i d0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(drow + c * 16)), d1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(drow + c * 16 + 16));
    differ = _mm256_or_si256(differ, _mm256_xor_si256(_mm256_unpacklo_epi8(L, H), _mm256_permute2x128_si256(d0, d1, 0x20)));
    differ = _mm256_or_si256(differ, _mm256_xor_si256(_mm256_unpackhi_epi8(L, H), _mm256_permute2x128_si256(d0, d1, 0x31)));
  }
  return lossy == 0 && _mm256_testz_si256(differ, differ);
}

__attribute__((target("avx2"))) void e2m1_row(const E2m1Ref& t, const uint8_t* wrow, const uint8_t* s, int64_t o, int64_t in, const uint16_t* drow, float* row, const float* f16v, Flags& flags, Partial& p) {
  const int64_t C = in / 16;
  const uint8_t* code = s + 4 * 256 + o * C;  // the row's blocks' stored bytes
  if (e2m1_row_clean_avx2(t, wrow, code, C, drow)) return;
  bool decoded = false;
  for (int64_t c = 0; c < C; c++) e2m1_block(t, wrow, s, o, in, c, code[c], drow, row, decoded, f16v, flags, p);
}

// The same, two blocks a step with AVX-512BW: their two tables in one register's halves, a vpermw index per element
// from its nibble (byte b's dword gives b | b << 12: the even element's code, the low nibble, in the low word's
// bits 0..3, the odd one's in the high word's) and bit 4 picking the second block's half, and 32 device values
// compared at once. A pair that does not pass goes block by block through e2m1_block.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593
#pragma GCC diagnostic ignored "-Wuninitialized"
// Whether every block of the row passes on its bits at a scale that cannot lose range: the pair test of
// e2m1_row_avx512 over the whole row with no branch a pair, the differences or'ed in a register and the scales'
// lossy flags in a byte, both tested once a row (as mxfp4_row_clean_avx512), for the rows of a correct device (all).
// A row with an odd block count is not tested here: it goes the pair-by-pair way.
__attribute__((target("avx512f,avx512bw,avx2"))) bool e2m1_row_clean_avx512(const E2m1Ref& t, const uint8_t* wrow, const uint8_t* code, int64_t C, const uint16_t* drow) {
  if (C % 2 != 0) return false;
  const __m512i nib = _mm512_set1_epi32(0x000f000f);
  const __m512i half = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(0x00100010), 1);
  __m512i differ = _mm512_setzero_si512();  // the or of every reference ^ device: zero when all bits agree
  bool lossy = false;
  for (int64_t c = 0; c < C; c += 2) {
    const uint8_t k0 = code[c], k1 = code[c + 1];
    lossy |= t.lossy[k0] | t.lossy[k1];
    const __m512i tab = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(t.f16[k0]))),
                                           _mm256_load_si256(reinterpret_cast<const __m256i*>(t.f16[k1])), 1);
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wrow + c * 8)));
    const __m512i idx = _mm512_or_si512(_mm512_and_si512(_mm512_or_si512(b, _mm512_slli_epi32(b, 12)), nib), half);
    // differ | (ref ^ device) in one ternary-logic operation (truth table 0xF6 over differ, ref, device)
    differ = _mm512_ternarylogic_epi32(differ, _mm512_permutexvar_epi16(idx, tab), _mm512_loadu_si512(drow + c * 16), 0xF6);
  }
  return !lossy && _mm512_test_epi32_mask(differ, differ) == 0;
}

// The same test with AVX-512 VBMI: the row's scale bytes' lossy flags looked up 64 at a time (two vpermi2b over the
// 256 flags, bit 7 picking between them) instead of two loads a pair, and a pair's vpermw indices from one
// vpmultishiftqb (its 16 packed bytes zero-extended a word to a qword, bytes p, p + 1: codes at bit offsets 0, 4, 8,
// 12, the low nibble first) masked to bits 0..3 with bit 4 set for the second block.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) bool e2m1_row_clean_vbmi(const E2m1Ref& t, const uint8_t* wrow, const uint8_t* code, int64_t C, const uint16_t* drow) {
  if (C % 2 != 0) return false;
  static_assert(sizeof(bool) == 1, "the lossy flags are read as bytes");
  const uint8_t* flags = reinterpret_cast<const uint8_t*>(t.lossy);
  const __m512i f0 = _mm512_loadu_si512(flags), f1 = _mm512_loadu_si512(flags + 64), f2 = _mm512_loadu_si512(flags + 128), f3 = _mm512_loadu_si512(flags + 192);
  for (int64_t c = 0; c < C; c += 64) {
    const __mmask64 m = C - c >= 64 ? ~0ULL : (1ULL << (C - c)) - 1;
    const __m512i k = _mm512_maskz_loadu_epi8(m, code + c);
    const __m512i f = _mm512_mask_blend_epi8(_mm512_movepi8_mask(k), _mm512_permutex2var_epi8(f0, k, f1), _mm512_permutex2var_epi8(f2, k, f3));
    if (_mm512_mask_test_epi8_mask(m, f, f) != 0) return false;
  }
  const __m512i at = _mm512_set1_epi64(0x000C000800040000);
  const __m512i nib = _mm512_set1_epi32(0x000f000f);
  const __m512i half = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(0x00100010), 1);
  __m512i differ = _mm512_setzero_si512();  // the or of every reference ^ device: zero when all bits agree
  for (int64_t c = 0; c < C; c += 2) {
    const __m512i tab = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(t.f16[code[c]]))),
                                           _mm256_load_si256(reinterpret_cast<const __m256i*>(t.f16[code[c + 1]])), 1);
    const __m512i codes = _mm512_multishift_epi64_epi8(at, _mm512_cvtepu16_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wrow + c * 8))));
    const __m512i idx = _mm512_ternarylogic_epi32(codes, nib, half, 0xEA);  // (codes & nib) | half
    differ = _mm512_ternarylogic_epi32(differ, _mm512_permutexvar_epi16(idx, tab), _mm512_loadu_si512(drow + c * 16), 0xF6);
  }
  return _mm512_test_epi32_mask(differ, differ) == 0;
}

__attribute__((target("avx512f,avx512bw,avx2"))) void e2m1_row_avx512(const E2m1Ref& t, const uint8_t* wrow, const uint8_t* s, int64_t o, int64_t in, const uint16_t* drow,
                                                                      float* row, const float* f16v, Flags& flags, Partial& p) {
  const int64_t C = in / 16;
  const uint8_t* code = s + 4 * 256 + o * C;
  if (reference_vbmi() ? e2m1_row_clean_vbmi(t, wrow, code, C, drow) : e2m1_row_clean_avx512(t, wrow, code, C, drow)) return;
  const __m512i nib = _mm512_set1_epi32(0x000f000f);
  const __m512i half = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(0x00100010), 1);
  bool decoded = false;
  int64_t c = 0;
  for (; c + 2 <= C; c += 2) {
    const uint8_t k0 = code[c], k1 = code[c + 1];
    if (!t.lossy[k0] && !t.lossy[k1]) {
      const __m512i tab = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(t.f16[k0]))),
                                             _mm256_load_si256(reinterpret_cast<const __m256i*>(t.f16[k1])), 1);
      const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wrow + c * 8)));
      const __m512i idx = _mm512_or_si512(_mm512_and_si512(_mm512_or_si512(b, _mm512_slli_epi32(b, 12)), nib), half);
      if (_mm512_cmpneq_epi16_mask(_mm512_permutexvar_epi16(idx, tab), _mm512_loadu_si512(drow + c * 16)) == 0) continue;
    }
    e2m1_block(t, wrow, s, o, in, c, k0, drow, row, decoded, f16v, flags, p);
    e2m1_block(t, wrow, s, o, in, c + 1, k1, drow, row, decoded, f16v, flags, p);
  }
  for (; c < C; c++) e2m1_block(t, wrow, s, o, in, c, code[c], drow, row, decoded, f16v, flags, p);
}
#pragma GCC diagnostic pop

// Row o of a bitsandbytes weight (table4-flat-f32: the 16 float32 table values, then one float32 absmax per bi
// consecutive elements of the flattened weight) against the device's row drow. Per block segment of the row, the
// reference's FP16 values of the block's 16 codes: their exact values at the block's absmax (row_table4_flat's
// table[code] · a, 16 lanes at once) through round_f16's rule on lanes (round_f16_avx512 / _avx2). A segment whose
// device values all have those bits (32 a step with AVX-512BW's vpermw, 16 with AVX2's pshufb, from an even
// element; the rest one at a time), at an absmax that cannot lose range (no code's value non-finite or rounding to
// ±Inf, or to ±0 from non-zero), passes; any other goes element by element through compare_elem over the exact row,
// decoded only then. So the result is the element-by-element compare's exactly.
// Blocks whose tables table4_row_* form before comparing any of them (at most 32: one bit each of a lossy mask).
constexpr int64_t kTable4Group = 16;

// The element-by-element part of a segment [j, end) of block b (row o starts at flat element j0 = o·in). In these
// functions w holds the codes from flat element k0 on (k0 even): element k's byte is w[(k − k0)/2] (the whole
// weight's bytes with k0 = 0; a fused read's chunk of rows with k0 = its first row · in).
inline void table4_segment_slow(const uint8_t* w, int64_t k0, const uint8_t* s, int64_t o, int64_t in, int64_t bi, int64_t j, int64_t end, int64_t b,
                                const uint16_t* drow, float* row, bool& decoded, const float* f16v, Flags& flags, Partial& p) {
  const int64_t j0 = o * in;
  if (!decoded) exact_row_table4_from(w, k0, s, o, in, bi, row), decoded = true;
  for (int64_t k = j; k < end; k++) compare_elem(row[k - j0], drow[k - j0], k, b, f16v, flags, p);
}

// Whether drow's elements [k, end) (flat indices; row start j0) are h[code] one at a time: the even element in the
// high nibble.
inline bool table4_equal_tail(const uint8_t* w, int64_t k0, const uint16_t* h, int64_t k, int64_t end, int64_t j0, const uint16_t* drow) {
  for (; k < end; k++) {
    const uint8_t byte = w[(k - k0) / 2];
    if (drow[k - j0] != h[(k & 1) == 0 ? byte >> 4 : byte & 15]) return false;
  }
  return true;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593
// Block b's table: the reference's FP16 values of its 16 codes (table[code] · its absmax through round_f16's rule on
// lanes) into h, and the lanes that can lose range (a value not finite, rounding to ±Inf, or non-zero rounding to ±0).
__attribute__((target("avx512f,avx512bw,avx2"), always_inline)) inline __mmask16 table4_block_avx512(const __m512 table, const uint8_t* s, int64_t b, __m256i& h) {
  float a;
  std::memcpy(&a, s + 64 + 4 * b, 4);
  const __m512 v = _mm512_mul_ps(table, _mm512_set1_ps(a));
  // every value ±0 or normal-range (a real checkpoint's blocks): round_f16_avx512's shorter form, whose only loss
  // of range is rounding past 65504 to Inf (no such lane is non-finite or non-zero rounding to ±0)
  const __m512i abs = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
  const __mmask16 normal = f16_normal_lanes(abs);
  if ((normal | _mm512_testn_epi32_mask(abs, abs)) == 0xffff) {
    const __m512i q = round_f16_normal(abs, normal);
    h = _mm512_cvtepi32_epi16(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 16), _mm512_set1_epi32(0x8000)), q));
    return _mm512_cmpeq_epi32_mask(q, _mm512_set1_epi32(0x7c00));
  }
  h = round_f16_avx512(v);
  const __m512i vu = _mm512_castps_si512(v), h32 = _mm512_cvtepu16_epi32(h);
  return _mm512_cmpeq_epi32_mask(_mm512_and_si512(vu, _mm512_set1_epi32(0x7f800000)), _mm512_set1_epi32(0x7f800000)) |
         _mm512_cmpeq_epi32_mask(_mm512_and_si512(h32, _mm512_set1_epi32(0x7c00)), _mm512_set1_epi32(0x7c00)) |
         (_mm512_test_epi32_mask(vu, _mm512_set1_epi32(0x7fffffff)) & _mm512_testn_epi32_mask(h32, _mm512_set1_epi32(0x7fff)));
}

// Whether every block of the row passes on its bits at an absmax that cannot lose range, for a row of whole blocks of
// a multiple of 32 (every bitsandbytes checkpoint's linears): table4_row_avx512's tables and compares over the whole
// row with no branch a block, the differences or'ed in a register and the lossy lanes in a mask, both tested once a
// row (as mxfp4_row_clean_avx512), for the rows of a correct device (all).
__attribute__((target("avx512f,avx512bw,avx2"))) bool table4_row_clean_avx512(const __m512 table, const uint8_t* w, int64_t k0, const uint8_t* s, int64_t o, int64_t in, int64_t bi,
                                                                              const uint16_t* drow) {
  if (bi % 32 != 0 || in % bi != 0) return false;
  const int64_t b0 = o * in / bi, nb = in / bi;
  const uint8_t* wrow = w + (o * in - k0) / 2;  // o·in is even: bi % 32 == 0 divides in
  __m512i differ = _mm512_setzero_si512();  // the or of every reference ^ device: zero when all bits agree
  __mmask16 bad = 0;
  for (int64_t g = 0; g < nb; g++) {
    __m256i h;
    bad |= table4_block_avx512(table, s, b0 + g, h);
    // the block's 16 values in both halves (table4_row_avx512's indices: the even element's code in the high nibble)
    const __m512i tab = _mm512_broadcast_i64x4(h);
    const uint8_t* pb = wrow + g * bi / 2;
    const uint16_t* db = drow + g * bi;
    for (int64_t q = 0; q < bi / 32; q++) {
      const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + q * 16)));
      const __m512i idx = _mm512_or_si512(_mm512_srli_epi32(c, 4), _mm512_slli_epi32(c, 16));
      differ = _mm512_ternarylogic_epi32(differ, _mm512_permutexvar_epi16(idx, tab), _mm512_loadu_si512(db + q * 32), 0xF6);
    }
  }
  return bad == 0 && _mm512_test_epi32_mask(differ, differ) == 0;
}

// 32 elements of a block (p: their packed bytes, d: the device's values) against its table: differ |= reference ^ device.
__attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) inline void table4_step_vbmi(const __m512i at, const __m512i tab, const uint8_t* p, const uint16_t* d, __m512i& differ) {
  const __m512i idx = _mm512_multishift_epi64_epi8(at, _mm512_cvtepu16_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  differ = _mm512_ternarylogic_epi32(differ, _mm512_permutexvar_epi16(idx, tab), _mm512_loadu_si512(d), 0xF6);
}

// The same test with AVX-512 VBMI (half the vector work a block), for a row whose every block's values are ±0 or
// normal-range by its absmax alone. With every table value finite, the non-zero codes' |table[c] · a| lie between
// fl(qmin · a) and fl(qmax · a) (qmin, qmax: the least and greatest non-zero |table[c]|; a float32 product rounds
// monotonically), so a block with fl(qmin · a) ≥ 2^-14 (FP16's least normal) and fl(qmax · a) < 65520 (the least value
// that rounds to Inf) has every non-zero code's value normal-range and none rounding to Inf: no lane can lose range,
// and the shorter rounding (round_f16_normal) is the rule. Such an a is positive, so a value's sign is table[c]'s;
// codes whose table value is ±0 give that ±0. The bounds are tested 16 blocks at once before any table is formed.
// A block's table is kept one code a dword, its FP16 bits in both words, so a vpermw index needs the code in bits
// 1..4 only (bit 0 picks either word): one vpmultishiftqb puts it there for 32 elements from their 16 packed bytes.
// A row with a block outside those bounds, or a table with a value not finite or none non-zero, is not tested here.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) bool table4_row_clean_vbmi(const __m512 table, const uint8_t* w, int64_t k0, const uint8_t* s, int64_t o, int64_t in, int64_t bi,
                                                                                 const uint16_t* drow) {
  if (bi % 32 != 0 || in % bi != 0) return false;
  const __m512i bits = _mm512_castps_si512(table), abs = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nonzero = _mm512_test_epi32_mask(abs, abs);
  if (_mm512_cmpge_epu32_mask(abs, _mm512_set1_epi32(0x7f800000)) != 0 || nonzero == 0) return false;
  const __m512 qabs = _mm512_castsi512_ps(abs);
  const __m512 qmin = _mm512_set1_ps(_mm512_mask_reduce_min_ps(nonzero, qabs)), qmax = _mm512_set1_ps(_mm512_mask_reduce_max_ps(nonzero, qabs));
  const int64_t b0 = o * in / bi, nb = in / bi;
  const float* a = reinterpret_cast<const float*>(s + 64) + b0;
  for (int64_t g = 0; g < nb; g += 16) {
    const __mmask16 m = nb - g >= 16 ? 0xffff : static_cast<__mmask16>((1u << (nb - g)) - 1);
    const __m512 ag = _mm512_maskz_loadu_ps(m, a + g);
    // ordered compares: a NaN absmax fails them
    const __mmask16 in_range = _mm512_cmp_ps_mask(_mm512_mul_ps(ag, qmin), _mm512_set1_ps(0x1p-14f), _CMP_GE_OQ) &
                               _mm512_cmp_ps_mask(_mm512_mul_ps(ag, qmax), _mm512_set1_ps(65520.0f), _CMP_LT_OQ);
    if ((in_range & m) != m) return false;
  }
  const __m512i sign = _mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512i signs = _mm512_or_si512(sign, _mm512_srli_epi32(sign, 16));  // table[c]'s sign in both words
  // round_f16_normal with 112 << 23 taken off before the shift: every lane left is ≥ 1 << 23
  const __m512i bias = _mm512_set1_epi32(0xfff - (112 << 23)), bit13 = _mm512_set1_epi32(1 << 13), one = _mm512_set1_epi32(1);
  // per qword of 4 elements (packed bytes p, p + 1 zero-extended from a word): the bit offsets of the even element's
  // code (p's high nibble), the odd one's (its low nibble: 63 wraps to the qword's zero top bit), then p + 1's
  const __m512i at = _mm512_set1_epi64(0x0007000B003F0003);
  const uint8_t* wrow = w + (o * in - k0) / 2;
  __m512i differ = _mm512_setzero_si512();  // the or of every reference ^ device: zero when all bits agree
  for (int64_t g = 0; g < nb; g++) {
    const __m512i v = _mm512_castps_si512(_mm512_mul_ps(qabs, _mm512_set1_ps(a[g])));
    __m512i x = _mm512_add_epi32(v, bias);
    x = _mm512_mask_add_epi32(x, _mm512_test_epi32_mask(v, bit13), x, one);
    const __m512i q = _mm512_maskz_srli_epi32(nonzero, x, 13);
    const __m512i tab = _mm512_ternarylogic_epi32(q, _mm512_slli_epi32(q, 16), signs, 0xFE);  // q | q << 16 | signs
    const uint8_t* pb = wrow + g * bi / 2;
    const uint16_t* db = drow + g * bi;
    if (bi == 64) {  // bitsandbytes' default, its loop unrolled
      table4_step_vbmi(at, tab, pb, db, differ);
      table4_step_vbmi(at, tab, pb + 16, db + 32, differ);
    } else {
      for (int64_t k = 0; k < bi / 32; k++) table4_step_vbmi(at, tab, pb + k * 16, db + k * 32, differ);
    }
  }
  return _mm512_test_epi32_mask(differ, differ) == 0;
}

__attribute__((target("avx512f,avx512bw,avx2"))) void table4_row_avx512(const uint8_t* w, int64_t k0, const uint8_t* s, int64_t o, int64_t in, int64_t bi, const uint16_t* drow,
                                                                        float* row, const float* f16v, Flags& flags, Partial& p) {
  const __m512 table = _mm512_loadu_ps(reinterpret_cast<const float*>(s));  // little-endian host: the stored float32s
  if (reference_vbmi() && table4_row_clean_vbmi(table, w, k0, s, o, in, bi, drow)) return;
  if (table4_row_clean_avx512(table, w, k0, s, o, in, bi, drow)) return;
  bool decoded = false;
  const int64_t j0 = o * in, j1 = j0 + in;
  for (int64_t j = j0; j < j1;) {
    // up to kTable4Group blocks' tables first, in a loop without branches (independent chains the core overlaps),
    // then their segments' compares
    const int64_t b0 = j / bi, nb = std::min<int64_t>(kTable4Group, (j1 - 1) / bi - b0 + 1);
    alignas(32) uint16_t hs[kTable4Group][16];
    uint32_t lossy = 0;
    for (int64_t g = 0; g < nb; g++) {
      __m256i h;
      const __mmask16 bad = table4_block_avx512(table, s, b0 + g, h);
      _mm256_store_si256(reinterpret_cast<__m256i*>(hs[g]), h);
      lossy |= static_cast<uint32_t>(bad != 0) << g;
    }
    for (int64_t g = 0; g < nb; g++) {
      const int64_t b = b0 + g, end = std::min(j1, (b + 1) * bi);
      bool ok = ((lossy >> g) & 1) == 0;
      int64_t k = j;
      if (ok && (j & 1) == 0) {
        // a block's 16 values in both halves, so a vpermw index needs only its low 4 bits: byte c's dword gives
        // c >> 4 | c << 16, the even element's code (high nibble) in the low word, the odd one's in the high word
        const __m512i tab = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(hs[g])));
        for (; ok && k + 32 <= end; k += 32) {
          const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + (k - k0) / 2)));
          const __m512i idx = _mm512_or_si512(_mm512_srli_epi32(c, 4), _mm512_slli_epi32(c, 16));
          ok = _mm512_cmpneq_epi16_mask(_mm512_permutexvar_epi16(idx, tab), _mm512_loadu_si512(drow + (k - j0))) == 0;
        }
      }
      if (ok) ok = table4_equal_tail(w, k0, hs[g], k, end, j0, drow);
      if (!ok) table4_segment_slow(w, k0, s, o, in, bi, j, end, b, drow, row, decoded, f16v, flags, p);
      j = end;
    }
  }
}

#pragma GCC diagnostic pop

// Whether a lane of v can lose range: not finite, rounding to ±Inf, or non-zero rounding to ±0 (h: round_f16 of
// each lane, 32-bit lanes).
__attribute__((target("avx2"))) inline bool lossy8(__m256 v, __m256i h) {
  const __m256i vu = _mm256_castps_si256(v), f8 = _mm256_set1_epi32(0x7f800000), i7c = _mm256_set1_epi32(0x7c00), zero = _mm256_setzero_si256();
  const __m256i nf = _mm256_cmpeq_epi32(_mm256_and_si256(vu, f8), f8), inf = _mm256_cmpeq_epi32(_mm256_and_si256(h, i7c), i7c);
  const __m256i under = _mm256_andnot_si256(_mm256_cmpeq_epi32(_mm256_and_si256(vu, _mm256_set1_epi32(0x7fffffff)), zero),
                                            _mm256_cmpeq_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7fff)), zero));
  return _mm256_movemask_epi8(_mm256_or_si256(_mm256_or_si256(nf, inf), under)) != 0;
}

// Block b's table (as table4_block_avx512): the FP16 bits of its 16 codes' values table[code] · absmax, in code
// order, and whether a lane can lose range. Where every lane is ±0 or normal-range (a real checkpoint's blocks), the
// shorter form's only loss of range is rounding past 65504, to Inf.
__attribute__((target("avx2"))) inline __m256i table4_block_avx2(__m256 t0, __m256 t1, const uint8_t* s, int64_t b, bool& lossy) {
  float a;
  std::memcpy(&a, s + 64 + 4 * b, 4);
  const __m256 va = _mm256_set1_ps(a), v0 = _mm256_mul_ps(t0, va), v1 = _mm256_mul_ps(t1, va);
  const __m256i u0 = _mm256_castps_si256(v0), u1 = _mm256_castps_si256(v1), m = _mm256_set1_epi32(0x7fffffff);
  const __m256i a0 = _mm256_and_si256(u0, m), a1 = _mm256_and_si256(u1, m);
  bool short0, short1;
  const __m256i n0 = f16_normal_lanes_avx2(a0, short0), n1 = f16_normal_lanes_avx2(a1, short1);
  if (short0 && short1) {
    const __m256i h = _mm256_permute4x64_epi64(_mm256_packus_epi32(round_f16_normal_avx2(u0, a0, n0), round_f16_normal_avx2(u1, a1, n1)), 0xd8);
    lossy = _mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x7c00))) != 0;
    return h;
  }
  const __m256i h0 = round_f16_avx2_32(v0), h1 = round_f16_avx2_32(v1);
  lossy = lossy8(v0, h0) || lossy8(v1, h1);
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(h0, h1), 0xd8);
}

// table4_row_clean_vbmi's test with AVX2 (the level MI250 hosts' Zen 3 CPUs run): the same bounds on the absmax
// (8 blocks at once) and the same shorter rounding of |table[c]| · a, then table4_row_avx2's lookups (the table's
// low and high bytes for pshufb) with the differences or'ed in a register and tested once a row, for the rows of a
// correct device (all).
__attribute__((target("avx2"))) bool table4_row_clean_avx2(const __m256 t0, const __m256 t1, const uint8_t* w, int64_t k0, const uint8_t* s, int64_t o, int64_t in, int64_t bi,
                                                           const uint16_t* drow) {
  if (bi % 32 != 0 || in % bi != 0) return false;
  const __m256i m = _mm256_set1_epi32(0x7fffffff);
  const __m256i b0i = _mm256_castps_si256(t0), b1i = _mm256_castps_si256(t1);
  const __m256i abs0 = _mm256_and_si256(b0i, m), abs1 = _mm256_and_si256(b1i, m);
  float q[16];
  _mm256_storeu_ps(q, _mm256_castsi256_ps(abs0)), _mm256_storeu_ps(q + 8, _mm256_castsi256_ps(abs1));
  float qmin = std::numeric_limits<float>::infinity(), qmax = 0;
  for (const float x : q) {
    if (!(x <= std::numeric_limits<float>::max())) return false;  // NaN or Inf
    if (x != 0) qmin = std::min(qmin, x), qmax = std::max(qmax, x);
  }
  if (qmax == 0) return false;
  const int64_t b0 = o * in / bi, nb = in / bi;
  const float* a = reinterpret_cast<const float*>(s + 64) + b0;
  const __m256 lo = _mm256_set1_ps(qmin), hi = _mm256_set1_ps(qmax), least = _mm256_set1_ps(0x1p-14f), inf_from = _mm256_set1_ps(65520.0f);
  int64_t g = 0;
  for (; g + 8 <= nb; g += 8) {
    const __m256 ag = _mm256_loadu_ps(a + g);
    // ordered compares: a NaN absmax fails them
    const __m256 ok = _mm256_and_ps(_mm256_cmp_ps(_mm256_mul_ps(ag, lo), least, _CMP_GE_OQ), _mm256_cmp_ps(_mm256_mul_ps(ag, hi), inf_from, _CMP_LT_OQ));
    if (_mm256_movemask_ps(ok) != 0xff) return false;
  }
  for (; g < nb; g++) {
    const float pmin = a[g] * qmin, pmax = a[g] * qmax;
    if (!(pmin >= 0x1p-14f && pmax < 65520.0f)) return false;
  }
  const __m256 qabs0 = _mm256_castsi256_ps(abs0), qabs1 = _mm256_castsi256_ps(abs1);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i nz0 = _mm256_xor_si256(_mm256_cmpeq_epi32(abs0, zero), _mm256_set1_epi32(-1)), nz1 = _mm256_xor_si256(_mm256_cmpeq_epi32(abs1, zero), _mm256_set1_epi32(-1));
  const __m256i sgn = _mm256_set1_epi32(0x8000);
  const __m256i sign0 = _mm256_and_si256(_mm256_srli_epi32(b0i, 16), sgn), sign1 = _mm256_and_si256(_mm256_srli_epi32(b1i, 16), sgn);
  // round_f16_normal with 112 << 23 taken off before the shift (as table4_row_clean_vbmi)
  const __m256i bias = _mm256_set1_epi32(0xfff - (112 << 23)), one = _mm256_set1_epi32(1);
  const auto half_table = [&](__m256 qabs, __m256 va, __m256i nz, __m256i sign) __attribute__((target("avx2"))) {
    const __m256i v = _mm256_castps_si256(_mm256_mul_ps(qabs, va));
    const __m256i x = _mm256_add_epi32(_mm256_add_epi32(v, bias), _mm256_and_si256(_mm256_srli_epi32(v, 13), one));
    return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(x, 13), nz), sign);
  };
  const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m128i m0f = _mm_set1_epi8(0x0f);
  const uint8_t* wrow = w + (o * in - k0) / 2;
  __m256i differ = _mm256_setzero_si256();  // the or of every reference ^ device: zero when all bits agree
  for (g = 0; g < nb; g++) {
    const __m256 va = _mm256_set1_ps(a[g]);
    // the 16 values' FP16 bits in code order, then per lane their low bytes and high bytes: [lo 0..7 | hi 0..7 |
    // lo 8..15 | hi 8..15] as qwords, so the low bytes of all 16 are qwords 0, 2 and the high ones 1, 3
    const __m256i h = _mm256_permute4x64_epi64(_mm256_packus_epi32(half_table(qabs0, va, nz0, sign0), half_table(qabs1, va, nz1, sign1)), 0xd8);
    const __m256i bytes = _mm256_shuffle_epi8(h, split);
    const __m256i L32 = _mm256_permute4x64_epi64(bytes, 0x88), H32 = _mm256_permute4x64_epi64(bytes, 0xdd);
    const uint8_t* pb = wrow + g * bi / 2;
    const uint16_t* db = drow + g * bi;
    for (int64_t k = 0; k < bi; k += 32) {
      // as table4_row_avx2: 16 packed bytes → 32 codes, the high nibble first, in the order whose byte unpacks give
      // the device's word order
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + k / 2));
      const __m128i hn = _mm_and_si128(_mm_srli_epi16(c, 4), m0f), ln = _mm_and_si128(c, m0f);
      const __m256i idx = _mm256_permute4x64_epi64(_mm256_set_m128i(_mm_unpackhi_epi8(hn, ln), _mm_unpacklo_epi8(hn, ln)), 0xd8);
      const __m256i L = _mm256_shuffle_epi8(L32, idx), H = _mm256_shuffle_epi8(H32, idx);
      const __m256i* d = reinterpret_cast<const __m256i*>(db + k);
      differ = _mm256_or_si256(differ, _mm256_or_si256(_mm256_xor_si256(_mm256_unpacklo_epi8(L, H), _mm256_loadu_si256(d)),
                                                       _mm256_xor_si256(_mm256_unpackhi_epi8(L, H), _mm256_loadu_si256(d + 1))));
    }
  }
  return _mm256_testz_si256(differ, differ);
}

__attribute__((target("avx2"))) void table4_row_avx2(const uint8_t* w, int64_t k0, const uint8_t* s, int64_t o, int64_t in, int64_t bi, const uint16_t* drow,
                                                     float* row, const float* f16v, Flags& flags, Partial& p) {
  const __m256 t0 = _mm256_loadu_ps(reinterpret_cast<const float*>(s)), t1 = _mm256_loadu_ps(reinterpret_cast<const float*>(s) + 8);
  if (table4_row_clean_avx2(t0, t1, w, k0, s, o, in, bi, drow)) return;
  // a table's words → its low bytes then its high bytes, in each lane; then the lanes' halves regrouped (low | high)
  const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m128i m0f = _mm_set1_epi8(0x0f);
  bool decoded = false;
  const int64_t j0 = o * in, j1 = j0 + in;
  for (int64_t j = j0; j < j1;) {
    // as table4_row_avx512: the tables of up to kTable4Group blocks first, then the compares; a table kept whole
    // (for a tail) and as its 16 low bytes then 16 high bytes, for pshufb
    const int64_t b0 = j / bi, nb = std::min<int64_t>(kTable4Group, (j1 - 1) / bi - b0 + 1);
    alignas(32) uint16_t hs[kTable4Group][16];
    alignas(32) uint8_t planes[kTable4Group][32];
    uint32_t lossy = 0;
    for (int64_t g = 0; g < nb; g++) {
      bool l;
      const __m256i h = table4_block_avx2(t0, t1, s, b0 + g, l);
      lossy |= static_cast<uint32_t>(l) << g;
      _mm256_store_si256(reinterpret_cast<__m256i*>(hs[g]), h);
      _mm256_store_si256(reinterpret_cast<__m256i*>(planes[g]), _mm256_permute4x64_epi64(_mm256_shuffle_epi8(h, split), 0xd8));
    }
    for (int64_t g = 0; g < nb; g++) {
      const int64_t b = b0 + g, end = std::min(j1, (b + 1) * bi);
      bool ok = ((lossy >> g) & 1) == 0;
      int64_t k = j;
      if (ok && (j & 1) == 0) {
        const __m128i L16 = _mm_load_si128(reinterpret_cast<const __m128i*>(planes[g])), H16 = _mm_load_si128(reinterpret_cast<const __m128i*>(planes[g] + 16));
        const __m256i L32 = _mm256_broadcastsi128_si256(L16), H32 = _mm256_broadcastsi128_si256(H16);
        // 16 packed bytes → 32 codes, the high nibble first, put in the order whose byte unpacks give the device's
        // word order (qwords 0, 2, 1, 3)
        for (; ok && k + 32 <= end; k += 32) {
          const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + (k - k0) / 2));
          const __m128i hn = _mm_and_si128(_mm_srli_epi16(c, 4), m0f), ln = _mm_and_si128(c, m0f);
          const __m256i idx = _mm256_permute4x64_epi64(_mm256_set_m128i(_mm_unpackhi_epi8(hn, ln), _mm_unpacklo_epi8(hn, ln)), 0xd8);
          const __m256i L = _mm256_shuffle_epi8(L32, idx), H = _mm256_shuffle_epi8(H32, idx);
          const __m256i* d = reinterpret_cast<const __m256i*>(drow + (k - j0));
          const __m256i e0 = _mm256_cmpeq_epi16(_mm256_unpacklo_epi8(L, H), _mm256_loadu_si256(d));
          const __m256i e1 = _mm256_cmpeq_epi16(_mm256_unpackhi_epi8(L, H), _mm256_loadu_si256(d + 1));
          ok = _mm256_movemask_epi8(_mm256_and_si256(e0, e1)) == -1;
        }
        // 8 packed bytes → 16 codes
        for (; ok && k + 16 <= end; k += 16) {
          const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + (k - k0) / 2));
          const __m128i idx = _mm_unpacklo_epi8(_mm_and_si128(_mm_srli_epi16(c, 4), m0f), _mm_and_si128(c, m0f));
          const __m128i L = _mm_shuffle_epi8(L16, idx), H = _mm_shuffle_epi8(H16, idx);
          const __m128i* d = reinterpret_cast<const __m128i*>(drow + (k - j0));
          const __m128i e0 = _mm_cmpeq_epi16(_mm_unpacklo_epi8(L, H), _mm_loadu_si128(d));
          const __m128i e1 = _mm_cmpeq_epi16(_mm_unpackhi_epi8(L, H), _mm_loadu_si128(d + 1));
          ok = _mm_movemask_epi8(_mm_and_si128(e0, e1)) == 0xffff;
        }
      }
      if (ok) ok = table4_equal_tail(w, k0, hs[g], k, end, j0, drow);
      if (!ok) table4_segment_slow(w, k0, s, o, in, bi, j, end, b, drow, row, decoded, f16v, flags, p);
      j = end;
    }
  }
}

// checkF16(kind, weight, scale, out, in, bo, bi, device: Uint16Array [out·in])
//   → { firstBad, maxAbs, nonFinite, firstReferenceNonFinite, bad, over, under, badBlocks, overBlocks, underBlocks }
//   with the three block flags as Uint8Array [⌈out/bo⌉·⌈in/bi⌉], each null when it flags no block. bitsandbytes'
//   blocks (table4-flat-f32) are bi consecutive elements of the flattened weight, straddling rows: flags [⌈out·in/bi⌉],
//   flat element k in block ⌊k/bi⌋.
Napi::Value check_f16(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  const char* fn = "checkF16";
  if (info.Length() < 8) throw Napi::TypeError::New(env, "checkF16: expected (kind, weight, scale, out, in, bo, bi, device)");
  Napi::Value v[7];
  for (size_t i = 0; i < 7; i++) v[i] = info[i];
  const WeightArgs wa = weight_args(env, v, fn);
  const ExactKind kind = wa.kind;
  const int64_t out = wa.out, in = wa.in, bo = wa.bo, bi = wa.bi;
  const uint8_t *w = wa.w, *s = wa.s;
  if (!info[7].IsTypedArray() || info[7].As<Napi::TypedArray>().TypedArrayType() != napi_uint16_array) throw Napi::TypeError::New(env, "checkF16: device must be a Uint16Array");
  auto devArr = info[7].As<Napi::Uint16Array>();
  if (devArr.ElementLength() != static_cast<size_t>(out * in)) throw Napi::RangeError::New(env, "checkF16: device has " + std::to_string(devArr.ElementLength()) + " values, want out×in = " + std::to_string(out * in));
  const uint16_t* dev = devArr.Data();

  const bool flat = kind == ExactKind::Table4FlatF32;
  const int64_t C = (in + bi - 1) / bi, blocks = flat ? (out * in + bi - 1) / bi : ((out + bo - 1) / bo) * C;
  Flags flags(blocks);
  const int nt = out * in >= (1 << 18) ? omp_get_max_threads() : 1;
  std::vector<Partial> parts(nt);
  const float* f16v = f16_values();
  // NVFP4 at the reference's SIMD levels but scalar: blocks that match pass 16 values at a time (e2m1_row)
  static const bool avx2 = __builtin_cpu_supports("avx2") != 0, avx512bw = __builtin_cpu_supports("avx512bw") != 0;
  E2m1Ref e2;
  const bool e2fast = kind == ExactKind::E2m1Lut && bo == 1 && bi == 16 && avx2 && reference_simd() != RefSimd::Scalar;
  if (e2fast) e2m1_ref(s, e2);
#pragma omp parallel num_threads(nt)
  {
    Partial& p = parts[omp_get_thread_num()];
    std::vector<float> row(in);
#pragma omp for schedule(static)
    for (int64_t o = 0; o < out; o++) {
      if (e2fast) {
        if (reference_simd() == RefSimd::Avx512 && avx512bw) e2m1_row_avx512(e2, w + o * (in / 2), s, o, in, dev + o * in, row.data(), f16v, flags, p);
        else e2m1_row(e2, w + o * (in / 2), s, o, in, dev + o * in, row.data(), f16v, flags, p);
        continue;
      }
      if (flat && reference_simd() == RefSimd::Avx512 && avx512bw) {
        table4_row_avx512(w, 0, s, o, in, bi, dev + o * in, row.data(), f16v, flags, p);
        continue;
      }
      if (flat && reference_simd() != RefSimd::Scalar) {
        table4_row_avx2(w, 0, s, o, in, bi, dev + o * in, row.data(), f16v, flags, p);
        continue;
      }
      exact_row(kind, w, s, o, in, bo, bi, row.data());
      const uint16_t* drow = dev + o * in;
      const int64_t brow = (o / bo) * C;
      if (flat) {
        for (int64_t i = 0; i < in; i++) compare_elem(row[i], drow[i], o * in + i, (o * in + i) / bi, f16v, flags, p);
      } else {
        for (int64_t i = 0; i < in; i++) compare_elem(row[i], drow[i], o * in + i, brow + i / bi, f16v, flags, p);
      }
    }
  }
  return result(env, parts, flags);
}

// ---- the fused pass (issue 15): the device's rows pulled from its row source, never a whole FP16 tensor ----
//
// checkF16Rows(kind, weight, scale, out, in, bo, bi, source, fast) → checkF16's result, for the same device
// values: `source` is the device emulation's producer of its FP16 rows (harness/contracts/ld_row_source.h),
// called by each thread for its own rows into a buffer of kRows rows, and compared there, so reading the packed
// bytes, both decodes and the compare happen in one pass over the tensor.
//
// MXFP4 (fast = true): per 32-element block, the reference's FP16 values of its 16 codes at the block's scale
// byte come from a table built by this file's own rule (exact_row on every code, then round_f16), and 32 values
// are compared with the device's at once (AVX2: two pshufb per 16 elements, one compare per 8). A block passes
// there only if every one of its FP16 bits equals the reference's and its scale cannot lose range (no code at
// that scale rounds to Inf, to ±0 from non-zero, or leaves float32); every other block goes through
// compare_elem, element by element, as checkF16 does, so the result is checkF16's exactly (tested: fast and
// slow, right and wrong devices). FP8 blocks (fast = true) likewise, with a table per scale block (256 codes under
// that block's scale, by exact_row and round_f16). Other kinds: exact_row and compare_elem per row.
// One row at a time: the device's row (8 KiB at in = 4096) stays in L1 between its decode and the compare; at 8
// rows the buffer lived in L2 and the check ran 1.3–1.6× slower (measured on [2048×4096] experts). FP8 blocks
// (VBMI, or AVX2's lookups of Fp8Planes) go 8 rows a step instead: a block is 128 codes of a row, and loading its
// two 256-byte tables into eight registers for every 128 codes cost more than the L2 (both sides load a block's
// tables once per step; ~1.15× faster on 16 [2048×4096] FP8 weights, side by side).
constexpr int64_t kRows = 1;
constexpr int64_t kFp8Rows = 8;

struct Mxfp4Ref {
  alignas(16) uint8_t lo[256][16];
  alignas(16) uint8_t hi[256][16];
  alignas(32) uint16_t f16[256][16];  // the same bits whole, for vpermw (AVX-512BW)
  float value[256][16];
  bool lossy[256];
  // the scale bytes that cannot lose range, when they are one run [ok_lo, ok_hi] (so a row's scales are tested
  // with two compares per 32 bytes); ranged false: tested byte by byte through lossy[]
  bool ranged;
  uint8_t ok_lo, ok_hi;
  // the run of scale bytes around 127 (2^0) that cannot lose range and whose 16 values all have a zero low byte
  // (FP16 normals and ±0: an E2M1 magnitude has one mantissa bit), [hi_lo, hi_hi]: a row of them is compared on its
  // values' high bytes and the or of its low ones (mxfp4_row_clean_hi_avx2). hi_ranged false: never.
  bool hi_ranged;
  uint8_t hi_lo, hi_hi;
};

// The one run of bytes b with ok(b), if they form one (and there is at least one).
template <class F>
bool byte_run(F ok, uint8_t& run_lo, uint8_t& run_hi) {
  int lo = 0;
  while (lo < 256 && !ok(lo)) lo++;
  int hi = lo;
  while (hi + 1 < 256 && ok(hi + 1)) hi++;
  bool one = lo < 256;
  for (int b = hi + 1; b < 256 && one; b++) one = !ok(b);
  run_lo = static_cast<uint8_t>(one ? lo : 0);
  run_hi = static_cast<uint8_t>(one ? hi : 0);
  return one;
}

// The reference's own rule on all 256 × 16 (scale, code) pairs: exact_row over one block holding codes 0..15
// twice, low nibble even, then round_f16.
const Mxfp4Ref& mxfp4_ref() {
  static const Mxfp4Ref t = [] {
    Mxfp4Ref r{};
    uint8_t w[16];
    for (int j = 0; j < 16; j++) w[j] = static_cast<uint8_t>(((2 * j) & 15) | (((2 * j + 1) & 15) << 4));
    float v[32];
    for (int sb = 0; sb < 256; sb++) {
      const uint8_t scale = static_cast<uint8_t>(sb);
      exact_row(ExactKind::Mxfp4, w, &scale, 0, 32, 1, 32, v);
      r.lossy[sb] = false;
      for (int c = 0; c < 16; c++) {
        const float x = v[c];
        const uint16_t h = round_f16(x);
        r.value[sb][c] = x;
        r.f16[sb][c] = h;
        r.lo[sb][c] = static_cast<uint8_t>(h & 0xff);
        r.hi[sb][c] = static_cast<uint8_t>(h >> 8);
        if (!std::isfinite(x) || (h & 0x7c00) == 0x7c00 || (x != 0 && (h & 0x7fff) == 0)) r.lossy[sb] = true;
      }
    }
    // the run of scale bytes that cannot lose range, if they form one; and within it those with no low byte
    r.ranged = byte_run([&](int sb) { return !r.lossy[sb]; }, r.ok_lo, r.ok_hi);
    const auto hi_only = [&](int sb) {
      bool zero = !r.lossy[sb];
      for (int c = 0; c < 16; c++) zero &= r.lo[sb][c] == 0;
      return zero;
    };
    int a = 127, b = 127;
    while (a > 0 && hi_only(a - 1)) a--;
    while (b < 255 && hi_only(b + 1)) b++;
    r.hi_ranged = hi_only(127);
    r.hi_lo = static_cast<uint8_t>(r.hi_ranged ? a : 0);
    r.hi_hi = static_cast<uint8_t>(r.hi_ranged ? b : 0);
    return r;
  }();
  return t;
}

// Block c of row o, element by element (the slow path).
void mxfp4_block_slow(const Mxfp4Ref& t, const uint8_t* wrow, uint8_t sb, const uint16_t* drow, int64_t o, int64_t in, int64_t c, int64_t blk, const float* f16v,
                      Flags& f, Partial& p) {
  for (int j = 0; j < 16; j++) {
    const uint8_t b = wrow[c * 16 + j];
    const int64_t i = c * 32 + 2 * j;
    compare_elem(t.value[sb][b & 15], drow[i], o * in + i, blk, f16v, f, p);
    compare_elem(t.value[sb][b >> 4], drow[i + 1], o * in + i + 1, blk, f16v, f, p);
  }
}

// same[c] ← block c of the row (scale bytes srow[c]) matches bit for bit and its scale cannot lose range (AVX2,
// two blocks per 256-bit step: vpshufb looks up within each 128-bit lane, so each lane holds one block's table).
__attribute__((target("avx2"))) inline __m256i mxfp4_pair_eq(const Mxfp4Ref& t, const uint8_t* wrow, const uint8_t* srow, const uint16_t* drow, int64_t c) {
  const __m256i m0f = _mm256_set1_epi8(0x0f);
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wrow + c * 16));  // blocks c, c+1
  const __m256i ev = _mm256_and_si256(b, m0f), od = _mm256_and_si256(_mm256_srli_epi16(b, 4), m0f);
  const __m256i tl = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.lo[srow[c]]))),
                                             _mm_load_si128(reinterpret_cast<const __m128i*>(t.lo[srow[c + 1]])), 1);
  const __m256i th = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[srow[c]]))),
                                             _mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[srow[c + 1]])), 1);
  // per lane: codes of elements 0..15 (i0) and 16..31 (i1) of that lane's block
  const __m256i i0 = _mm256_unpacklo_epi8(ev, od), i1 = _mm256_unpackhi_epi8(ev, od);
  const __m256i L0 = _mm256_shuffle_epi8(tl, i0), H0 = _mm256_shuffle_epi8(th, i0), L1 = _mm256_shuffle_epi8(tl, i1), H1 = _mm256_shuffle_epi8(th, i1);
  // per lane: f16 of elements 0..7, 8..15, 16..23, 24..31
  const __m256i e0 = _mm256_unpacklo_epi8(L0, H0), e1 = _mm256_unpackhi_epi8(L0, H0), e2 = _mm256_unpacklo_epi8(L1, H1), e3 = _mm256_unpackhi_epi8(L1, H1);
  const __m128i* d = reinterpret_cast<const __m128i*>(drow + c * 32);  // block c: d[0..3], block c+1: d[4..7]
#define LD_DEV_PAIR(q) _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(d + (q))), _mm_loadu_si128(d + 4 + (q)), 1)
  __m256i eq = _mm256_cmpeq_epi16(e0, LD_DEV_PAIR(0));
  eq = _mm256_and_si256(eq, _mm256_cmpeq_epi16(e1, LD_DEV_PAIR(1)));
  eq = _mm256_and_si256(eq, _mm256_cmpeq_epi16(e2, LD_DEV_PAIR(2)));
  return _mm256_and_si256(eq, _mm256_cmpeq_epi16(e3, LD_DEV_PAIR(3)));
#undef LD_DEV_PAIR
}

__attribute__((target("avx2"))) int64_t mxfp4_row_same_avx2(const Mxfp4Ref& t, const uint8_t* wrow, const uint8_t* srow, const uint16_t* drow, int64_t C, uint8_t* same) {
  int64_t c = 0, differ = 0;
  for (; c + 2 <= C; c += 2) {
    const int m = _mm256_movemask_epi8(mxfp4_pair_eq(t, wrow, srow, drow, c));
    same[c] = static_cast<uint8_t>((m & 0xffff) == 0xffff && !t.lossy[srow[c]]);
    same[c + 1] = static_cast<uint8_t>((static_cast<unsigned>(m) >> 16) == 0xffff && !t.lossy[srow[c + 1]]);
    differ += 2 - same[c] - same[c + 1];
  }
  for (; c < C; c++) {  // an odd last block, 128 bits
    const __m128i m0f = _mm_set1_epi8(0x0f);
    const uint8_t sb = srow[c];
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wrow + c * 16));
    const __m128i ev = _mm_and_si128(b, m0f), od = _mm_and_si128(_mm_srli_epi16(b, 4), m0f);
    const __m128i tl = _mm_load_si128(reinterpret_cast<const __m128i*>(t.lo[sb])), th = _mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[sb]));
    const __m128i i0 = _mm_unpacklo_epi8(ev, od), i1 = _mm_unpackhi_epi8(ev, od);
    const __m128i L0 = _mm_shuffle_epi8(tl, i0), H0 = _mm_shuffle_epi8(th, i0), L1 = _mm_shuffle_epi8(tl, i1), H1 = _mm_shuffle_epi8(th, i1);
    const __m128i* d = reinterpret_cast<const __m128i*>(drow + c * 32);
    __m128i eq = _mm_cmpeq_epi16(_mm_unpacklo_epi8(L0, H0), _mm_loadu_si128(d));
    eq = _mm_and_si128(eq, _mm_cmpeq_epi16(_mm_unpackhi_epi8(L0, H0), _mm_loadu_si128(d + 1)));
    eq = _mm_and_si128(eq, _mm_cmpeq_epi16(_mm_unpacklo_epi8(L1, H1), _mm_loadu_si128(d + 2)));
    eq = _mm_and_si128(eq, _mm_cmpeq_epi16(_mm_unpackhi_epi8(L1, H1), _mm_loadu_si128(d + 3)));
    same[c] = static_cast<uint8_t>(_mm_movemask_epi8(eq) == 0xffff && !t.lossy[sb]);
    differ += 1 - same[c];
  }
  return differ;
}

// Whether every byte of s [n] lies in [lo, hi]: two compares per 32 bytes.
__attribute__((target("avx2"))) bool bytes_within_avx2(const uint8_t* s, int64_t n, uint8_t lo, uint8_t hi) {
  const __m256i vlo = _mm256_set1_epi8(static_cast<char>(lo)), vhi = _mm256_set1_epi8(static_cast<char>(hi));
  __m256i in = _mm256_set1_epi8(-1);
  int64_t c = 0;
  for (; c + 32 <= n; c += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + c));
    in = _mm256_and_si256(in, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_max_epu8(v, vlo), v), _mm256_cmpeq_epi8(_mm256_min_epu8(v, vhi), v)));
  }
  bool ok = _mm256_movemask_epi8(in) == -1;
  for (; c < n; c++) ok &= s[c] >= lo && s[c] <= hi;
  return ok;
}

// Whether no scale of the row (srow [C]) can lose range: bytes_within_avx2 when the bytes that cannot form one run,
// else through lossy[].
__attribute__((target("avx2"))) bool mxfp4_scales_safe_avx2(const Mxfp4Ref& t, const uint8_t* srow, int64_t C) {
  if (!t.ranged) {
    bool lossy = false;
    for (int64_t c = 0; c < C; c++) lossy |= t.lossy[srow[c]];
    return !lossy;
  }
  return bytes_within_avx2(srow, C, t.ok_lo, t.ok_hi);
}

// mxfp4_row_clean_avx2 for a row whose scales are all in [hi_lo, hi_hi] (every reference value's low byte is
// zero): the device's low bytes are or'ed together and must be zero, and its high bytes, packed two blocks at a
// time, must be the table's high bytes. Half the lookups and a third fewer shuffles than comparing whole values
// (with the device's row of the same form, one wide layer's AVX2 check 269–278 → 216–250 ms, alternating builds).
// The packing: vpackuswb of blocks c and c+1's first (or last) 16 values per 128-bit lane gives
// [c 0–7, c+1 0–7 | c 8–15, c+1 8–15] (or 16–31); the lookups give [c 0–15 | c+1 0–15] (each lane its own
// block's table), which vpermq 0xD8 (quadwords 0, 2, 1, 3) puts in the same order.
__attribute__((target("avx2"))) bool mxfp4_row_clean_hi_avx2(const Mxfp4Ref& t, const uint8_t* wrow, const uint8_t* srow, const uint16_t* drow, int64_t C) {
  const __m256i m0f = _mm256_set1_epi8(0x0f);
  __m256i differ = _mm256_setzero_si256(), low = _mm256_setzero_si256();
  for (int64_t c = 0; c < C; c += 2) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wrow + c * 16));  // blocks c, c+1
    const __m256i ev = _mm256_and_si256(b, m0f), od = _mm256_and_si256(_mm256_srli_epi16(b, 4), m0f);
    const __m256i th = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[srow[c]]))),
                                               _mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[srow[c + 1]])), 1);
    const __m256i h0 = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(th, _mm256_unpacklo_epi8(ev, od)), 0xD8);
    const __m256i h1 = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(th, _mm256_unpackhi_epi8(ev, od)), 0xD8);
    const __m256i* d = reinterpret_cast<const __m256i*>(drow + c * 32);  // c: d[0] (0–15), d[1] (16–31); c+1: d[2], d[3]
    const __m256i d0 = _mm256_loadu_si256(d), d1 = _mm256_loadu_si256(d + 1), d2 = _mm256_loadu_si256(d + 2), d3 = _mm256_loadu_si256(d + 3);
    low = _mm256_or_si256(low, _mm256_or_si256(_mm256_or_si256(d0, d1), _mm256_or_si256(d2, d3)));
    const __m256i p0 = _mm256_packus_epi16(_mm256_srli_epi16(d0, 8), _mm256_srli_epi16(d2, 8));
    const __m256i p1 = _mm256_packus_epi16(_mm256_srli_epi16(d1, 8), _mm256_srli_epi16(d3, 8));
    differ = _mm256_or_si256(differ, _mm256_or_si256(_mm256_xor_si256(p0, h0), _mm256_xor_si256(p1, h1)));
  }
  return _mm256_testz_si256(differ, differ) && _mm256_testz_si256(low, _mm256_set1_epi16(0x00ff));
}

// Whether every block of the row passes on its bits and no scale of it can lose range (AVX2): the test of
// mxfp4_row_same_avx2 for the whole row at once, with no per-block result, for the rows of a correct device (all).
__attribute__((target("avx2"))) bool mxfp4_row_clean_avx2(const Mxfp4Ref& t, const uint8_t* wrow, const uint8_t* srow, const uint16_t* drow, int64_t C) {
  if (C % 2 != 0) return false;  // an odd block count goes block by block
  if (t.hi_ranged && bytes_within_avx2(srow, C, t.hi_lo, t.hi_hi)) return mxfp4_row_clean_hi_avx2(t, wrow, srow, drow, C);
  __m256i eq = _mm256_set1_epi8(-1);
  for (int64_t c = 0; c < C; c += 2) eq = _mm256_and_si256(eq, mxfp4_pair_eq(t, wrow, srow, drow, c));
  return _mm256_movemask_epi8(eq) == -1 && mxfp4_scales_safe_avx2(t, srow, C);
}

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_epi32(), which -Wmaybe-uninitialized reports at -O3
// (GCC bug 105593, fixed in 13): silenced for these functions only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// mxfp4_row_clean_avx2 with AVX-512BW: each block's 16 reference values in both halves of one
// register (a broadcast), so each vpermw index needs only its low 4 bits right (bit 4 picks one of two equal
// halves, bits 5..15 are not read); the differences are gathered in a register and tested once a row. Byte j of
// the block, widened to a dword b, gives both of its indices as b + (b << 12): the low nibble (element 2j, E2M1
// code in bits 0..3) in the low word and the high nibble (element 2j+1) at bits 16..19, the high word's bits
// 0..3 (the two addends do not overlap, so the sum is an or). A row that is not clean goes block by block.
// Two blocks a step into two accumulators: with one, each block's ternary-logic operation waited for the previous
// block's (a chain through `differ` the compiler also lengthened with register moves), 0.55–0.63 ns a block against
// 0.45 for two chains, measured on a row in L1 (AMD EPYC, AVX-512).
__attribute__((target("avx512f,avx512bw,avx2"))) inline __m512i mxfp4_block_differ_avx512(const Mxfp4Ref& t, const uint8_t* wrow, uint8_t sb, const uint16_t* drow, int64_t c, __m512i differ) {
  const __m512i ref = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(t.f16[sb])));
  const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wrow + c * 16)));
  const __m512i codes = _mm512_add_epi32(b, _mm512_slli_epi32(b, 12));
  // differ | (ref ^ device) in one ternary-logic operation (truth table 0xF6 over differ, ref, device)
  return _mm512_ternarylogic_epi32(differ, _mm512_permutexvar_epi16(codes, ref), _mm512_loadu_si512(drow + c * 32), 0xF6);
}
__attribute__((target("avx512f,avx512bw,avx2"))) bool mxfp4_row_clean_avx512(const Mxfp4Ref& t, const uint8_t* wrow, const uint8_t* srow, const uint16_t* drow, int64_t C) {
  // the or of every reference ^ device, even blocks and odd: zero when all bits agree
  __m512i d0 = _mm512_setzero_si512(), d1 = _mm512_setzero_si512();
  int64_t c = 0;
  for (; c + 2 <= C; c += 2) {
    d0 = mxfp4_block_differ_avx512(t, wrow, srow[c], drow, c, d0);
    d1 = mxfp4_block_differ_avx512(t, wrow, srow[c + 1], drow, c + 1, d1);
  }
  if (c < C) d0 = mxfp4_block_differ_avx512(t, wrow, srow[c], drow, c, d0);  // an odd last block
  const __m512i differ = _mm512_or_si512(d0, d1);
  return _mm512_test_epi32_mask(differ, differ) == 0 && mxfp4_scales_safe_avx2(t, srow, C);
}
#pragma GCC diagnostic pop

// The same test without SIMD.
int64_t mxfp4_row_same(const Mxfp4Ref& t, const uint8_t* wrow, const uint8_t* srow, const uint16_t* drow, int64_t C, uint8_t* same) {
  int64_t differ = 0;
  for (int64_t c = 0; c < C; c++) {
    const uint8_t sb = srow[c];
    bool ok = !t.lossy[sb];
    for (int j = 0; j < 16 && ok; j++) {
      const uint8_t b = wrow[c * 16 + j];
      const uint16_t e = static_cast<uint16_t>(t.lo[sb][b & 15] | (t.hi[sb][b & 15] << 8)), od = static_cast<uint16_t>(t.lo[sb][b >> 4] | (t.hi[sb][b >> 4] << 8));
      ok = drow[c * 32 + 2 * j] == e && drow[c * 32 + 2 * j + 1] == od;
    }
    same[c] = static_cast<uint8_t>(ok);
    differ += !ok;
  }
  return differ;
}

// round_f16 over x[0, n) (n a multiple of 16), 16 lanes a step.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593
__attribute__((target("avx512f"))) void round_f16_run_avx512(const float* x, size_t n, uint16_t* h) {
  for (size_t i = 0; i < n; i += 16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + i), round_f16_avx512(_mm512_loadu_ps(x + i)));
}
#pragma GCC diagnostic pop
__attribute__((target("avx2"))) void round_f16_run_avx2(const float* x, size_t n, uint16_t* h) {
  for (size_t i = 0; i < n; i += 16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + i), round_f16_avx2(_mm256_loadu_ps(x + i), _mm256_loadu_ps(x + i + 8)));
}

// A table in the form AVX2 can look up 32 codes a step (vpshufb: 16 bytes, within each 128-bit lane), for CPUs
// without VBMI. A code's low 7 bits give its FP16 bits but the sign, which is FP16's top bit wherever the table is
// symmetric. Those below 16·groups are looked up in their group of 16. Those above follow the table's run: the FP16
// bits of mantissa m at E4M3 exponent e + 1 are those at e plus 1 << 10 wherever both are FP16 normals (a value
// twice as large, whatever the scale), so they are run[m] + (e << 10), an 8-entry lookup and an add to the high
// byte. Code 0x7f (NaN) has its own bits. An E8M0 scale leaves only the codes whose values fall below FP16's normals
// to the groups (16–48 of 128 at scales of 2^-9 … 2^-13), a float32 scale the same; 8 groups where no run is found.
// The groups are stored telescoped (group g XOR group g + 1, the last as is), so that lookups in every group with an
// index that is in range (bit 7 clear) for each group at or above the code's own XOR to the code's group's entry:
// one index, decremented by 16 a group, serves them all.
// Nothing of this form is assumed: fp8_build runs the lookup itself (fp8_planes_same) over the 256 codes against the
// table, and keeps the form only if every code gives the table's bits (else kNotPlanar: read a value at a time).
constexpr uint8_t kNotPlanar = 0xff;
struct Fp8Planes {
  uint8_t groups = kNotPlanar;  // 0..8
  uint8_t nan_lo = 0, nan_hi = 0;
  alignas(16) uint8_t run_lo[16] = {}, run_hi[16] = {};  // [m], m < 8: the run's bits less (e << 10)
  alignas(16) uint8_t lo[8][16] = {}, hi[8][16] = {};
};

// The planar form of one table of 256 FP16 values: the fewest groups above which its codes are a run (unchecked).
Fp8Planes fp8_planes(const uint16_t* f16) {
  Fp8Planes p;
  int groups = 8;
  for (int g = 0; g < 8; g++) {
    const int c0 = 16 * g;
    uint16_t run[8];
    for (int m = 0; m < 8; m++) run[m] = static_cast<uint16_t>(f16[c0 + m] - ((c0 >> 3) << 10));
    bool is_run = true;
    for (int c = c0; c < 0x7f && is_run; c++) is_run = f16[c] == static_cast<uint16_t>(run[c & 7] + ((c >> 3) << 10));
    if (is_run) {
      groups = g;
      for (int m = 0; m < 8; m++) p.run_lo[m] = static_cast<uint8_t>(run[m] & 0xff), p.run_hi[m] = static_cast<uint8_t>(run[m] >> 8);
      break;
    }
  }
  p.nan_lo = static_cast<uint8_t>(f16[0x7f] & 0xff), p.nan_hi = static_cast<uint8_t>(f16[0x7f] >> 8);
  for (int g = 0; g < groups; g++) {
    for (int n = 0; n < 16; n++) {
      const uint16_t v = f16[16 * g + n], next = g + 1 < groups ? f16[16 * (g + 1) + n] : 0;
      p.lo[g][n] = static_cast<uint8_t>((v ^ next) & 0xff), p.hi[g][n] = static_cast<uint8_t>((v ^ next) >> 8);
    }
  }
  p.groups = static_cast<uint8_t>(groups);
  return p;
}

// fp8_blocks_same_vbmi for CPUs with AVX2 and no VBMI, from a table's planar form t (G = t.groups): 32 codes a step,
// put in the order whose byte unpacks give the device's word order (qwords 0, 2, 1, 3), looked up as Fp8Planes says.
// f16: the same table whole, for a tail of fewer than 32.
template <int G>
__attribute__((target("avx2"))) void fp8_blocks_same_avx2(const uint8_t* codes, int64_t cstride, const Fp8Planes& t, const uint16_t* f16, const uint16_t* d, int64_t dstride,
                                                        int64_t n, int64_t rows, bool* same) {
  __m256i L[G > 0 ? G : 1], H[G > 0 ? G : 1];
  for (int g = 0; g < G; g++) {
    L[g] = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.lo[g])));
    H[g] = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.hi[g])));
  }
  const __m256i m7f = _mm256_set1_epi8(0x7f), m80 = _mm256_set1_epi8(static_cast<char>(0x80)), k70 = _mm256_set1_epi8(0x70), k16 = _mm256_set1_epi8(16);
  const __m256i last_group = _mm256_set1_epi8(static_cast<char>(16 * G - 1)), m7 = _mm256_set1_epi8(7), m3c = _mm256_set1_epi8(0x3c);
  const __m256i RL = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.run_lo)));
  const __m256i RH = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.run_hi)));
  const __m256i nlo = _mm256_set1_epi8(static_cast<char>(t.nan_lo)), nhi = _mm256_set1_epi8(static_cast<char>(t.nan_hi));
  for (int64_t r = 0; r < rows; r++) {
    const uint8_t* c = codes + r * cstride;
    const uint16_t* dr = d + r * dstride;
    __m256i ne = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m256i b = _mm256_permute4x64_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + i)), 0xd8);
      const __m256i mag = _mm256_and_si256(b, m7f);
      __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
      __m256i idx = _mm256_add_epi8(mag, k70);
      for (int g = 0; g < G; g++) {
        lo = _mm256_xor_si256(lo, _mm256_shuffle_epi8(L[g], idx));
        hi = _mm256_xor_si256(hi, _mm256_shuffle_epi8(H[g], idx));
        idx = _mm256_sub_epi8(idx, k16);
      }
      if constexpr (G < 8) {
        // the run's lanes (their lookups above gave 0): run[m] + (e << 10), e << 2 = (mag >> 1) & 0x3c in the high
        // byte; then code 0x7f's
        const __m256i run = _mm256_cmpgt_epi8(mag, last_group), m = _mm256_and_si256(mag, m7);
        lo = _mm256_xor_si256(lo, _mm256_and_si256(run, _mm256_shuffle_epi8(RL, m)));
        hi = _mm256_xor_si256(hi, _mm256_and_si256(run, _mm256_add_epi8(_mm256_shuffle_epi8(RH, m), _mm256_and_si256(_mm256_srli_epi16(mag, 1), m3c))));
        const __m256i nan = _mm256_cmpeq_epi8(mag, m7f);
        lo = _mm256_blendv_epi8(lo, nlo, nan), hi = _mm256_blendv_epi8(hi, nhi, nan);
      }
      hi = _mm256_xor_si256(hi, _mm256_and_si256(b, m80));
      const __m256i d0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dr + i)), d1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dr + i + 16));
      ne = _mm256_or_si256(ne, _mm256_or_si256(_mm256_xor_si256(_mm256_unpacklo_epi8(lo, hi), d0), _mm256_xor_si256(_mm256_unpackhi_epi8(lo, hi), d1)));
    }
    uint32_t rest = 0;
    for (; i < n; i++) rest |= static_cast<uint32_t>(f16[c[i]] ^ dr[i]);
    same[r] = rest == 0 && _mm256_testz_si256(ne, ne);
  }
}

// fp8_blocks_same_avx2 at t's group count; false where t has no planar form.
bool fp8_planes_same(const Fp8Planes& t, const uint16_t* f16, const uint8_t* codes, int64_t cstride, const uint16_t* d, int64_t dstride, int64_t n, int64_t rows,
                     bool* same) {
  switch (t.groups) {
    case 0: fp8_blocks_same_avx2<0>(codes, cstride, t, f16, d, dstride, n, rows, same); return true;
    case 1: fp8_blocks_same_avx2<1>(codes, cstride, t, f16, d, dstride, n, rows, same); return true;
    case 2: fp8_blocks_same_avx2<2>(codes, cstride, t, f16, d, dstride, n, rows, same); return true;
    case 3: fp8_blocks_same_avx2<3>(codes, cstride, t, f16, d, dstride, n, rows, same); return true;
    case 4: fp8_blocks_same_avx2<4>(codes, cstride, t, f16, d, dstride, n, rows, same); return true;
    case 5: fp8_blocks_same_avx2<5>(codes, cstride, t, f16, d, dstride, n, rows, same); return true;
    case 6: fp8_blocks_same_avx2<6>(codes, cstride, t, f16, d, dstride, n, rows, same); return true;
    case 7: fp8_blocks_same_avx2<7>(codes, cstride, t, f16, d, dstride, n, rows, same); return true;
    case 8: fp8_blocks_same_avx2<8>(codes, cstride, t, f16, d, dstride, n, rows, same); return true;
    default: return false;
  }
}

// FP8 blocks: per stored scale (an E8M0 byte or a float32 pattern), the reference's FP16 values of the 256 codes
// (exact_row over a row holding codes 0..255 under that scale, then round_f16) and whether the scale can lose
// range; block r·C + c uses table id[r·C + c]. A tensor holds a handful of distinct E8M0 scales, so a handful of
// tables are built (at most one per block, for float32 scales).
struct Fp8Ref {
  std::vector<uint32_t> id;     // [r·C + c] → table
  std::vector<uint16_t> f16;    // [table·256 + code]
  std::vector<uint8_t> lo, hi;  // the same bits' low and high bytes, for the VBMI test
  std::vector<Fp8Planes> planes;  // [table], for the AVX2 test (planar: built)
  std::vector<uint8_t> lossy;   // [table]
  // Tables are built where first needed (fp8_ready), by the worker's threads: float32 scales make one a block (512
  // for [2048×4096]), 0.8 µs each, which on the JS thread was a serial ~30 % of an FP8 check. state[table]: 0 not
  // built, 1 being built, 2 built (its bits published by the release store that sets 2).
  ExactKind kind = ExactKind::Fp8E8m0;
  // the compare's form, fixed at the level the job was made at (only its own tables are built): VBMI's 256-byte
  // tables, AVX2's planar forms, or neither (scalar: the table a value at a time)
  bool vbmi = false, planar = false;
  const uint8_t* s = nullptr;  // the stored scales
  std::vector<int64_t> first;  // [table] → a block holding its scale
  std::unique_ptr<std::atomic<uint8_t>[]> state;
};

// The distinct scales of the tensor's blocks, each a table to be built (fp8_ready).
Fp8Ref fp8_ref(ExactKind kind, const uint8_t* s, int64_t blocks) {
  Fp8Ref t;
  t.kind = kind, t.s = s;
  const RefSimd simd = reference_simd();
  t.vbmi = simd == RefSimd::Avx512 && reference_vbmi();
  t.planar = simd != RefSimd::Scalar && g_avx2 && !t.vbmi;
  const size_t sz = kind == ExactKind::Fp8F32 ? 4 : 1;
  t.id.resize(static_cast<size_t>(blocks));
  std::unordered_map<uint32_t, uint32_t> seen;
  for (int64_t b = 0; b < blocks; b++) {
    uint32_t key = 0;
    std::memcpy(&key, s + b * sz, sz);
    const auto it = seen.emplace(key, static_cast<uint32_t>(t.first.size()));
    if (it.second) t.first.push_back(b);
    t.id[b] = it.first->second;
  }
  const size_t T = t.first.size();
  t.f16.resize(T * 256);
  t.lossy.resize(T);
  if (t.planar) t.planes.resize(T);
  else if (t.vbmi) t.lo.resize(T * 256), t.hi.resize(T * 256);
  t.state.reset(new std::atomic<uint8_t>[T]);
  for (size_t k = 0; k < T; k++) t.state[k].store(0, std::memory_order_relaxed);
  return t;
}

// Table k: the reference's FP16 bits of the 256 codes under its scale (exact_row over a row holding codes 0..255,
// then round_f16 at the reference's SIMD level), whether the scale can lose range, and the table's planar form.
void fp8_build(Fp8Ref& t, int64_t k) {
  static const uint8_t* codes = [] {
    static uint8_t c[256];
    for (int i = 0; i < 256; i++) c[i] = static_cast<uint8_t>(i);
    return c;
  }();
  const size_t sz = t.kind == ExactKind::Fp8F32 ? 4 : 1;
  float v[256];
  exact_row(t.kind, codes, t.s + t.first[k] * sz, 0, 256, 1, 256, v);
  uint16_t* h16 = t.f16.data() + k * 256;
  const RefSimd simd = reference_simd();
  if (simd == RefSimd::Avx512 && g_avx512bw) round_f16_run_avx512(v, 256, h16);
  else if (simd != RefSimd::Scalar && g_avx2) round_f16_run_avx2(v, 256, h16);
  else
    for (int c = 0; c < 256; c++) h16[c] = round_f16(v[c]);
  bool lossy = false;
  for (int c = 0; c < 256; c++) {
    const uint16_t h = h16[c];
    if (t.vbmi) t.lo[k * 256 + c] = static_cast<uint8_t>(h & 0xff), t.hi[k * 256 + c] = static_cast<uint8_t>(h >> 8);
    // NaN codes (0x7F, 0xFF) decode to NaN and never mark a block: a weight holding any is refused, by the caller
    // before the compare or, when the compare reads the weight itself, after it from weightNanCodes (check.ts
    // looks at that before anything else in the result)
    if ((c & 0x7f) != 0x7f && (!std::isfinite(v[c]) || (h & 0x7c00) == 0x7c00 || (v[c] != 0 && (h & 0x7fff) == 0))) lossy = true;
  }
  t.lossy[k] = lossy;
  if (t.planar) {
    // kept only if its lookup gives the table's bits for all 256 codes
    Fp8Planes p = fp8_planes(h16);
    bool same = false;
    if (!fp8_planes_same(p, h16, codes, 256, h16, 256, 256, 1, &same) || !same) p.groups = kNotPlanar;
    t.planes[k] = p;
  }
}

// Build the tables of block row br's C blocks that no thread has taken, then wait for those another thread is
// building (two threads on one block row share its tables' work). fp8_build neither throws nor returns early, so a
// table taken is always built.
void fp8_ready(Fp8Ref& t, int64_t br, int64_t C) {
  bool busy = false;
  for (int64_t c = 0; c < C; c++) {
    const uint32_t k = t.id[br * C + c];
    std::atomic<uint8_t>& st = t.state[k];
    uint8_t idle = 0;
    if (st.load(std::memory_order_acquire) == 0 && st.compare_exchange_strong(idle, 1, std::memory_order_acq_rel)) {
      fp8_build(t, k);
      st.store(2, std::memory_order_release);
    } else {
      busy |= st.load(std::memory_order_acquire) != 2;
    }
  }
  for (int64_t c = 0; c < C && busy; c++) {
    while (t.state[t.id[br * C + c]].load(std::memory_order_acquire) != 2) std::this_thread::yield();  // a table is a microsecond's work
  }
}

// Byte j of the 128 bytes of two registers of words, as indices of a two-register byte permute: the words' low
// bytes are the even bytes (kWordBytes[0]), their high bytes the odd ones (kWordBytes[1]).
struct WordBytes {
  alignas(64) uint8_t b[2][64];
  constexpr WordBytes() : b{} {
    for (int j = 0; j < 64; j++) b[0][j] = static_cast<uint8_t>(2 * j), b[1][j] = static_cast<uint8_t>(2 * j + 1);
  }
};
constexpr WordBytes kWordBytesAll{};
constexpr const uint8_t (&kWordBytes)[2][64] = kWordBytesAll.b;

// For `rows` rows of one block (codes and device values `cstride` and `dstride` apart, the tables loaded once
// for all of them): same[r] = whether row r's n device values d equal the block's reference FP16 bits for its
// codes (lo, hi: the reference table's low and high bytes). AVX-512 VBMI, 64 per step: a code's low 7 bits index
// two 128-byte halves of each table with vpermi2b and its top bit picks the half; the device's words are split
// into their low and high bytes (one two-register byte permute each, a third of the work of vpmovwb's four
// narrowings) and compared byte for byte.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, as above
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void fp8_blocks_same_vbmi(const uint8_t* codes, int64_t cstride, const uint8_t* lo, const uint8_t* hi,
                                                                                  const uint16_t* d, int64_t dstride, int64_t n, int64_t rows, bool* same) {
  const __m512i L0 = _mm512_loadu_si512(lo), L1 = _mm512_loadu_si512(lo + 64), L2 = _mm512_loadu_si512(lo + 128), L3 = _mm512_loadu_si512(lo + 192);
  const __m512i H0 = _mm512_loadu_si512(hi), H1 = _mm512_loadu_si512(hi + 64), H2 = _mm512_loadu_si512(hi + 128), H3 = _mm512_loadu_si512(hi + 192);
  const __m512i even = _mm512_load_si512(kWordBytes[0]), odd = _mm512_load_si512(kWordBytes[1]);
  for (int64_t r = 0; r < rows; r++) {
    const uint8_t* c = codes + r * cstride;
    const uint16_t* dr = d + r * dstride;
    __mmask64 ne = 0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
      const __m512i idx = _mm512_loadu_si512(c + i);
      const __mmask64 top = _mm512_movepi8_mask(idx);
      const __m512i l = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(L0, idx, L1), _mm512_permutex2var_epi8(L2, idx, L3));
      const __m512i h = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(H0, idx, H1), _mm512_permutex2var_epi8(H2, idx, H3));
      const __m512i d0 = _mm512_loadu_si512(dr + i), d1 = _mm512_loadu_si512(dr + i + 32);
      const __m512i dl = _mm512_permutex2var_epi8(d0, even, d1), dh = _mm512_permutex2var_epi8(d0, odd, d1);
      ne |= _mm512_cmpneq_epi8_mask(l, dl) | _mm512_cmpneq_epi8_mask(h, dh);
    }
    bool ok = ne == 0;
    for (; i < n; i++) ok &= dr[i] == static_cast<uint16_t>(lo[c[i]] | (hi[c[i]] << 8));
    same[r] = ok;
  }
}
#pragma GCC diagnostic pop

// For the n rows from r0 held in dev ([n][in]): differ[(o − r0)·C + c] = whether row o's block c is not the
// reference's on its FP16 bits, rows of the same block row sharing one load of each block's tables: VBMI's byte
// tables (f8.vbmi), else each block by its table's planar form (AVX2), or value by value where the table has none.
// w0: the stored bytes of row r0 onwards.
void fp8_step_same(const Fp8Ref& f8, const uint8_t* w0, int64_t in, int64_t bo, int64_t bi, int64_t C, int64_t r0, int64_t n,
                   const uint16_t* dev, uint8_t* differ) {
  bool same[kFp8Rows];
  for (int64_t a = r0; a < r0 + n;) {
    const int64_t br = a / bo, e = std::min(r0 + n, (br + 1) * bo);  // rows [a, e) share block row br
    for (int64_t c = 0; c < C; c++) {
      const int64_t i0 = c * bi, w = std::min(in, i0 + bi) - i0;
      const uint32_t k = f8.id[br * C + c];
      const uint8_t* codes = w0 + (a - r0) * in + i0;
      const uint16_t* d = dev + (a - r0) * in + i0;
      const int64_t kb = static_cast<int64_t>(k) * 256;
      const uint16_t* f16 = f8.f16.data() + kb;
      if (f8.vbmi) {
        fp8_blocks_same_vbmi(codes, in, f8.lo.data() + kb, f8.hi.data() + kb, d, in, w, e - a, same);
      } else if (!fp8_planes_same(f8.planes[k], f16, codes, in, d, in, w, e - a, same)) {
        for (int64_t r = 0; r < e - a; r++) {
          uint32_t diff = 0;
          for (int64_t i = 0; i < w; i++) diff |= static_cast<uint32_t>(f16[codes[r * in + i]] ^ d[r * in + i]);
          same[r] = diff == 0;
        }
      }
      for (int64_t o = a; o < e; o++) differ[(o - r0) * C + c] = !same[o - a];
    }
    a = e;
  }
}

// How many bytes x of b [n] have (x & mask) == value; the AVX2 form 32 at a time (a byte loop ran at ~1 GB/s and
// cost a wide layer's check ~0.1 s over its 110 MB of E8M0 scales).
int64_t count_bytes(const uint8_t* b, size_t n, uint8_t mask, uint8_t value) {
  int64_t count = 0;
  for (size_t i = 0; i < n; i++) count += (b[i] & mask) == value;
  return count;
}

__attribute__((target("avx2,popcnt"))) int64_t count_bytes_avx2(const uint8_t* b, size_t n, uint8_t mask, uint8_t value) {
  const __m256i m = _mm256_set1_epi8(static_cast<char>(mask)), v = _mm256_set1_epi8(static_cast<char>(value));
  int64_t count = 0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i x = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i)), m);
    count += __builtin_popcount(static_cast<unsigned>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(x, v))));
  }
  return count + count_bytes(b + i, n - i, mask, value);
}

// The fused read (issue 15): with a `fill` argument {fd, offset}, the weight's bytes are not in `weight` but in
// the file at `offset` (the tensor's first byte), and each thread reads the rows it is about to compare into a
// chunk buffer of its own (pread, ~1 MiB at a time), then both sides decode and compare them while they sit in
// its cache: one pass over the page cache on both cores, where a read of the whole tensor first (one thread, the
// kernel's copy into memory) and the compare after it read every byte twice from memory. `weight` is left as it
// was: a tensor that differs is read again by the caller for its evidence (harness/weights/check.ts). Measured
// side by side on a wide layer's file, two threads: the kernel's copy ran at 16 GB/s in 128 KiB reads into the
// tensor's place, 25 GB/s in 512 KiB ones, 31–34 GB/s in 512 KiB–1 MiB reads into a chunk that stays in cache
// (each read call has a fixed cost of ~8 µs on this kind of VM). Where the page cache holds the rows in 2 MiB
// folios they are not copied at all but compared where they lie (the mapped read, below). The FP8 weight's E4M3
// NaN codes are counted in the same pass (weightNanCodes), as the caller counted them before.
struct FileMap;  // below: one file's mapping, shared by its tensors

struct Fill {
  bool on = false;
  int fd = -1;
  int64_t offset = 0;
  std::atomic<int> error{0};  // 0, −1: the file ended early, else errno
  // the mapped read (map_rows): the file's mapping, shared by its tensors, and this tensor's place in it
  std::shared_ptr<FileMap> map;
  std::atomic<bool> small{false};  // an extent of this tensor was not: its rows not yet read are read, not asked about
  uint64_t key = 0;                // the file's, for the count of small answers (worth_mapping)
  int64_t bytes = 0;               // the tensor's stored bytes from offset
};

// The mapped read (issue 15, round 39): where the page cache holds a tensor's bytes in 2 MiB folios, its rows are
// compared where they lie, through one PMD entry per 2 MiB (huge_map.h), instead of copied into a chunk buffer by
// pread: the kernel's copy was a quarter of the check's CPU time (perf, a wide layer), and a wide layer's check
// took 0.28–0.30 s mapped against 0.32–0.36 s read, side by side. Where the folios are 4 KiB (read in by
// POSIX_FADV_WILLNEED, or by page faults on small mappings) a mapped page costs a fault of its own and mapped rows
// ran 2 GB/s, so each extent is asked first: mapped (with the tensor's later extents, one MADV_POPULATE_READ), then
// whether a PMD entry maps it (PAGEMAP_SCAN's PAGE_IS_HUGE, Linux 6.7; /proc/self/pagemap, unprivileged). An extent
// that is not sends its rows to pread, and so does the rest of its tensor (one ask a tensor). After kSmallRun such
// answers in a row the process stops mapping, asking again every kAskEvery-th tensor: a page cache of 4 KiB folios
// then costs an ask or so a layer (~45 µs an extent of 4 KiB folios populated, a C probe); the count is kept per file
// (a checkpoint's shards are read in at different times, by different readers). Results cannot depend on it: the
// same bytes reach the same compare either way. The one hazard is any mapping's: a file truncated under the run
// faults (SIGBUS) where a row is read after its extent was asked, which the CLI's supervisor reports as bad input
// (harness/cli/supervise.ts); the file's size is checked when the tensor is mapped, and an extent the populate
// cannot map is read.
constexpr int kSmallRun = 16, kAskEvery = 64;
struct SmallRun {
  int run = 0;           // answers "not mapped whole" in a row
  uint32_t skipped = 0;  // tensors not mapped since
};
std::mutex g_small_mutex;
std::unordered_map<uint64_t, SmallRun> g_small;  // by file (device and inode)

uint64_t file_key(const struct stat& st) { return static_cast<uint64_t>(st.st_dev) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(st.st_ino); }

// whether to map a tensor of the file: not after kSmallRun small answers in a row, but every kAskEvery-th tensor
bool worth_mapping(uint64_t key) {
  std::lock_guard<std::mutex> lock(g_small_mutex);
  SmallRun& r = g_small[key];
  return r.run < kSmallRun || ++r.skipped % kAskEvery == 0;
}

void tell_small(uint64_t key, bool small) {
  std::lock_guard<std::mutex> lock(g_small_mutex);
  SmallRun& r = g_small[key];
  r.run = small ? r.run + 1 : 0;
}

// PAGEMAP_SCAN (uapi linux/fs.h, Linux 6.7), declared here for older headers: an older kernel fails the ioctl, and
// the rows are read.
struct PmRegion {
  uint64_t start, end, categories;
};
struct PmScanArg {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages, category_inverted, category_mask, category_anyof_mask, return_mask;
};
constexpr unsigned long kPagemapScan = _IOWR('f', 16, PmScanArg);
constexpr uint64_t kPageIsHuge = 1u << 6;

// /proc/self/pagemap, where PAGEMAP_SCAN answers on it (-1 elsewhere: then every row is read)
int pagemap_fd() {
  static const int fd = [] {
    const int f = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (f < 0) return -1;
    // asked once over a page of this process's own (its answer: no run, or one)
    static const uint8_t probe[1] = {0};
    PmRegion reg{};
    PmScanArg arg{};
    arg.size = sizeof(arg);
    arg.start = reinterpret_cast<uintptr_t>(probe) & ~static_cast<uintptr_t>(sysconf(_SC_PAGESIZE) - 1);
    arg.end = arg.start + static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    arg.vec = reinterpret_cast<uintptr_t>(&reg);
    arg.vec_len = 1;
    arg.category_mask = kPageIsHuge;
    arg.return_mask = kPageIsHuge;
    if (ioctl(f, kPagemapScan, &arg) < 0) {
      close(f);
      return -1;
    }
    return f;
  }();
  return fd;
}

// mappedRowsAvailable() → whether this kernel lets the fused pass ask which extents are mapped by PMD entries (the
// mapped read's condition besides the page cache's folios), for the tests
Napi::Value mapped_rows_available(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), pagemap_fd() >= 0); }

// One file mapped whole, as huge_map.h lays it out, for every tensor of it the pass compares (g_file_maps): a mapping
// per tensor cost an munmap per tensor, and on this kind of VM each is a TLB shootdown to the other thread (a wide
// layer's check 0.28 → 0.44–0.65 s once those munmaps ran as each tensor ended). What a batch has compared is
// dropped from the process (MADV_DONTNEED: the pages stay in the page cache) when the batch ends, in one call per
// run of extents (drop_compared), so the process holds at most the batches in flight. The mapping itself goes with
// the last tensor that holds it.
struct FileMap {
  uint8_t* base = nullptr;
  size_t len = 0;
  std::unique_ptr<std::atomic<uint8_t>[]> extent;  // per extent: 0 not asked since mapped, 1 mapped whole by one entry, 2 not
  ~FileMap() {
    if (base != nullptr) munmap(base, len);
  }
};
std::mutex g_file_maps_mutex;
std::unordered_map<uint64_t, std::weak_ptr<FileMap>> g_file_maps;  // by file (device and inode)

// The file's mapping, at least `need` bytes long (a file that grew is mapped again), or null.
std::shared_ptr<FileMap> file_map(int fd, uint64_t key, int64_t size) {
  const int64_t page = sysconf(_SC_PAGESIZE), need = (size + page - 1) / page * page;
  std::lock_guard<std::mutex> lock(g_file_maps_mutex);
  std::weak_ptr<FileMap>& slot = g_file_maps[key];
  std::shared_ptr<FileMap> m = slot.lock();
  if (m != nullptr && static_cast<int64_t>(m->len) >= need) return m;
  uint8_t* base = ld::map_extents(fd, 0, static_cast<size_t>(need));
  if (base == nullptr) return nullptr;
  m = std::make_shared<FileMap>();
  m->base = base, m->len = static_cast<size_t>(need);
  const int64_t n = (need + ld::kExtent - 1) / ld::kExtent;
  m->extent.reset(new std::atomic<uint8_t>[static_cast<size_t>(n)]);
  for (int64_t i = 0; i < n; i++) m->extent[static_cast<size_t>(i)].store(0, std::memory_order_relaxed);
  slot = m;
  return m;
}

// The file's mapping for the tensor's len bytes from f.offset, or none (its rows are read).
void map_rows(Fill& f, int64_t len) {
  if (len < ld::kExtent || pagemap_fd() < 0) return;
  struct stat st;
  if (fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < f.offset + len) return;  // pread reports what is wrong
  f.key = file_key(st);
  f.bytes = len;
  if (!worth_mapping(f.key)) return;
  f.map = file_map(f.fd, f.key, st.st_size);
}

// Extents [e0, e1] of the mapping asked at once: mapped (MADV_POPULATE_READ, one call for them all), then which of
// them a PMD entry maps whole (PAGEMAP_SCAN, one call: its runs of huge pages) → true for those, in huge[0 .. e1 − e0].
// Asked per tensor (mapped_rows: its first extent, then the rest), not faulted per extent: a fault to each extent cost
// ~16 µs on this kind of VM (the exception's entry and exit), where the populate maps an extent in ~1 µs (a C probe
// over a wide layer's shard, 2 MiB folios cached); the faults were ~10 % of a wide layer's check CPU (perf), with
// 1,700 extents a layer. At most kAskExtents extents a call (regs). A kernel before 5.14 refuses the advice: the
// first byte of each extent is then touched instead. A range the populate cannot map (the file shrank under the
// run: it fails where an access would raise SIGBUS) reads as not huge, so its rows go to pread, which names what is
// wrong.
constexpr int64_t kAskExtents = 64;  // at most this many a call (a tensor of up to 130 MiB in two)
void extents_huge(const FileMap& m, int64_t first_byte, int64_t e0, int64_t e1, bool* huge) {
  uint8_t* from = m.base + e0 * ld::kExtent;
  const size_t span = static_cast<size_t>((e1 - e0 + 1) * ld::kExtent);
  std::fill(huge, huge + (e1 - e0 + 1), false);
  if (madvise(from, span, MADV_POPULATE_READ) != 0) {
    if (errno != EINVAL) return;
    for (int64_t e = e0; e <= e1; e++) (void)*static_cast<const volatile uint8_t*>(m.base + std::max(e * ld::kExtent, first_byte));
  }
  PmRegion regs[kAskExtents];
  PmScanArg arg{};
  arg.size = sizeof(arg);
  arg.start = reinterpret_cast<uintptr_t>(from);
  arg.end = arg.start + span;
  arg.vec = reinterpret_cast<uintptr_t>(regs);
  arg.vec_len = static_cast<uint64_t>(e1 - e0 + 1);
  arg.category_mask = kPageIsHuge;  // only pages mapped huge, reported as runs
  arg.return_mask = kPageIsHuge;
  const int n = ioctl(pagemap_fd(), kPagemapScan, &arg);
  for (int k = 0; k < n; k++) {
    // the extents a run covers whole (a run's ends are PMD boundaries where its pages are PMD-mapped)
    const int64_t lo = (static_cast<int64_t>(regs[k].start - arg.start) + ld::kExtent - 1) / ld::kExtent;
    const int64_t hi = static_cast<int64_t>(regs[k].end - arg.start) / ld::kExtent;
    for (int64_t i = lo; i < hi; i++) huge[i] = true;
  }
}

// Bytes [x, x + len) of the tensor (x from its first byte) where they lie in the mapping, or null: then read them.
// An extent not yet asked is asked with the rest of the tensor's extents after it (extents_huge).
const uint8_t* mapped_rows(Fill& f, int64_t x, int64_t len) {
  if (f.map == nullptr) return nullptr;
  FileMap& m = *f.map;
  const int64_t from = f.offset + x;
  // the file's last extent, partial, has no PMD entry to ask about: its rows are read, and no answer recorded (it
  // says nothing about the folios of the tensor's other extents or of the file)
  const int64_t whole = static_cast<int64_t>(m.len) / ld::kExtent;  // extents [0, whole) are whole
  for (int64_t e = from / ld::kExtent; e <= (from + len - 1) / ld::kExtent; e++) {
    std::atomic<uint8_t>& st = m.extent[static_cast<size_t>(e)];
    uint8_t v = st.load(std::memory_order_acquire);
    if (v == 0) {
      if (e >= whole || f.small.load(std::memory_order_relaxed)) return nullptr;
      // this extent alone, then, if it is huge, the tensor's later ones at once (two threads asking at once get the
      // same answers): asked together first, a tensor in 4 KiB folios would have every extent of it populated (~45
      // µs each) before the answer sent its rows to pread
      const int64_t last = std::min(whole - 1, (f.offset + f.bytes - 1) / ld::kExtent);
      bool huge[kAskExtents + 1];
      extents_huge(m, f.offset, e, e, huge);
      int64_t e1 = e;
      if (huge[0] && e < last) {
        e1 = std::min(last, e + kAskExtents);
        extents_huge(m, f.offset, e + 1, e1, huge + 1);
      }
      bool all = true;
      for (int64_t i = e; i <= e1; i++) {
        m.extent[static_cast<size_t>(i)].store(huge[i - e] ? 1 : 2, std::memory_order_release);
        all &= huge[i - e];
      }
      v = huge[0] ? 1 : 2;
      // a small answer anywhere in the tensor counts (its rows there are read), so a file of mixed folios stops
      // being asked as one of small ones does
      tell_small(f.key, !all);
      if (!all) f.small.store(true, std::memory_order_relaxed);
    }
    if (v != 1) return nullptr;
  }
  return m.base + from;
}

// The extents of the tensors compared, dropped from the process (MADV_DONTNEED), one call per run of extents of a
// file, then the tensors' holds on the mapping itself, and asked about again when next used (the page cache may read them in again otherwise meanwhile). A run
// shared with a tensor still being compared (the next batch's first, beside this one's last) is faulted again there.
template <class Jobs>
void drop_compared(const Jobs& jobs) {
  std::vector<std::tuple<FileMap*, int64_t, int64_t>> runs;  // [first, last] extent
  for (const auto& j : jobs) {
    const Fill& f = j->fill;
    if (f.map == nullptr) continue;
    const int64_t bytes = j->a.out * j->row_bytes;
    runs.emplace_back(f.map.get(), f.offset / ld::kExtent, (f.offset + bytes - 1) / ld::kExtent);
  }
  std::sort(runs.begin(), runs.end());
  for (size_t i = 0; i < runs.size();) {
    auto [m, lo, hi] = runs[i];
    size_t k = i + 1;
    for (; k < runs.size() && std::get<0>(runs[k]) == m && std::get<1>(runs[k]) <= hi + 1; k++) hi = std::max(hi, std::get<2>(runs[k]));
    const int64_t last = std::min<int64_t>(hi + 1, static_cast<int64_t>((m->len + ld::kExtent - 1) / ld::kExtent));
    for (int64_t e = lo; e < last; e++) m->extent[static_cast<size_t>(e)].store(0, std::memory_order_relaxed);
    const size_t end = std::min(m->len, static_cast<size_t>(last * ld::kExtent));
    madvise(m->base + lo * ld::kExtent, end - static_cast<size_t>(lo * ld::kExtent), MADV_DONTNEED);
    i = k;
  }
  // and the batch's hold on each file's mapping: the mapping goes with the last batch that compares the file (a
  // batch in flight beside this one keeps it for its own tensors), not when this batch's handle is collected, so a
  // shard deleted after the check has its space back then
  for (const auto& j : jobs) j->fill.map.reset();
}

// rows [r0, e) of the weight from the file into dst; false (and f.error set) on a short read or an error
bool fill_rows(Fill& f, uint8_t* dst, int64_t row_bytes, int64_t r0, int64_t e) {
  size_t want = static_cast<size_t>((e - r0) * row_bytes);
  off_t at = static_cast<off_t>(f.offset + r0 * row_bytes);
  while (want > 0) {
    const ssize_t got = pread(f.fd, dst, want, at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      int none = 0;
      f.error.compare_exchange_strong(none, got == 0 ? -1 : errno);
      return false;
    }
    dst += got, at += got, want -= static_cast<size_t>(got);
  }
  return true;
}

constexpr int64_t kFillChunkBytes = 1 << 20;

// One tensor of the fused pass: its checked arguments, its chunks of rows, and what its threads found. Built on
// the JS thread (rows_job), run by run_jobs on any thread (it touches no JS value), read back by rows_result.
struct RowsJob {
  WeightArgs a{};
  const LdRowSource* src = nullptr;
  bool fast = true, mx = false, fp8 = false, e2 = false;
  Fill fill;
  int64_t row_bytes = 0, C = 0, step = 1, chunk_rows = 1, nchunks = 0;
  Fp8Ref f8;
  // NVFP4's tables (e2: fast, 16-value blocks), 16 KiB, so only for NVFP4: held inline they made every job a 16 KiB
  // aligned allocation, a batch's 16 of them more than malloc's trim threshold, so each batch grew the heap into a
  // fresh huge page (zeroed by the kernel, ~4 % of a wide layer's check) that the batch's end handed back
  std::unique_ptr<E2m1Ref> e2m1;
  Flags flags;
  std::vector<Partial> parts;  // one per thread of the pass that runs it (run_jobs, or the batch worker's team)
  explicit RowsJob(int64_t blocks) : flags(blocks) {}
};

// Arguments (kind, weight, scale, out, in, bo, bi, source, fast[, fill]) in v[0..9], checked as checkF16Rows names them.
std::unique_ptr<RowsJob> rows_job(Napi::Env env, const Napi::Value* v, size_t nargs) {
  const WeightArgs wa = weight_args(env, v, "checkF16Rows");
  const ExactKind kind = wa.kind;
  const int64_t out = wa.out, in = wa.in, bo = wa.bo, bi = wa.bi;
  if (kind == ExactKind::Mxfp4 && (bo != 1 || bi != 32)) throw Napi::RangeError::New(env, "checkF16Rows: mxfp4 needs [1, 32] blocks");
  // bitsandbytes' flat blocks are this pass's [row, column] grid (flat block o·in/bi + i/bi) only when each row holds
  // whole blocks; blocks that straddle rows are counted by checkF16 over the flattened weight
  if (kind == ExactKind::Table4FlatF32 && in % bi != 0) throw Napi::RangeError::New(env, "checkF16Rows: bitsandbytes blocks straddle rows (in % blocksize ≠ 0); use checkF16");
  static const napi_type_tag tag = {LD_ROW_SOURCE_TAG_LOWER, LD_ROW_SOURCE_TAG_UPPER};
  bool tagged = false;
  if (!v[7].IsExternal() || napi_check_object_type_tag(env, v[7], &tag, &tagged) != napi_ok || !tagged) {
    throw Napi::TypeError::New(env, "checkF16Rows: source must be a device row source (dequantRowSource)");
  }
  const LdRowSource* src = v[7].As<Napi::External<LdRowSource>>().Data();
  if (src->out != out || src->in != in) throw Napi::RangeError::New(env, "checkF16Rows: the row source is [" + std::to_string(src->out) + "×" + std::to_string(src->in) + "], the weight [" + std::to_string(out) + "×" + std::to_string(in) + "]");
  const int64_t C = (in + bi - 1) / bi;
  auto j = std::make_unique<RowsJob>(((out + bo - 1) / bo) * C);
  j->a = wa, j->src = src, j->C = C;
  j->fast = v[8].IsBoolean() && v[8].As<Napi::Boolean>().Value();
  if (nargs >= 10 && !v[9].IsUndefined() && !v[9].IsNull()) {
    if (!v[9].IsObject()) throw Napi::TypeError::New(env, "checkF16Rows: fill must be { fd, offset }");
    const Napi::Object o = v[9].As<Napi::Object>();
    const Napi::Value fd = o.Get("fd"), off = o.Get("offset");
    const double fdv = fd.IsNumber() ? fd.As<Napi::Number>().DoubleValue() : -1, offv = off.IsNumber() ? off.As<Napi::Number>().DoubleValue() : -1;
    if (!(fdv >= 0 && fdv <= 2147483647.0 && fdv == std::floor(fdv)) || !(offv >= 0 && offv <= 9007199254740991.0 && offv == std::floor(offv))) {
      throw Napi::RangeError::New(env, "checkF16Rows: fill.fd and fill.offset must be integers ≥ 0");
    }
    // the kinds whose rows are whole bytes of the file, row after row: MXFP4, NVFP4, FP8 blocks, and bitsandbytes'
    // flat codes where each row holds whole blocks (checked above) of an even count (a row starts on a byte)
    const bool rows_of_bytes = kind == ExactKind::Mxfp4 || kind == ExactKind::E2m1Lut || kind == ExactKind::Fp8E8m0 || kind == ExactKind::Fp8F32 ||
                               (kind == ExactKind::Table4FlatF32 && in % 2 == 0);
    if (!rows_of_bytes) throw Napi::RangeError::New(env, "checkF16Rows: fill reads MXFP4, NVFP4, FP8-block and bitsandbytes weights (rows of whole bytes) only");
    j->fill.on = true, j->fill.fd = static_cast<int>(fdv), j->fill.offset = static_cast<int64_t>(offv);
  }
  // a row's stored bytes, for the kinds whose rows wc below addresses (fill reads only those kinds)
  j->row_bytes = kind == ExactKind::Mxfp4 || kind == ExactKind::E2m1Lut || kind == ExactKind::Table4FlatF32 ? in / 2 : in;
  if (j->fill.on) map_rows(j->fill, out * j->row_bytes);
  j->mx = kind == ExactKind::Mxfp4;
  if (j->mx) mxfp4_ref();  // built before any thread needs it
  j->fp8 = j->fast && (kind == ExactKind::Fp8E8m0 || kind == ExactKind::Fp8F32);
  if (j->fp8) j->f8 = fp8_ref(kind, wa.s, ((out + bo - 1) / bo) * C);
  static const bool avx2 = __builtin_cpu_supports("avx2") != 0;
  j->e2 = j->fast && kind == ExactKind::E2m1Lut && bo == 1 && bi == 16 && avx2;
  if (j->e2) {
    j->e2m1 = std::make_unique<E2m1Ref>();
    e2m1_ref(wa.s, *j->e2m1);
  }
  // FP8 blocks: kFp8Rows rows a step, so each block's tables are loaded once for the step's rows on both sides
  // (a block is 128 codes of a row: 8 table loads for every 2 steps of lookups, one row at a time); else one row.
  j->step = j->fp8 ? kFp8Rows : kRows;
  // Rows in chunks taken as threads come free: a vCPU of a shared machine is not always as fast as the other,
  // and with one contiguous range per thread (static) the faster one waited for the slower at the end of every
  // tensor (1.3× slower over 16 [2048×4096] tensors, measured side by side). Without fill, 64 rows (8-row chunks
  // interleaved the threads' pages too finely); with fill, what one read brings in (kFillChunkBytes).
  j->chunk_rows = j->fill.on ? std::max<int64_t>(1, kFillChunkBytes / (j->row_bytes * j->step)) * j->step : std::max<int64_t>(1, 64 / j->step) * j->step;
  // FP8 blocks: whole block rows a chunk, so no two threads need the same block row's tables (float32 scales: each
  // block its own), and none waits for another to build them. A fused read's chunk stays near what one read brings
  // in (under twice it): where a read brings in fewer rows than a block row (at 128-row blocks, rows wider than 8192)
  // threads share block rows instead.
  if (j->fp8 && (!j->fill.on || j->chunk_rows >= bo)) j->chunk_rows = (j->chunk_rows + bo - 1) / bo * bo;
  j->nchunks = (out + j->chunk_rows - 1) / j->chunk_rows;
  return j;
}

// A thread's buffers, grown and kept for the next call: a fresh buffer each call would pay the first touch of
// its pages, which is what is slow on this kind of VM.
struct ThreadBufs {
  std::vector<uint16_t> dev;     // the device's rows of one step
  std::vector<uint8_t> differ;   // [row of the step][block] (FP8, VBMI or AVX2)
  std::vector<float> row;        // one exact row
  std::vector<uint8_t> same;     // [block] of one MXFP4 row
  std::vector<uint8_t> chunk;    // the fused read's rows
  template <class T> static T* at_least(std::vector<T>& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
    return v.data();
  }
};

// Whether any block of FP8 block row starting at block index brow (C blocks) has a scale that can lose range.
inline bool fp8_block_row_lossy(const Fp8Ref& f8, int64_t brow, int64_t C) {
  uint8_t any = 0;
  for (int64_t c = 0; c < C; c++) any |= f8.lossy[f8.id[brow + c]];
  return any != 0;
}

// Whether the n bytes at p are all zero (32 at a time with AVX2).
__attribute__((target("avx2"))) inline bool all_zero(const uint8_t* p, int64_t n) {
  __m256i acc = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) acc = _mm256_or_si256(acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
  uint8_t rest = 0;
  for (; i < n; i++) rest |= p[i];
  return rest == 0 && _mm256_testz_si256(acc, acc);
}

// Chunk ci of job j on this thread: read its rows (fill), pull the device's rows, compare.
void run_chunk(RowsJob& j, int64_t ci, Partial& p, ThreadBufs& tb) {
  const ExactKind kind = j.a.kind;
  const int64_t out = j.a.out, in = j.a.in, bo = j.a.bo, bi = j.a.bi, C = j.C, step = j.step, row_bytes = j.row_bytes;
  const uint8_t *w = j.a.w, *s = j.a.s;
  const bool mx = j.mx, fp8 = j.fp8, fast = j.fast;
  Fp8Ref& f8 = j.f8;
  Flags& flags = j.flags;
  const LdRowSource* src = j.src;
  const float* f16v = f16_values();
  const RefSimd simd = reference_simd();  // the level setSimd chose (tests run each)
  const bool avx2 = g_avx2 && simd != RefSimd::Scalar;
  // FP8 blocks compared a step of rows at once, into differ: 64 codes a lookup with VBMI, else 32 with AVX2
  const bool fp8_vbmi = fp8 && f8.vbmi, fp8_avx2 = fp8 && f8.planar;
  const Mxfp4Ref* t = mx ? &mxfp4_ref() : nullptr;
  uint16_t* dev = ThreadBufs::at_least(tb.dev, step * in);
  uint8_t* differ = fp8 ? ThreadBufs::at_least(tb.differ, step * C) : nullptr;
  float* row = mx ? nullptr : ThreadBufs::at_least(tb.row, in);
  uint8_t* same = mx ? ThreadBufs::at_least(tb.same, C) : nullptr;
  const int64_t c0 = ci * j.chunk_rows, c1 = std::min(out, c0 + j.chunk_rows);
  const uint8_t* wc = w + c0 * row_bytes;  // row c0's stored bytes (the chunk's, with fill); row o's at wc + (o − c0)·row_bytes
  if (j.fill.on) {
    if (j.fill.error.load(std::memory_order_relaxed) != 0) return;  // the call fails; the rest is not compared
    const uint8_t* in_place = mapped_rows(j.fill, c0 * row_bytes, (c1 - c0) * row_bytes);
    if (in_place != nullptr) {
      wc = in_place;
      p.mapped += (c1 - c0) * row_bytes;
    } else {
      uint8_t* buf = ThreadBufs::at_least(tb.chunk, j.chunk_rows * row_bytes);
      if (!fill_rows(j.fill, buf, row_bytes, c0, c1)) return;
      wc = buf;
    }
    p.filled += (c1 - c0) * row_bytes;
    if (kind == ExactKind::Fp8E8m0 || kind == ExactKind::Fp8F32) {  // FP4 codes have no NaN; E4M3 has 0x7f, 0xff
      const size_t len = static_cast<size_t>((c1 - c0) * row_bytes);
      p.weight_nan += avx2 ? count_bytes_avx2(wc, len, 0x7f, 0x7f) : count_bytes(wc, len, 0x7f, 0x7f);
    }
  }
  int64_t lossy_row = -1;  // the FP8 block row fp8_block_row_lossy last answered for, and its answer
  bool lossy_any = true;
  int64_t ready_row = -1;  // the last FP8 block row whose tables this thread made sure of
  for (int64_t r0 = c0; r0 < c1; r0 += step) {
    const int64_t n = std::min(step, c1 - r0);
    if (fp8) {
      for (int64_t br = std::max(ready_row + 1, r0 / bo); br <= (r0 + n - 1) / bo; br++) fp8_ready(f8, br, C), ready_row = br;
    }
    // with fill the device decodes the same chunk by its own rule; without, its own bound tensor's bytes
    if (j.fill.on) src->rows_from(src, wc + (r0 - c0) * row_bytes, r0, n, dev);
    else src->rows(src, r0, n, dev);
    if (fp8_vbmi || fp8_avx2) fp8_step_same(f8, wc + (r0 - c0) * row_bytes, in, bo, bi, C, r0, n, dev, differ);
    for (int64_t o = r0; o < r0 + n; o++) {
      const uint16_t* drow = dev + (o - r0) * in;
      const int64_t brow = (o / bo) * C;
      if (mx) {
        const uint8_t* wrow = wc + (o - c0) * row_bytes;
        const uint8_t* srow = s + o * C;
        // the blocks that do not pass on their bits go element by element (every block when !fast); a row whose
        // blocks all pass is done without a look at same[]
        int64_t ndiffer = C;
        if (fast && simd == RefSimd::Avx512 && g_avx512bw && mxfp4_row_clean_avx512(*t, wrow, srow, drow, C)) continue;
        if (fast && simd != RefSimd::Scalar && g_avx2 && mxfp4_row_clean_avx2(*t, wrow, srow, drow, C)) continue;
        if (!fast) std::fill(same, same + C, 0);
        else if (simd != RefSimd::Scalar && g_avx2) ndiffer = mxfp4_row_same_avx2(*t, wrow, srow, drow, C, same);
        else ndiffer = mxfp4_row_same(*t, wrow, srow, drow, C, same);
        for (int64_t c = 0; c < C && ndiffer > 0; c++) {
          if (!same[c]) mxfp4_block_slow(*t, wrow, srow[c], drow, o, in, c, brow + c, f16v, flags, p), ndiffer--;
        }
      } else if (fp8) {
        // a block passes on its FP16 bits when its scale cannot lose range; the row is decoded exactly only for a
        // block that does not (the slow path, element by element)
        const uint8_t* wrow = wc + (o - c0) * row_bytes;
        if (fp8_vbmi || fp8_avx2) {
          // a row whose blocks all passed on their bits, in a block row no scale of which can lose range, is done
          // without a look at each block (the rows of a block row share the answer: asked once for them)
          if (o / bo != lossy_row) lossy_row = o / bo, lossy_any = fp8_block_row_lossy(f8, brow, C);
          if (!lossy_any && all_zero(differ + (o - r0) * C, C)) continue;
        }
        bool decoded = false;
        for (int64_t c = 0; c < C; c++) {
          const int64_t i0 = c * bi, i1 = std::min(in, i0 + bi);
          const uint32_t k = f8.id[brow + c];
          const int64_t b = static_cast<int64_t>(k) * 256;
          uint32_t diff = f8.lossy[k];
          if (fp8_vbmi || fp8_avx2) {
            diff |= differ[(o - r0) * C + c];
          } else {
            const uint16_t* tb16 = f8.f16.data() + b;
            for (int64_t i = i0; i < i1; i++) diff |= static_cast<uint32_t>(tb16[wrow[i]] ^ drow[i]);  // no branch per element
          }
          if (diff == 0) continue;
          if (!decoded) exact_row_at(kind, wrow, s, o, in, bo, bi, row);
          decoded = true;
          for (int64_t i = i0; i < i1; i++) compare_elem(row[i], drow[i], o * in + i, brow + c, f16v, flags, p);
        }
      } else if (j.e2 && simd != RefSimd::Scalar) {
        // NVFP4: blocks that match the reference's table pass 16 values at a time (e2m1_row, as checkF16 does)
        const uint8_t* wrow = wc + (o - c0) * row_bytes;
        if (simd == RefSimd::Avx512 && g_avx512bw) e2m1_row_avx512(*j.e2m1, wrow, s, o, in, drow, row, f16v, flags, p);
        else e2m1_row(*j.e2m1, wrow, s, o, in, drow, row, f16v, flags, p);
      } else if (kind == ExactKind::Table4FlatF32 && fast && simd != RefSimd::Scalar) {
        // bitsandbytes, whole blocks a row: as checkF16 does (flat block (o·in + i)/bi is brow + i/bi here)
        // with fill, the chunk's codes start at its first row's first element
        const uint8_t* w4 = j.fill.on ? wc : w;
        const int64_t k0 = j.fill.on ? c0 * in : 0;
        if (simd == RefSimd::Avx512 && g_avx512bw) table4_row_avx512(w4, k0, s, o, in, bi, drow, row, f16v, flags, p);
        else table4_row_avx2(w4, k0, s, o, in, bi, drow, row, f16v, flags, p);
      } else {
        if (j.fill.on && kind == ExactKind::Table4FlatF32) exact_row_table4_from(wc, c0 * in, s, o, in, bi, row);
        else if (j.fill.on) exact_row_at(kind, wc + (o - c0) * row_bytes, s, o, in, bo, bi, row);  // fast = false or the scalar level
        else exact_row(kind, w, s, o, in, bo, bi, row);
        for (int64_t i = 0; i < in; i++) compare_elem(row[i], drow[i], o * in + i, brow + i / bi, f16v, flags, p);
      }
    }
  }
}

// Every chunk of every job in one parallel region, taken as threads come free: the threads do not wait for each
// other at the end of each tensor (a layer's 776 tensors of ~4 chunks each, one region per tensor, left a core
// idle ~0.05 s a layer in that wait alone). No exception leaves the region: run_chunk throws none.
void run_jobs(const std::vector<RowsJob*>& jobs) {
  int64_t elems = 0, total = 0;
  std::vector<int64_t> first(jobs.size() + 1, 0);  // job k's chunks are [first[k], first[k + 1])
  for (size_t k = 0; k < jobs.size(); k++) elems += jobs[k]->a.out * jobs[k]->a.in, first[k + 1] = (total += jobs[k]->nchunks);
  const int nt = elems >= (1 << 18) ? omp_get_max_threads() : 1;
  for (RowsJob* j : jobs) j->parts.assign(static_cast<size_t>(nt), Partial{});
#pragma omp parallel num_threads(nt)
  {
    static thread_local ThreadBufs tb;
    const int me = omp_get_thread_num();
    size_t k = 0;
#pragma omp for schedule(dynamic, 1)
    for (int64_t g = 0; g < total; g++) {
      while (g >= first[k + 1]) k++;  // g only grows on a thread (dynamic hands out increasing indices)
      run_chunk(*jobs[k], g - first[k], jobs[k]->parts[static_cast<size_t>(me)], tb);
    }
  }
  drop_compared(jobs);
}

// A run job's result: checkF16's, with weightNanCodes when it read its weight, or { readError } when that read failed.
Napi::Value rows_result(Napi::Env env, RowsJob& j) {
  if (j.fill.on) {
    int64_t filled = 0;
    for (const Partial& q : j.parts) filled += q.filled;
    if (j.fill.error.load() == 0 && filled != j.a.out * j.row_bytes) j.fill.error.store(-2);  // a row left unread: never a result
    const int err = j.fill.error.load();
    if (err != 0) {
      Napi::Object res = Napi::Object::New(env);
      res.Set("readError", err == -1 ? std::string("the file ended before the tensor did") : err == -2 ? std::string("not every row of the weight was read") : std::string(std::strerror(err)));
      return res;
    }
  }
  return result(env, j.parts, j.flags, j.fill.on);
}

Napi::Value check_f16_rows(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  if (info.Length() < 9) throw Napi::TypeError::New(env, "checkF16Rows: expected (kind, weight, scale, out, in, bo, bi, source, fast[, fill])");
  Napi::Value v[10];
  for (size_t i = 0; i < 10; i++) v[i] = info[i];
  std::unique_ptr<RowsJob> j = rows_job(env, v, info.Length());
  run_jobs({j.get()});
  return rows_result(env, *j);
}

// ---- a batch of fused compares on a background thread (issue 15) -------------------------------------------
// checkF16RowsStart(jobs: Array<checkF16Rows' argument array>) → a handle at once; the compares run on a worker
// thread (with its own OpenMP team) while the JS thread prepares the next batch (reads its scales, makes its row
// sources), which on a wide layer is ~0.1 s of TypeScript the cores otherwise waited through. checkF16RowsWait(
// handle) blocks until the batch is done and returns its results in order. The handle holds references to every
// job's arrays and row source, so they outlive the run; a handle dropped without a wait is waited for by its
// finalizer (the worker never outlives what it reads).
struct RowsBatch {
  std::vector<std::unique_ptr<RowsJob>> jobs;
  std::vector<Napi::Reference<Napi::Value>> held;
  std::vector<int64_t> first;  // job k's chunks are [first[k], first[k + 1]) of the batch's
  int64_t next = 0;            // the next chunk to hand out (under the worker's lock)
  std::atomic<int64_t> left{0};  // chunks not yet done
  std::mutex m;
  std::condition_variable cv;
  bool done = false, collected = false;
  void wait() {
    std::unique_lock<std::mutex> lk(m);
    cv.wait(lk, [this] { return done; });
  }
  // notified under the lock: once a waiter can see done it may free the batch, so nothing here touches it after
  void finish() {
    std::lock_guard<std::mutex> lk(m);
    done = true;
    cv.notify_all();
  }
};

// One worker thread whose OpenMP team takes the chunks of every batch submitted, in order, as each thread comes
// free, across batches: one parallel region for a run of batches, not one per batch, so no thread waits at a
// batch's end for the other's last chunk. That wait was ~19 % of a team thread's time on a wide layer: the JS thread
// preparing the next batch takes a core from one of the two threads now and then, and with a barrier a batch the
// other then spun until it came back (a wide layer's check 293 → 276 ms a layer with 128-tensor batches instead of
// 16, which only thinned the barriers). Idle threads wait on a condition variable, not in libgomp's spin.
// The team ends once no chunk has come for kIdle. While a thread other than the main one holds an OpenMP team,
// libgomp counts more threads than cores (two teams of two on two cores here) and every team's idle threads stop
// spinning after 100 turns instead of ~300,000 (its throttled spin count), sleeping and being woken through the
// kernel at each parallel region: a long-lived worker left every later small product of the process paying that,
// the reference's 64-token llama-tiny decode after a wide weights check 476 tok/s against 2870
// (scripts/bench/HISTORY.md, round 26). When the worker's thread ends, libgomp frees its team and the count is the
// process's own again.
class BatchWorker {
 public:
  static BatchWorker& get() {
    static BatchWorker* w = new BatchWorker();  // never destroyed: a detached thread may be blocked in it at exit
    return *w;
  }
  // every thread of the team: each job's partial results are indexed by a thread's number in it
  static int team() {
    static const int n = omp_get_max_threads();
    return n;
  }
  void submit(RowsBatch* b) {
    b->first.assign(b->jobs.size() + 1, 0);
    for (size_t k = 0; k < b->jobs.size(); k++) {
      b->jobs[k]->parts.assign(static_cast<size_t>(team()), Partial{});
      b->first[k + 1] = b->first[k] + b->jobs[k]->nchunks;
    }
    b->left.store(b->first.back());
    if (b->first.back() == 0) return b->finish();  // no rows to compare
    bool start = false;
    {
      std::lock_guard<std::mutex> lk(m_);
      q_.push_back(b);
      start = !running_;
      running_ = true;
    }
    if (!start) return cv_.notify_all();
    try {
      std::thread([this] { loop(); }).detach();
    } catch (...) {  // no worker: the batch is taken back and the error thrown (the next submit tries again)
      std::lock_guard<std::mutex> lk(m_);
      q_.erase(std::find(q_.begin(), q_.end(), b));
      running_ = false;
      throw;
    }
  }

 private:
  static constexpr std::chrono::milliseconds kIdle{50};
  BatchWorker() = default;
  // The next chunk (its batch and number), or false once the team is to stop: no chunk for kIdle, or another
  // thread found that.
  bool take(RowsBatch*& b, int64_t& g) {
    std::unique_lock<std::mutex> lk(m_);
    if (!cv_.wait_for(lk, kIdle, [this] { return stop_ || !q_.empty(); })) {
      stop_ = true;
      cv_.notify_all();
    }
    if (stop_) return false;
    b = q_.front();
    g = b->next++;
    if (b->next == b->first.back()) q_.pop_front();
    return true;
  }
  void loop() {
    for (;;) {
#pragma omp parallel num_threads(team())
      {
        static thread_local ThreadBufs tb;
        const size_t me = static_cast<size_t>(omp_get_thread_num());
        RowsBatch* b;
        int64_t g;
        while (take(b, g)) {
          const size_t k = static_cast<size_t>(std::upper_bound(b->first.begin(), b->first.end(), g) - b->first.begin()) - 1;
          run_chunk(*b->jobs[k], g - b->first[k], b->jobs[k]->parts[me], tb);
          if (b->left.fetch_sub(1) == 1) {
            drop_compared(b->jobs);  // before the waiter may free the batch
            b->finish();
          }
        }
      }
      std::lock_guard<std::mutex> lk(m_);
      stop_ = false;
      if (q_.empty()) {
        running_ = false;  // under the lock: a batch submitted after this starts a new thread
        return;
      }
      // a batch came as the team stopped: go on with it
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<RowsBatch*> q_;  // batches with chunks not yet handed out, in order
  bool running_ = false, stop_ = false;
};

Napi::Value check_f16_rows_start(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsArray()) throw Napi::TypeError::New(env, "checkF16RowsStart: expected an array of checkF16Rows argument arrays");
  const Napi::Array list = info[0].As<Napi::Array>();
  auto b = std::make_unique<RowsBatch>();
  for (uint32_t k = 0; k < list.Length(); k++) {
    const Napi::Value e = list.Get(k);
    if (!e.IsArray() || e.As<Napi::Array>().Length() < 9) throw Napi::TypeError::New(env, "checkF16RowsStart: job " + std::to_string(k) + " must be (kind, weight, scale, out, in, bo, bi, source, fast[, fill])");
    const Napi::Array a = e.As<Napi::Array>();
    Napi::Value v[10];
    for (uint32_t i = 0; i < 10; i++) v[i] = i < a.Length() ? a.Get(i) : env.Undefined();
    b->jobs.push_back(rows_job(env, v, a.Length()));
    for (uint32_t i : {1u, 2u, 7u}) b->held.push_back(Napi::Persistent(v[i]));  // weight, scale, source
  }
  // submitted before the handle exists: a submit that fails (no memory, no thread) leaves no finalizer waiting for a
  // batch that never runs, and the batch is freed here with its references
  try {
    BatchWorker::get().submit(b.get());
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, std::string("checkF16RowsStart: the batch could not be started: ") + e.what());
  }
  return Napi::External<RowsBatch>::New(env, b.release(), [](Napi::Env, RowsBatch* x) {
    x->wait();
    delete x;
  });
}

Napi::Value check_f16_rows_wait(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsExternal()) throw Napi::TypeError::New(env, "checkF16RowsWait: expected a handle from checkF16RowsStart");
  RowsBatch* b = info[0].As<Napi::External<RowsBatch>>().Data();
  if (b->collected) throw Napi::Error::New(env, "checkF16RowsWait: this batch's results were already taken");
  b->wait();
  b->collected = true;
  Napi::Array out = Napi::Array::New(env, b->jobs.size());
  for (size_t k = 0; k < b->jobs.size(); k++) out.Set(static_cast<uint32_t>(k), rows_result(env, *b->jobs[k]));
  return out;
}

// The (bytes: Uint8Array, kind: string) arguments of nanCodes and nonFiniteAt: the bytes and the kind, or a TypeError
// naming the function and what it takes.
struct BytesAndKind {
  const uint8_t* b;
  size_t n;
  std::string kind;
};
BytesAndKind bytes_and_kind(const Napi::CallbackInfo& info, const char* fn, const char* kinds) {
  if (info.Length() < 2 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array || !info[1].IsString()) {
    throw Napi::TypeError::New(info.Env(), std::string(fn) + ": expected (bytes: Uint8Array, kind: " + kinds + ")");
  }
  auto a = info[0].As<Napi::Uint8Array>();
  return {a.Data(), a.ByteLength(), info[1].As<Napi::String>().Utf8Value()};
}

// nanCodes(bytes: Uint8Array, kind: 'e8m0' | 'e4m3' | 'f32') → how many NaN encodings the stored bytes hold:
// E8M0 0xFF; E4M3 "fn" S.1111.111 (0x7F, 0xFF); little-endian float32 NaNs (exponent all ones, mantissa ≠ 0).
// The weights check refuses a tensor holding any (harness/weights/check.ts); counted here, not per byte in JS.
Napi::Value nan_codes(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  const auto [b, n, kind] = bytes_and_kind(info, "nanCodes", "'e8m0' | 'e4m3' | 'f32'");
  int64_t count = 0;
  const bool avx2 = g_avx2 && reference_simd() != RefSimd::Scalar;
  if (kind == "e8m0") {
    count = avx2 ? count_bytes_avx2(b, n, 0xff, 0xff) : count_bytes(b, n, 0xff, 0xff);
  } else if (kind == "e4m3") {
    count = avx2 ? count_bytes_avx2(b, n, 0x7f, 0x7f) : count_bytes(b, n, 0x7f, 0x7f);
  } else if (kind == "f32") {
    if (n % 4 != 0) throw Napi::RangeError::New(env, "nanCodes: f32 bytes must be a multiple of 4, got " + std::to_string(n));
    for (size_t i = 0; i < n; i += 4) {
      const uint32_t u = static_cast<uint32_t>(b[i]) | (static_cast<uint32_t>(b[i + 1]) << 8) | (static_cast<uint32_t>(b[i + 2]) << 16) | (static_cast<uint32_t>(b[i + 3]) << 24);
      count += (u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu) != 0;
    }
  } else {
    throw Napi::RangeError::New(env, "nanCodes: kind must be 'e8m0', 'e4m3' or 'f32', got '" + kind + "'");
  }
  return Napi::Number::New(env, static_cast<double>(count));
}

// nonFiniteAt(bytes: Uint8Array, kind: 'bf16' | 'f16' | 'f32') → the element index of the first NaN or Inf among
// little-endian floats (exponent all ones), or -1. A plain tensor holding one is bad input: convert refuses it
// before writing an FP16 cache of it, as the reference refuses it when it reads it (harness/weights/finite.ts).
Napi::Value non_finite_at(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  const auto [b, n, kind] = bytes_and_kind(info, "nonFiniteAt", "'bf16' | 'f16' | 'f32'");
  size_t width;
  uint32_t exp_mask;
  if (kind == "bf16") width = 2, exp_mask = 0x7f80u;
  else if (kind == "f16") width = 2, exp_mask = 0x7c00u;
  else if (kind == "f32") width = 4, exp_mask = 0x7f800000u;
  else throw Napi::RangeError::New(env, "nonFiniteAt: kind must be 'bf16', 'f16' or 'f32', got '" + kind + "'");
  if (n % width != 0) throw Napi::RangeError::New(env, "nonFiniteAt: " + kind + " bytes must be a multiple of " + std::to_string(width) + ", got " + std::to_string(n));
  const size_t count = n / width;
  // scanned in blocks without a branch per element (the compiler vectorizes the OR), then the block is searched
  constexpr size_t kBlock = 1024;
  for (size_t i0 = 0; i0 < count; i0 += kBlock) {
    const size_t i1 = std::min(count, i0 + kBlock);
    uint32_t any = 0;
    for (size_t i = i0; i < i1; i++) {
      uint32_t u;
      if (width == 2) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        u = h;
      } else {
        std::memcpy(&u, b + 4 * i, 4);
      }
      any |= static_cast<uint32_t>((u & exp_mask) == exp_mask);
    }
    if (any == 0) continue;
    for (size_t i = i0; i < i1; i++) {
      uint32_t u = 0;
      std::memcpy(&u, b + width * i, width);
      if ((u & exp_mask) == exp_mask) return Napi::Number::New(env, static_cast<double>(i));
    }
  }
  return Napi::Number::New(env, -1);
}

// fp8PlanarGroups(kind, scales) → Int32Array: for each stored scale (an E8M0 byte or a float32 pattern), the group
// count of its table's planar form (Fp8Planes), −1 where it has none; the form is built whatever the level, on a
// CPU with AVX2 (which its check runs on). So tests see which tables take which lookup.
Napi::Value fp8_planar_groups_fn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const ExactKind kind = exact_kind_arg(info, "fp8PlanarGroups");
  if ((kind != ExactKind::Fp8E8m0 && kind != ExactKind::Fp8F32) || info.Length() < 2 || !info[1].IsTypedArray() ||
      info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    throw Napi::TypeError::New(env, "fp8PlanarGroups: expected ('fp8-e8m0' | 'fp8-f32', Uint8Array of scales)");
  }
  auto sb = info[1].As<Napi::Uint8Array>();
  const size_t sz = kind == ExactKind::Fp8F32 ? 4 : 1, blocks = sb.ElementLength() / sz;
  if (sb.ElementLength() % sz != 0) throw Napi::RangeError::New(env, "fp8PlanarGroups: float32 scales take 4 bytes each");
  Fp8Ref t = fp8_ref(kind, sb.Data(), static_cast<int64_t>(blocks));
  t.vbmi = false, t.planar = g_avx2;
  t.planes.resize(t.first.size());
  auto out = Napi::Int32Array::New(env, blocks);
  for (size_t b = 0; b < blocks; b++) {
    const uint32_t k = t.id[b];
    if (t.state[k].load(std::memory_order_relaxed) != 2) fp8_build(t, k), t.state[k].store(2, std::memory_order_relaxed);
    out[b] = t.planes[k].groups == kNotPlanar ? -1 : t.planes[k].groups;
  }
  return out;
}

// roundF16(Float32Array) → Uint16Array: the rounding above at the reference's SIMD level (round_f16_avx512 /
// _avx2 on whole groups of 16), exposed so tests hold every level to f32ToF16Bits.
Napi::Value round_f16_fn(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    throw Napi::TypeError::New(info.Env(), "roundF16: expected a Float32Array");
  }
  auto a = info[0].As<Napi::Float32Array>();
  auto y = Napi::Uint16Array::New(info.Env(), a.ElementLength());
  const size_t n = a.ElementLength(), n16 = n / 16 * 16;
  size_t i = 0;
  // at the reference's SIMD level, as the bitsandbytes check rounds (so the test of this export tests those)
  if (reference_simd() == RefSimd::Avx512) round_f16_run_avx512(a.Data(), n16, y.Data()), i = n16;
  else if (reference_simd() == RefSimd::Avx2) round_f16_run_avx2(a.Data(), n16, y.Data()), i = n16;
  for (; i < n; i++) y[i] = round_f16(a[i]);
  return y;
}

// roundF16Values(x: Float32Array) → Float32Array: each value rounded to the nearest binary16 by round_f16's rule and
// widened back (exact: every binary16 value is a float32), a NaN as the canonical quiet NaN, as TypeScript's
// roundToF16 stores it into a Float32Array. What the floor pass does to every activation it stores (FP16 storage);
// in TypeScript, one element at a time, it was ~15% of a verdict's time on deepseek-v4-tiny.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593
__attribute__((target("avx512f"))) void round_f16_values_avx512(const float* x, size_t n, float* y) {
  const __m512 qnan = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000));
  for (size_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_cvtph_ps(round_f16_avx512(_mm512_loadu_ps(x + i)));
    _mm512_storeu_ps(y + i, _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), qnan));
  }
}
#pragma GCC diagnostic pop
__attribute__((target("avx2,f16c"))) void round_f16_values_avx2(const float* x, size_t n, float* y) {
  const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
  for (size_t i = 0; i < n; i += 16) {
    const __m256i h = round_f16_avx2(_mm256_loadu_ps(x + i), _mm256_loadu_ps(x + i + 8));
    const __m256 v0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h)), v1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    _mm256_storeu_ps(y + i, _mm256_blendv_ps(v0, qnan, _mm256_cmp_ps(v0, v0, _CMP_UNORD_Q)));
    _mm256_storeu_ps(y + i + 8, _mm256_blendv_ps(v1, qnan, _mm256_cmp_ps(v1, v1, _CMP_UNORD_Q)));
  }
}

Napi::Value round_f16_values_fn(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    throw Napi::TypeError::New(info.Env(), "roundF16Values: expected a Float32Array");
  }
  auto a = info[0].As<Napi::Float32Array>();
  const int64_t n = static_cast<int64_t>(a.ElementLength());
  auto out = Napi::Float32Array::New(info.Env(), static_cast<size_t>(n));
  const float* x = a.Data();
  float* y = out.Data();
  const RefSimd simd = reference_simd();
  static const bool f16c = __builtin_cpu_supports("f16c") != 0;
  constexpr int64_t kPiece = 1 << 14;  // elements a thread takes at a time (a multiple of 16)
  const int64_t pieces = (n + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(static) if (n >= (1 << 17))
  for (int64_t q = 0; q < pieces; q++) {
    const int64_t i0 = q * kPiece, len = std::min(kPiece, n - i0), l16 = len / 16 * 16;
    int64_t i = 0;
    if (simd == RefSimd::Avx512) round_f16_values_avx512(x + i0, static_cast<size_t>(l16), y + i0), i = l16;
    else if (simd == RefSimd::Avx2 && f16c) round_f16_values_avx2(x + i0, static_cast<size_t>(l16), y + i0), i = l16;
    for (; i < len; i++) {
      const uint16_t h = round_f16(x[i0 + i]);
      y[i0 + i] = is_nan16(h) ? std::numeric_limits<float>::quiet_NaN() : exact_f16_value(h);
    }
  }
  return out;
}

}  // namespace

void register_check_f16(Napi::Env env, Napi::Object exports) {
  exports.Set("checkF16", Napi::Function::New(env, check_f16));
  exports.Set("checkF16Rows", Napi::Function::New(env, check_f16_rows));
  exports.Set("mappedRowsAvailable", Napi::Function::New(env, mapped_rows_available));
  exports.Set("checkF16RowsStart", Napi::Function::New(env, check_f16_rows_start));
  exports.Set("checkF16RowsWait", Napi::Function::New(env, check_f16_rows_wait));
  exports.Set("nanCodes", Napi::Function::New(env, nan_codes));
  exports.Set("nonFiniteAt", Napi::Function::New(env, non_finite_at));
  exports.Set("roundF16", Napi::Function::New(env, round_f16_fn));
  exports.Set("fp8PlanarGroups", Napi::Function::New(env, fp8_planar_groups_fn));
  exports.Set("roundF16Values", Napi::Function::New(env, round_f16_values_fn));
}
