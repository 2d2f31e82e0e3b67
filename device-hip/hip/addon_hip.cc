// Module `ld_hip`: the `hip` backend's native side, and the kernels' host reference.
//   probe()                      what the HIP runtime offers (dlopen libamdhip64; never throws)
//   open(codeObjectPath)         load the runtime, the code object and every kernel, run the self-check
//   dequantToF16 … mulScalarF16  the DeviceNative ops on the GPU (same signatures as the ld_device addon's),
//                                dequantNvfp4ToF16 and dequantBnb4ToF16 included
//   hcPreF16 … moeCombineF16     the DeepseekNative ops on the GPU (deepseek.hip, moe.hip), same signatures
//   attentionDecodeF16           the DecodeNative op on the GPU (ld_attention_decode), same signature
//   ref*                         ld_host_ref.h — the expected values the device check compares the GPU with —
//                                so a CPU test can hold them equal to the emulation (ld_device) on random inputs.
// No link-time dependency on ROCm: this addon builds and loads on any machine (the runtime is dlopen'ed).
// Argument checks: lengths are checked here too (a wrong length must throw, never read out of bounds); the
// TypeScript wrapper (device-hip/hip/hip_native.ts) checks first with the emulation's messages.
#include <napi.h>

#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../src/addon.h"
#include "../src/dequant_fp4_args.h"
#include "ld_gpu_backend.h"
#include "ld_host_ref.h"

namespace {

using ld::arg_array;
using ld::arg_array_len;
using ld::arg_bool;
using ld::arg_int;
using ld::arg_num;
using ld::need_args;
using ld::new_array;
using ld::throw_range;
using ld::throw_type;

std::unique_ptr<ldgpu::Backend> g_backend;

ldgpu::Backend& backend(const Napi::Env& env) {
  if (!g_backend || !g_backend->is_open()) throw Napi::Error::New(env, "ld_hip: open() the hip backend first");
  return *g_backend;
}

// Runs a GPU op, turning runtime errors into JS errors.
template <class F>
void gpu(const Napi::Env& env, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, e.what());
  }
}

const float* opt_f32(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name, size_t want) {
  if (info[i].IsNull() || info[i].IsUndefined()) return nullptr;
  return arg_array_len<float>(info, i, fn, name, want, std::to_string(want)).data;
}

ld::Span<const int32_t> arg_i32(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name) {
  const Napi::Value v = info[i];
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    throw_type(info.Env(), std::string(fn) + ": " + name + " must be an Int32Array");
  }
  Napi::TypedArrayOf<int32_t> a = v.As<Napi::TypedArrayOf<int32_t>>();
  return {a.Data(), a.ElementLength()};
}

Napi::Value probe(const Napi::CallbackInfo& info) {
  const ldgpu::ProbeResult p = ldgpu::probe_amd();
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("library", p.library);
  o.Set("libraryName", p.library_name);
  o.Set("deviceCount", p.device_count);
  o.Set("deviceName", p.device_name);
  o.Set("arch", p.arch);
  o.Set("runtimeVersion", p.runtime_version);
  o.Set("driverVersion", p.driver_version);
  o.Set("error", p.error);
  return o;
}

Napi::Value open(const Napi::CallbackInfo& info) {
  need_args(info, 1, "open");
  if (!info[0].IsString()) throw_type(info.Env(), "open: codeObjectPath must be a string");
  const std::string path = info[0].As<Napi::String>().Utf8Value();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Napi::Error::New(info.Env(), "hip backend: cannot read the code object " + path);
  std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto b = std::make_unique<ldgpu::Backend>();
  gpu(info.Env(), [&] { b->open(ldgpu::Flavour::Amd, image); });
  g_backend = std::move(b);
  return info.Env().Undefined();
}

// ---- shared argument readers (DeviceNative signatures) -------------------------------------------------
struct DequantIn {
  int kind, out, in, bo, bi, fault;
  bool f32s;
  ld::Span<const uint8_t> w, s;
};
DequantIn dequant_args(const Napi::CallbackInfo& info, const char* fn) {
  need_args(info, 9, fn);
  DequantIn d{};
  d.kind = arg_int(info, 0, fn, "kind", 0);
  d.f32s = arg_bool(info, 3, fn, "scaleIsF32");
  d.out = arg_int(info, 4, fn, "out", 1), d.in = arg_int(info, 5, fn, "in", 1);
  d.bo = arg_int(info, 6, fn, "blockOut", 1), d.bi = arg_int(info, 7, fn, "blockIn", 1);
  d.fault = arg_int(info, 8, fn, "fault", 0);
  if (d.kind > 4 || d.fault >= LD_FAULT_COUNT) throw_range(info.Env(), std::string(fn) + ": kind 0..4 and fault 0..6");
  const size_t n = (size_t)d.out * d.in;
  const bool has = !info[2].IsNull() && !info[2].IsUndefined();
  if (d.kind == 0) {
    if (d.in % 32 != 0 || !has || d.f32s) throw_range(info.Env(), std::string(fn) + ": mxfp4 needs in % 32 == 0 and E8M0 scales");
    d.w = arg_array_len<uint8_t>(info, 1, fn, "weight", n / 2, "packed");
    d.s = arg_array_len<uint8_t>(info, 2, fn, "scale", n / 32, "E8M0");
  } else if (d.kind == 1) {
    if (!has) throw_type(info.Env(), std::string(fn) + ": fp8-block needs a scale");
    const size_t R = (size_t)((d.out + d.bo - 1) / d.bo), C = (size_t)((d.in + d.bi - 1) / d.bi);
    d.w = arg_array_len<uint8_t>(info, 1, fn, "weight", n, "E4M3");
    d.s = arg_array_len<uint8_t>(info, 2, fn, "scale", R * C * (d.f32s ? 4 : 1), "scale grid");
  } else {
    if (has) throw_type(info.Env(), std::string(fn) + ": plain weights take no scale");
    d.w = arg_array_len<uint8_t>(info, 1, fn, "weight", n * (d.kind == 4 ? 4 : 2), "bytes");
    d.s = {nullptr, 0};
  }
  return d;
}

