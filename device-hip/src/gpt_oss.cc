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

namespace ld {
namespace {

constexpr size_t kParallelMin = 1 << 15;

// ossRouterF32(logits [T, E], bias [E] | null, T, E, topk, given Int32 [T, topk] | null)
//   → { ids: Int32 [T, topk] ascending, weights: f32 [T, topk] }.
Napi::Value oss_router(const Napi::CallbackInfo& info) {
  const char* fn = "ossRouterF32";
  need_args(info, 6, fn);
  const int T = arg_int(info, 2, fn, "T", 1), E = arg_int(info, 3, fn, "E", 1), k = arg_int(info, 4, fn, "topk", 1);
  if (k > E) throw_range(info.Env(), std::string(fn) + ": topk " + std::to_string(k) + " exceeds E " + std::to_string(E));
  auto logits = arg_array_len<float>(info, 0, fn, "logits", (size_t)T * E, "T×E " + dims({T, E}));
  const float* bias = arg_is_null(info, 1) ? nullptr : arg_array_len<float>(info, 1, fn, "bias", (size_t)E, "E " + dims({E})).data;
  const int32_t* given = nullptr;
  if (!arg_is_null(info, 5)) {
    auto g = arg_i32_len(info, 5, fn, "given", (size_t)T * k, "T×topk " + dims({T, k}));
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
  int32_t* io = ids.Data();
  float* wo = weights.Data();
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
  Napi::Object out = Napi::Object::New(env);
  out.Set("ids", ids);
  out.Set("weights", weights);
  return out;
}

// ossSwigluF16(h [rows, 2I], rows, I, limit, alpha) → f16 [rows, I].
Napi::Value oss_swiglu(const Napi::CallbackInfo& info) {
  const char* fn = "ossSwigluF16";
  need_args(info, 5, fn);
  const int rows = arg_int(info, 1, fn, "rows", 1), I = arg_int(info, 2, fn, "I", 1);
  auto h = arg_array_len<uint16_t>(info, 0, fn, "h", (size_t)rows * 2 * I, "rows×2I " + dims({rows, 2 * I}));
  const float limit = static_cast<float>(arg_num(info, 3, fn, "limit"));
  const float alpha = static_cast<float>(arg_num(info, 4, fn, "alpha"));
  auto y = new_array<uint16_t>(info.Env(), (size_t)rows * I);
  uint16_t* yo = y.Data();
#pragma omp parallel for schedule(static) if ((size_t)rows * I >= kParallelMin)
  for (int r = 0; r < rows; r++) {
    const uint16_t* hr = h.data + (size_t)r * 2 * I;
    for (int i = 0; i < I; i++) yo[(size_t)r * I + i] = ld_oss_swiglu_f16(hr[2 * i], hr[2 * i + 1], limit, alpha);
  }
  return y;
}

}  // namespace

void init_gpt_oss(Napi::Env env, Napi::Object exports) {
  exports.Set("ossRouterF32", Napi::Function::New(env, oss_router));
  exports.Set("ossSwigluF16", Napi::Function::New(env, oss_swiglu));
}

}  // namespace ld
