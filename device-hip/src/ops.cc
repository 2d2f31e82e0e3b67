// Emulated MI250 elementwise and row kernels (element math: the LD_HD helpers of ld_numerics.h, shared
// with the HIP kernels in device-hip/kernels). Activations are f16 in memory; each op widens to f32
// (exact), computes in f32 with the operation order written next to it, and rounds once to f16 (RNE).
// f32 sqrt and division are correctly rounded on both the host and HIP (its default
// -fhip-fp32-correctly-rounded-divide-sqrt), so the orders below fix the bits.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "addon.h"
#include "ld_numerics.h"
#include "ops_emulated.generated.h"

namespace ld {
namespace {

constexpr size_t kParallelMin = 1 << 15;  // below this, an OpenMP fork costs more than the loop

// rmsnorm: ms = (Σ x² in the ld lane order) / dim; r = 1/sqrtf(ms + eps); y = f16((x·r)·w).
void rmsnorm(const ops::RmsnormF16Args& a, ops::RmsnormF16Out& o) {
  const int rows = a.rows, dim = a.dim;
  uint16_t* yo = o.y.Data();
#pragma omp parallel for schedule(static) if (a.x.len >= kParallelMin)
  for (int r = 0; r < rows; r++) {
    const uint16_t* xr = a.x.data + (size_t)r * dim;
    const float inv = ld_rms_inv(dot_f16(xr, xr, dim), dim, a.eps);
    for (int d = 0; d < dim; d++) yo[(size_t)r * dim + d] = ld_rmsnorm_elem_f16(xr[d], inv, a.w.data[d]);
  }
}

// RoPE on dims [off, off+rot) of each head; pairs (j, j+rot/2) (HF rotate_half) or (2j, 2j+1)
// (interleaved). a' = a·c − b·s, b' = a·s + b·c with each product rounded (no fma), then f16.
void rope(const ops::RopeF16Args& a, ops::RopeF16Out& o) {
  const int T = a.tokens, H = a.heads, D = a.headDim, off = a.rotOffset, half = a.rotDim / 2;
  const bool inter = a.interleaved;
  uint16_t* yo = o.y.Data();
  std::copy(a.x.data, a.x.data + a.x.len, yo);
#pragma omp parallel for schedule(static) if (a.x.len >= kParallelMin)
  for (int th = 0; th < T * H; th++) {
    const int t = th / H;
    uint16_t* head = yo + (size_t)th * D + off;
    for (int j = 0; j < half; j++) {
      const int ia = ld_rope_index_a(j, inter), ib = ld_rope_index_b(j, half, inter);
      const uint16_t x0 = head[ia], x1 = head[ib];
      const float cs = a.cos.data[(size_t)t * half + j], sn = a.sin.data[(size_t)t * half + j];
      head[ia] = ld_rope_a_f16(x0, x1, cs, sn);
      head[ib] = ld_rope_b_f16(x0, x1, cs, sn);
    }
  }
}

// SwiGLU: g, u in f32; clamp (limit > 0) written with comparisons so a NaN passes through as NaN, like
// torch.clamp (fminf would replace it by the limit and hide the bug); y = f16((g / (1 + exp(−g))) · u).
void swiglu(const ops::SwigluF16Args& a, ops::SwigluF16Out& o) {
  uint16_t* yo = o.y.Data();
  const long long n = (long long)a.gate.len;
#pragma omp parallel for schedule(static) if (a.gate.len >= kParallelMin)
  for (long long i = 0; i < n; i++) yo[i] = ld_swiglu_f16(a.gate.data[i], a.up.data[i], a.limit);
}

void add(const ops::AddF16Args& a, ops::AddF16Out& o) {
  uint16_t* yo = o.y.Data();
  const long long n = (long long)a.a.len;
#pragma omp parallel for schedule(static) if (a.a.len >= kParallelMin)
  for (long long i = 0; i < n; i++) yo[i] = ld_add_f16(a.a.data[i], a.b.data[i]);
}

void mul_scalar(const ops::MulScalarF16Args& a, ops::MulScalarF16Out& o) {
  uint16_t* yo = o.y.Data();
  const long long n = (long long)a.a.len;
#pragma omp parallel for schedule(static) if (a.a.len >= kParallelMin)
  for (long long i = 0; i < n; i++) yo[i] = ld_mul_scalar_f16(a.a.data[i], a.s);
}

// The exact conversions: one element function over the array.
template <typename In, typename Out, Out (*F)(In)>
void convert(Span<const In> x, Out* y) {
  const long long n = (long long)x.len;
#pragma omp parallel for schedule(static) if (x.len >= kParallelMin)
  for (long long i = 0; i < n; i++) y[i] = F(x.data[i]);
}

}  // namespace

namespace emu {
void rmsnormF16(const ops::RmsnormF16Args& a, ops::RmsnormF16Out& o) { rmsnorm(a, o); }
void ropeF16(const ops::RopeF16Args& a, ops::RopeF16Out& o) { rope(a, o); }
void swigluF16(const ops::SwigluF16Args& a, ops::SwigluF16Out& o) { swiglu(a, o); }
void addF16(const ops::AddF16Args& a, ops::AddF16Out& o) { add(a, o); }
void mulScalarF16(const ops::MulScalarF16Args& a, ops::MulScalarF16Out& o) { mul_scalar(a, o); }
void f32ToF16(const ops::F32ToF16Args& a, ops::F32ToF16Out& o) { convert<float, uint16_t, ld_f32_to_f16>(a.x, o.y.Data()); }
void f16ToF32(const ops::F16ToF32Args& a, ops::F16ToF32Out& o) { convert<uint16_t, float, ld_f16_to_f32>(a.x, o.y.Data()); }
void bf16ToF16(const ops::Bf16ToF16Args& a, ops::Bf16ToF16Out& o) { convert<uint16_t, uint16_t, ld_bf16_to_f16>(a.x, o.y.Data()); }
}  // namespace emu

}  // namespace ld
