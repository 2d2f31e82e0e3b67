// Internal to the ld_device addon: the DeepSeek-V4 kernels (deepseek_*.cc), their registration and the
// argument readers they need beyond addon.h (Int32Array index lists, optional arrays). Same rules as addon.h:
// every check throws before any OpenMP region, kernels never throw.
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>

#include "addon.h"

namespace ld {

void init_deepseek_hc(Napi::Env env, Napi::Object exports);
void init_deepseek_attention(Napi::Env env, Napi::Object exports);
void init_deepseek_moe(Napi::Env env, Napi::Object exports);

// The one hook addon.cc calls.
inline void init_deepseek(Napi::Env env, Napi::Object exports) {
  init_deepseek_hc(env, exports);
  init_deepseek_attention(env, exports);
  init_deepseek_moe(env, exports);
}

// dot product of an f32 row with an f32 row in the LD_LANES order (ld_dot_f32), dispatched AVX2 / scalar
// with the same bits (deepseek_hc.cc).
float dot_f32(const float* x, const float* w, int k);

inline bool arg_is_null(const Napi::CallbackInfo& info, size_t i) { return info[i].IsNull() || info[i].IsUndefined(); }

// An Int32Array argument (index lists: candidates, expert ids, row → token maps).
inline Span<const int32_t> arg_i32(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name) {
  const Napi::Value v = info[i];
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    throw_type(info.Env(), std::string(fn) + ": " + name + " must be an Int32Array");
  }
  Napi::TypedArrayOf<int32_t> a = v.As<Napi::TypedArrayOf<int32_t>>();
  return {a.Data(), a.ElementLength()};
}

inline Span<const int32_t> arg_i32_len(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name,
                                       size_t want, const std::string& shape) {
  Span<const int32_t> s = arg_i32(info, i, fn, name);
  if (s.len != want) {
    throw_range(info.Env(), std::string(fn) + ": " + name + " has " + std::to_string(s.len) + " elements, expected " +
                                shape + " = " + std::to_string(want));
  }
  return s;
}

}  // namespace ld
