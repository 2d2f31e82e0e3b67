// Internal to the ld_device addon: FP8-block rows to f16, shared by dequantToF16 (dequant.cc) and the fused FP8
// GEMM (gemm.cc), so both give a row the same bits.
#pragma once

#include <cstdint>
#include <vector>

namespace ld {

// An FP8-block weight's values per scale value: the element function at a block's scale (ld_fp8_scale, faults
// included) for each of the 256 codes, f16[id[r·C + c]·256 + code]. A block's f16 depends on nothing else, so this is
// the element function, made fast: 256 evaluations per distinct scale (a handful of E8M0 exponents per tensor;
// at most one per block) instead of one per element. The same bits split into low and high bytes (lo, hi) for
// the byte permutes of the AVX-512 VBMI row. Without VBMI (AVX2 hosts, such as the Zen 3 EPYCs MI250 nodes
// commonly carry) a block is decoded arithmetically on 8 lanes (fp8_blocks_avx2 in dequant.cc) where that gives its
// table's 256 entries exactly (avx2[id], checked when the table is built), else looked up one code at a time.
struct Fp8Tables {
  std::vector<uint32_t> id;
  std::vector<uint16_t> f16;
  std::vector<uint8_t> lo, hi;
  std::vector<float> scale;    // [id]: the block scale the table was built at
  std::vector<uint8_t> avx2;   // [id]: 1 where the arithmetic decode equals the table on every code
};

// The tables of an FP8-block weight [out, in] with blocks [bo, bi] and its scales (E8M0 bytes, or little-endian
// f32 with f32s), fault as ld_fp8_scale takes it. team: build many tables (f32 scales: one a block) on an OpenMP
// team; false where the caller's thread runs beside another team (a row source made while the weights check's
// worker runs a batch).
Fp8Tables fp8_tables(const uint8_t* scales, bool f32s, int out, int in, int bo, int bi, int fault, bool team = true);

// Rows [o0, o0 + rows) of the weight (w0: row o0's stored bytes, rows `in` apart) → y [rows][in] f16 bits.
void fp8_rows(const uint8_t* w0, const Fp8Tables& tab, int in, int bo, int bi, int o0, int rows, uint16_t* y);

}  // namespace ld
