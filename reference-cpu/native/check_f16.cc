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
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "dequant_exact.h"

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

inline bool is_nan16(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
inline bool same_f16(uint16_t a, uint16_t b) { return a == b || ((a | b) & 0x7fff) == 0 || (is_nan16(a) && is_nan16(b)); }

struct Partial {
  int64_t first_bad = -1;
  double max_abs = 0;
  int64_t non_finite = 0;
  int64_t first_ref_nonfinite = -1;  // an exact value outside float32 (bad input, reported by the caller)
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

inline void flag(uint8_t* a, int64_t i) { __atomic_store_n(a + i, static_cast<uint8_t>(1), __ATOMIC_RELAXED); }

// checkF16(kind, weight, scale, out, in, bo, bi, device: Uint16Array [out·in])
//   → { firstBad, maxAbs, nonFinite, firstReferenceNonFinite, bad, over, under } with the three Uint8Array block flags [⌈out/bo⌉·⌈in/bi⌉].
Napi::Value check_f16(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  const char* fn = "checkF16";
  if (info.Length() < 8) throw Napi::TypeError::New(env, "checkF16: expected (kind, weight, scale, out, in, bo, bi, device)");
  const ExactKind kind = exact_kind_arg(info, fn);
  int64_t d[4];
  const char* names[4] = {"out", "in", "bo", "bi"};
  for (int a = 0; a < 4; a++) {
    const Napi::Value v = info[3 + a];
    const double x = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : 0;
    if (!(x >= 1 && x <= 2147483647.0 && x == std::floor(x))) throw Napi::RangeError::New(env, std::string("checkF16: ") + names[a] + " must be a positive integer");
    d[a] = static_cast<int64_t>(x);
  }
  const int64_t out = d[0], in = d[1], bo = d[2], bi = d[3];
  if (kind == ExactKind::Mxfp4 && in % 32 != 0) throw Napi::RangeError::New(env, "checkF16: mxfp4 needs in divisible by 32");
  size_t wbytes = 0, sbytes = 0;
  exact_sizes(kind, out, in, bo, bi, &wbytes, &sbytes);
  auto bytes_arg = [&](size_t i, const char* name, size_t want) {
    if (!info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) throw Napi::TypeError::New(env, std::string("checkF16: ") + name + " must be a Uint8Array");
    auto a = info[i].As<Napi::Uint8Array>();
    if (a.ByteLength() < want) throw Napi::RangeError::New(env, std::string("checkF16: ") + name + " holds " + std::to_string(a.ByteLength()) + " bytes, need " + std::to_string(want));
    return static_cast<const uint8_t*>(a.Data());
  };
  const uint8_t* w = bytes_arg(1, "weight", wbytes);
  const uint8_t* s = bytes_arg(2, "scale", sbytes);
  if (!info[7].IsTypedArray() || info[7].As<Napi::TypedArray>().TypedArrayType() != napi_uint16_array) throw Napi::TypeError::New(env, "checkF16: device must be a Uint16Array");
  auto devArr = info[7].As<Napi::Uint16Array>();
  if (devArr.ElementLength() != static_cast<size_t>(out * in)) throw Napi::RangeError::New(env, "checkF16: device has " + std::to_string(devArr.ElementLength()) + " values, want out×in = " + std::to_string(out * in));
  const uint16_t* dev = devArr.Data();

  const int64_t C = (in + bi - 1) / bi, blocks = ((out + bo - 1) / bo) * C;
  auto bad = Napi::Uint8Array::New(env, blocks), over = Napi::Uint8Array::New(env, blocks), under = Napi::Uint8Array::New(env, blocks);
  uint8_t *pb = bad.Data(), *po = over.Data(), *pu = under.Data();
  const int nt = out * in >= (1 << 18) ? omp_get_max_threads() : 1;
  std::vector<Partial> parts(nt);
  const float* f16v = f16_values();
#pragma omp parallel num_threads(nt)
  {
    Partial& p = parts[omp_get_thread_num()];
    std::vector<float> row(in);
#pragma omp for schedule(static)
    for (int64_t o = 0; o < out; o++) {
      exact_row(kind, w, s, o, in, bo, bi, row.data());
      const uint16_t* drow = dev + o * in;
      const int64_t brow = (o / bo) * C;
      for (int64_t i = 0; i < in; i++) {
        const float r = row[i];
        const uint16_t dv = drow[i];
        if (!std::isfinite(r) && p.first_ref_nonfinite < 0) p.first_ref_nonfinite = o * in + i;
        if (f16v[dv] == r) continue;
        const int64_t blk = brow + i / bi;
        const uint16_t h = round_f16(r);
        if ((h & 0x7c00) == 0x7c00) flag(po, blk);
        else if (r != 0 && (h & 0x7fff) == 0) flag(pu, blk);
        if ((dv & 0x7c00) == 0x7c00) p.non_finite++;
        if (same_f16(h, dv)) continue;
        flag(pb, blk);
        if (p.first_bad < 0) p.first_bad = o * in + i;  // rows ascend within a thread: its first is its lowest
        const double e = std::fabs(static_cast<double>(f16v[dv]) - static_cast<double>(f16v[h]));
        p.max_abs = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(p.max_abs, e);
      }
    }
  }
  Partial all;
  for (const Partial& p : parts) {
    if (p.first_bad >= 0 && (all.first_bad < 0 || p.first_bad < all.first_bad)) all.first_bad = p.first_bad;
    all.max_abs = std::max(all.max_abs, p.max_abs);
    all.non_finite += p.non_finite;
    if (p.first_ref_nonfinite >= 0 && (all.first_ref_nonfinite < 0 || p.first_ref_nonfinite < all.first_ref_nonfinite)) all.first_ref_nonfinite = p.first_ref_nonfinite;
  }
  Napi::Object res = Napi::Object::New(env);
  res.Set("firstBad", static_cast<double>(all.first_bad));
  res.Set("maxAbs", all.max_abs);
  res.Set("nonFinite", static_cast<double>(all.non_finite));
  res.Set("firstReferenceNonFinite", static_cast<double>(all.first_ref_nonfinite));
  res.Set("bad", bad);
  res.Set("over", over);
  res.Set("under", under);
  return res;
}

// roundF16(Float32Array) → Uint16Array: the rounding above, exposed so tests hold it to f32ToF16Bits.
Napi::Value round_f16_fn(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    throw Napi::TypeError::New(info.Env(), "roundF16: expected a Float32Array");
  }
  auto a = info[0].As<Napi::Float32Array>();
  auto y = Napi::Uint16Array::New(info.Env(), a.ElementLength());
  for (size_t i = 0; i < a.ElementLength(); i++) y[i] = round_f16(a[i]);
  return y;
}

}  // namespace

void register_check_f16(Napi::Env env, Napi::Object exports) {
  exports.Set("checkF16", Napi::Function::New(env, check_f16));
  exports.Set("roundF16", Napi::Function::New(env, round_f16_fn));
}
