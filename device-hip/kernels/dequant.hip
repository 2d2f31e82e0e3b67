// Weight dequantization to f16 (the emulation: device-hip/src/dequant.cc, kind codes and fault codes of
// ld_numerics.h). Each output is the ld_numerics.h element function of its stored bits: bit-identical to the
// emulation by construction, faults included (a fault that does not apply to a format is a no-op there).
#include "ld_kernel_common.h"

// MXFP4: thread per 4 packed bytes = 8 outputs of one row (in % 32 == 0, so the 8 share one 32-block and
// its scale byte); the nibble order and scale location follow ld_mxfp4_elem_f16 exactly (faults included),
// the value is ld_mxfp4_value_f16 looked up in a per-block table of all 256×16 (scale byte, nibble) pairs.
LD_KERNEL void ld_dequant_mxfp4(LdDequantArgs a) {
  __shared__ uint16_t tab[256][16];  // ld_mxfp4_value_f16 of every (scale byte, nibble), as src/dequant.cc's table
  for (int e = threadIdx.x; e < 256 * 16; e += blockDim.x) tab[e >> 4][e & 15] = ld_mxfp4_value_f16(e & 15, (uint8_t)(e >> 4), a.fault);
  __syncthreads();
  const long long groups = (long long)a.out * (a.in / 8);
  const int per_row = a.in / 8, C = a.in / 32;
  LD_GRID_STRIDE(g, groups) {
    const int o = (int)(g / per_row), i0 = (int)(g % per_row) * 8;
    const uint8_t* p = a.w + (size_t)o * (size_t)(a.in / 2) + (size_t)(i0 / 2);
    const uint8_t sb = a.scale[ld_scale_index((size_t)a.out, (size_t)C, (size_t)o, (size_t)(i0 / 32), a.fault)];
    uint16_t v[8];
#pragma unroll
    for (int b = 0; b < 4; b++) {
      const uint8_t byte = p[b];
      v[2 * b] = tab[sb][ld_mxfp4_nibble(byte, 0, a.fault)];
      v[2 * b + 1] = tab[sb][ld_mxfp4_nibble(byte, 1, a.fault)];
    }
    uint4 pk;
    pk.x = (uint32_t)v[0] | ((uint32_t)v[1] << 16);
    pk.y = (uint32_t)v[2] | ((uint32_t)v[3] << 16);
    pk.z = (uint32_t)v[4] | ((uint32_t)v[5] << 16);
    pk.w = (uint32_t)v[6] | ((uint32_t)v[7] << 16);
    *reinterpret_cast<uint4*>(a.y + (size_t)o * a.in + i0) = pk;  // 16-byte aligned: in % 32 == 0
  }
}

// FP8 block: thread per 8 consecutive outputs of a row; the block scale is looked up (ld_fp8_scale) when the
// column block changes, then ld_fp8_value_f16 — the composition of ld_fp8_elem_f16 and of dequant.cc. (An LDS table of
// ld_e4m3_to_f32 with a capped grid measured 10% slower on the H200 than this; see NOTES.md.)
LD_KERNEL void ld_dequant_fp8(LdDequantArgs a) {
  const int per_row = (a.in + 7) / 8;
  const long long groups = (long long)a.out * per_row;
  const size_t R = (size_t)((a.out + a.block_out - 1) / a.block_out), C = (size_t)((a.in + a.block_in - 1) / a.block_in);
  LD_GRID_STRIDE(g, groups) {
    const int o = (int)(g / per_row), i0 = (int)(g % per_row) * 8;
    const size_t r = (size_t)(o / a.block_out);
    int cprev = -1;
    float s = 0.0f;
    for (int e = 0; e < 8 && i0 + e < a.in; e++) {
      const int i = i0 + e, c = i / a.block_in;
      if (c != cprev) {
        s = ld_fp8_scale(a.scale, a.scale_is_f32, R, C, r, (size_t)c, a.fault);
        cprev = c;
      }
      a.y[(size_t)o * a.in + i] = ld_fp8_value_f16(a.w[(size_t)o * a.in + i], s);
    }
  }
}