struct GemmIn {
  int m, k, n;
  ld::Span<const uint16_t> x, w;
};
GemmIn gemm_args(const Napi::CallbackInfo& info, const char* fn, size_t nargs) {
  need_args(info, nargs, fn);
  GemmIn g{};
  g.m = arg_int(info, 2, fn, "m", 1), g.k = arg_int(info, 3, fn, "k", 1), g.n = arg_int(info, 4, fn, "n", 1);
  g.x = arg_array_len<uint16_t>(info, 0, fn, "x", (size_t)g.m * g.k, "m×k");
  g.w = arg_array_len<uint16_t>(info, 1, fn, "w", (size_t)g.n * g.k, "n×k");
  return g;
}

struct AttnIn {
  int T, Hq, Hkv, D, Dv, window;
  float scale;
  ld::Span<const uint16_t> q, k, v;
  const float* sinks;
};
AttnIn attn_args(const Napi::CallbackInfo& info, const char* fn) {
  need_args(info, 11, fn);
  AttnIn a{};
  a.T = arg_int(info, 3, fn, "T", 1), a.Hq = arg_int(info, 4, fn, "Hq", 1), a.Hkv = arg_int(info, 5, fn, "Hkv", 1);
  a.D = arg_int(info, 6, fn, "D", 1), a.Dv = arg_int(info, 7, fn, "Dv", 1);
  a.scale = (float)arg_num(info, 8, fn, "scale");
  a.window = arg_int(info, 9, fn, "window", 0);
  if (a.Hq % a.Hkv != 0) throw_range(info.Env(), std::string(fn) + ": Hq is not a multiple of Hkv");
  a.q = arg_array_len<uint16_t>(info, 0, fn, "q", (size_t)a.T * a.Hq * a.D, "T×Hq×D");
  a.k = arg_array_len<uint16_t>(info, 1, fn, "k", (size_t)a.T * a.Hkv * a.D, "T×Hkv×D");
  a.v = arg_array_len<uint16_t>(info, 2, fn, "v", (size_t)a.T * a.Hkv * a.Dv, "T×Hkv×Dv");
  a.sinks = opt_f32(info, 10, fn, "sinks", (size_t)a.Hq);
  return a;
}

struct RopeIn {
  int T, H, D, off, rot;
  bool inter;
  ld::Span<const uint16_t> x;
  ld::Span<const float> c, s;
};
RopeIn rope_args(const Napi::CallbackInfo& info, const char* fn) {
  need_args(info, 9, fn);
  RopeIn r{};
  r.T = arg_int(info, 3, fn, "tokens", 1), r.H = arg_int(info, 4, fn, "heads", 1), r.D = arg_int(info, 5, fn, "headDim", 1);
  r.off = arg_int(info, 6, fn, "rotOffset", 0), r.rot = arg_int(info, 7, fn, "rotDim", 2);
  r.inter = arg_bool(info, 8, fn, "interleaved");
  if (r.rot % 2 != 0 || (long long)r.off + r.rot > r.D) throw_range(info.Env(), std::string(fn) + ": rotOffset + rotDim must fit in headDim");
  r.x = arg_array_len<uint16_t>(info, 0, fn, "x", (size_t)r.T * r.H * r.D, "tokens×heads×headDim");
  r.c = arg_array_len<float>(info, 1, fn, "cos", (size_t)r.T * (r.rot / 2), "tokens×rotDim/2");
  r.s = arg_array_len<float>(info, 2, fn, "sin", (size_t)r.T * (r.rot / 2), "tokens×rotDim/2");
  return r;
}

// ---- GPU ops --------------------------------------------------------------------------------------------
Napi::Value hip_dequant(const Napi::CallbackInfo& info) {
  const DequantIn d = dequant_args(info, "dequantToF16");
  auto y = new_array<uint16_t>(info.Env(), (size_t)d.out * d.in);
  gpu(info.Env(), [&] {
    backend(info.Env()).dequant(d.kind, d.w.data, d.w.len, d.s.data, d.s.len, d.f32s, d.out, d.in, d.bo, d.bi, d.fault, y.Data());
  });
  return y;
}

Napi::Value hip_dequant_nvfp4(const Napi::CallbackInfo& info) {
  const ld::Nvfp4In a = ld::nvfp4_args(info, "dequantNvfp4ToF16");
  auto y = new_array<uint16_t>(info.Env(), (size_t)a.out * a.in);
  gpu(info.Env(), [&] { backend(info.Env()).dequant_nvfp4(a.w.data, a.s.data, a.out, a.in, a.global, a.divisor ? 1 : 0, a.fault, y.Data()); });
  return y;
}

Napi::Value hip_dequant_bnb4(const Napi::CallbackInfo& info) {
  const ld::Bnb4In a = ld::bnb4_args(info, "dequantBnb4ToF16");
  auto y = new_array<uint16_t>(info.Env(), a.n);
  gpu(info.Env(), [&] {
    backend(info.Env()).dequant_bnb4(a.w.data, a.absmax.data, a.absmax.len, a.codes ? 1 : 0, a.quant_map.data, a.nested_absmax.data, a.nested_absmax.len,
                                     a.nested_map.data, a.nested_offset, a.nested_blocksize, (long long)a.n, a.blocksize, a.fault, y.Data());
  });
  return y;
}

Napi::Value hip_gemm(const Napi::CallbackInfo& info, bool f32) {
  const GemmIn g = gemm_args(info, f32 ? "gemmF16F32" : "gemmF16", f32 ? 5 : 6);
  const float alpha = f32 ? 1.0f : (float)arg_num(info, 5, "gemmF16", "alpha");
  if (f32) {
    auto y = new_array<float>(info.Env(), (size_t)g.m * g.n);
    gpu(info.Env(), [&] { backend(info.Env()).gemm(g.x.data, g.w.data, nullptr, nullptr, g.m, g.k, g.n, 1.0f, 0, nullptr, y.Data()); });
    return y;
  }
  auto y = new_array<uint16_t>(info.Env(), (size_t)g.m * g.n);
  gpu(info.Env(), [&] { backend(info.Env()).gemm(g.x.data, g.w.data, nullptr, nullptr, g.m, g.k, g.n, alpha, 0, y.Data(), nullptr); });
  return y;
}

