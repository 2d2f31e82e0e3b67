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

namespace ld {
namespace {

constexpr size_t kParallelMin = 1 << 15;

// routerF32(logits, bias | null, T, E, topk, routeScale, given | null) → { ids: Int32 [T, topk],
// weights: f32 [T, topk], scores: f32 [T, E] }.
Napi::Value router(const Napi::CallbackInfo& info) {
  const char* fn = "routerF32";
  need_args(info, 7, fn);
  const int T = arg_int(info, 2, fn, "T", 1), E = arg_int(info, 3, fn, "E", 1), k = arg_int(info, 4, fn, "topk", 1);
  if (k > E) throw_range(info.Env(), std::string(fn) + ": topk " + std::to_string(k) + " exceeds E " + std::to_string(E));
  const float route_scale = static_cast<float>(arg_num(info, 5, fn, "routeScale"));
  auto logits = arg_array_len<float>(info, 0, fn, "logits", (size_t)T * E, "T×E " + dims({T, E}));
  const float* bias = arg_is_null(info, 1) ? nullptr : arg_array_len<float>(info, 1, fn, "bias", (size_t)E, "E " + dims({E})).data;
  const int32_t* given = nullptr;
  if (!arg_is_null(info, 6)) {
    auto g = arg_i32_len(info, 6, fn, "given", (size_t)T * k, "T×topk " + dims({T, k}));
    for (size_t i = 0; i < g.len; i++) {
      if (g.data[i] < 0 || g.data[i] >= E) {
        throw_range(info.Env(), std::string(fn) + ": given[" + std::to_string(i / k) + "][" + std::to_string(i % k) + "] = " +
                                    std::to_string(g.data[i]) + " is outside [0, " + std::to_string(E) + ")");
      }
    }
    given = g.data;
  }
  const Napi::Env env = info.Env();
  auto ids = new_array<int32_t>(env, (size_t)T * k);
  auto weights = new_array<float>(env, (size_t)T * k);
  auto scores = new_array<float>(env, (size_t)T * E);
  int32_t* io = ids.Data();
  float* wo = weights.Data();
  float* so = scores.Data();
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
  Napi::Object out = Napi::Object::New(env);
  out.Set("ids", ids);
  out.Set("weights", weights);
  out.Set("scores", scores);
  return out;
}

// swigluRowsF16(gate, up, rows, cols, rowWeights | null, limit) → f16 [rows, cols].
Napi::Value swiglu_rows(const Napi::CallbackInfo& info) {
  const char* fn = "swigluRowsF16";
  need_args(info, 6, fn);
  const int rows = arg_int(info, 2, fn, "rows", 1), cols = arg_int(info, 3, fn, "cols", 1);
  auto g = arg_array_len<uint16_t>(info, 0, fn, "gate", (size_t)rows * cols, "rows×cols " + dims({rows, cols}));
  auto u = arg_array_len<uint16_t>(info, 1, fn, "up", (size_t)rows * cols, "rows×cols " + dims({rows, cols}));
  const float* rw = arg_is_null(info, 4) ? nullptr : arg_array_len<float>(info, 4, fn, "rowWeights", (size_t)rows, "rows " + dims({rows})).data;
  const float limit = static_cast<float>(arg_num(info, 5, fn, "limit"));
  auto y = new_array<uint16_t>(info.Env(), g.len);
  uint16_t* yo = y.Data();
#pragma omp parallel for schedule(static) if (g.len >= kParallelMin)
  for (int r = 0; r < rows; r++) {
    for (int c = 0; c < cols; c++) {
      const size_t i = (size_t)r * cols + c;
      float v = ld_swiglu_f32(ld_f16_to_f32(g.data[i]), ld_f16_to_f32(u.data[i]), limit);
      if (rw != nullptr) v = v * rw[r];
      yo[i] = ld_f32_to_f16(v);
    }
  }
  return y;
}

// moeCombineF16(y [R, D], rowToken Int32 [R], shared [T, D], T, D) → f16 [T, D].
Napi::Value moe_combine(const Napi::CallbackInfo& info) {
  const char* fn = "moeCombineF16";
  need_args(info, 5, fn);
  const int T = arg_int(info, 3, fn, "T", 1), D = arg_int(info, 4, fn, "D", 1);
  auto rt = arg_i32(info, 1, fn, "rowToken");
  const size_t R = rt.len;
  auto y = arg_array_len<uint16_t>(info, 0, fn, "y", R * D, "R×D " + dims({(long long)R, D}));
  auto shared = arg_array_len<uint16_t>(info, 2, fn, "shared", (size_t)T * D, "T×D " + dims({T, D}));
  // Rows of each token, in increasing row order (CSR), built before the parallel region.
  std::vector<size_t> start((size_t)T + 1, 0);
  for (size_t r = 0; r < R; r++) {
    if (rt.data[r] < 0 || rt.data[r] >= T) {
      throw_range(info.Env(), std::string(fn) + ": rowToken[" + std::to_string(r) + "] = " + std::to_string(rt.data[r]) +
                                  " is outside [0, " + std::to_string(T) + ")");
    }
    start[(size_t)rt.data[r] + 1]++;
  }
  for (int t = 0; t < T; t++) start[t + 1] += start[t];
  std::vector<size_t> rows(R), fill(start.begin(), start.end() - 1);
  for (size_t r = 0; r < R; r++) rows[fill[rt.data[r]]++] = r;
  auto out = new_array<uint16_t>(info.Env(), (size_t)T * D);
  uint16_t* oo = out.Data();
#pragma omp parallel for schedule(static) if ((R + T) * (size_t)D >= kParallelMin)
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < D; i++) {
      float acc = 0.0f;
      for (size_t j = start[t]; j < start[t + 1]; j++) acc += ld_f16_to_f32(y.data[rows[j] * D + i]);
      acc += ld_f16_to_f32(shared.data[(size_t)t * D + i]);
      oo[(size_t)t * D + i] = ld_f32_to_f16(acc);
    }
  }
  return out;
}

}  // namespace

void init_deepseek_moe(Napi::Env env, Napi::Object exports) {
  exports.Set("routerF32", Napi::Function::New(env, router));
  exports.Set("swigluRowsF16", Napi::Function::New(env, swiglu_rows));
  exports.Set("moeCombineF16", Napi::Function::New(env, moe_combine));
}

}  // namespace ld
