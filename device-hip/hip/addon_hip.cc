// Module `ld_hip`: the `hip` backend's native side, and the kernels' host reference.
//   probe()                      what the HIP runtime offers (dlopen libamdhip64; never throws)
//   open(codeObjectPath)         load the runtime, the code object and every kernel, run the self-check
//   <op>, ref<Op>                every op of the op table (device-hip/ops/table.ts) with a GPU kernel, on the GPU
//                                and as its host reference (ld_host_ref.h: the expected values the device check
//                                compares the GPU with, so a CPU test can hold them equal to the emulation),
//                                written by the generator into ops_hip.generated.inc; moeCombineF16 here.
// No link-time dependency on ROCm: this addon builds and loads on any machine (the runtime is dlopen'ed).
// Argument checks: the emulation's generated readers (src/ops_args.generated.h), so a wrong length throws with
// the same message here, never reads out of bounds; the TypeScript wrapper checks first, with the same words.
#include <napi.h>

#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../src/addon.h"
#include "../src/ops_args.generated.h"
#include "ld_gpu_backend.h"
#include "ld_host_ref.h"

namespace {

using ld::need_args;
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

// Exports `name` (the GPU op) and `refName` (its host reference) from one `op(info, where)`.
template <Napi::Value (*Op)(const Napi::CallbackInfo&, Where)>
void export_pair(Napi::Env env, Napi::Object exports, const char* name) {
  exports.Set(name, Napi::Function::New(env, [](const Napi::CallbackInfo& i) { return Op(i, Where::Gpu); }));
  exports.Set(op_name(Where::Ref, name), Napi::Function::New(env, [](const Napi::CallbackInfo& i) { return Op(i, Where::Ref); }));
}

// (ref)moeCombineF16(y [R, D], rowToken Int32 [R], shared [T, D], T, D) → [T, D]: rowToken → CSR on the host
// (ldref::moe_csr, as moeCombineF16 builds it), then ld_moe_combine.
Napi::Value moe_combine_op(const Napi::CallbackInfo& info, Where where) {
  const std::string name = op_name(where, "moeCombineF16");
  const ld::ops::MoeCombineF16Args a = ld::ops::read_moeCombineF16(info, name.c_str());
  ld::ops::MoeCombineF16Out o = ld::ops::alloc_moeCombineF16(info.Env(), a);
  const int R = (int)a.rowToken.len, T = a.T, D = a.D;
  std::vector<int32_t> start((size_t)T + 1), rows((size_t)R);
  ldref::moe_csr(a.rowToken.data, R, T, start.data(), rows.data());
  if (where == Where::Gpu) {
    gpu(info.Env(), [&] { backend(info.Env()).moe_combine(a.y.data, R, start.data(), rows.data(), a.shared.data, T, D, o.out.Data()); });
  } else {
    ldref::moe_combine(a.y.data, start.data(), rows.data(), a.shared.data, T, D, o.out.Data());
  }
  return o.value(info.Env());
}

#include "ops_hip.generated.inc"

Napi::Object init(Napi::Env env, Napi::Object exports) {
  exports.Set("probe", Napi::Function::New(env, probe));
  exports.Set("open", Napi::Function::New(env, open));
  // Every op of the table with a GPU kernel (and its ref* host reference), and the host-reference-only ones.
  register_generated(env, exports);
  export_pair<moe_combine_op>(env, exports, "moeCombineF16");
  return exports;
}

}  // namespace

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return init(env, exports); }

NODE_API_MODULE(ld_hip, InitModule)
