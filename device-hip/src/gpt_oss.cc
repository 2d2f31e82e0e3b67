// Emulated MI250 kernels of gpt-oss's MoE (spec/gpt-oss.md §3; element numerics in include/ld_gpt_oss.h).
//
// ossRouterF32: the router logits arrive in f32 (gemmF16F32, as every router here: an FP16 logit would
//   flip near-tied experts for no modelled reason); z_e = f32(logit_e + bias_e). Choice: the given ids (the
//   reference's, in isolated mode), else the top-k of z in the ld_topk_before order (ties → lowest id);
//   ids returned ascending; weights = softmax over the k chosen z only (ld_oss_router_weights).
// ossSwigluF16: h f16 [rows, 2I] as W1·x + b1 left it, gate/up interleaved by element; → f16 [rows, I] of
//   ld_oss_swiglu_f32 (gate clamped above, up both ways, α, +1), one rounding.
#include <omp.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "deepseek.h"
#include "ld_gpt_oss.h"
#include "ops_emulated.generated.h"

namespace ld {
namespace {

constexpr size_t kParallelMin = 1 << 15;

void oss_router(const ops::OssRouterF32Args& a, ops::OssRouterF32Out& o) {
  const int T = a.T, E = a.E, k = a.topk;
  const Span<const float> logits = a.logits;
  const float* bias = a.bias.data;
  const int32_t* given = a.given.data;
  int32_t* io = o.ids.Data();
  float* wo = o.weights.Data();
  const int nthreads = omp_get_max_threads();
  std::vector<float> zv((size_t)nthreads * E);
  std::vector<int> order((size_t)nthreads * E);
#pragma omp parallel for schedule(static) num_threads(nthreads) if ((size_t)T * E >= kParallelMin / 8)
  for (int t = 0; t < T; t++) {
    float* z = zv.data() + (size_t)omp_get_thread_num() * E;
    int* ix = order.data() + (size_t)omp_get_thread_num() * E;
    const float* row = logits.data + (size_t)t * E;
    for (int e = 0; e < E; e++) z[e] = ld_oss_router_z(row, bias, e);
    int32_t* it = io + (size_t)t * k;
    if (given != nullptr) {
      std::copy(given + (size_t)t * k, given + (size_t)(t + 1) * k, it);
    } else {
      std::iota(ix, ix + E, 0);
      std::partial_sort(ix, ix + k, ix + E, [z](int a, int b) { return ld_topk_before(z[a], a, z[b], b) != 0; });
      std::copy(ix, ix + k, it);
    }
    std::sort(it, it + k);
    ld_oss_router_weights(row, bias, it, k, wo + (size_t)t * k);
  }
}

void oss_swiglu(const ops::OssSwigluF16Args& a, ops::OssSwigluF16Out& o) {
  const int rows = a.rows, I = a.I;
  const Span<const uint16_t> h = a.h;
  const float limit = a.limit, alpha = a.alpha;
  uint16_t* yo = o.y.Data();
#pragma omp parallel for schedule(static) if ((size_t)rows * I >= kParallelMin)
  for (int r = 0; r < rows; r++) {
    const uint16_t* hr = h.data + (size_t)r * 2 * I;
    for (int i = 0; i < I; i++) yo[(size_t)r * I + i] = ld_oss_swiglu_f16(hr[2 * i], hr[2 * i + 1], limit, alpha);
  }
}

}  // namespace

void emu::ossRouterF32(const ops::OssRouterF32Args& a, ops::OssRouterF32Out& o) { oss_router(a, o); }
void emu::ossSwigluF16(const ops::OssSwigluF16Args& a, ops::OssSwigluF16Out& o) { oss_swiglu(a, o); }

}  // namespace ld
