// Row and elementwise kernels: RMSNorm, RoPE, SwiGLU (with clamp), residual add, scalar multiply (the emulation:
// device-hip/src/ops.cc). Element math: the LD_HD helpers of ld_numerics.h that ops.cc calls too.
#include "ld_kernel_common.h"

// RMSNorm: 8 consecutive threads own one row (thread l: the lane k ≡ l mod 8 of Σx², increasing k, fmaf —
// the ld_dot order of ops.cc's dot_f16(x, x)); lanes combined by the xor-shuffle tree; then the same 8
// threads write the row with ld_rmsnorm_elem_f16. 32 rows per 256-thread block.
LD_KERNEL void ld_rmsnorm(LdRmsnormArgs a) {
  const int l = threadIdx.x & 7, row = blockIdx.x * (LD_THREADS / 8) + (threadIdx.x >> 3);
  const bool live = row < a.rows;
  const uint16_t* x = a.x + (size_t)(live ? row : 0) * a.dim;
  float acc = 0.0f;
  if (live) {
#pragma unroll 8
    for (int d = l; d < a.dim; d += LD_LANES) {
      const float v = ld_widen_f16(x[d]);
      acc = fmaf(v, v, acc);
    }
  }
  const float inv = ld_rms_inv(ld_lanes_combine_shfl(acc), a.dim, a.eps);
  if (!live) return;
  uint16_t* y = a.y + (size_t)row * a.dim;
  for (int d = l; d < a.dim; d += LD_LANES) y[d] = ld_rmsnorm_elem_f16(x[d], inv, a.w[d]);
}

// RoPE: thread per output element; dims outside [off, off+rot) are copied, a rotated element reads its pair
// and applies ld_rope_a_f16 / ld_rope_b_f16 (each product rounded, no fma). x and y must not alias.
LD_KERNEL void ld_rope(LdRopeArgs a) {
  const long long n = (long long)a.tokens * a.heads * a.head_dim;
  const int half = a.rot_dim / 2;
  LD_GRID_STRIDE(e, n) {
    const int d = (int)(e % a.head_dim);
    const long long th = e / a.head_dim;
    const int rel = d - a.rot_offset;
    if (rel < 0 || rel >= a.rot_dim) {
      a.y[e] = a.x[e];
      continue;
    }
    const int t = (int)(th / a.heads);
    int j, is_b;
    if (a.interleaved) {
      j = rel >> 1;
      is_b = rel & 1;
    } else {
      is_b = rel >= half;
      j = is_b ? rel - half : rel;
    }
    const uint16_t* head = a.x + th * a.head_dim + a.rot_offset;
    const uint16_t xa = head[ld_rope_index_a(j, a.interleaved)], xb = head[ld_rope_index_b(j, half, a.interleaved)];
    const float c = a.cos[(size_t)t * half + j], s = a.sin[(size_t)t * half + j];
    a.y[e] = is_b ? ld_rope_b_f16(xa, xb, c, s) : ld_rope_a_f16(xa, xb, c, s);
  }
}

LD_KERNEL void ld_swiglu(LdSwigluArgs a) {
  LD_GRID_STRIDE(i, a.n) a.y[i] = ld_swiglu_f16(a.g[i], a.u[i], a.limit);
}

LD_KERNEL void ld_add(LdAddArgs a) {
  LD_GRID_STRIDE(i, a.n) a.y[i] = ld_add_f16(a.a[i], a.b[i]);
}

LD_KERNEL void ld_mul_scalar(LdMulScalarArgs a) {
  LD_GRID_STRIDE(i, a.n) a.y[i] = ld_mul_scalar_f16(a.a[i], a.s);
}