Napi::Value hip_rmsnorm(const Napi::CallbackInfo& info) {
  const char* fn = "rmsnormF16";
  need_args(info, 5, fn);
  const int rows = arg_int(info, 2, fn, "rows", 1), dim = arg_int(info, 3, fn, "dim", 1);
  auto x = arg_array_len<uint16_t>(info, 0, fn, "x", (size_t)rows * dim, "rows×dim");
  auto w = arg_array_len<uint16_t>(info, 1, fn, "w", (size_t)dim, "dim");
  const float eps = (float)arg_num(info, 4, fn, "eps");
  auto y = new_array<uint16_t>(info.Env(), x.len);
  gpu(info.Env(), [&] { backend(info.Env()).rmsnorm(x.data, w.data, rows, dim, eps, y.Data()); });
  return y;
}

Napi::Value hip_rope(const Napi::CallbackInfo& info) {
  const RopeIn r = rope_args(info, "ropeF16");
  auto y = new_array<uint16_t>(info.Env(), r.x.len);
  gpu(info.Env(), [&] { backend(info.Env()).rope(r.x.data, r.c.data, r.s.data, r.T, r.H, r.D, r.off, r.rot, r.inter, y.Data()); });
  return y;
}

Napi::Value hip_attention(const Napi::CallbackInfo& info) {
  const AttnIn a = attn_args(info, "attentionF16");
  auto y = new_array<uint16_t>(info.Env(), (size_t)a.T * a.Hq * a.Dv);
  gpu(info.Env(), [&] {
    backend(info.Env()).attention(a.q.data, a.k.data, a.v.data, a.sinks, a.T, a.Hq, a.Hkv, a.D, a.Dv, a.scale, a.window, y.Data());
  });
  return y;
}

Napi::Value hip_swiglu(const Napi::CallbackInfo& info) {
  need_args(info, 3, "swigluF16");
  auto g = arg_array<uint16_t>(info, 0, "swigluF16", "gate");
  auto u = arg_array_len<uint16_t>(info, 1, "swigluF16", "up", g.len, "gate's length");
  const float limit = (float)arg_num(info, 2, "swigluF16", "limit");
  auto y = new_array<uint16_t>(info.Env(), g.len);
  gpu(info.Env(), [&] { backend(info.Env()).swiglu(g.data, u.data, (long long)g.len, limit, y.Data()); });
  return y;
}

Napi::Value hip_add(const Napi::CallbackInfo& info) {
  need_args(info, 2, "addF16");
  auto a = arg_array<uint16_t>(info, 0, "addF16", "a");
  auto b = arg_array_len<uint16_t>(info, 1, "addF16", "b", a.len, "a's length");
  auto y = new_array<uint16_t>(info.Env(), a.len);
  gpu(info.Env(), [&] { backend(info.Env()).add(a.data, b.data, (long long)a.len, y.Data()); });
  return y;
}

Napi::Value hip_mul_scalar(const Napi::CallbackInfo& info) {
  need_args(info, 2, "mulScalarF16");
  auto a = arg_array<uint16_t>(info, 0, "mulScalarF16", "a");
  const float s = (float)arg_num(info, 1, "mulScalarF16", "s");
  auto y = new_array<uint16_t>(info.Env(), a.len);
  gpu(info.Env(), [&] { backend(info.Env()).mul_scalar(a.data, (long long)a.len, s, y.Data()); });
  return y;
}

// ---- host reference (ld_host_ref.h) ----------------------------------------------------------------------
Napi::Value ref_dequant(const Napi::CallbackInfo& info) {
  const DequantIn d = dequant_args(info, "refDequantToF16");
  auto y = new_array<uint16_t>(info.Env(), (size_t)d.out * d.in);
  ldref::dequant(d.kind, d.w.data, d.s.data, d.f32s, d.out, d.in, d.bo, d.bi, d.fault, y.Data());
  return y;
}

Napi::Value ref_dequant_nvfp4(const Napi::CallbackInfo& info) {
  const ld::Nvfp4In a = ld::nvfp4_args(info, "refDequantNvfp4ToF16");
  auto y = new_array<uint16_t>(info.Env(), (size_t)a.out * a.in);
  ldref::dequant_nvfp4(a.w.data, a.s.data, a.out, a.in, a.global, a.divisor ? 1 : 0, a.fault, y.Data());
  return y;
}

Napi::Value ref_dequant_bnb4(const Napi::CallbackInfo& info) {
  const ld::Bnb4In a = ld::bnb4_args(info, "refDequantBnb4ToF16");
  auto y = new_array<uint16_t>(info.Env(), a.n);
  ldref::dequant_bnb4(a.w.data, a.absmax.data, a.codes ? 1 : 0, a.quant_map.data, a.nested_absmax.data, a.nested_map.data, a.nested_offset, a.nested_blocksize,
                      (long long)a.n, a.blocksize, a.fault, y.Data());
  return y;
}

Napi::Value ref_gemm(const Napi::CallbackInfo& info, bool f32) {
  const GemmIn g = gemm_args(info, f32 ? "refGemmF16F32" : "refGemmF16", f32 ? 5 : 6);
  if (f32) {
    auto y = new_array<float>(info.Env(), (size_t)g.m * g.n);
    ldref::gemm(g.x.data, g.w.data, nullptr, nullptr, g.m, g.k, g.n, 1.0f, 0, nullptr, y.Data());
    return y;
  }
  const float alpha = (float)arg_num(info, 5, "refGemmF16", "alpha");
  auto y = new_array<uint16_t>(info.Env(), (size_t)g.m * g.n);
  ldref::gemm(g.x.data, g.w.data, nullptr, nullptr, g.m, g.k, g.n, alpha, 0, y.Data(), nullptr);
  return y;
}

