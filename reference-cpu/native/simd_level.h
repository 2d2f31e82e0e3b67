// The reference addon's SIMD level, one for all its kernels: gemm_f32.cc holds it (setSimd), the weights
// check's fused pass (check_f16.cc) reads it, so tests run both at every level the CPU has.
#pragma once

enum class RefSimd { Scalar, Avx2, Avx512 };

RefSimd reference_simd();
