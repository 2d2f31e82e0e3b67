// Emulated MI250 kernels of DeepSeek-V4's MoE (spec §4.6; DeepSeek's Gate, Expert, MoE).
//
// routerF32: the router logits arrive in f32 (gemmF16F32: DeepSeek's router runs in fp32, and a gate score
//   rounded to FP16 would flip near-tied experts for no modelled reason). s_e = ld_sqrt_softplusf(l_e).
//   Choice: the given ids (hash layers' tid2eid rows, or the reference's choice in isolated mode), else the
//   top-k of f32(s_e + bias_e) in the ld_topk_before order (ties → lowest id). ids are returned ascending;
//   ω_i = f32(routeScale·s_i) / Σ s (sum over the ascending ids, f32, sequential) — the unbiased scores.
// swigluRowsF16: f16(ld_swiglu_f32(g, u, limit)·ω_row): the routing weight is applied before W2 as in
//   DeepSeek's Expert, inside the same f32 expression, so the FP16 input of W2 is rounded once. Without
//   weights it is bit-identical to swigluF16.
// moeCombineF16: per token, the routed experts' W2 outputs (f16 rows, ordered by the caller: expert id
//   ascending, then token order) are summed in f32 in increasing row order, the shared expert's output
//   added last, and the total rounded once to f16 (DeepSeek sums expert outputs in fp32).
#include <omp.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

#include "deepseek.h"
#include "ld_deepseek.h"
#include "ops_emulated.generated.h"

namespace ld {
namespace {

constexpr size_t kParallelMin = 1 << 15;

// routerF32(logits, bias | null, T, E, topk, routeScale, given | null) → { ids: Int32 [T, topk],
// weights: f32 [T, topk], scores: f32 [T, E] }.
void router(const ops::RouterF32Args& a, ops::RouterF32Out& o) {
  const int T = a.T, E = a.E, k = a.topk;
  const float route_scale = a.routeScale;
  const Span<const float> logits = a.logits;
  const float* bias = a.bias.data;
  const int32_t* given = a.given.data;
  int32_t* io = o.ids.Data();
  float* wo = o.weights.Data();
  float* so = o.scores.Data();
  const int nthreads = omp_get_max_threads();
  std::vector<float> selv((size_t)nthreads * E);
  std::vector<int> order((size_t)nthreads * E);
#pragma omp parallel for schedule(static) num_threads(nthreads) if ((size_t)T * E >= kParallelMin / 8)
  for (int t = 0; t < T; t++) {
    float* s = so + (size_t)t * E;
    for (int e = 0; e < E; e++) s[e] = ld_sqrt_softplusf(logits.data[(size_t)t * E + e]);
    int32_t* it = io + (size_t)t * k;
    if (given != nullptr) {
      std::copy(given + (size_t)t * k, given + (size_t)(t + 1) * k, it);
    } else {
      float* sel = selv.data() + (size_t)omp_get_thread_num() * E;
      int* ix = order.data() + (size_t)omp_get_thread_num() * E;
      for (int e = 0; e < E; e++) sel[e] = bias != nullptr ? s[e] + bias[e] : s[e];
      std::iota(ix, ix + E, 0);
      std::partial_sort(ix, ix + k, ix + E, [sel](int a, int b) { return ld_topk_before(sel[a], a, sel[b], b) != 0; });
      std::copy(ix, ix + k, it);
    }
    std::sort(it, it + k);
    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum += s[it[j]];
    for (int j = 0; j < k; j++) wo[(size_t)t * k + j] = (route_scale * s[it[j]]) / sum;
  }
}

// swigluRowsF16(gate, up, rows, cols, rowWeights | null, limit) → f16 [rows, cols].
void swiglu_rows(const ops::SwigluRowsF16Args& a, ops::SwigluRowsF16Out& o) {
  const int rows = a.rows, cols = a.cols;
  const Span<const uint16_t> g = a.gate, u = a.up;
  const float* rw = a.rowWeights.data;
  const float limit = a.limit;
  uint16_t* yo = o.y.Data();
#pragma omp parallel for schedule(static) if (g.len >= kParallelMin)
  for (int r = 0; r < rows; r++) {
    for (int c = 0; c < cols; c++) {
      const size_t i = (size_t)r * cols + c;
      float v = ld_swiglu_f32(ld_f16_to_f32(g.data[i]), ld_f16_to_f32(u.data[i]), limit);
      if (rw != nullptr) v = v * rw[r];
      yo[i] = ld_f32_to_f16(v);
    }
  }
}

// moeCombineF16(y [R, D], rowToken Int32 [R], shared [T, D], T, D) → f16 [T, D].
void moe_combine(const ops::MoeCombineF16Args& a, ops::MoeCombineF16Out& o) {
  const int T = a.T, D = a.D;
  const Span<const int32_t> rt = a.rowToken;
  const Span<const uint16_t> y = a.y, shared = a.shared;
  const size_t R = rt.len;
  // Rows of each token, in increasing row order (CSR), built before the parallel region.
  std::vector<size_t> start((size_t)T + 1, 0);
  for (size_t r = 0; r < R; r++) start[(size_t)rt.data[r] + 1]++;  // rowToken in [0, T): the reader's range check
  for (int t = 0; t < T; t++) start[t + 1] += start[t];
  std::vector<size_t> rows(R), fill(start.begin(), start.end() - 1);
  for (size_t r = 0; r < R; r++) rows[fill[rt.data[r]]++] = r;
  uint16_t* oo = o.out.Data();
#pragma omp parallel for schedule(static) if ((R + T) * (size_t)D >= kParallelMin)
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < D; i++) {
      float acc = 0.0f;
      for (size_t j = start[t]; j < start[t + 1]; j++) acc += ld_f16_to_f32(y.data[rows[j] * D + i]);
      acc += ld_f16_to_f32(shared.data[(size_t)t * D + i]);
      oo[(size_t)t * D + i] = ld_f32_to_f16(acc);
    }
  }
}

}  // namespace

void emu::routerF32(const ops::RouterF32Args& a, ops::RouterF32Out& o) { router(a, o); }
void emu::swigluRowsF16(const ops::SwigluRowsF16Args& a, ops::SwigluRowsF16Out& o) { swiglu_rows(a, o); }
void emu::moeCombineF16(const ops::MoeCombineF16Args& a, ops::MoeCombineF16Out& o) { moe_combine(a, o); }

}  // namespace ld