// refGemmMxfp4F16(x, packed, scale, m, k, n, alpha, fault): the fused kernel's expected values.
Napi::Value ref_gemm_mxfp4(const Napi::CallbackInfo& info) {
  const char* fn = "refGemmMxfp4F16";
  need_args(info, 8, fn);
  const int m = arg_int(info, 3, fn, "m", 1), k = arg_int(info, 4, fn, "k", 32), n = arg_int(info, 5, fn, "n", 1);
  if (k % 32 != 0) throw_range(info.Env(), std::string(fn) + ": k must be a multiple of 32");
  auto x = arg_array_len<uint16_t>(info, 0, fn, "x", (size_t)m * k, "m×k");
  auto q = arg_array_len<uint8_t>(info, 1, fn, "packed", (size_t)n * k / 2, "n×k/2");
  auto s = arg_array_len<uint8_t>(info, 2, fn, "scale", (size_t)n * k / 32, "n×k/32");
  const float alpha = (float)arg_num(info, 6, fn, "alpha");
  const int fault = arg_int(info, 7, fn, "fault", 0);
  if (fault >= LD_FAULT_COUNT) throw_range(info.Env(), std::string(fn) + ": fault 0..6");
  auto y = new_array<uint16_t>(info.Env(), (size_t)m * n);
  ldref::gemm(x.data, nullptr, q.data, s.data, m, k, n, alpha, fault, y.Data(), nullptr);
  return y;
}

Napi::Value ref_rmsnorm(const Napi::CallbackInfo& info) {
  const char* fn = "refRmsnormF16";
  need_args(info, 5, fn);
  const int rows = arg_int(info, 2, fn, "rows", 1), dim = arg_int(info, 3, fn, "dim", 1);
  auto x = arg_array_len<uint16_t>(info, 0, fn, "x", (size_t)rows * dim, "rows×dim");
  auto w = arg_array_len<uint16_t>(info, 1, fn, "w", (size_t)dim, "dim");
  auto y = new_array<uint16_t>(info.Env(), x.len);
  ldref::rmsnorm(x.data, w.data, rows, dim, (float)arg_num(info, 4, fn, "eps"), y.Data());
  return y;
}

Napi::Value ref_rope(const Napi::CallbackInfo& info) {
  const RopeIn r = rope_args(info, "refRopeF16");
  auto y = new_array<uint16_t>(info.Env(), r.x.len);
  ldref::rope(r.x.data, r.c.data, r.s.data, r.T, r.H, r.D, r.off, r.rot, r.inter, y.Data());
  return y;
}

Napi::Value ref_attention(const Napi::CallbackInfo& info) {
  const AttnIn a = attn_args(info, "refAttentionF16");
  auto y = new_array<uint16_t>(info.Env(), (size_t)a.T * a.Hq * a.Dv);
  ldref::attention(a.q.data, a.k.data, a.v.data, a.sinks, a.T, a.Hq, a.Hkv, a.D, a.Dv, a.scale, a.window, y.Data());
  return y;
}

// refSoftmaxF16(z f32 [rows, n], sinks f32 [rows] | null, rows, n)
Napi::Value ref_softmax(const Napi::CallbackInfo& info) {
  const char* fn = "refSoftmaxF16";
  need_args(info, 4, fn);
  const int rows = arg_int(info, 2, fn, "rows", 1), n = arg_int(info, 3, fn, "n", 1);
  auto z = arg_array_len<float>(info, 0, fn, "z", (size_t)rows * n, "rows×n");
  const float* sinks = opt_f32(info, 1, fn, "sinks", (size_t)rows);
  auto y = new_array<uint16_t>(info.Env(), z.len);
  ldref::softmax(z.data, sinks, rows, n, y.Data());
  return y;
}

Napi::Value ref_swiglu(const Napi::CallbackInfo& info) {
  need_args(info, 3, "refSwigluF16");
  auto g = arg_array<uint16_t>(info, 0, "refSwigluF16", "gate");
  auto u = arg_array_len<uint16_t>(info, 1, "refSwigluF16", "up", g.len, "gate's length");
  auto y = new_array<uint16_t>(info.Env(), g.len);
  ldref::swiglu(g.data, u.data, (long long)g.len, (float)arg_num(info, 2, "refSwigluF16", "limit"), y.Data());
  return y;
}

Napi::Value ref_add(const Napi::CallbackInfo& info) {
  need_args(info, 2, "refAddF16");
  auto a = arg_array<uint16_t>(info, 0, "refAddF16", "a");
  auto b = arg_array_len<uint16_t>(info, 1, "refAddF16", "b", a.len, "a's length");
  auto y = new_array<uint16_t>(info.Env(), a.len);
  ldref::add(a.data, b.data, (long long)a.len, y.Data());
  return y;
}

Napi::Value ref_mul_scalar(const Napi::CallbackInfo& info) {
  need_args(info, 2, "refMulScalarF16");
  auto a = arg_array<uint16_t>(info, 0, "refMulScalarF16", "a");
  auto y = new_array<uint16_t>(info.Env(), a.len);
  ldref::mul_scalar(a.data, (long long)a.len, (float)arg_num(info, 1, "refMulScalarF16", "s"), y.Data());
  return y;
}

// refMoeGatherF16(x [T, D], token Int32 [R], T, D) → [R, D]
Napi::Value ref_moe_gather(const Napi::CallbackInfo& info) {
  const char* fn = "refMoeGatherF16";
  need_args(info, 4, fn);
  const int T = arg_int(info, 2, fn, "T", 1), D = arg_int(info, 3, fn, "D", 1);
  auto x = arg_array_len<uint16_t>(info, 0, fn, "x", (size_t)T * D, "T×D");
  auto tok = arg_i32(info, 1, fn, "token");
  for (size_t r = 0; r < tok.len; r++)
    if (tok.data[r] < 0 || tok.data[r] >= T) throw_range(info.Env(), std::string(fn) + ": token out of range");
  auto y = new_array<uint16_t>(info.Env(), tok.len * D);
  ldref::moe_gather(x.data, tok.data, (int)tok.len, D, y.Data());
  return y;
}

// ---- ops whose GPU kernel and host reference share one argument reader: `where` picks the implementation ----
// Gpu: the kernel through the backend (the DeepseekNative / DecodeNative surface, the emulation's signatures);
// Ref: ld_host_ref.h (the ref* exports). The JS name in messages is the emulation's, "ref"-prefixed for Ref.
enum class Where { Gpu, Ref };

std::string op_name(Where w, const char* name) {
  if (w == Where::Gpu) return name;
  std::string n = std::string("ref") + name;
  n[3] = (char)(n[3] - 'a' + 'A');
  return n;
}

