// Internal to the ld_device addon: MXFP4 rows to f16, shared by dequantToF16 (dequant.cc) and the fused MXFP4
// GEMM (gemm.cc), so both give a row the same bits.
#pragma once

#include <cstdint>

#include "ld_numerics.h"

namespace ld {

// f16 bits of every (scale byte, nibble) pair, split into low and high bytes for pshufb lookups.
struct Mxfp4Table {
  alignas(16) uint8_t lo[256][16];
  alignas(16) uint8_t hi[256][16];
  alignas(32) uint16_t f16[256][16];  // the same bits whole, for the AVX-512 row's word permutes
  // The run of scale bytes around 127 (2^0) whose 16 values all have a zero low byte (FP16 normals, ±0, and from
  // 141 on the overflow's Inf and the NaN of byte 255: an E2M1 magnitude has one mantissa bit), [hi_lo, hi_hi]: a
  // row of them is written from its high bytes alone (the AVX2 row's shorter form); the same bits, so the run may
  // hold whatever has no low byte. hi_ranged false (a fault's table without such a byte 127): never.
  bool hi_ranged = false;
  uint8_t hi_lo = 0, hi_hi = 0;
  explicit Mxfp4Table(int fault) {
    bool zero[256];
    for (int s = 0; s < 256; s++) {
      zero[s] = true;
      for (int c = 0; c < 16; c++) {
        const uint16_t h = ld_mxfp4_value_f16(c, (uint8_t)s, fault);
        lo[s][c] = (uint8_t)(h & 0xFF);
        hi[s][c] = (uint8_t)(h >> 8);
        f16[s][c] = h;
        zero[s] = zero[s] && lo[s][c] == 0;
      }
    }
    // (the bytes far below it also qualify, their values all flushed to ±0, but are not one run with these)
    int a = 127, b = 127;
    while (a > 0 && zero[a - 1]) a--;
    while (b < 255 && zero[b + 1]) b++;
    hi_ranged = zero[127];
    hi_lo = (uint8_t)(hi_ranged ? a : 0);
    hi_hi = (uint8_t)(hi_ranged ? b : 0);
  }
};

// The table of one fault (0 .. LD_FAULT_COUNT − 1), built once per process: building it evaluates the element
// function 4,096 times, which cost a routed expert's check or fused GEMM more than a tenth of its time.
const Mxfp4Table& mxfp4_table(int fault);

// Row o of an MXFP4 weight [out, in] (packed [out, in/2], E8M0 scales [out, in/32], fault as ld_scale_index and
// ld_mxfp4_nibble take it) → y [in] f16 bits through t; AVX-512BW, AVX2 or scalar by g_simd, the same lookups
// every way.
void mxfp4_row(const uint8_t* prow, const uint8_t* scales, const Mxfp4Table& t, int out, int in, int o, int fault, uint16_t* y);

}  // namespace ld
