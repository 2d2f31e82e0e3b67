// Emulated MI250 attention: causal, optional sliding window, GQA, optional per-head sink logit.
//   q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, Dv] f16; out [T, Hq, Dv] f16; head h reads kv head h/(Hq/Hkv).
// Numerics, per query t and head h, over the visible keys s (t−window < s ≤ t, or 0 ≤ s ≤ t), in
// increasing s — the order a one-query-per-thread GPU kernel uses:
//   z_s = f32(dot_ld(q, k_s) · scale)            (dot in the LD_LANES order, scale rounded to f32)
//   m   = max(z_s, sink)                          (NaN scores do not win the max; they propagate below)
//   p_s = ld_expf(z_s − m)
//   l   = ((p_first + …) + p_t) + ld_expf(sink − m)   (sequential f32 adds, sink last)
//   P_s = f16(p_s / l)                            (probabilities are stored as f16, as the P·V product reads them)
//   o   = f16(Σ_s fmaf(f32(P_s), f32(v_s), acc))  (acc from +0, sequential in s, per output dim)
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "addon.h"
#include "ld_numerics.h"

namespace ld {
namespace {

Napi::Value attention(const Napi::CallbackInfo& info) {
  const char* fn = "attentionF16";
  need_args(info, 11, fn);
  const int T = arg_int(info, 3, fn, "T", 1), Hq = arg_int(info, 4, fn, "Hq", 1), Hkv = arg_int(info, 5, fn, "Hkv", 1);
  const int D = arg_int(info, 6, fn, "D", 1), Dv = arg_int(info, 7, fn, "Dv", 1);
  const float scale = static_cast<float>(arg_num(info, 8, fn, "scale"));
  const int window = arg_int(info, 9, fn, "window", 0);
  if (Hq % Hkv != 0) {
    throw_range(info.Env(), std::string(fn) + ": Hq " + std::to_string(Hq) + " is not a multiple of Hkv " + std::to_string(Hkv));
  }
  auto q = arg_array_len<uint16_t>(info, 0, fn, "q", (size_t)T * Hq * D, "T×Hq×D " + dims({T, Hq, D}));
  auto k = arg_array_len<uint16_t>(info, 1, fn, "k", (size_t)T * Hkv * D, "T×Hkv×D " + dims({T, Hkv, D}));
  auto v = arg_array_len<uint16_t>(info, 2, fn, "v", (size_t)T * Hkv * Dv, "T×Hkv×Dv " + dims({T, Hkv, Dv}));
  const float* sinks = nullptr;
  if (!info[10].IsNull() && !info[10].IsUndefined()) sinks = arg_array_len<float>(info, 10, fn, "sinks", (size_t)Hq, "Hq " + dims({Hq})).data;

  auto y = new_array<uint16_t>(info.Env(), (size_t)T * Hq * Dv);
  uint16_t* yo = y.Data();
  const int group = Hq / Hkv;
  const int nthreads = omp_get_max_threads();
  // Per thread: scores/probabilities [T] and the output accumulator [Dv].
  std::vector<float> scratch((size_t)nthreads * ((size_t)T + Dv));

#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads) if ((long long)T * T * Hq * D >= (1 << 18))
  for (int th = 0; th < T * Hq; th++) {
    const int t = th / Hq, h = th % Hq, hk = h / group;
    float* p = scratch.data() + (size_t)omp_get_thread_num() * ((size_t)T + Dv);
    float* acc = p + T;
    const int s0 = ld_attn_first_key(t, window);
    const uint16_t* qv = q.data + (size_t)th * D;
    float m = -std::numeric_limits<float>::infinity();
    for (int s = s0; s <= t; s++) {
      const float z = dot_f16(qv, k.data + ((size_t)s * Hkv + hk) * D, D) * scale;
      p[s] = z;
      m = ld_max_step(m, z);
    }
    if (sinks != nullptr) m = ld_max_step(m, sinks[h]);
    float l = 0.0f;
    for (int s = s0; s <= t; s++) {
      p[s] = ld_expf(p[s] - m);
      l += p[s];
    }
    if (sinks != nullptr) l += ld_expf(sinks[h] - m);
    for (int d = 0; d < Dv; d++) acc[d] = 0.0f;
    for (int s = s0; s <= t; s++) {
      const float P = ld_attn_prob_f32(p[s], l);
      axpy_f16(P, v.data + ((size_t)s * Hkv + hk) * Dv, acc, Dv);
    }
    for (int d = 0; d < Dv; d++) yo[(size_t)th * Dv + d] = ld_f32_to_f16(acc[d]);
  }
  return y;
}

}  // namespace

void init_attention(Napi::Env env, Napi::Object exports) {
  exports.Set("attentionF16", Napi::Function::New(env, attention));
}

}  // namespace ld