// (ref)moeCombineF16(y [R, D], rowToken Int32 [R], shared [T, D], T, D) → [T, D]: rowToken → CSR on the host
// (ldref::moe_csr, as moeCombineF16 builds it), then ld_moe_combine.
Napi::Value moe_combine_op(const Napi::CallbackInfo& info, Where where) {
  const std::string name = op_name(where, "moeCombineF16");
  const char* fn = name.c_str();
  need_args(info, 5, fn);
  const int T = arg_int(info, 3, fn, "T", 1), D = arg_int(info, 4, fn, "D", 1);
  auto rt = arg_i32(info, 1, fn, "rowToken");
  for (size_t r = 0; r < rt.len; r++)
    if (rt.data[r] < 0 || rt.data[r] >= T) throw_range(info.Env(), std::string(fn) + ": rowToken out of range");
  auto y = arg_array_len<uint16_t>(info, 0, fn, "y", rt.len * D, "R×D");
  auto sh = arg_array_len<uint16_t>(info, 2, fn, "shared", (size_t)T * D, "T×D");
  std::vector<int32_t> start((size_t)T + 1), rows(rt.len);
  ldref::moe_csr(rt.data, (int)rt.len, T, start.data(), rows.data());
  auto out = new_array<uint16_t>(info.Env(), (size_t)T * D);
  if (where == Where::Gpu) {
    gpu(info.Env(), [&] { backend(info.Env()).moe_combine(y.data, (int)rt.len, start.data(), rows.data(), sh.data, T, D, out.Data()); });
  } else {
    ldref::moe_combine(y.data, start.data(), rows.data(), sh.data, T, D, out.Data());
  }
  return out;
}

// refSinkhornF32(A f32 [T, hc, hc], T, hc, iters, eps) → f32 [T, hc, hc]
Napi::Value ref_sinkhorn(const Napi::CallbackInfo& info) {
  const char* fn = "refSinkhornF32";
  need_args(info, 5, fn);
  const int T = arg_int(info, 1, fn, "T", 1), hc = arg_int(info, 2, fn, "hc", 1), iters = arg_int(info, 3, fn, "iters", 1);
  auto A = arg_array_len<float>(info, 0, fn, "A", (size_t)T * hc * hc, "T×hc×hc");
  auto C = new_array<float>(info.Env(), A.len);
  ldref::sinkhorn(A.data, T, hc, iters, (float)arg_num(info, 4, fn, "eps"), C.Data());
  return C;
}

// (ref)attentionDecodeF16: DecodeNative's signature (q, k, v, B, Tq, Bc, cap, slot, start, Hq, Hkv, D, Dv, scale,
// window, sinks) and decode.cc's checks (slot inside the cache, start + Tq ≤ cap).
Napi::Value attention_decode_op(const Napi::CallbackInfo& info, Where where) {
  const std::string name = op_name(where, "attentionDecodeF16");
  const char* fn = name.c_str();
  const Napi::Env env = info.Env();
  need_args(info, 16, fn);
  const int B = arg_int(info, 3, fn, "B", 1), Tq = arg_int(info, 4, fn, "Tq", 1);
  const int Bc = arg_int(info, 5, fn, "Bc", 1), cap = arg_int(info, 6, fn, "cap", 1);
  const int Hq = arg_int(info, 9, fn, "Hq", 1), Hkv = arg_int(info, 10, fn, "Hkv", 1);
  const int D = arg_int(info, 11, fn, "D", 1), Dv = arg_int(info, 12, fn, "Dv", 1);
  const float scale = (float)arg_num(info, 13, fn, "scale");
  const int window = arg_int(info, 14, fn, "window", 0);
  if (Hq % Hkv != 0) throw_range(env, std::string(fn) + ": Hq is not a multiple of Hkv");
  auto q = arg_array_len<uint16_t>(info, 0, fn, "q", (size_t)B * Tq * Hq * D, "B×Tq×Hq×D");
  auto k = arg_array_len<uint16_t>(info, 1, fn, "k", (size_t)Bc * cap * Hkv * D, "Bc×cap×Hkv×D");
  auto v = arg_array_len<uint16_t>(info, 2, fn, "v", (size_t)Bc * cap * Hkv * Dv, "Bc×cap×Hkv×Dv");
  auto slot = arg_i32(info, 7, fn, "slot");
  auto start = arg_i32(info, 8, fn, "start");
  if (slot.len != (size_t)B || start.len != (size_t)B) throw_range(env, std::string(fn) + ": slot and start must have B elements");
  for (int b = 0; b < B; b++) {
    if (slot.data[b] < 0 || slot.data[b] >= Bc) throw_range(env, std::string(fn) + ": slot[" + std::to_string(b) + "] is outside the cache's sequences");
    if (start.data[b] < 0 || ((long long)start.data[b] + Tq > cap && !(window > 0 && (long long)window + Tq - 1 <= cap))) {
      throw_range(env, std::string(fn) + ": start[" + std::to_string(b) + "] + Tq does not fit the cache capacity (a ring needs window + Tq − 1 ≤ cap)");
    }
  }
  const float* sinks = opt_f32(info, 15, fn, "sinks", (size_t)Hq);
  auto y = new_array<uint16_t>(env, (size_t)B * Tq * Hq * Dv);
  if (where == Where::Gpu) {
    gpu(env, [&] {
      backend(env).attention_decode(q.data, k.data, v.data, slot.data, start.data, sinks, B, Tq, Bc, cap, Hq, Hkv, D, Dv, scale, window,
                                    y.Data());
    });
  } else {
    ldref::attention_decode(q.data, k.data, v.data, slot.data, start.data, sinks, B, Tq, cap, Hq, Hkv, D, Dv, scale, window, y.Data());
  }
  return y;
}

// ---- DeepSeek-V4 ops: the same signatures as the ld_device addon's (src/deepseek_*.cc) ----

