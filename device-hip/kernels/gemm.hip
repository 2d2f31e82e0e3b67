// FP16 × FP16 → FP32-accumulated matrix products, y[i, j] = f16(alpha · dot(x[i, :], W[j, :])) or the f32 dot
// (the emulation: device-hip/src/gemm.cc, gemmF16 / gemmF16F32). W is [n, k] row-major (PyTorch Linear).
//
// Accumulation order (ld_numerics.h, "GEMM accumulation order"): every output keeps 8 lane accumulators,
// lane l = k ≡ l (mod 8) in increasing k, acc = fmaf(x, w, acc) from +0, combined by ld_lanes_combine. That
// order fixes the bits, so these kernels equal the AVX-512/AVX2/scalar emulation bit for bit. It also rules
// out MFMA/tensor-core instructions (their internal summation order is not this one): these are CUDA-core /
// VALU FMA kernels.
//
// Zero padding is exact: beyond k (and outside the matrix) both x and w are staged as +0, and
// fmaf(+0, +0, acc) == acc for every acc this order can produce (acc starts at +0 and an exact-zero fmaf
// result under round-to-nearest is +0 unless both terms are −0, so acc is never −0; Inf and NaN pass).
//
// Kernels:
//   ld_gemm_tiled_{f16,mxfp4}       m > 8: 64×64 output tile per 256-thread block, k staged 32 at a time in
//                                   shared memory as f32; each thread a 4×4 sub-tile × 8 lanes (128 acc).
//   ld_gemm_skinny_{f16,mxfp4}_MT   m ≤ 8 (decode): 8 consecutive threads = the 8 lanes of one output
//                                   column, MT ∈ {1,2,4,8} rows of x at once, W and x staged through LDS
//                                   with 16-byte loads; lanes combined by xor-shuffles.
//   The mxfp4 variants are the fused dequant-in-GEMM: W[j, kk] = ld_mxfp4_elem_f16(...) (the dequant
//   kernel's and the emulation's element function, fault codes included; evaluated once per (scale byte,
//   nibble) into an LDS table, as the emulation's dequant.cc does) computed while staging, so the f16
//   weight never goes through memory: 4.25 bits read per weight instead of 4.25 + 16 written + 16 read.
//   f16(W) then widened equals dequant-then-GEMM exactly.
#include "ld_kernel_common.h"

// W[j, kk] of an MXFP4 weight through the block's value table (ld_kernel_common.h: tab[sb][nibble] =
// widen(ld_mxfp4_value_f16(nibble, sb, fault))): byte, nibble and scale byte located exactly as
// ld_mxfp4_elem_f16 locates them, so the value is that function's, widened.
__device__ static inline float ld_mx_w(const LdGemmArgs& a, const float (*tab)[16], int j, int kk) {
  const uint8_t byte = a.wq[(size_t)j * (size_t)(a.k / 2) + (size_t)(kk / 2)];
  const uint8_t sb = a.wscale[ld_scale_index((size_t)a.n, (size_t)(a.k / 32), (size_t)j, (size_t)(kk / 32), a.fault)];
  return tab[sb][ld_mxfp4_nibble(byte, kk & 1, a.fault)];
}

__device__ static inline void ld_gemm_store(const LdGemmArgs& a, int i, int j, float d) {
  if (a.y16 != 0) a.y16[(size_t)i * a.n + j] = ld_f32_to_f16(a.alpha * d);
  else a.y32[(size_t)i * a.n + j] = d;
}

