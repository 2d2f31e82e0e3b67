// Internal to the ld_device addon: SIMD dispatch state and the shared dot/axpy kernels. Arguments are read and
// checked by the generated readers (ops_args.generated.h, from the op table) before a kernel runs; kernels
// themselves never throw, since an exception escaping an OpenMP region would terminate the process.
#pragma once

#include <napi.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "op_read.h"

struct LdRowSource;  // harness/contracts/ld_row_source.h

namespace ld {

// Which kernels run. Every level produces the same bits (same accumulation order, same element
// functions); Avx512 differs from Avx2 only in the GEMM tile. Set at load to the best the CPU has,
// changed by setSimd().
enum class Simd { Scalar, Avx2, Avx512 };
extern Simd g_simd;
// g_simd != Scalar: the AVX2+FMA+F16C kernels may run. Kernels without an AVX-512 variant test this.
extern bool g_avx2;
Simd best_simd();
void set_simd_level(Simd s, bool vbmi = true);
// Whether the AVX-512 VBMI kernels may run: the CPU has VBMI (and BW), g_simd is AVX-512, and setSimd did not ask
// for AVX-512 without them ('avx512': so tests on a VBMI CPU also run the AVX-512BW kernels other CPUs take).
bool simd_vbmi();


[[noreturn]] inline void throw_type(const Napi::Env& env, const std::string& msg) {
  throw Napi::TypeError::New(env, msg);
}
[[noreturn]] inline void throw_range(const Napi::Env& env, const std::string& msg) {
  throw Napi::RangeError::New(env, msg);
}

inline void need_args(const Napi::CallbackInfo& info, size_t n, const char* fn) {
  if (info.Length() < n) {
    throw_type(info.Env(), std::string(fn) + ": expected " + std::to_string(n) + " arguments, got " +
                               std::to_string(info.Length()));
  }
}

// An External of *src (harness/contracts/ld_row_source.h), type-tagged as a row source, holding references to the
// weight and scale values (scale may be null) until it is collected, when release(state) frees what src points into
// (dequant.cc; the NVFP4 source in dequant_fp4.cc).
Napi::Value row_source_external(Napi::Env env, ::LdRowSource* src, void (*release)(void*), void* state, const Napi::Value& weight,
                                const Napi::Value& scale, const char* fn);

// y [m, rows.out] = f16(alpha · x [m, rows.in] · Wᵀ) over W's rows as the row source gives them (gemm.cc: the
// kernels and sums of gemmF16, so the bits of gemmF16 over the same rows materialised).
void gemm_rows_f16(const uint16_t* x, const ::LdRowSource& rows, int m, float alpha, uint16_t* out_f16);

// Dot product in the ld_numerics.h lane order, dispatched (AVX2 or scalar, same bits).
float dot_f16(const uint16_t* x, const uint16_t* w, int k);
// acc[d] = fmaf(p, f32(v[d]), acc[d]) for d < n, dispatched.
void axpy_f16(float p, const uint16_t* v, float* acc, int n);

}  // namespace ld
