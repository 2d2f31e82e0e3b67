// Emulated MI250 attention for incremental decoding over a KV cache: queries start at a position offset
// and attend to a longer cached K/V.
//   q [B, Tq, Hq, D] f16: Tq new queries for each of B sequences;
//   k [Bc, cap, Hkv, D], v [Bc, cap, Hkv, Dv] f16: the cache, Bc sequences of cap slots, slot s = position s;
//   slot [B] int32: the cache sequence each query group reads; start [B] int32: the position of its query 0;
//   out [B, Tq, Hq, Dv] f16. Query t of group b sits at position p = start[b] + t and sees the positions s of
//   cache sequence slot[b] with max(0, p−window+1) ≤ s ≤ p (window 0: 0 ≤ s ≤ p), held in slot s mod cap:
//   p < cap, or, with a window, a ring of window + Tq − 1 ≤ cap slots (ld_ring_slot).
// Numerics: exactly attention.cc's (same dot/axpy kernels, same order: scores in increasing s, max with
// NaNs not winning, p_s = ld_expf(z_s − m), l a sequential f32 sum with the sink last, P_s rounded to f16,
// o = f16(Σ_s fmaf(P_s, v_s, acc)) from +0 in increasing s). Keys at the same positions therefore give
// the same bits as a full causal recompute: prefill + decode equals recompute, bit for bit, as long as the
// cached K/V rows are the recompute's rows (row-wise ops and the row-independent GEMM make them so).
// The element math is ld_numerics.h's (ld_attn_first_key, ld_max_step, ld_attn_prob_f32, ld_kv_cache_row): the
// HIP kernel ld_attention_decode (kernels/attention.hip) and its host reference (ldref::attention_decode) call
// the same functions, and the tests hold this file equal to attention.cc and to that host reference.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "addon.h"
#include "ops_emulated.generated.h"
#include "ld_numerics.h"

namespace ld {
namespace {

// The slot and start checks (inside the cache; a ring only when window + Tq − 1 ≤ cap) are the reader's.
void attention_decode(const ops::AttentionDecodeF16Args& a, ops::AttentionDecodeF16Out& o) {
  const int B = a.B, Tq = a.Tq, cap = a.cap, Hq = a.Hq, Hkv = a.Hkv, D = a.D, Dv = a.Dv, window = a.window;
  const float scale = a.scale;
  const Span<const uint16_t> q = a.q, k = a.k, v = a.v;
  const Span<const int32_t> slot = a.slot, start = a.start;
  const float* sinks = a.sinks.data;
  uint16_t* yo = o.y.Data();
  const int group = Hq / Hkv;
  const int rows = B * Tq * Hq;
  const int nthreads = omp_get_max_threads();
  // Per thread: scores/probabilities [cap] and the output accumulator [Dv].
  std::vector<float> scratch((size_t)nthreads * ((size_t)cap + Dv));
  long long work = 0;
  for (int b = 0; b < B; b++) work += (long long)std::min(start.data[b] + Tq, window > 0 ? window : cap) * Tq * Hq * D;

#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads) if (work >= (1 << 18))
  for (int r = 0; r < rows; r++) {
    const int b = r / (Tq * Hq), t = (r / Hq) % Tq, h = r % Hq, hk = h / group;
    const int pos = start.data[b] + t;
    const int seq = slot.data[b];
    float* p = scratch.data() + (size_t)omp_get_thread_num() * ((size_t)cap + Dv);
    float* acc = p + cap;
    const int s0 = ld_attn_first_key(pos, window);
    const uint16_t* qv = q.data + (size_t)r * D;
    float m = -std::numeric_limits<float>::infinity();
    for (int s = s0; s <= pos; s++) {
      const float z = dot_f16(qv, k.data + ld_kv_cache_row(seq, cap, s, Hkv, hk) * D, D) * scale;
      p[s - s0] = z;
      m = ld_max_step(m, z);
    }
    if (sinks != nullptr) m = ld_max_step(m, sinks[h]);
    float l = 0.0f;
    for (int s = s0; s <= pos; s++) {
      p[s - s0] = ld_expf(p[s - s0] - m);
      l += p[s - s0];
    }
    if (sinks != nullptr) l += ld_expf(sinks[h] - m);
    for (int d = 0; d < Dv; d++) acc[d] = 0.0f;
    for (int s = s0; s <= pos; s++) {
      const float P = ld_attn_prob_f32(p[s - s0], l);
      axpy_f16(P, v.data + ld_kv_cache_row(seq, cap, s, Hkv, hk) * Dv, acc, Dv);
    }
    for (int d = 0; d < Dv; d++) yo[(size_t)r * Dv + d] = ld_f32_to_f16(acc[d]);
  }
}

}  // namespace

void emu::attentionDecodeF16(const ops::AttentionDecodeF16Args& a, ops::AttentionDecodeF16Out& o) { attention_decode(a, o); }

}  // namespace ld
