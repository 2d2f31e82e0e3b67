// Emulated MI250 elementwise and row kernels (element math: the LD_HD helpers of ld_numerics.h, shared
// with the HIP kernels in device-hip/kernels). Activations are f16 in memory; each op widens to f32
// (exact), computes in f32 with the operation order written next to it, and rounds once to f16 (RNE).
// f32 sqrt and division are correctly rounded on both the host and HIP (its default
// -fhip-fp32-correctly-rounded-divide-sqrt), so the orders below fix the bits.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "addon.h"
#include "ld_numerics.h"

namespace ld {
namespace {

constexpr size_t kParallelMin = 1 << 15;  // below this, an OpenMP fork costs more than the loop

// rmsnorm: ms = (Σ x² in the ld lane order) / dim; r = 1/sqrtf(ms + eps); y = f16((x·r)·w).
Napi::Value rmsnorm(const Napi::CallbackInfo& info) {
  const char* fn = "rmsnormF16";
  need_args(info, 5, fn);
  const int rows = arg_int(info, 2, fn, "rows", 1), dim = arg_int(info, 3, fn, "dim", 1);
  auto x = arg_array_len<uint16_t>(info, 0, fn, "x", (size_t)rows * dim, "rows×dim " + dims({rows, dim}));
  auto w = arg_array_len<uint16_t>(info, 1, fn, "w", (size_t)dim, "dim " + dims({dim}));
  const float eps = static_cast<float>(arg_num(info, 4, fn, "eps"));
  auto y = new_array<uint16_t>(info.Env(), x.len);
  uint16_t* yo = y.Data();
#pragma omp parallel for schedule(static) if (x.len >= kParallelMin)
  for (int r = 0; r < rows; r++) {
    const uint16_t* xr = x.data + (size_t)r * dim;
    const float inv = ld_rms_inv(dot_f16(xr, xr, dim), dim, eps);
    for (int d = 0; d < dim; d++) yo[(size_t)r * dim + d] = ld_rmsnorm_elem_f16(xr[d], inv, w.data[d]);
  }
  return y;
}

// RoPE on dims [off, off+rot) of each head; pairs (j, j+rot/2) (HF rotate_half) or (2j, 2j+1)
// (interleaved). a' = a·c − b·s, b' = a·s + b·c with each product rounded (no fma), then f16.
Napi::Value rope(const Napi::CallbackInfo& info) {
  const char* fn = "ropeF16";
  need_args(info, 9, fn);
  const int T = arg_int(info, 3, fn, "tokens", 1), H = arg_int(info, 4, fn, "heads", 1), D = arg_int(info, 5, fn, "headDim", 1);
  const int off = arg_int(info, 6, fn, "rotOffset", 0), rot = arg_int(info, 7, fn, "rotDim", 2);
  const bool inter = arg_bool(info, 8, fn, "interleaved");
  if (rot % 2 != 0 || (long long)off + rot > D) {
    throw_range(info.Env(), std::string(fn) + ": rotOffset " + std::to_string(off) + " + rotDim " + std::to_string(rot) +
                                " must fit in headDim " + std::to_string(D) + " with rotDim even");
  }
  const int half = rot / 2;
  auto x = arg_array_len<uint16_t>(info, 0, fn, "x", (size_t)T * H * D, "tokens×heads×headDim " + dims({T, H, D}));
  auto c = arg_array_len<float>(info, 1, fn, "cos", (size_t)T * half, "tokens×rotDim/2 " + dims({T, half}));
  auto s = arg_array_len<float>(info, 2, fn, "sin", (size_t)T * half, "tokens×rotDim/2 " + dims({T, half}));
  auto y = new_array<uint16_t>(info.Env(), x.len);
  uint16_t* yo = y.Data();
  std::copy(x.data, x.data + x.len, yo);
#pragma omp parallel for schedule(static) if (x.len >= kParallelMin)
  for (int th = 0; th < T * H; th++) {
    const int t = th / H;
    uint16_t* head = yo + (size_t)th * D + off;
    for (int j = 0; j < half; j++) {
      const int ia = ld_rope_index_a(j, inter), ib = ld_rope_index_b(j, half, inter);
      const uint16_t a = head[ia], b = head[ib];
      const float cs = c.data[(size_t)t * half + j], sn = s.data[(size_t)t * half + j];
      head[ia] = ld_rope_a_f16(a, b, cs, sn);
      head[ib] = ld_rope_b_f16(a, b, cs, sn);
    }
  }
  return y;
}

// SwiGLU: g, u in f32; clamp (limit > 0) written with comparisons so a NaN passes through as NaN, like
// torch.clamp (fminf would replace it by the limit and hide the bug); y = f16((g / (1 + exp(−g))) · u).
Napi::Value swiglu(const Napi::CallbackInfo& info) {
  const char* fn = "swigluF16";
  need_args(info, 3, fn);
  auto g = arg_array<uint16_t>(info, 0, fn, "gate");
  auto u = arg_array_len<uint16_t>(info, 1, fn, "up", g.len, "gate's length");
  const float limit = static_cast<float>(arg_num(info, 2, fn, "limit"));
  auto y = new_array<uint16_t>(info.Env(), g.len);
  uint16_t* yo = y.Data();
  const long long n = (long long)g.len;
#pragma omp parallel for schedule(static) if (g.len >= kParallelMin)
  for (long long i = 0; i < n; i++) {
    yo[i] = ld_swiglu_f16(g.data[i], u.data[i], limit);
  }
  return y;
}

Napi::Value add(const Napi::CallbackInfo& info) {
  const char* fn = "addF16";
  need_args(info, 2, fn);
  auto a = arg_array<uint16_t>(info, 0, fn, "a");
  auto b = arg_array_len<uint16_t>(info, 1, fn, "b", a.len, "a's length");
  auto y = new_array<uint16_t>(info.Env(), a.len);
  uint16_t* yo = y.Data();
  const long long n = (long long)a.len;
#pragma omp parallel for schedule(static) if (a.len >= kParallelMin)
  for (long long i = 0; i < n; i++) yo[i] = ld_add_f16(a.data[i], b.data[i]);
  return y;
}

Napi::Value mul_scalar(const Napi::CallbackInfo& info) {
  const char* fn = "mulScalarF16";
  need_args(info, 2, fn);
  auto a = arg_array<uint16_t>(info, 0, fn, "a");
  const float s = static_cast<float>(arg_num(info, 1, fn, "s"));
  auto y = new_array<uint16_t>(info.Env(), a.len);
  uint16_t* yo = y.Data();
  const long long n = (long long)a.len;
#pragma omp parallel for schedule(static) if (a.len >= kParallelMin)
  for (long long i = 0; i < n; i++) yo[i] = ld_mul_scalar_f16(a.data[i], s);
  return y;
}

Napi::Value f32_to_f16(const Napi::CallbackInfo& info) {
  need_args(info, 1, "f32ToF16");
  auto a = arg_array<float>(info, 0, "f32ToF16", "x");
  auto y = new_array<uint16_t>(info.Env(), a.len);
  uint16_t* yo = y.Data();
  const long long n = (long long)a.len;
#pragma omp parallel for schedule(static) if (a.len >= kParallelMin)
  for (long long i = 0; i < n; i++) yo[i] = ld_f32_to_f16(a.data[i]);
  return y;
}

Napi::Value f16_to_f32(const Napi::CallbackInfo& info) {
  need_args(info, 1, "f16ToF32");
  auto a = arg_array<uint16_t>(info, 0, "f16ToF32", "x");
  auto y = new_array<float>(info.Env(), a.len);
  float* yo = y.Data();
  const long long n = (long long)a.len;
#pragma omp parallel for schedule(static) if (a.len >= kParallelMin)
  for (long long i = 0; i < n; i++) yo[i] = ld_f16_to_f32(a.data[i]);
  return y;
}

Napi::Value bf16_to_f16(const Napi::CallbackInfo& info) {
  need_args(info, 1, "bf16ToF16");
  auto a = arg_array<uint16_t>(info, 0, "bf16ToF16", "x");
  auto y = new_array<uint16_t>(info.Env(), a.len);
  uint16_t* yo = y.Data();
  const long long n = (long long)a.len;
#pragma omp parallel for schedule(static) if (a.len >= kParallelMin)
  for (long long i = 0; i < n; i++) yo[i] = ld_bf16_to_f16(a.data[i]);
  return y;
}

}  // namespace

void init_ops(Napi::Env env, Napi::Object exports) {
  exports.Set("rmsnormF16", Napi::Function::New(env, rmsnorm));
  exports.Set("ropeF16", Napi::Function::New(env, rope));
  exports.Set("swigluF16", Napi::Function::New(env, swiglu));
  exports.Set("addF16", Napi::Function::New(env, add));
  exports.Set("mulScalarF16", Napi::Function::New(env, mul_scalar));
  exports.Set("f32ToF16", Napi::Function::New(env, f32_to_f16));
  exports.Set("f16ToF32", Napi::Function::New(env, f16_to_f32));
  exports.Set("bf16ToF16", Napi::Function::New(env, bf16_to_f16));
}

}  // namespace ld