Napi::Value hc_op(const Napi::CallbackInfo& info, bool head, Where where) {
  const std::string name = op_name(where, head ? "hcHeadF16" : "hcPreF16");
  const char* fn = name.c_str();
  need_args(info, head ? 9 : 10, fn);
  const int T = arg_int(info, 4, fn, "T", 1), hc = arg_int(info, 5, fn, "hc", 1), D = arg_int(info, 6, fn, "D", 1);
  const size_t width = (size_t)hc * D, nmix = head ? (size_t)hc : (size_t)(2 + hc) * hc;
  auto x = arg_array_len<uint16_t>(info, 0, fn, "x", (size_t)T * width, "T×hc×D");
  auto w = arg_array_len<float>(info, 1, fn, "fn", nmix * width, "nmix×hc·D");
  auto base = arg_array_len<float>(info, 2, fn, "base", nmix, "nmix");
  auto scale = arg_array_len<float>(info, 3, fn, "scale", head ? 1 : 3, head ? "1" : "3");
  const float norm_eps = (float)arg_num(info, 7, fn, "normEps"), hc_eps = (float)arg_num(info, 8, fn, "hcEps");
  const int iters = head ? 0 : arg_int(info, 9, fn, "iters", 1);
  const Napi::Env env = info.Env();
  auto u = new_array<uint16_t>(env, (size_t)T * D);
  auto post = new_array<float>(env, (size_t)T * hc);
  auto comb = new_array<float>(env, (size_t)T * hc * hc);
  if (where == Where::Gpu) {
    gpu(env, [&] {
      if (head) backend(env).hc_head(x.data, w.data, base.data, scale.data, T, hc, D, norm_eps, hc_eps, u.Data());
      else backend(env).hc_pre(x.data, w.data, base.data, scale.data, T, hc, D, norm_eps, hc_eps, iters, u.Data(), post.Data(), comb.Data());
    });
  } else {
    ldref::hc_pre_head(head, x.data, w.data, base.data, scale.data, T, hc, D, norm_eps, hc_eps, iters, u.Data(), post.Data(), comb.Data());
  }
  if (head) return u;
  Napi::Object o = Napi::Object::New(env);
  o.Set("u", u);
  o.Set("post", post);
  o.Set("comb", comb);
  return o;
}

Napi::Value hc_post_op(const Napi::CallbackInfo& info, Where where) {
  const std::string name = op_name(where, "hcPostF16");
  const char* fn = name.c_str();
  need_args(info, 7, fn);
  const int T = arg_int(info, 4, fn, "T", 1), hc = arg_int(info, 5, fn, "hc", 1), D = arg_int(info, 6, fn, "D", 1);
  auto f = arg_array_len<uint16_t>(info, 0, fn, "f", (size_t)T * D, "T×D");
  auto x = arg_array_len<uint16_t>(info, 1, fn, "x", (size_t)T * hc * D, "T×hc×D");
  auto post = arg_array_len<float>(info, 2, fn, "post", (size_t)T * hc, "T×hc");
  auto comb = arg_array_len<float>(info, 3, fn, "comb", (size_t)T * hc * hc, "T×hc×hc");
  auto y = new_array<uint16_t>(info.Env(), x.len);
  if (where == Where::Gpu) gpu(info.Env(), [&] { backend(info.Env()).hc_post(f.data, x.data, post.data, comb.data, T, hc, D, y.Data()); });
  else ldref::hc_post(f.data, x.data, post.data, comb.data, T, hc, D, y.Data());
  return y;
}

Napi::Value compress_pool_op(const Napi::CallbackInfo& info, Where where) {
  const std::string name = op_name(where, "compressPoolF16");
  const char* fn = name.c_str();
  need_args(info, 7, fn);
  const int T = arg_int(info, 3, fn, "T", 1), r = arg_int(info, 4, fn, "ratio", 1), dc = arg_int(info, 5, fn, "dc", 1);
  const bool overlap = arg_bool(info, 6, fn, "overlap");
  const size_t w = (size_t)(overlap ? 2 : 1) * dc;
  auto K = arg_array_len<float>(info, 0, fn, "K", (size_t)T * w, "T×c·dc");
  auto Z = arg_array_len<float>(info, 1, fn, "Z", (size_t)T * w, "T×c·dc");
  auto ape = arg_array_len<float>(info, 2, fn, "ape", (size_t)r * w, "ratio×c·dc");
  auto y = new_array<uint16_t>(info.Env(), (size_t)(T / r) * dc);
  if (where == Where::Gpu) gpu(info.Env(), [&] { backend(info.Env()).compress_pool(K.data, Z.data, ape.data, T, r, dc, overlap, y.Data()); });
  else ldref::compress_pool(K.data, Z.data, ape.data, T, r, dc, overlap, y.Data());
  return y;
}

