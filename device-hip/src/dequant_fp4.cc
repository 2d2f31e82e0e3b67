// NVFP4 dequantization to f16 (ModelOpt and compressed-tensors; spec/fp4-formats.md §2–3), as the MI250 path
// does once per weight before its FP16 GEMMs:
//   packed bytes [out, in/2] (low nibble = even i), E4M3 block scales [out, in/16], one f32 global scale,
//   a multiplier (ModelOpt weight_scale_2) or a divisor (compressed-tensors weight_global_scale).
// The value of (scale byte, nibble) depends on nothing else, so each call evaluates ld_nvfp4_value_f16 once
// per pair into a 256×16 table and then only looks values up: the element function, made fast.
#include <omp.h>

#include <algorithm>

#include "addon.h"
#include "ops_emulated.generated.h"
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

}  // namespace

void emu::dequantNvfp4ToF16(const ops::DequantNvfp4ToF16Args& a, ops::DequantNvfp4ToF16Out& o) {
  dequant_nvfp4(a.weight.data, a.scale.data, a.out, a.inDim, a.globalScale, a.globalIsDivisor ? 1 : 0, a.fault, o.y.Data());
}

void emu::dequantBnb4ToF16(const ops::DequantBnb4ToF16Args& a, ops::DequantBnb4ToF16Out& o) {
  dequant_bnb4(a.weight.data, a.absmax.data, a.absmaxIsCodes ? 1 : 0, a.quantMap.data, a.nestedAbsmax.data, a.nestedQuantMap.data, a.nestedOffset,
               a.nestedBlocksize, (size_t)a.out * a.inDim, a.blocksize, a.fault, o.y.Data());
}

}  // namespace ld
