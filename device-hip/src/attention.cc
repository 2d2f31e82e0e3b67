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
#include "ops_emulated.generated.h"
#include "ld_numerics.h"

namespace ld {
namespace {

void attention(const ops::AttentionF16Args& a, ops::AttentionF16Out& o) {
  const int T = a.T, Hq = a.Hq, Hkv = a.Hkv, D = a.D, Dv = a.Dv, window = a.window;
  const float scale = a.scale;
  const Span<const uint16_t> q = a.q, k = a.k, v = a.v;
  const float* sinks = a.sinks.data;
  uint16_t* yo = o.y.Data();
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
}

}  // namespace

void emu::attentionF16(const ops::AttentionF16Args& a, ops::AttentionF16Out& o) { attention(a, o); }

}  // namespace ld