Napi::Value router_op(const Napi::CallbackInfo& info, Where where) {
  const std::string name = op_name(where, "routerF32");
  const char* fn = name.c_str();
  need_args(info, 7, fn);
  const int T = arg_int(info, 2, fn, "T", 1), E = arg_int(info, 3, fn, "E", 1), k = arg_int(info, 4, fn, "topk", 1);
  if (k > E) throw_range(info.Env(), std::string(fn) + ": topk exceeds E");
  auto logits = arg_array_len<float>(info, 0, fn, "logits", (size_t)T * E, "T×E");
  const float* bias = opt_f32(info, 1, fn, "bias", (size_t)E);
  const float route_scale = (float)arg_num(info, 5, fn, "routeScale");
  const int32_t* given = nullptr;
  if (!info[6].IsNull() && !info[6].IsUndefined()) {
    auto g = arg_i32(info, 6, fn, "given");
    if (g.len != (size_t)T * k) throw_range(info.Env(), std::string(fn) + ": given must have T×topk elements");
    for (size_t i = 0; i < g.len; i++)
      if (g.data[i] < 0 || g.data[i] >= E) throw_range(info.Env(), std::string(fn) + ": given id out of range");
    given = g.data;
  }
  const Napi::Env env = info.Env();
  auto ids = new_array<int32_t>(env, (size_t)T * k);
  auto weights = new_array<float>(env, (size_t)T * k);
  auto scores = new_array<float>(env, (size_t)T * E);
  if (where == Where::Gpu) {
    gpu(env, [&] { backend(env).router(logits.data, bias, given, T, E, k, route_scale, ids.Data(), weights.Data(), scores.Data()); });
  } else {
    ldref::router(logits.data, bias, given, T, E, k, route_scale, ids.Data(), weights.Data(), scores.Data());
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("ids", ids);
  o.Set("weights", weights);
  o.Set("scores", scores);
  return o;
}

Napi::Value swiglu_rows_op(const Napi::CallbackInfo& info, Where where) {
  const std::string name = op_name(where, "swigluRowsF16");
  const char* fn = name.c_str();
  need_args(info, 6, fn);
  const int rows = arg_int(info, 2, fn, "rows", 1), cols = arg_int(info, 3, fn, "cols", 1);
  auto g = arg_array_len<uint16_t>(info, 0, fn, "gate", (size_t)rows * cols, "rows×cols");
  auto u = arg_array_len<uint16_t>(info, 1, fn, "up", (size_t)rows * cols, "rows×cols");
  const float* rw = opt_f32(info, 4, fn, "rowWeights", (size_t)rows);
  const float limit = (float)arg_num(info, 5, fn, "limit");
  auto y = new_array<uint16_t>(info.Env(), g.len);
  if (where == Where::Gpu) gpu(info.Env(), [&] { backend(info.Env()).swiglu_rows(g.data, u.data, rw, rows, cols, limit, y.Data()); });
  else ldref::swiglu_rows(g.data, u.data, rw, rows, cols, limit, y.Data());
  return y;
}

Napi::Value oss_router_op(const Napi::CallbackInfo& info, Where where) {
  const std::string name = op_name(where, "ossRouterF32");
  const char* fn = name.c_str();
  need_args(info, 6, fn);
  const int T = arg_int(info, 2, fn, "T", 1), E = arg_int(info, 3, fn, "E", 1), k = arg_int(info, 4, fn, "topk", 1);
  if (k > E) throw_range(info.Env(), std::string(fn) + ": topk exceeds E");
  auto logits = arg_array_len<float>(info, 0, fn, "logits", (size_t)T * E, "T×E");
  const float* bias = opt_f32(info, 1, fn, "bias", (size_t)E);
  const int32_t* given = nullptr;
  if (!info[5].IsNull() && !info[5].IsUndefined()) {
    auto g = arg_i32(info, 5, fn, "given");
    if (g.len != (size_t)T * k) throw_range(info.Env(), std::string(fn) + ": given must have T×topk elements");
    for (size_t i = 0; i < g.len; i++)
      if (g.data[i] < 0 || g.data[i] >= E) throw_range(info.Env(), std::string(fn) + ": given id out of range");
    given = g.data;
  }
  const Napi::Env env = info.Env();
  auto ids = new_array<int32_t>(env, (size_t)T * k);
  auto weights = new_array<float>(env, (size_t)T * k);
  if (where == Where::Gpu) gpu(env, [&] { backend(env).oss_router(logits.data, bias, given, T, E, k, ids.Data(), weights.Data()); });
  else ldref::oss_router(logits.data, bias, given, T, E, k, ids.Data(), weights.Data());
  Napi::Object o = Napi::Object::New(env);
  o.Set("ids", ids);
  o.Set("weights", weights);
  return o;
}

Napi::Value oss_swiglu_op(const Napi::CallbackInfo& info, Where where) {
  const std::string name = op_name(where, "ossSwigluF16");
  const char* fn = name.c_str();
  need_args(info, 5, fn);
  const int rows = arg_int(info, 1, fn, "rows", 1), I = arg_int(info, 2, fn, "I", 1);
  auto h = arg_array_len<uint16_t>(info, 0, fn, "h", (size_t)rows * 2 * I, "rows×2I");
  const float limit = (float)arg_num(info, 3, fn, "limit"), alpha = (float)arg_num(info, 4, fn, "alpha");
  auto y = new_array<uint16_t>(info.Env(), (size_t)rows * I);
  if (where == Where::Gpu) gpu(info.Env(), [&] { backend(info.Env()).oss_swiglu(h.data, rows, I, limit, alpha, y.Data()); });
  else ldref::oss_swiglu(h.data, rows, I, limit, alpha, y.Data());
  return y;
}

Napi::Value indexer_topk_op(const Napi::CallbackInfo& info, Where where) {
  const std::string name = op_name(where, "indexerTopkF16");
  const char* fn = name.c_str();
  need_args(info, 11, fn);
  const int T = arg_int(info, 3, fn, "T", 1), nh = arg_int(info, 4, fn, "nh", 1), hd = arg_int(info, 5, fn, "hd", 1);
  const int B = arg_int(info, 6, fn, "B", 0), r = arg_int(info, 7, fn, "ratio", 1), t0 = arg_int(info, 8, fn, "t0", 0);
  const int topk = arg_int(info, 9, fn, "topk", 1);
  auto q = arg_array_len<uint16_t>(info, 0, fn, "q", (size_t)T * nh * hd, "T×nh×hd");
  auto w = arg_array_len<uint16_t>(info, 1, fn, "w", (size_t)T * nh, "T×nh");
  auto e = arg_array_len<uint16_t>(info, 2, fn, "e", (size_t)B * hd, "B×hd");
  const float scale = (float)arg_num(info, 10, fn, "scale");
  const Napi::Env env = info.Env();
  auto scores = new_array<float>(env, (size_t)T * B);
  auto picks = new_array<int32_t>(env, (size_t)T * topk);
  if (where == Where::Gpu) {
    gpu(env, [&] { backend(env).indexer_topk(q.data, w.data, e.data, T, nh, hd, B, r, t0, topk, scale, scores.Data(), picks.Data()); });
  } else {
    ldref::indexer_topk(q.data, w.data, e.data, T, nh, hd, B, r, t0, topk, scale, scores.Data(), picks.Data());
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("scores", scores);
  o.Set("picks", picks);
  return o;
}

Napi::Value sparse_attention_op(const Napi::CallbackInfo& info, Where where) {
  const std::string name = op_name(where, "sparseAttentionF16");
  const char* fn = name.c_str();
  need_args(info, 12, fn);
  const int T = arg_int(info, 3, fn, "T", 1), H = arg_int(info, 4, fn, "H", 1), D = arg_int(info, 5, fn, "D", 1);
  const int B = arg_int(info, 6, fn, "B", 0), window = arg_int(info, 7, fn, "window", 0), K = arg_int(info, 9, fn, "K", 0);
  auto q = arg_array_len<uint16_t>(info, 0, fn, "q", (size_t)T * H * D, "T×H×D");
  auto kv = arg_array_len<uint16_t>(info, 1, fn, "kv", (size_t)T * D, "T×D");
  auto comp = arg_array_len<uint16_t>(info, 2, fn, "comp", (size_t)B * D, "B×D");
  auto cand = arg_i32(info, 8, fn, "cand");
  if (cand.len != (size_t)T * K) throw_range(info.Env(), std::string(fn) + ": cand must have T×K elements");
  for (size_t i = 0; i < cand.len; i++)
    if (cand.data[i] < -1 || cand.data[i] >= B) throw_range(info.Env(), std::string(fn) + ": cand entry out of range");
  auto sinks = arg_array_len<float>(info, 10, fn, "sinks", (size_t)H, "H");
  const float scale = (float)arg_num(info, 11, fn, "scale");
  auto y = new_array<uint16_t>(info.Env(), (size_t)T * H * D);
  if (where == Where::Gpu) {
    gpu(info.Env(), [&] {
      backend(info.Env()).sparse_attention(q.data, kv.data, comp.data, cand.data, sinks.data, T, H, D, B, window, K, scale, y.Data());
    });
  } else {
    ldref::sparse_attention(q.data, kv.data, comp.data, cand.data, sinks.data, T, H, D, window, K, scale, y.Data());
  }
  return y;
}

// Exports `name` (the GPU op) and `refName` (its host reference) from one `op(info, where)`.
template <Napi::Value (*Op)(const Napi::CallbackInfo&, Where)>
void export_pair(Napi::Env env, Napi::Object exports, const char* name) {
  exports.Set(name, Napi::Function::New(env, [](const Napi::CallbackInfo& i) { return Op(i, Where::Gpu); }));
  exports.Set(op_name(Where::Ref, name), Napi::Function::New(env, [](const Napi::CallbackInfo& i) { return Op(i, Where::Ref); }));
}

Napi::Value hc_pre_op(const Napi::CallbackInfo& info, Where where) { return hc_op(info, false, where); }
Napi::Value hc_head_op(const Napi::CallbackInfo& info, Where where) { return hc_op(info, true, where); }

Napi::Object init(Napi::Env env, Napi::Object exports) {
  exports.Set("probe", Napi::Function::New(env, probe));
  exports.Set("open", Napi::Function::New(env, open));
  exports.Set("dequantToF16", Napi::Function::New(env, hip_dequant));
  exports.Set("dequantNvfp4ToF16", Napi::Function::New(env, hip_dequant_nvfp4));
  exports.Set("dequantBnb4ToF16", Napi::Function::New(env, hip_dequant_bnb4));
  exports.Set("gemmF16", Napi::Function::New(env, [](const Napi::CallbackInfo& i) { return hip_gemm(i, false); }));
  exports.Set("gemmF16F32", Napi::Function::New(env, [](const Napi::CallbackInfo& i) { return hip_gemm(i, true); }));
  exports.Set("rmsnormF16", Napi::Function::New(env, hip_rmsnorm));
  exports.Set("ropeF16", Napi::Function::New(env, hip_rope));
  exports.Set("attentionF16", Napi::Function::New(env, hip_attention));
  exports.Set("swigluF16", Napi::Function::New(env, hip_swiglu));
  exports.Set("addF16", Napi::Function::New(env, hip_add));
  exports.Set("mulScalarF16", Napi::Function::New(env, hip_mul_scalar));
  exports.Set("refDequantToF16", Napi::Function::New(env, ref_dequant));
  exports.Set("refDequantNvfp4ToF16", Napi::Function::New(env, ref_dequant_nvfp4));
  exports.Set("refDequantBnb4ToF16", Napi::Function::New(env, ref_dequant_bnb4));
  exports.Set("refGemmF16", Napi::Function::New(env, [](const Napi::CallbackInfo& i) { return ref_gemm(i, false); }));
  exports.Set("refGemmF16F32", Napi::Function::New(env, [](const Napi::CallbackInfo& i) { return ref_gemm(i, true); }));
  exports.Set("refGemmMxfp4F16", Napi::Function::New(env, ref_gemm_mxfp4));
  exports.Set("refRmsnormF16", Napi::Function::New(env, ref_rmsnorm));
  exports.Set("refRopeF16", Napi::Function::New(env, ref_rope));
  exports.Set("refAttentionF16", Napi::Function::New(env, ref_attention));
  exports.Set("refSoftmaxF16", Napi::Function::New(env, ref_softmax));
  exports.Set("refSwigluF16", Napi::Function::New(env, ref_swiglu));
  exports.Set("refAddF16", Napi::Function::New(env, ref_add));
  exports.Set("refMulScalarF16", Napi::Function::New(env, ref_mul_scalar));
  exports.Set("refMoeGatherF16", Napi::Function::New(env, ref_moe_gather));
  exports.Set("refSinkhornF32", Napi::Function::New(env, ref_sinkhorn));
  export_pair<moe_combine_op>(env, exports, "moeCombineF16");
  export_pair<attention_decode_op>(env, exports, "attentionDecodeF16");
  export_pair<hc_pre_op>(env, exports, "hcPreF16");
  export_pair<hc_head_op>(env, exports, "hcHeadF16");
  export_pair<hc_post_op>(env, exports, "hcPostF16");
  export_pair<compress_pool_op>(env, exports, "compressPoolF16");
  export_pair<router_op>(env, exports, "routerF32");
  export_pair<swiglu_rows_op>(env, exports, "swigluRowsF16");
  export_pair<indexer_topk_op>(env, exports, "indexerTopkF16");
  export_pair<sparse_attention_op>(env, exports, "sparseAttentionF16");
  export_pair<oss_router_op>(env, exports, "ossRouterF32");
  export_pair<oss_swiglu_op>(env, exports, "ossSwigluF16");
  return exports;
}

}  // namespace

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return init(env, exports); }

NODE_API_MODULE(ld_hip, InitModule)
