// gpt-oss's own ops (the emulation: device-hip/src/gpt_oss.cc ossRouterF32 / ossSwigluF16), from the same
// LD_HD functions (ld_gpt_oss.h, ld_deepseek.h's ld_topk_before) in the same orders:
//   oss_router  thread per token: the top-k of z_e = ld_oss_router_z in the ld_topk_before total order (k
//               selection passes: pick j is the best element ranking after pick j−1 — the set partial_sort
//               yields, the order being total), ids ascending (insertion sort), ld_oss_router_weights.
//   oss_swiglu  thread per output element (r, i): ld_oss_swiglu_f32 of h[r, 2i], h[r, 2i+1], one rounding.
#include "ld_kernel_common.h"
#include "ld_gpt_oss.h"

LD_KERNEL void ld_oss_router(LdOssRouterArgs a) {
  const int t = blockIdx.x * LD_THREADS + threadIdx.x;
  if (t >= a.T) return;
  const int E = a.E, k = a.topk;
  const float* row = a.logits + (size_t)t * E;
  int32_t* it = a.ids + (size_t)t * k;
  if (a.given != 0) {
    for (int j = 0; j < k; j++) it[j] = a.given[(size_t)t * k + j];
  } else {
    int prev = -1;
    float pv = 0.0f;
    for (int j = 0; j < k; j++) {
      int best = -1;
      float bv = 0.0f;
      for (int e = 0; e < E; e++) {
        const float v = ld_oss_router_z(row, a.bias, e);
        if (prev >= 0 && !ld_topk_before(pv, prev, v, e)) continue;  // only what ranks after pick j − 1
        if (best < 0 || ld_topk_before(v, e, bv, best)) {
          best = e;
          bv = v;
        }
      }
      it[j] = best;
      prev = best;
      pv = bv;
    }
  }
  for (int j = 1; j < k; j++) {  // ids ascending (insertion sort)
    const int32_t v = it[j];
    int p = j - 1;
    while (p >= 0 && it[p] > v) {
      it[p + 1] = it[p];
      p--;
    }
    it[p + 1] = v;
  }
  ld_oss_router_weights(row, a.bias, it, k, a.weights + (size_t)t * k);
}

LD_KERNEL void ld_oss_swiglu(LdOssSwigluArgs a) {
  LD_GRID_STRIDE(e, (long long)a.rows * a.I) {
    const long long r = e / a.I, i = e % a.I;
    const uint16_t* hr = a.h + (size_t)r * 2 * a.I;
    a.y[e] = ld_f32_to_f16(ld_oss_swiglu_f32(ld_widen_f16(hr[2 * i]), ld_widen_f16(hr[2 * i + 1]), a.limit, a.alpha));
  }
}
