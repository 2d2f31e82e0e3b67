// The arguments of dequantNvfp4ToF16 and dequantBnb4ToF16, read and checked once for every addon that exports
// them: the emulation (src/dequant_fp4.cc), the hip backend's GPU ops and their host reference (hip/addon_hip.cc).
// A wrong length throws here, before any kernel could read out of bounds.
#pragma once

#include <string>

#include "addon.h"
#include "ld_numerics.h"

namespace ld {

struct Nvfp4In {
  int out, in, fault;
  float global;
  bool divisor;
  Span<const uint8_t> w, s;
};

// (weight, scale, out, in, globalScale, globalIsDivisor, fault)
inline Nvfp4In nvfp4_args(const Napi::CallbackInfo& info, const char* fn) {
  const Napi::Env env = info.Env();
  need_args(info, 7, fn);
  Nvfp4In a{};
  a.out = arg_int(info, 2, fn, "out", 1), a.in = arg_int(info, 3, fn, "in", 1);
  const double g = arg_num(info, 4, fn, "globalScale");
  a.divisor = arg_bool(info, 5, fn, "globalIsDivisor");
  a.fault = arg_int(info, 6, fn, "fault", 0);
  if (a.fault >= LD_FAULT_COUNT) throw_range(env, std::string(fn) + ": fault must be 0.." + std::to_string(LD_FAULT_COUNT - 1) + ", got " + std::to_string(a.fault));
  if (a.in % 16 != 0) throw_range(env, std::string(fn) + ": nvfp4 weight " + dims({a.out, a.in}) + ": in must be a multiple of 16");
  if (!(g > 0) || g > 3.4028234663852886e38) throw_range(env, std::string(fn) + ": globalScale must be a finite positive f32, got " + std::to_string(g));
  a.global = (float)g;
  const size_t count = (size_t)a.out * a.in;
  a.w = arg_array_len<uint8_t>(info, 0, fn, "weight", count / 2, "packed " + dims({a.out, a.in / 2}));
  a.s = arg_array_len<uint8_t>(info, 1, fn, "scale", count / 16, "E4M3 " + dims({a.out, a.in / 16}));
  return a;
}

struct Bnb4In {
  int out, in, blocksize, nested_blocksize, fault;
  bool codes;
  float nested_offset;
  size_t n;
  Span<const uint8_t> w, absmax;
  Span<const float> quant_map, nested_absmax, nested_map;
};

// (weight, absmax, absmaxIsCodes, quantMap, nestedAbsmax, nestedQuantMap, nestedOffset, nestedBlocksize, out, in, blocksize, fault)
inline Bnb4In bnb4_args(const Napi::CallbackInfo& info, const char* fn) {
  const Napi::Env env = info.Env();
  need_args(info, 12, fn);
  Bnb4In a{};
  a.codes = arg_bool(info, 2, fn, "absmaxIsCodes");
  a.nested_offset = (float)arg_num(info, 6, fn, "nestedOffset");
  a.nested_blocksize = arg_int(info, 7, fn, "nestedBlocksize", 1);
  a.out = arg_int(info, 8, fn, "out", 1), a.in = arg_int(info, 9, fn, "in", 1);
  a.blocksize = arg_int(info, 10, fn, "blocksize", 1);
  a.fault = arg_int(info, 11, fn, "fault", 0);
  if (a.fault >= LD_FAULT_COUNT) throw_range(env, std::string(fn) + ": fault must be 0.." + std::to_string(LD_FAULT_COUNT - 1) + ", got " + std::to_string(a.fault));
  a.n = (size_t)a.out * a.in;
  const size_t nblocks = (a.n + a.blocksize - 1) / a.blocksize;
  a.w = arg_array_len<uint8_t>(info, 0, fn, "weight", (a.n + 1) / 2, "packed [(out·in+1)/2]");
  a.absmax = arg_array_len<uint8_t>(info, 1, fn, "absmax", a.codes ? nblocks : 4 * nblocks, a.codes ? "U8 codes [⌈out·in/blocksize⌉]" : "F32 bytes 4·[⌈out·in/blocksize⌉]");
  a.quant_map = arg_array_len<float>(info, 3, fn, "quantMap", 16, "[16]");
  a.nested_absmax = arg_array_len<float>(info, 4, fn, "nestedAbsmax", a.codes ? (nblocks + a.nested_blocksize - 1) / a.nested_blocksize : 0, "[⌈nblocks/nestedBlocksize⌉]");
  a.nested_map = arg_array_len<float>(info, 5, fn, "nestedQuantMap", a.codes ? 256 : 0, a.codes ? "[256]" : "[] (no double quant)");
  return a;
}

}  // namespace ld