// NVFP4: thread per 8 outputs of a row (in % 16 == 0, so the 8 share one 16-block and its E4M3 scale byte); the
// block scale e4m3 · g (or / g) is formed in f32 by ld_nvfp4_scale and the value by ld_nvfp4_value_f16, both
// looked up in a per-block LDS table of all 256×16 (scale byte, nibble) pairs, as src/dequant_fp4.cc's table;
// nibble order and scale location as ld_nvfp4_elem_f16 (faults included).
LD_KERNEL void ld_dequant_nvfp4(LdDequantNvfp4Args a) {
  __shared__ uint16_t tab[256][16];
  for (int e = threadIdx.x; e < 256 * 16; e += blockDim.x) {
    tab[e >> 4][e & 15] = ld_nvfp4_value_f16(e & 15, ld_nvfp4_scale((uint8_t)(e >> 4), a.global, a.divisor, a.fault), a.fault);
  }
  __syncthreads();
  const long long groups = (long long)a.out * (a.in / 8);
  const int per_row = a.in / 8, C = a.in / 16;
  LD_GRID_STRIDE(g, groups) {
    const int o = (int)(g / per_row), i0 = (int)(g % per_row) * 8;
    const uint8_t* p = a.w + (size_t)o * (size_t)(a.in / 2) + (size_t)(i0 / 2);
    const uint8_t sb = a.scale[ld_nvfp4_scale_index((size_t)a.out, (size_t)C, (size_t)o, (size_t)(i0 / 16), a.fault)];
    uint16_t v[8];
#pragma unroll
    for (int b = 0; b < 4; b++) {
      v[2 * b] = tab[sb][ld_mxfp4_nibble(p[b], 0, a.fault)];
      v[2 * b + 1] = tab[sb][ld_mxfp4_nibble(p[b], 1, a.fault)];
    }
    uint4 pk;
    pk.x = (uint32_t)v[0] | ((uint32_t)v[1] << 16);
    pk.y = (uint32_t)v[2] | ((uint32_t)v[3] << 16);
    pk.z = (uint32_t)v[4] | ((uint32_t)v[5] << 16);
    pk.w = (uint32_t)v[6] | ((uint32_t)v[7] << 16);
    *reinterpret_cast<uint4*>(a.y + (size_t)o * a.in + i0) = pk;  // 16-byte aligned: in % 16 == 0
  }
}

// bitsandbytes 4-bit: thread per packed byte = flat elements 2k (high nibble) and 2k+1; each element's block
// absmax by ld_bnb4_absmax (the double-quant product and sum in f32), its value by ld_bnb4_value_f16 — the
// element functions src/dequant_fp4.cc tabulates per block. Blocks need not be byte-aligned (any blocksize).
LD_KERNEL void ld_dequant_bnb4(LdDequantBnb4Args a) {
  const long long bytes = (a.n + 1) / 2;
  LD_GRID_STRIDE(k, bytes) {
    for (int h = 0; h < 2; h++) {
      const size_t j = (size_t)(2 * k + h);
      if ((long long)j >= a.n) break;
      const float am = ld_bnb4_absmax(a.absmax, a.absmax_is_codes, a.nested_absmax, a.nested_map, a.nested_offset, a.nested_blocksize,
                                      j / (size_t)a.blocksize, a.fault);
      a.y[j] = ld_bnb4_value_f16(ld_bnb4_code(a.w, j, a.fault), am, a.quant_map, a.fault);
    }
  }
}

// Plain weights: kind 2 bf16, 3 f16, 4 f32 (little-endian bytes).
LD_KERNEL void ld_dequant_plain(LdDequantArgs a) {
  const long long n = (long long)a.out * a.in;
  LD_GRID_STRIDE(i, n) {
    const uint8_t* b = a.w;
    uint16_t h;
    if (a.kind == 2) h = ld_bf16_to_f16((uint16_t)(b[2 * i] | (b[2 * i + 1] << 8)));
    else if (a.kind == 3) h = (uint16_t)(b[2 * i] | (b[2 * i + 1] << 8));
    else h = ld_f32_to_f16(ld_load_f32le(b + 4 * i));
    a.y[i] = h;
  }
}
