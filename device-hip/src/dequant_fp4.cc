// NVFP4 dequantization to f16 (ModelOpt and compressed-tensors; spec/fp4-formats.md §2–3), as the MI250 path
// does once per weight before its FP16 GEMMs:
//   packed bytes [out, in/2] (low nibble = even i), E4M3 block scales [out, in/16], one f32 global scale,
//   a multiplier (ModelOpt weight_scale_2) or a divisor (compressed-tensors weight_global_scale).
// The value of (scale byte, nibble) depends on nothing else, so each call evaluates ld_nvfp4_value_f16 once
// per pair into a 256×16 table and then only looks values up: the element function, made fast.
#include <omp.h>

#include <algorithm>

#include "addon.h"
#include "ld_numerics.h"

namespace ld {
namespace {

void dequant_nvfp4(const uint8_t* packed, const uint8_t* scales, int out, int in, float global, int divisor, int fault,
                   uint16_t* y) {
  uint16_t tab[256][16];
  for (int s = 0; s < 256; s++) {
    const float sc = ld_nvfp4_scale((uint8_t)s, global, divisor, fault);
    for (int c = 0; c < 16; c++) tab[s][c] = ld_nvfp4_value_f16(c, sc, fault);
  }
  const int C = in / 16;
#pragma omp parallel for schedule(static) if ((long long)out * in >= (1 << 15))
  for (int o = 0; o < out; o++) {
    const uint8_t* prow = packed + (size_t)o * (in / 2);
    uint16_t* yrow = y + (size_t)o * in;
    for (int c = 0; c < C; c++) {
      const uint8_t sb = scales[ld_nvfp4_scale_index((size_t)out, (size_t)C, (size_t)o, (size_t)c, fault)];
      for (int j = 0; j < 8; j++) {
        const uint8_t b = prow[c * 8 + j];
        yrow[c * 16 + 2 * j] = tab[sb][ld_mxfp4_nibble(b, 0, fault)];
        yrow[c * 16 + 2 * j + 1] = tab[sb][ld_mxfp4_nibble(b, 1, fault)];
      }
    }
  }
}

// dequantNvfp4ToF16(weight, scale, out, in, globalScale, globalIsDivisor, fault)
Napi::Value dequant_nvfp4_js(const Napi::CallbackInfo& info) {
  const char* fn = "dequantNvfp4ToF16";
  const Napi::Env env = info.Env();
  need_args(info, 7, fn);
  const int out = arg_int(info, 2, fn, "out", 1), in = arg_int(info, 3, fn, "in", 1);
  const double g = arg_num(info, 4, fn, "globalScale");
  const bool divisor = arg_bool(info, 5, fn, "globalIsDivisor");
  const int fault = arg_int(info, 6, fn, "fault", 0);
  if (fault >= LD_FAULT_COUNT) throw_range(env, std::string(fn) + ": fault must be 0.." + std::to_string(LD_FAULT_COUNT - 1) + ", got " + std::to_string(fault));
  if (in % 16 != 0) throw_range(env, std::string(fn) + ": nvfp4 weight " + dims({out, in}) + ": in must be a multiple of 16");
  if (!(g > 0) || g > 3.4028234663852886e38) throw_range(env, std::string(fn) + ": globalScale must be a finite positive f32, got " + std::to_string(g));
  const size_t count = (size_t)out * in;
  auto w = arg_array_len<uint8_t>(info, 0, fn, "weight", count / 2, "packed " + dims({out, in / 2}));
  auto s = arg_array_len<uint8_t>(info, 1, fn, "scale", count / 16, "E4M3 " + dims({out, in / 16}));
  auto y = new_array<uint16_t>(env, count);
  dequant_nvfp4(w.data, s.data, out, in, (float)g, divisor ? 1 : 0, fault, y.Data());
  return y;
}

// bitsandbytes 4-bit (spec/fp4-formats.md §5): one block of `blocksize` flat elements at a time; its absmax
// (double-dequantized when stored as codes) is formed once and the block's 16 values looked up.
void dequant_bnb4(const uint8_t* packed, const uint8_t* absmax, int absmax_is_codes, const float* quant_map, const float* nested_absmax,
                  const float* nested_map, float nested_offset, int nested_blocksize, size_t n, int blocksize, int fault, uint16_t* y) {
  const long long nblocks = (long long)((n + blocksize - 1) / blocksize);
#pragma omp parallel for schedule(static) if (n >= (1 << 15))
  for (long long b = 0; b < nblocks; b++) {
    const float a = ld_bnb4_absmax(absmax, absmax_is_codes, nested_absmax, nested_map, nested_offset, nested_blocksize, (size_t)b, fault);
    uint16_t tab[16];
    for (int c = 0; c < 16; c++) tab[c] = ld_bnb4_value_f16(c, a, quant_map, fault);
    const size_t j1 = std::min(n, (size_t)(b + 1) * blocksize);
    for (size_t j = (size_t)b * blocksize; j < j1; j++) y[j] = tab[ld_bnb4_code(packed, j, fault)];
  }
}

// dequantBnb4ToF16(weight, absmax, absmaxIsCodes, quantMap, nestedAbsmax, nestedQuantMap, nestedOffset, nestedBlocksize,
//                  out, in, blocksize, fault)
Napi::Value dequant_bnb4_js(const Napi::CallbackInfo& info) {
  const char* fn = "dequantBnb4ToF16";
  const Napi::Env env = info.Env();
  need_args(info, 12, fn);
  const bool codes = arg_bool(info, 2, fn, "absmaxIsCodes");
  const double offset = arg_num(info, 6, fn, "nestedOffset");
  const int nbs = arg_int(info, 7, fn, "nestedBlocksize", 1);
  const int out = arg_int(info, 8, fn, "out", 1), in = arg_int(info, 9, fn, "in", 1);
  const int bs = arg_int(info, 10, fn, "blocksize", 1);
  const int fault = arg_int(info, 11, fn, "fault", 0);
  if (fault >= LD_FAULT_COUNT) throw_range(env, std::string(fn) + ": fault must be 0.." + std::to_string(LD_FAULT_COUNT - 1) + ", got " + std::to_string(fault));
  const size_t n = (size_t)out * in, nblocks = (n + bs - 1) / bs;
  auto w = arg_array_len<uint8_t>(info, 0, fn, "weight", (n + 1) / 2, "packed [(out·in+1)/2]");
  auto a = arg_array_len<uint8_t>(info, 1, fn, "absmax", codes ? nblocks : 4 * nblocks, codes ? "U8 codes [⌈out·in/blocksize⌉]" : "F32 bytes 4·[⌈out·in/blocksize⌉]");
  auto q = arg_array_len<float>(info, 3, fn, "quantMap", 16, "[16]");
  const size_t nested = codes ? (nblocks + nbs - 1) / nbs : 0;
  auto na = arg_array_len<float>(info, 4, fn, "nestedAbsmax", nested, "[⌈nblocks/nestedBlocksize⌉]");
  auto nm = arg_array_len<float>(info, 5, fn, "nestedQuantMap", codes ? 256 : 0, codes ? "[256]" : "[] (no double quant)");
  auto y = new_array<uint16_t>(env, n);
  dequant_bnb4(w.data, a.data, codes ? 1 : 0, q.data, na.data, nm.data, (float)offset, nbs, n, bs, fault, y.Data());
  return y;
}

}  // namespace

void init_dequant_fp4(Napi::Env env, Napi::Object exports) {
  exports.Set("dequantNvfp4ToF16", Napi::Function::New(env, dequant_nvfp4_js));
  exports.Set("dequantBnb4ToF16", Napi::Function::New(env, dequant_bnb4_js));
}

}  // namespace ld
