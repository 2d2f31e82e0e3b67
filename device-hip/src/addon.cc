// Module `ld_device`: the `emulated` backend, i.e. the MI250 kernels' numerics on the CPU.
#include <omp.h>

#include "addon.h"
#include "deepseek.h"
#include "ops_emulated.generated.h"
#include "ld_allocator.h"

namespace ld {

Simd best_simd() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  if (avx2 && __builtin_cpu_supports("avx512f")) return Simd::Avx512;
  return avx2 ? Simd::Avx2 : Simd::Scalar;
}

Simd g_simd = best_simd();
bool g_avx2 = g_simd != Simd::Scalar;

namespace {
bool g_vbmi_allowed = true;
}  // namespace

void set_simd_level(Simd s, bool vbmi) {
  g_simd = s;
  g_avx2 = s != Simd::Scalar;
  g_vbmi_allowed = vbmi;
}

bool simd_vbmi() {
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
  return g_simd == Simd::Avx512 && vbmi && g_vbmi_allowed;
}

namespace {

const char* simd_name(Simd s) { return s == Simd::Avx512 ? "avx512" : s == Simd::Avx2 ? "avx2" : "scalar"; }

std::string compiler() {
#if defined(__clang__)
  return std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("gcc ") + __VERSION__;
#else
  return "unknown";
#endif
}

Napi::Value info_fn(const Napi::CallbackInfo& info) {
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("backend", "emulated");
  o.Set("simd", simd_name(g_simd));
  o.Set("vbmi", simd_vbmi());
  o.Set("openmpThreads", omp_get_max_threads());
  o.Set("compiler", compiler());
  return o;
}

// setSimd('auto' | 'avx512' | 'avx2' | 'scalar') → the level now in use ('avx512': AVX-512 without the VBMI kernels).
// Tests run every level the CPU has and check they give the same bits; a level the CPU lacks falls back to the best
// it has.
Napi::Value set_simd(const Napi::CallbackInfo& info) {
  need_args(info, 1, "setSimd");
  const std::string mode = info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "";
  const Simd best = best_simd();
  if (mode == "auto") set_simd_level(best);
  else if (mode == "avx512") set_simd_level(best, false);
  else if (mode == "avx2") set_simd_level(best == Simd::Scalar ? Simd::Scalar : Simd::Avx2);
  else if (mode == "scalar") set_simd_level(Simd::Scalar);
  else throw_range(info.Env(), "setSimd: mode must be 'auto', 'avx512', 'avx2' or 'scalar', got '" + mode + "'");
  return Napi::String::New(info.Env(), simd_name(g_simd));
}

// setPoisonOutputs(on) → on: outputs an op writes in full start as all-ones bytes (tests: an element a kernel
// did not write shows as NaN instead of whatever the allocator held).
Napi::Value set_poison_outputs(const Napi::CallbackInfo& info) {
  need_args(info, 1, "setPoisonOutputs");
  if (!info[0].IsBoolean()) throw_type(info.Env(), "setPoisonOutputs: on must be a boolean");
  ops::g_poison_outputs = info[0].As<Napi::Boolean>().Value();
  return Napi::Boolean::New(info.Env(), ops::g_poison_outputs);
}

}  // namespace

Napi::Object init(Napi::Env env, Napi::Object exports) {
  ld_tune_allocator();  // large typed arrays reused, not re-faulted (harness/contracts/ld_allocator.h)
  exports.Set("info", Napi::Function::New(env, info_fn));
  exports.Set("setSimd", Napi::Function::New(env, set_simd));
  exports.Set("setPoisonOutputs", Napi::Function::New(env, set_poison_outputs));
  // Every op of the table (device-hip/ops/table.ts): its reader, its outputs, its kernel ld::emu::<op>.
  ops::register_emulated(env, exports);
  // The weights-first check's row source (dequant.cc): dequantToF16's rows, pulled by the reference's compare.
  void init_row_source(Napi::Env, Napi::Object);
  init_row_source(env, exports);
  return exports;
}

}  // namespace ld

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return ld::init(env, exports); }

NODE_API_MODULE(ld_device, InitModule)
