// module_check_cpu.h — a runtime table (ldgpu::Api) over HIP-CPU, for `module_check cpu` (scripts/device-check.sh
// --cpu): the hip backend's host code (hip/ld_gpu_backend.cc: argument structs, buffer sizes, launch plans, kernels
// by name) runs unchanged, and each "module launch" steps the kernel compiled into this binary on the CPU. It is
// how the backend's wiring is checked without a GPU; on hardware module_check uses the real runtime instead.
//
// Included only when module_check.cc is built with -DLD_HIP_CPU and HIP-CPU's include/ on the path.
#pragma once

#include <cstring>
#include <string>

#include "all.hip"
#include "ld_gpu_api.h"

namespace ldcpu {

using Launcher = void (*)(unsigned gx, unsigned gy, unsigned bx, unsigned shmem, void* args);
struct Kernel {
  const char* name;
  Launcher launch;
};

// One entry per extern "C" kernel of kernels/all.hip: its name and how to launch it with its argument struct.
#define LD_CPU_KERNEL(k, T)                                                                        \
  Kernel {                                                                                         \
    #k, [](unsigned gx, unsigned gy, unsigned bx, unsigned sh, void* a) {                          \
      hipLaunchKernelGGL(k, dim3(gx, gy, 1), dim3(bx, 1, 1), sh, 0, *static_cast<const T*>(a));    \
    }                                                                                              \
  }
inline const Kernel* kernels(size_t* n) {
  static const Kernel table[] = {
      LD_CPU_KERNEL(ld_dequant_mxfp4, LdDequantArgs),        LD_CPU_KERNEL(ld_dequant_fp8, LdDequantArgs),
      LD_CPU_KERNEL(ld_dequant_plain, LdDequantArgs),        LD_CPU_KERNEL(ld_dequant_nvfp4, LdDequantNvfp4Args),
      LD_CPU_KERNEL(ld_dequant_bnb4, LdDequantBnb4Args),     LD_CPU_KERNEL(ld_gemm_tiled_f16, LdGemmArgs),
      LD_CPU_KERNEL(ld_gemm_tiled_mxfp4, LdGemmArgs),        LD_CPU_KERNEL(ld_gemm_skinny_f16_1, LdGemmArgs),
      LD_CPU_KERNEL(ld_gemm_skinny_f16_2, LdGemmArgs),       LD_CPU_KERNEL(ld_gemm_skinny_f16_4, LdGemmArgs),
      LD_CPU_KERNEL(ld_gemm_skinny_f16_8, LdGemmArgs),       LD_CPU_KERNEL(ld_gemm_skinny_mxfp4_1, LdGemmArgs),
      LD_CPU_KERNEL(ld_gemm_skinny_mxfp4_2, LdGemmArgs),     LD_CPU_KERNEL(ld_gemm_skinny_mxfp4_4, LdGemmArgs),
      LD_CPU_KERNEL(ld_gemm_skinny_mxfp4_8, LdGemmArgs),     LD_CPU_KERNEL(ld_rmsnorm, LdRmsnormArgs),
      LD_CPU_KERNEL(ld_rope, LdRopeArgs),                    LD_CPU_KERNEL(ld_swiglu, LdSwigluArgs),
      LD_CPU_KERNEL(ld_add, LdAddArgs),                      LD_CPU_KERNEL(ld_mul_scalar, LdMulScalarArgs),
      LD_CPU_KERNEL(ld_attention, LdAttentionArgs),          LD_CPU_KERNEL(ld_attention_decode, LdAttentionDecodeArgs),
      LD_CPU_KERNEL(ld_softmax, LdSoftmaxArgs),              LD_CPU_KERNEL(ld_moe_gather, LdMoeGatherArgs),
      LD_CPU_KERNEL(ld_moe_combine, LdMoeCombineArgs),       LD_CPU_KERNEL(ld_sinkhorn, LdSinkhornArgs),
      LD_CPU_KERNEL(ld_hc_pre, LdHcArgs),                    LD_CPU_KERNEL(ld_hc_head, LdHcArgs),
      LD_CPU_KERNEL(ld_hc_post, LdHcPostArgs),               LD_CPU_KERNEL(ld_compress_pool, LdCompressPoolArgs),
      LD_CPU_KERNEL(ld_router, LdRouterArgs),                LD_CPU_KERNEL(ld_swiglu_rows, LdSwigluRowsArgs),
      LD_CPU_KERNEL(ld_indexer_topk, LdIndexerArgs),         LD_CPU_KERNEL(ld_sparse_attention, LdSparseAttnArgs),
      LD_CPU_KERNEL(ld_oss_router, LdOssRouterArgs),         LD_CPU_KERNEL(ld_oss_swiglu, LdOssSwigluArgs),
      LD_CPU_KERNEL(ld_widen_check, LdWidenCheckArgs),
  };
  *n = sizeof table / sizeof table[0];
  return table;
}
#undef LD_CPU_KERNEL

// The table: memory through HIP-CPU's hipMalloc/hipMemcpy, the "module" is this binary (the image is ignored),
// a function is a Kernel entry, a launch calls it with params[0] (the one argument struct, as the backend passes it).
inline ldgpu::Api api() {
  ldgpu::Api a;
  a.init = [](ldgpu::Api&) { return 0; };
  a.device_count = [](ldgpu::Api&, int* n) { return (int)hipGetDeviceCount(n); };
  a.malloc = [](ldgpu::Api&, uint64_t* p, size_t n) {
    void* q = nullptr;
    const int r = (int)hipMalloc(&q, n == 0 ? 1 : n);
    *p = (uint64_t)(uintptr_t)q;
    return r;
  };
  a.free = [](ldgpu::Api&, uint64_t p) { return (int)hipFree((void*)(uintptr_t)p); };
  a.htod = [](ldgpu::Api&, uint64_t d, const void* h, size_t n) { return (int)hipMemcpy((void*)(uintptr_t)d, h, n, hipMemcpyHostToDevice); };
  a.dtoh = [](ldgpu::Api&, void* h, uint64_t d, size_t n) { return (int)hipMemcpy(h, (const void*)(uintptr_t)d, n, hipMemcpyDeviceToHost); };
  a.sync = [](ldgpu::Api&) { return (int)hipDeviceSynchronize(); };
  a.module_load = [](ldgpu::Api&, void** m, const void*) {
    static int self;
    *m = &self;
    return 0;
  };
  a.module_unload = [](ldgpu::Api&, void*) { return 0; };
  a.get_function = [](ldgpu::Api&, void** f, void*, const char* name) {
    size_t n = 0;
    const Kernel* t = kernels(&n);
    for (size_t i = 0; i < n; i++)
      if (std::strcmp(t[i].name, name) == 0) {
        *f = const_cast<Kernel*>(&t[i]);
        return 0;
      }
    return 500;  // hipErrorNotFound
  };
  a.launch = [](ldgpu::Api&, void* f, unsigned gx, unsigned gy, unsigned bx, unsigned shmem, void** params) {
    static_cast<const Kernel*>(f)->launch(gx, gy, bx, shmem, params[0]);
    return (int)hipGetLastError();
  };
  a.error_string = [](ldgpu::Api&, int e) { return std::string(hipGetErrorString((hipError_t)e)) + " (" + std::to_string(e) + ")"; };
  return a;
}

}  // namespace ldcpu
