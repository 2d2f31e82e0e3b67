// ld_gpu_api.cc — dlopen of the GPU runtime (see ld_gpu_api.h). Only C ABI calls with plain types cross the
// boundary: handles are void*, device pointers 64-bit integers, hipDeviceProp_t is read as raw bytes (its
// layout differs between ROCm 5 and 6, so gcnArchName is found by content, not by offset).
#include "ld_gpu_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace ldgpu {
namespace {

// Symbol slots (Api::sym), per flavour.
enum AmdSym {
  A_INIT, A_COUNT, A_SETDEV, A_MALLOC, A_FREE, A_HTOD, A_DTOH, A_SYNC, A_MLOAD, A_MUNLOAD, A_GETFN, A_LAUNCH, A_ERRSTR,
  A_NAME, A_RTVER, A_DRVVER, A_PROPS, A_NSYM
};
const char* const kAmdNames[A_NSYM] = {
    "hipInit", "hipGetDeviceCount", "hipSetDevice", "hipMalloc", "hipFree", "hipMemcpyHtoD", "hipMemcpyDtoH",
    "hipDeviceSynchronize", "hipModuleLoadData", "hipModuleUnload", "hipModuleGetFunction", "hipModuleLaunchKernel",
    "hipGetErrorString", "hipDeviceGetName", "hipRuntimeGetVersion", "hipDriverGetVersion", "hipGetDeviceProperties"};

enum CudaSym {
  C_INIT, C_COUNT, C_DEVGET, C_MALLOC, C_FREE, C_HTOD, C_DTOH, C_SYNC, C_MLOAD, C_MUNLOAD, C_GETFN, C_LAUNCH, C_ERRSTR,
  C_NAME, C_CTXRETAIN, C_CTXSET, C_DRVVER, C_ATTR, C_NSYM
};
const char* const kCudaNames[C_NSYM] = {
    "cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2",
    "cuCtxSynchronize", "cuModuleLoadData", "cuModuleUnload", "cuModuleGetFunction", "cuLaunchKernel", "cuGetErrorString",
    "cuDeviceGetName", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuDriverGetVersion", "cuDeviceGetAttribute"};

template <class F>
F S(Api& a, int i) {
  return reinterpret_cast<F>(a.sym[i]);
}

// ---- AMD (HIP runtime) ----
int amd_init(Api& a) {
  int r = S<int (*)(unsigned)>(a, A_INIT)(0);
  if (r != 0) return r;
  return S<int (*)(int)>(a, A_SETDEV)(0);
}
int amd_count(Api& a, int* n) { return S<int (*)(int*)>(a, A_COUNT)(n); }
int amd_malloc(Api& a, uint64_t* p, size_t n) {
  void* q = nullptr;
  int r = S<int (*)(void**, size_t)>(a, A_MALLOC)(&q, n == 0 ? 1 : n);
  *p = (uint64_t)(uintptr_t)q;
  return r;
}
int amd_free(Api& a, uint64_t p) { return S<int (*)(void*)>(a, A_FREE)((void*)(uintptr_t)p); }
int amd_htod(Api& a, uint64_t d, const void* h, size_t n) {
  return S<int (*)(void*, void*, size_t)>(a, A_HTOD)((void*)(uintptr_t)d, const_cast<void*>(h), n);
}
int amd_dtoh(Api& a, void* h, uint64_t d, size_t n) { return S<int (*)(void*, void*, size_t)>(a, A_DTOH)(h, (void*)(uintptr_t)d, n); }
int amd_sync(Api& a) { return S<int (*)()>(a, A_SYNC)(); }
int amd_mload(Api& a, void** m, const void* img) { return S<int (*)(void**, const void*)>(a, A_MLOAD)(m, img); }
int amd_munload(Api& a, void* m) { return S<int (*)(void*)>(a, A_MUNLOAD)(m); }
int amd_getfn(Api& a, void** f, void* m, const char* name) { return S<int (*)(void**, void*, const char*)>(a, A_GETFN)(f, m, name); }
int amd_launch(Api& a, void* f, unsigned gx, unsigned gy, unsigned bx, unsigned shmem, void** params) {
  using L = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
  return S<L>(a, A_LAUNCH)(f, gx, gy, 1, bx, 1, 1, shmem, nullptr, params, nullptr);
}
std::string amd_err(Api& a, int e) {
  const char* s = a.sym[A_ERRSTR] != nullptr ? S<const char* (*)(int)>(a, A_ERRSTR)(e) : nullptr;
  return std::string(s != nullptr ? s : "unknown") + " (" + std::to_string(e) + ")";
}

// ---- CUDA driver ----
int cu_init(Api& a) {
  int r = S<int (*)(unsigned)>(a, C_INIT)(0);
  if (r != 0) return r;
  int dev = 0;
  if ((r = S<int (*)(int*, int)>(a, C_DEVGET)(&dev, 0)) != 0) return r;
  if ((r = S<int (*)(void**, int)>(a, C_CTXRETAIN)(&a.ctx, dev)) != 0) return r;
  return S<int (*)(void*)>(a, C_CTXSET)(a.ctx);
}
int cu_count(Api& a, int* n) {
  int r = S<int (*)(unsigned)>(a, C_INIT)(0);
  if (r != 0) return r;
  return S<int (*)(int*)>(a, C_COUNT)(n);
}
int cu_malloc(Api& a, uint64_t* p, size_t n) {
  unsigned long long q = 0;
  int r = S<int (*)(unsigned long long*, size_t)>(a, C_MALLOC)(&q, n == 0 ? 1 : n);
  *p = q;
  return r;
}
int cu_free(Api& a, uint64_t p) { return S<int (*)(unsigned long long)>(a, C_FREE)(p); }
int cu_htod(Api& a, uint64_t d, const void* h, size_t n) { return S<int (*)(unsigned long long, const void*, size_t)>(a, C_HTOD)(d, h, n); }
int cu_dtoh(Api& a, void* h, uint64_t d, size_t n) { return S<int (*)(void*, unsigned long long, size_t)>(a, C_DTOH)(h, d, n); }
int cu_sync(Api& a) { return S<int (*)()>(a, C_SYNC)(); }
int cu_mload(Api& a, void** m, const void* img) { return S<int (*)(void**, const void*)>(a, C_MLOAD)(m, img); }
int cu_munload(Api& a, void* m) { return S<int (*)(void*)>(a, C_MUNLOAD)(m); }
int cu_getfn(Api& a, void** f, void* m, const char* name) { return S<int (*)(void**, void*, const char*)>(a, C_GETFN)(f, m, name); }
int cu_launch(Api& a, void* f, unsigned gx, unsigned gy, unsigned bx, unsigned shmem, void** params) {
  using L = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
  return S<L>(a, C_LAUNCH)(f, gx, gy, 1, bx, 1, 1, shmem, nullptr, params, nullptr);
}
std::string cu_err(Api& a, int e) {
  const char* s = nullptr;
  if (a.sym[C_ERRSTR] != nullptr) S<int (*)(int, const char**)>(a, C_ERRSTR)(e, &s);
  return std::string(s != nullptr ? s : "unknown") + " (" + std::to_string(e) + ")";
}

void* dlopen_first(const std::vector<std::string>& names, std::string* tried, std::string* loaded) {
  for (const std::string& n : names) {
    void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) {
      *loaded = n;
      return h;
    }
    if (!tried->empty()) *tried += ", ";
    *tried += n;
  }
  return nullptr;
}

// gcnArchName inside a hipDeviceProp_t of unknown layout: the first "gfx<alnum>…" string in the bytes.
std::string find_gfx(const unsigned char* p, size_t n) {
  for (size_t i = 0; i + 4 < n; i++) {
    if (p[i] == 'g' && p[i + 1] == 'f' && p[i + 2] == 'x' && (i == 0 || p[i - 1] == 0) && p[i + 3] >= '0' && p[i + 3] <= '9') {
      std::string s;
      for (size_t j = i; j < n && p[j] != 0 && s.size() < 255; j++) s += (char)p[j];
      return s;
    }
  }
  return "";
}

}  // namespace

