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
#include "ld_numerics.h"

namespace ld {
namespace {

// An Int32Array argument of exactly `want` elements (addon.h reads only u8/u16/f32 arrays).
Span<const int32_t> arg_i32(const Napi::CallbackInfo& info, size_t i, const char* fn, const char* name, size_t want) {
  const Napi::Value v = info[i];
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    throw_type(info.Env(), std::string(fn) + ": " + name + " must be an Int32Array");
  }
  Napi::TypedArrayOf<int32_t> a = v.As<Napi::TypedArrayOf<int32_t>>();
  if (a.ElementLength() != want) {
    throw_range(info.Env(), std::string(fn) + ": " + name + " has " + std::to_string(a.ElementLength()) +
                                " elements, expected B = " + std::to_string(want));
  }
  return {a.Data(), a.ElementLength()};
}

Napi::Value attention_decode(const Napi::CallbackInfo& info) {
  const char* fn = "attentionDecodeF16";
  need_args(info, 16, fn);
  const int B = arg_int(info, 3, fn, "B", 1), Tq = arg_int(info, 4, fn, "Tq", 1);
  const int Bc = arg_int(info, 5, fn, "Bc", 1), cap = arg_int(info, 6, fn, "cap", 1);
  const int Hq = arg_int(info, 9, fn, "Hq", 1), Hkv = arg_int(info, 10, fn, "Hkv", 1);
  const int D = arg_int(info, 11, fn, "D", 1), Dv = arg_int(info, 12, fn, "Dv", 1);
  const float scale = static_cast<float>(arg_num(info, 13, fn, "scale"));
  const int window = arg_int(info, 14, fn, "window", 0);
  if (Hq % Hkv != 0) {
    throw_range(info.Env(), std::string(fn) + ": Hq " + std::to_string(Hq) + " is not a multiple of Hkv " + std::to_string(Hkv));
  }
  auto q = arg_array_len<uint16_t>(info, 0, fn, "q", (size_t)B * Tq * Hq * D, "B×Tq×Hq×D " + dims({B, Tq, Hq, D}));
  auto k = arg_array_len<uint16_t>(info, 1, fn, "k", (size_t)Bc * cap * Hkv * D, "Bc×cap×Hkv×D " + dims({Bc, cap, Hkv, D}));
  auto v = arg_array_len<uint16_t>(info, 2, fn, "v", (size_t)Bc * cap * Hkv * Dv, "Bc×cap×Hkv×Dv " + dims({Bc, cap, Hkv, Dv}));
  auto slot = arg_i32(info, 7, fn, "slot", (size_t)B);
  auto start = arg_i32(info, 8, fn, "start", (size_t)B);
  const float* sinks = nullptr;
  if (!info[15].IsNull() && !info[15].IsUndefined()) sinks = arg_array_len<float>(info, 15, fn, "sinks", (size_t)Hq, "Hq " + dims({Hq})).data;
  // Every check before the parallel region: an exception must not escape OpenMP.
  for (int b = 0; b < B; b++) {
    if (slot.data[b] < 0 || slot.data[b] >= Bc) {
      throw_range(info.Env(), std::string(fn) + ": slot[" + std::to_string(b) + "] = " + std::to_string(slot.data[b]) +
                                  " is outside the cache's " + std::to_string(Bc) + " sequences");
    }
    // positions past cap wrap (a ring) only when every key a query sees is still held: window + Tq − 1 ≤ cap
    if (start.data[b] < 0 || ((long long)start.data[b] + Tq > cap && !(window > 0 && (long long)window + Tq - 1 <= cap))) {
      throw_range(info.Env(), std::string(fn) + ": start[" + std::to_string(b) + "] = " + std::to_string(start.data[b]) +
                                  " + Tq " + std::to_string(Tq) + " does not fit the cache capacity " + std::to_string(cap) +
                                  " (a ring needs window + Tq − 1 ≤ cap)");
    }
  }

  auto y = new_array<uint16_t>(info.Env(), (size_t)B * Tq * Hq * Dv);
  uint16_t* yo = y.Data();
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
  return y;
}

}  // namespace

void init_decode(Napi::Env env, Napi::Object exports) {
  exports.Set("attentionDecodeF16", Napi::Function::New(env, attention_decode));
}

}  // namespace ld
