// The reference addon's SIMD level, one for all its kernels: gemm_f32.cc holds it (setSimd), the weights
// check's fused pass (check_f16.cc) reads it, so tests run both at every level the CPU has.
#pragma once

enum class RefSimd { Scalar, Avx2, Avx512 };

RefSimd reference_simd();
// Whether the AVX-512 VBMI kernels may run: the CPU has VBMI (and BW), the level is AVX-512, and setSimd did not ask
// for AVX-512 without them ('avx512': so tests on a VBMI CPU also run the AVX-512BW kernels other CPUs take).
bool reference_vbmi();
