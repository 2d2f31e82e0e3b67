// ld_gpu_api.h — the GPU runtime, found at run time with dlopen: no link-time dependency, so a machine without
// ROCm installs and runs layerdiff unchanged (the `emulated` backend), and the same addon binary uses an
// AMD GPU where libamdhip64 and a device are present.
//
// Two flavours behind one table of functions:
//   Amd   libamdhip64.so (HIP runtime): hipModuleLoadData / hipModuleGetFunction / hipModuleLaunchKernel …
//   Cuda  libcuda.so.1 (CUDA driver API): cuModuleLoadData / cuModuleGetFunction / cuLaunchKernel … — the same
//         module-API calls one for one. It exists so the module-launch path of the hip backend (code object
//         loaded from bytes, kernels by name, one argument struct per launch) can be exercised on the NVIDIA
//         GPU this project is lent (device-hip/check/module_check.cc); layerdiff's backend selection uses
//         Amd only.
// Device pointers are 64-bit integers in both (hipDeviceptr_t / CUdeviceptr).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ldgpu {

enum class Flavour { Amd, Cuda };

// What a probe found. Never throws; every field is filled as far as it got, `error` says where it stopped.
struct ProbeResult {
  bool library = false;        // the runtime library was loaded
  std::string library_name;    // the soname that loaded, or the names tried
  int device_count = 0;
  std::string device_name;     // device 0
  std::string arch;            // gcnArchName of device 0 (e.g. "gfx90a:sramecc+:xnack-"), or "sm_90" on CUDA
  int runtime_version = 0, driver_version = 0;
  std::string error;           // empty when a usable device was found
};

struct Api {
  Flavour flavour = Flavour::Amd;
  void* lib = nullptr;
  // Unified entry points (0 = success; any other value is the runtime's error code).
  int (*init)(Api&) = nullptr;
  int (*device_count)(Api&, int*) = nullptr;
  int (*malloc)(Api&, uint64_t*, size_t) = nullptr;
  int (*free)(Api&, uint64_t) = nullptr;
  int (*htod)(Api&, uint64_t, const void*, size_t) = nullptr;
  int (*dtoh)(Api&, void*, uint64_t, size_t) = nullptr;
  int (*sync)(Api&) = nullptr;
  int (*module_load)(Api&, void**, const void*) = nullptr;
  int (*module_unload)(Api&, void*) = nullptr;
  int (*get_function)(Api&, void**, void*, const char*) = nullptr;
  int (*launch)(Api&, void* fn, unsigned gx, unsigned gy, unsigned bx, unsigned shmem, void** params) = nullptr;
  std::string (*error_string)(Api&, int) = nullptr;
  // Raw symbols (filled by open()).
  void* sym[32] = {};
  void* ctx = nullptr;  // CUDA: the primary context
};

// dlopen the flavour's library and resolve its symbols; false (with *err) when it is not there.
bool open_api(Api& api, Flavour f, std::string* err);
// Probe the AMD runtime: library, device count, name, gcnArchName, versions (ProbeResult::error says what
// was missing: "library not found …", "no device …").
ProbeResult probe_amd();
// The same facts through the CUDA driver (for module_check).
ProbeResult probe_cuda();

}  // namespace ldgpu