template <int WFMT>
__device__ static void ld_gemm_tiled_body(const LdGemmArgs& a) {
  __shared__ __attribute__((aligned(16))) float xs[LD_GT_BK][LD_GT_BM + 4];
  __shared__ __attribute__((aligned(16))) float ws[LD_GT_BK][LD_GT_BN + 4];
  __shared__ float tab[WFMT == LD_W_MXFP4 ? 256 : 1][16];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  if (WFMT == LD_W_MXFP4) {
    ld_mx_table_fill(tab, a.fault);
    __syncthreads();
  }
  const int i0 = blockIdx.y * LD_GT_BM, j0 = blockIdx.x * LD_GT_BN;
  float acc[4][4][LD_LANES];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int l = 0; l < LD_LANES; l++) acc[i][j][l] = 0.0f;

  for (int k0 = 0; k0 < a.k; k0 += LD_GT_BK) {
    for (int e = tid; e < LD_GT_BM * LD_GT_BK; e += LD_THREADS) {
      const int r = e / LD_GT_BK, kk = e % LD_GT_BK, gi = i0 + r, gk = k0 + kk;
      xs[kk][r] = (gi < a.m && gk < a.k) ? ld_widen_f16(a.x[(size_t)gi * a.k + gk]) : 0.0f;
    }
    for (int e = tid; e < LD_GT_BN * LD_GT_BK; e += LD_THREADS) {
      const int c = e / LD_GT_BK, kk = e % LD_GT_BK, gj = j0 + c, gk = k0 + kk;
      float v = 0.0f;
      if (gj < a.n && gk < a.k) v = WFMT == LD_W_MXFP4 ? ld_mx_w(a, tab, gj, gk) : ld_widen_f16(a.w[(size_t)gj * a.k + gk]);
      ws[kk][c] = v;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < LD_GT_BK; kk += LD_LANES) {
#pragma unroll
      for (int l = 0; l < LD_LANES; l++) {  // k0 and kk are multiples of 8: global k ≡ l (mod 8)
        const float4 xa = *reinterpret_cast<const float4*>(&xs[kk + l][ty * 4]);
        const float4 wb = *reinterpret_cast<const float4*>(&ws[kk + l][tx * 4]);
        const float xv[4] = {xa.x, xa.y, xa.z, xa.w};
        const float wv[4] = {wb.x, wb.y, wb.z, wb.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int j = 0; j < 4; j++) acc[i][j][l] = fmaf(xv[i], wv[j], acc[i][j][l]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int gi = i0 + ty * 4 + i, gj = j0 + tx * 4 + j;
      if (gi < a.m && gj < a.n) ld_gemm_store(a, gi, gj, ld_lanes_combine(acc[i][j]));
    }
  }
}

// Skinny: k in chunks of LD_GS_KC; per chunk the block stages x (MT rows, widened to f32) and its 32 W rows in
// LDS with 16-byte coalesced loads (f16: 32 rows × 512 B; MXFP4: 32 rows × 128 packed bytes), zero-padded
// past k; then thread (j, l) runs lane l of output j over the chunk from LDS.
#define LD_GS_KC 256
template <int WFMT, int MT>
__device__ static void ld_gemm_skinny_body(const LdGemmArgs& a) {
  __shared__ __attribute__((aligned(16))) float xs[MT][LD_GS_KC];
  __shared__ __attribute__((aligned(16))) uint16_t ws[WFMT == LD_W_F16 ? LD_GS_OUT : 1][LD_GS_KC + 8];
  __shared__ __attribute__((aligned(16))) uint8_t qs[WFMT == LD_W_MXFP4 ? LD_GS_OUT : 1][LD_GS_KC / 2 + 16];
  __shared__ float tab[WFMT == LD_W_MXFP4 ? 256 : 1][16];
  const int tid = threadIdx.x, l = tid & 7, jl = tid >> 3, j0 = blockIdx.x * LD_GS_OUT, j = j0 + jl;
  const bool live = j < a.n;
  if (WFMT == LD_W_MXFP4) ld_mx_table_fill(tab, a.fault);
  const bool vec = (a.k & 7) == 0;  // rows 16-byte aligned: vector staging (MXFP4: k % 32 == 0 always)
  float acc[MT];
#pragma unroll
  for (int r = 0; r < MT; r++) acc[r] = 0.0f;
  for (int k0 = 0; k0 < a.k; k0 += LD_GS_KC) {
    for (int e = tid; e < MT * LD_GS_KC; e += LD_THREADS) {
      const int r = e / LD_GS_KC, kk = k0 + e % LD_GS_KC;
      xs[r][e % LD_GS_KC] = (r < a.m && kk < a.k) ? ld_widen_f16(a.x[(size_t)r * a.k + kk]) : 0.0f;
    }
    if (WFMT == LD_W_F16) {
      if (vec) {
        for (int e = tid; e < LD_GS_OUT * (LD_GS_KC / 8); e += LD_THREADS) {  // one 16-byte piece each
          const int row = e / (LD_GS_KC / 8), c8 = (e % (LD_GS_KC / 8)) * 8, gj = j0 + row, kk = k0 + c8;
          uint4 v = make_uint4(0u, 0u, 0u, 0u);
          if (gj < a.n && kk < a.k) v = *reinterpret_cast<const uint4*>(a.w + (size_t)gj * a.k + kk);
          *reinterpret_cast<uint4*>(&ws[row][c8]) = v;
        }
      } else {
        for (int e = tid; e < LD_GS_OUT * LD_GS_KC; e += LD_THREADS) {
          const int row = e / LD_GS_KC, c = e % LD_GS_KC, gj = j0 + row, kk = k0 + c;
          ws[row][c] = (gj < a.n && kk < a.k) ? a.w[(size_t)gj * a.k + kk] : (uint16_t)0;
        }
      }
    } else {
      for (int e = tid; e < LD_GS_OUT * (LD_GS_KC / 32); e += LD_THREADS) {  // 16 packed bytes = 32 weights
        const int row = e / (LD_GS_KC / 32), c16 = (e % (LD_GS_KC / 32)) * 16, gj = j0 + row, kk = k0 + 2 * c16;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (gj < a.n && kk < a.k) v = *reinterpret_cast<const uint4*>(a.wq + (size_t)gj * (a.k / 2) + kk / 2);
        *reinterpret_cast<uint4*>(&qs[row][c16]) = v;
      }
    }
    __syncthreads();
    if (live) {
      const int clen = a.k - k0 < LD_GS_KC ? a.k - k0 : LD_GS_KC;
      if (WFMT == LD_W_F16) {
#pragma unroll 8
        for (int c = l; c < LD_GS_KC; c += LD_LANES) {  // zero-padded past k: exact (see the top of this file)
          const float wv = ld_widen_f16(ws[jl][c]);
#pragma unroll
          for (int r = 0; r < MT; r++) acc[r] = fmaf(xs[r][c], wv, acc[r]);
        }
      } else {
        for (int c0 = 0; c0 < clen; c0 += 32) {  // one scale byte per 32-block (ld_mxfp4_elem_f16's location)
          const uint8_t sb = a.wscale[ld_scale_index((size_t)a.n, (size_t)(a.k / 32), (size_t)j, (size_t)((k0 + c0) / 32), a.fault)];
#pragma unroll
          for (int q = 0; q < 32 / LD_LANES; q++) {
            const int c = c0 + l + LD_LANES * q;
            const float wv = tab[sb][ld_mxfp4_nibble(qs[jl][c / 2], c & 1, a.fault)];
#pragma unroll
            for (int r = 0; r < MT; r++) acc[r] = fmaf(xs[r][c], wv, acc[r]);
          }
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < MT; r++) {
    const float d = ld_lanes_combine_shfl(acc[r]);  // every thread of the wavefront takes part
    if (live && l == 0 && r < a.m) ld_gemm_store(a, r, j, d);
  }
}

LD_KERNEL void ld_gemm_tiled_f16(LdGemmArgs a) { ld_gemm_tiled_body<LD_W_F16>(a); }
LD_KERNEL void ld_gemm_tiled_mxfp4(LdGemmArgs a) { ld_gemm_tiled_body<LD_W_MXFP4>(a); }
LD_KERNEL void ld_gemm_skinny_f16_1(LdGemmArgs a) { ld_gemm_skinny_body<LD_W_F16, 1>(a); }
LD_KERNEL void ld_gemm_skinny_f16_2(LdGemmArgs a) { ld_gemm_skinny_body<LD_W_F16, 2>(a); }
LD_KERNEL void ld_gemm_skinny_f16_4(LdGemmArgs a) { ld_gemm_skinny_body<LD_W_F16, 4>(a); }
LD_KERNEL void ld_gemm_skinny_f16_8(LdGemmArgs a) { ld_gemm_skinny_body<LD_W_F16, 8>(a); }
LD_KERNEL void ld_gemm_skinny_mxfp4_1(LdGemmArgs a) { ld_gemm_skinny_body<LD_W_MXFP4, 1>(a); }
LD_KERNEL void ld_gemm_skinny_mxfp4_2(LdGemmArgs a) { ld_gemm_skinny_body<LD_W_MXFP4, 2>(a); }
LD_KERNEL void ld_gemm_skinny_mxfp4_4(LdGemmArgs a) { ld_gemm_skinny_body<LD_W_MXFP4, 4>(a); }
LD_KERNEL void ld_gemm_skinny_mxfp4_8(LdGemmArgs a) { ld_gemm_skinny_body<LD_W_MXFP4, 8>(a); }
