// Internal to the ld_device addon: argument readers (every throw names the argument and the shapes, and
// becomes a JS TypeError/RangeError through NAPI_CPP_EXCEPTIONS), SIMD dispatch state, and the
// registration hooks of each source file. Kernels themselves never throw: all checks happen before any
// OpenMP region, since an exception escaping a parallel region would terminate the process.
#pragma once

#include <napi.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ld {

// Which kernels run. Every level produces the same bits (same accumulation order, same element
// functions); Avx512 differs from Avx2 only in the GEMM tile. Set at load to the best the CPU has,
// changed by setSimd().
enum class Simd { Scalar, Avx2, Avx512 };
extern Simd g_simd;
// g_simd != Scalar: the AVX2+FMA+F16C kernels may run. Kernels without an AVX-512 variant test this.
extern bool g_avx2;
Simd best_simd();
void set_simd_level(Simd s);

template <typename T>
struct Span {
  T* data;
  size_t len;
};

[[noreturn]] inline void throw_type(const Napi::Env& env, const std::string& msg) {
  throw Napi::TypeError::New(env, msg);
}
[[noreturn]] inline void throw_range(const Napi::Env& env, const std::string& msg) {
  throw Napi::RangeError::New(env, msg);
}

inline void need_args(const Napi::CallbackInfo& info, size_t n, const char* fn) {
  if (info.Length() < n) {
    throw_type(info.Env(), std::string(fn) + ": expected " + std::to_string(n) + " arguments, got " +
                               std::to_string(info.Length()));
  }
}

// An integer argument in [lo, INT32_MAX]: sizes are ints in the element functions (ld_numerics.h).
inline int arg_int(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name, int lo) {
  const Napi::Value v = info[i];
  if (!v.IsNumber()) throw_type(info.Env(), std::string(fn) + ": " + name + " must be a number");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!(d == static_cast<double>(static_cast<int64_t>(d))) || d < lo || d > 2147483647.0) {
    throw_range(info.Env(), std::string(fn) + ": " + name + " must be an integer >= " + std::to_string(lo) + ", got " +
                                std::to_string(d));
  }
  return static_cast<int>(d);
}

inline double arg_num(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name) {
  const Napi::Value v = info[i];
  if (!v.IsNumber()) throw_type(info.Env(), std::string(fn) + ": " + name + " must be a number");
  return v.As<Napi::Number>().DoubleValue();
}

inline bool arg_bool(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name) {
  const Napi::Value v = info[i];
  if (!v.IsBoolean()) throw_type(info.Env(), std::string(fn) + ": " + name + " must be a boolean");
  return v.As<Napi::Boolean>().Value();
}

template <typename T>
struct TypedArrayKind;
template <>
struct TypedArrayKind<uint8_t> {
  static constexpr napi_typedarray_type type = napi_uint8_array;
  static constexpr const char* name = "Uint8Array";
};
template <>
struct TypedArrayKind<uint16_t> {
  static constexpr napi_typedarray_type type = napi_uint16_array;
  static constexpr const char* name = "Uint16Array";
};
template <>
struct TypedArrayKind<float> {
  static constexpr napi_typedarray_type type = napi_float32_array;
  static constexpr const char* name = "Float32Array";
};

// A typed-array view as (pointer past its byteOffset, element count). Node's Buffer is a Uint8Array.
template <typename T>
Span<const T> arg_array(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name) {
  const Napi::Value v = info[i];
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != TypedArrayKind<T>::type) {
    throw_type(info.Env(), std::string(fn) + ": " + name + " must be a " + TypedArrayKind<T>::name);
  }
  Napi::TypedArrayOf<T> a = v.As<Napi::TypedArrayOf<T>>();
  return {a.Data(), a.ElementLength()};
}

template <typename T>
Span<const T> arg_array_len(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name, size_t want,
                            const std::string& shape) {
  Span<const T> s = arg_array<T>(info, i, fn, name);
  if (s.len != want) {
    throw_range(info.Env(), std::string(fn) + ": " + name + " has " + std::to_string(s.len) + " elements, expected " +
                                shape + " = " + std::to_string(want));
  }
  return s;
}

inline std::string dims(std::initializer_list<long long> d) {
  std::string s = "[";
  bool first = true;
  for (long long x : d) {
    if (!first) s += "×";
    s += std::to_string(x);
    first = false;
  }
  return s + "]";
}

template <typename T>
Napi::TypedArrayOf<T> new_array(const Napi::Env& env, size_t n) {
  return Napi::TypedArrayOf<T>::New(env, n);
}

// Registration hooks, one per source file.
void init_dequant(Napi::Env env, Napi::Object exports);
void init_gemm(Napi::Env env, Napi::Object exports);
void init_ops(Napi::Env env, Napi::Object exports);
void init_attention(Napi::Env env, Napi::Object exports);

// Dot product in the ld_numerics.h lane order, dispatched (AVX2 or scalar, same bits).
float dot_f16(const uint16_t* x, const uint16_t* w, int k);
// acc[d] = fmaf(p, f32(v[d]), acc[d]) for d < n, dispatched.
void axpy_f16(float p, const uint16_t* v, float* acc, int n);

}  // namespace ld
