/*
 * ld_kernel_common.h — what every HIP kernel file includes: the runtime (or its CUDA spelling), the shared
 * element numerics (ld_numerics.h, ld_deepseek.h: the SAME functions the `emulated` backend calls), the
 * argument ABI and launch plans (ld_kernel_args.h), and two device-only helpers that change no bits:
 *
 *   ld_widen_f16(h)   f16 bits → f32 by the hardware converter (v_cvt_f32_f16 / cvt.f32.f16): one instruction
 *                     instead of ld_f16_to_f32's integer sequence. Widening is exact, so for every non-NaN
 *                     input both give the same f32; a NaN stays a NaN (its payload is not part of the
 *                     contract: GPU FMAs return a canonical NaN anyway). The `ld_widen_check` kernel compares
 *                     all 65536 inputs against ld_f16_to_f32 on the device; the device check and the hip
 *                     backend's open() run it. Build with -DLD_NO_HW_WIDEN to use ld_f16_to_f32 itself.
 *   ld_lanes_combine_shfl(v)  the ld_lanes_combine tree across 8 consecutive threads holding lanes 0..7:
 *                     v + xor 4 → (l0+l4), (l2+l6), (l1+l5), (l3+l7); + xor 2 → ((l0+l4)+(l2+l6)),
 *                     ((l1+l5)+(l3+l7)); + xor 1 → the full tree in every thread of the group. f32 addition
 *                     is commutative, so operand order inside each + does not matter. All threads of the
 *                     warp/wavefront must call it (no divergent call sites).
 *
 * Build flags bit-identity depends on (ld_numerics.h): hipcc -ffp-contract=off (HIP's default is fast);
 * nvcc --fmad=false; never fast-math / denormal flushing.
 */
#ifndef LD_KERNEL_COMMON_H
#define LD_KERNEL_COMMON_H

#include "hip_to_cuda.h"
#include "ld_numerics.h"
#include "ld_deepseek.h"
#include "ld_kernel_args.h"

__device__ static inline float ld_widen_f16(uint16_t h) {
#if defined(LD_NO_HW_WIDEN)
  return ld_f16_to_f32(h);
#elif defined(__HIP_DEVICE_COMPILE__) && (defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__))
  _Float16 v;
  memcpy(&v, &h, 2);
  return (float)v;
#elif defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  return ld_f16_to_f32(h);
#endif
}

__device__ static inline float ld_lanes_combine_shfl(float v) {
  v = v + ld_shfl_xor(v, 4);
  v = v + ld_shfl_xor(v, 2);
  v = v + ld_shfl_xor(v, 1);
  return v;
}

/* MXFP4 value table in LDS: tab[sb][c] = widen(ld_mxfp4_value_f16(c, sb, fault)) for every scale byte sb and
 * nibble c — the element function evaluated once per pair (what src/dequant.cc's Mxfp4Table does on the CPU):
 * an element's value depends on nothing else, so a lookup is that function. The caller synchronizes. */
__device__ static inline void ld_mx_table_fill(float (*tab)[16], int fault) {
  for (int e = threadIdx.x; e < 256 * 16; e += blockDim.x) tab[e >> 4][e & 15] = ld_widen_f16(ld_mxfp4_value_f16(e & 15, (uint8_t)(e >> 4), fault));
}

#define LD_GRID_STRIDE(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)(n); i += (long long)gridDim.x * blockDim.x)

#define LD_KERNEL extern "C" __global__ __launch_bounds__(LD_THREADS)

/* Dynamic shared memory (LDS) of a kernel. HIP-CPU (a CPU implementation of the HIP runtime, used only to
 * step through these kernels without a GPU) needs its own macro for it. */
#if defined(__HIP_CPU_RT__)
#define LD_DYNAMIC_SHARED(type, var) HIP_DYNAMIC_SHARED(type, var)
#else
#define LD_DYNAMIC_SHARED(type, var) extern __shared__ __attribute__((aligned(16))) type var[]
#endif

#endif /* LD_KERNEL_COMMON_H */
