// The exact decoder of dequant_exact.cc, shared with check_f16.cc (both on the `ld_reference` addon, whose
// init lives in gemm_f32.cc).
#pragma once
#include <napi.h>

#include <cstddef>
#include <cstdint>

// E2m1Lut: NVFP4 — E2M1 nibbles [out, in/2] low-even; the scale buffer holds 256 float32 values (the scale each
//   E4M3 byte gives: the byte's value times or over the global scale, formed by the caller by the format's float32
//   rule), then the stored E4M3 byte of each [1, bi] block, [out, in/bi]: a block's scale is table[byte].
// Table4FlatF32: bitsandbytes 4-bit — codes over the flattened [out, in], two a byte high-even; the scale
//   buffer holds the stored 16-entry code table then one float32 absmax per bi flat elements.
enum class ExactKind { Mxfp4, Fp8E8m0, Fp8F32, Bf16, F16, F32, E2m1Lut, Table4FlatF32 };

// Row o of a stored [out, in] weight (whole tensors w, s), decoded exactly into dst[in].
void exact_row(ExactKind kind, const uint8_t* w, const uint8_t* s, int64_t o, int64_t in, int64_t bo, int64_t bi, float* dst);
// The same for a row-local kind (not Table4FlatF32) with row o's own stored bytes at wrow (the fused read's chunk).
void exact_row_at(ExactKind kind, const uint8_t* wrow, const uint8_t* s, int64_t o, int64_t in, int64_t bo, int64_t bi, float* dst);
// Table4FlatF32's row o from w, the codes from flat element k0 on (k0 even, ≤ o·in): a fused read's chunk of rows.
void exact_row_table4_from(const uint8_t* w, int64_t k0, const uint8_t* s, int64_t o, int64_t in, int64_t bi, float* dst);
// Index of the first NaN or ±Inf in p[0, n) (exponent bits all ones), or −1; SIMD at the reference's level.
int64_t first_nonfinite(const float* p, int64_t n);
// Bytes a whole [out, in] weight and its scale occupy.
void exact_sizes(ExactKind kind, int64_t out, int64_t in, int64_t bo, int64_t bi, size_t* wbytes, size_t* sbytes);
// info[i] as a kind name ('mxfp4', 'fp8-e8m0', 'fp8-f32', 'bf16', 'f16', 'f32', 'e2m1-lut', 'table4-flat-f32'); TypeError otherwise.
ExactKind exact_kind_arg(const Napi::CallbackInfo& info, const char* fn, size_t i = 0);
ExactKind exact_kind_name(Napi::Env env, const Napi::Value& v, const char* fn);
// IEEE binary16 bits → their float32 value.
float exact_f16_value(uint16_t h);

void register_dequant_exact(Napi::Env env, Napi::Object exports);
void register_check_f16(Napi::Env env, Napi::Object exports);
// file_io.cc: willNeed (posix_fadvise) and mapRange (a private mapping of a file range)
void register_file_io(Napi::Env env, Napi::Object exports);
// blake3.cc: blake3Parts and blake3File (BLAKE3 of byte ranges and of files, on several threads)
void register_blake3(Napi::Env env, Napi::Object exports);
// attention_f64.cc: attentionScores and attentionOutput (the DeepSeek-V4 reference attention's float64 sums), hcPostMix
// and hcCollapse (its hyper-connection mixes)
void register_attention_f64(Napi::Env env, Napi::Object exports);
// metrics_f64.cc: compareSums, errorBins, logSumExp, klRow and expF64 (the error metrics' per-element passes)
void register_metrics_f64(Napi::Env env, Napi::Object exports);
