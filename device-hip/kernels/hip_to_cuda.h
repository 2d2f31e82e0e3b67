/*
 * hip_to_cuda.h — lets the HIP sources in device-hip/kernels and device-hip/check build with nvcc for an
 * NVIDIA GPU (`nvcc -x cu -arch=sm_90`), so the kernels can be run and timed on the hardware that is lent
 * (an H200) while the target stays AMD (hipcc --offload-arch=gfx90a).
 *
 * Under hipcc (either platform) it is just <hip/hip_runtime.h>. Under nvcc without HIP it maps the small
 * part of the HIP runtime API this project uses onto the CUDA runtime, plus the one device intrinsic that
 * differs (__shfl_xor has no mask on HIP; CUDA's needs the full-warp mask — every call site is reached by
 * the whole warp). Nothing here changes numerics: those live in ld_numerics.h / ld_deepseek.h.
 */
#ifndef LD_HIP_TO_CUDA_H
#define LD_HIP_TO_CUDA_H

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__) || defined(LD_HIP_CPU)
#include <hip/hip_runtime.h>
#define LD_PLATFORM_NAME "hip"
__device__ static inline float ld_shfl_xor(float v, int mask) { return __shfl_xor(v, mask); }

#elif defined(__CUDACC__)
#include <cuda_runtime.h>
#define LD_PLATFORM_NAME "cuda"

typedef cudaError_t hipError_t;
typedef cudaEvent_t hipEvent_t;
typedef cudaStream_t hipStream_t;
typedef cudaDeviceProp hipDeviceProp_t;
typedef cudaFuncAttribute hipFuncAttribute;
#define hipSuccess cudaSuccess
#define hipErrorNoDevice cudaErrorNoDevice
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipSetDevice cudaSetDevice
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemset cudaMemset
#define hipMemGetInfo cudaMemGetInfo
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipGetLastError cudaGetLastError
#define hipGetErrorString cudaGetErrorString
#define hipEventCreate cudaEventCreate
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime
#define hipRuntimeGetVersion cudaRuntimeGetVersion
#define hipDriverGetVersion cudaDriverGetVersion
#define hipFuncSetAttribute(f, attr, v) cudaFuncSetAttribute((const void*)(f), attr, v)
#define hipLaunchKernelGGL(kernel, grid, block, shmem, stream, ...) \
  kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
__device__ static inline float ld_shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }

#else
#error "hip_to_cuda.h: compile with hipcc (HIP) or nvcc (CUDA)"
#endif

#endif /* LD_HIP_TO_CUDA_H */