bool open_api(Api& api, Flavour f, std::string* err) {
  api = Api();
  api.flavour = f;
  std::vector<std::string> names;
  if (f == Flavour::Amd) {
    const char* env = std::getenv("LAYERDIFF_HIP_LIB");
    if (env != nullptr && *env != 0) names.push_back(env);
    names.insert(names.end(), {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5", "/opt/rocm/lib/libamdhip64.so"});
  } else {
    names.insert(names.end(), {"libcuda.so.1", "libcuda.so"});
  }
  std::string tried, loaded;
  api.lib = dlopen_first(names, &tried, &loaded);
  if (api.lib == nullptr) {
    *err = "library not found: dlopen(" + tried + ") failed";
    return false;
  }
  const int n = f == Flavour::Amd ? (int)A_NSYM : (int)C_NSYM;
  const char* const* sn = f == Flavour::Amd ? kAmdNames : kCudaNames;
  for (int i = 0; i < n; i++) {
    void* s = dlsym(api.lib, sn[i]);
    if (s == nullptr && f == Flavour::Amd && i == A_PROPS) s = dlsym(api.lib, "hipGetDevicePropertiesR0600");
    if (s == nullptr && !(f == Flavour::Amd && (i == A_PROPS || i == A_ERRSTR))) {
      *err = loaded + " lacks " + sn[i];
      dlclose(api.lib);
      api.lib = nullptr;
      return false;
    }
    api.sym[i] = s;
  }
  if (f == Flavour::Amd) {
    api.init = amd_init, api.device_count = amd_count, api.malloc = amd_malloc, api.free = amd_free, api.htod = amd_htod;
    api.dtoh = amd_dtoh, api.sync = amd_sync, api.module_load = amd_mload, api.module_unload = amd_munload;
    api.get_function = amd_getfn, api.launch = amd_launch, api.error_string = amd_err;
  } else {
    api.init = cu_init, api.device_count = cu_count, api.malloc = cu_malloc, api.free = cu_free, api.htod = cu_htod;
    api.dtoh = cu_dtoh, api.sync = cu_sync, api.module_load = cu_mload, api.module_unload = cu_munload;
    api.get_function = cu_getfn, api.launch = cu_launch, api.error_string = cu_err;
  }
  return true;
}

ProbeResult probe_amd() {
  ProbeResult r;
  Api a;
  std::string err;
  if (!open_api(a, Flavour::Amd, &err)) {
    r.library_name = "libamdhip64.so";
    r.error = err;
    return r;
  }
  r.library = true;
  Dl_info info;
  r.library_name = dladdr(a.sym[A_COUNT], &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "libamdhip64.so";
  S<int (*)(int*)>(a, A_RTVER)(&r.runtime_version);
  S<int (*)(int*)>(a, A_DRVVER)(&r.driver_version);
  int count = 0;
  const int e = S<int (*)(int*)>(a, A_COUNT)(&count);
  if (e != 0 || count <= 0) {
    r.device_count = 0;
    r.error = "no device: hipGetDeviceCount " + (e != 0 ? "returned " + amd_err(a, e) : std::string("found 0 devices"));
    return r;  // the library stays loaded: unloading the HIP runtime mid-process is not safe
  }
  r.device_count = count;
  char name[256] = {0};
  if (S<int (*)(char*, int, int)>(a, A_NAME)(name, (int)sizeof name - 1, 0) == 0) r.device_name = name;
  if (a.sym[A_PROPS] != nullptr) {
    std::vector<unsigned char> props(16384, 0);  // larger than any hipDeviceProp_t layout
    if (S<int (*)(void*, int)>(a, A_PROPS)(props.data(), 0) == 0) r.arch = find_gfx(props.data(), props.size());
  }
  if (r.arch.empty()) r.error = "device found but its gcnArchName could not be read";
  return r;
}

ProbeResult probe_cuda() {
  ProbeResult r;
  Api a;
  std::string err;
  if (!open_api(a, Flavour::Cuda, &err)) {
    r.library_name = "libcuda.so.1";
    r.error = err;
    return r;
  }
  r.library = true;
  r.library_name = "libcuda.so.1";
  S<int (*)(int*)>(a, C_DRVVER)(&r.driver_version);
  int count = 0;
  const int e = cu_count(a, &count);
  if (e != 0 || count <= 0) {
    r.error = "no device: cuDeviceGetCount " + (e != 0 ? "returned " + cu_err(a, e) : std::string("found 0 devices"));
    return r;
  }
  r.device_count = count;
  int dev = 0, major = 0, minor = 0;
  S<int (*)(int*, int)>(a, C_DEVGET)(&dev, 0);
  char name[256] = {0};
  if (S<int (*)(char*, int, int)>(a, C_NAME)(name, (int)sizeof name - 1, dev) == 0) r.device_name = name;
  S<int (*)(int*, int, int)>(a, C_ATTR)(&major, 75, dev);
  S<int (*)(int*, int, int)>(a, C_ATTR)(&minor, 76, dev);
  r.arch = "sm_" + std::to_string(major) + std::to_string(minor);
  return r;
}

}  // namespace ldgpu
