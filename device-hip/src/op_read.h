// The argument readers the generated ones (ops_args.generated.h) call, for both addons. Their messages are
// device-hip/ops/validate.ts's word for word (a test holds them equal): a missing argument reads as undefined,
// as in JavaScript, and numbers print as JavaScript prints them. Every check throws before any kernel runs, so
// nothing reads out of bounds and no exception leaves an OpenMP region.
#pragma once

#include <napi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "ld_numerics.h"
#include "ld_op_expr.h"

namespace ld {

template <typename T>
struct Span {
  T* data;
  size_t len;
};

namespace ops {

// A number as JavaScript's String(x) writes it (shortest round trip; integers below 1e21 without exponent).
inline std::string js_num(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  if (x == std::floor(x) && std::fabs(x) < 1e21) {
    char b[32];
    std::snprintf(b, sizeof b, "%.0f", x);
    return b[0] == '-' && b[1] == '0' && b[2] == 0 ? "0" : b;
  }
  char b[40];
  for (int p = 1; p <= 17; p++) {
    std::snprintf(b, sizeof b, "%.*g", p, x);
    if (std::strtod(b, nullptr) == x) break;
  }
  std::string s = b;
  const size_t e = s.find('e');
  if (e != std::string::npos) {  // 1e-07 → 1e-7, as JavaScript writes exponents
    std::string mant = s.substr(0, e), ex = s.substr(e + 1);
    const char sign = ex[0];
    ex = ex.substr(1);
    while (ex.size() > 1 && ex[0] == '0') ex.erase(0, 1);
    s = mant + "e" + sign + ex;
  }
  return s;
}
inline std::string js_num(long long x) { return std::to_string(x); }
inline std::string js_num(int x) { return std::to_string(x); }

// typeof v
inline const char* js_typeof(const Napi::Value& v) {
  switch (v.Type()) {
    case napi_undefined: return "undefined";
    case napi_boolean: return "boolean";
    case napi_number: return "number";
    case napi_string: return "string";
    case napi_symbol: return "symbol";
    case napi_function: return "function";
    case napi_bigint: return "bigint";
    default: return "object";
  }
}

[[noreturn]] inline void op_fail(const Napi::CallbackInfo& info, bool type, const char* fn, const std::string& msg) {
  const std::string m = std::string(fn) + ": " + msg;
  if (type) throw Napi::TypeError::New(info.Env(), m);
  throw Napi::RangeError::New(info.Env(), m);
}

inline bool op_is_null(const Napi::CallbackInfo& info, size_t i) { return info[i].IsNull() || info[i].IsUndefined(); }

inline int op_int(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name, int min) {
  const Napi::Value v = info[i];
  if (!v.IsNumber()) op_fail(info, true, fn, std::string(name) + " must be a number, got " + js_typeof(v));
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!(d == std::floor(d)) || d < min || d > 2147483647.0) {
    op_fail(info, false, fn, std::string(name) + " must be an integer >= " + std::to_string(min) + ", got " + js_num(d));
  }
  return (int)d;
}

inline double op_num(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name) {
  const Napi::Value v = info[i];
  if (!v.IsNumber()) op_fail(info, true, fn, std::string(name) + " must be a number, got " + js_typeof(v));
  return v.As<Napi::Number>().DoubleValue();
}

inline bool op_bool(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name) {
  const Napi::Value v = info[i];
  if (!v.IsBoolean()) op_fail(info, true, fn, std::string(name) + " must be a boolean, got " + js_typeof(v));
  return v.As<Napi::Boolean>().Value();
}

template <typename T> struct ArrayKind;
template <> struct ArrayKind<uint8_t> { static constexpr napi_typedarray_type type = napi_uint8_array; static constexpr const char* name = "Uint8Array"; };
template <> struct ArrayKind<uint16_t> { static constexpr napi_typedarray_type type = napi_uint16_array; static constexpr const char* name = "Uint16Array"; };
template <> struct ArrayKind<float> { static constexpr napi_typedarray_type type = napi_float32_array; static constexpr const char* name = "Float32Array"; };
template <> struct ArrayKind<int32_t> { static constexpr napi_typedarray_type type = napi_int32_array; static constexpr const char* name = "Int32Array"; };

inline std::string dims_text(std::initializer_list<long long> d) {
  std::string s = "[";
  bool first = true;
  for (long long x : d) {
    if (!first) s += "×";
    s += std::to_string(x);
    first = false;
  }
  return s + "]";
}

// A typed array of T (an empty span for null when nullable); with dims, exactly their product of elements.
template <typename T>
Span<const T> op_array(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name, bool nullable) {
  const Napi::Value v = info[i];
  if (nullable && (v.IsNull() || v.IsUndefined())) return {nullptr, 0};
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != ArrayKind<T>::type) {
    op_fail(info, true, fn, std::string(name) + " must be a " + ArrayKind<T>::name + (nullable ? " or null" : ""));
  }
  Napi::TypedArrayOf<T> a = v.As<Napi::TypedArrayOf<T>>();
  return {a.Data(), a.ElementLength()};
}

template <typename T>
Span<const T> op_array(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name, bool nullable,
                       std::initializer_list<long long> dims, const char* label) {
  Span<const T> s = op_array<T>(info, i, fn, name, nullable);
  if (nullable && op_is_null(info, i)) return s;
  long long want = 1;
  for (long long d : dims) want *= d;
  if ((long long)s.len != want) {
    op_fail(info, false, fn, std::string(name) + " has " + std::to_string(s.len) + " elements, expected " + label + " " + dims_text(dims) + " = " + std::to_string(want));
  }
  return s;
}

inline void op_range(const Napi::CallbackInfo& info, const char* fn, const char* name, Span<const int32_t> s, long long lo, long long hi) {
  for (size_t i = 0; i < s.len; i++) {
    if (s.data[i] < lo || s.data[i] >= hi) {
      op_fail(info, false, fn, std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(s.data[i]) + " is outside [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + ")");
    }
  }
}

// An output array of the product of dims elements, zero-filled.
template <typename T>
Napi::TypedArrayOf<T> op_new(Napi::Env env, std::initializer_list<long long> dims) {
  long long n = 1;
  for (long long d : dims) n *= d;
  return Napi::TypedArrayOf<T>::New(env, (size_t)n);
}

// Set by setPoisonOutputs or LAYERDIFF_POISON_OUTPUTS=1 (the test suite runs with it): op_new_filled's arrays start
// as all-ones bytes instead of whatever the allocator held, so an element a kernel failed to write reads as NaN
// or −1, never as a plausible value.
inline bool g_poison_outputs = [] {
  const char* v = std::getenv("LAYERDIFF_POISON_OUTPUTS");
  return v != nullptr && std::strcmp(v, "1") == 0;
}();

// An output the op writes in full (table.ts: `filled`), allocated as a node Buffer's memory: not zero-filled,
// where a TypedArray's is (a memset as long as the decode into it).
template <typename T>
Napi::TypedArrayOf<T> op_new_filled(Napi::Env env, std::initializer_list<long long> dims) {
  long long n = 1;
  for (long long d : dims) n *= d;
  if (n == 0) return Napi::TypedArrayOf<T>::New(env, 0);
  auto b = Napi::Buffer<uint8_t>::New(env, (size_t)n * sizeof(T));
  if (g_poison_outputs) std::memset(b.Data(), 0xFF, b.ByteLength());
  return Napi::TypedArrayOf<T>::New(env, (size_t)n, b.ArrayBuffer(), b.ByteOffset());
}

}  // namespace ops
}  // namespace ld
