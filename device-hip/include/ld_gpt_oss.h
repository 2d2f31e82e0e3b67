/*
 * gpt-oss's own element numerics (spec/gpt-oss.md §3), shared like ld_numerics.h by the emulation
 * (src/gpt_oss.cc) and the HIP kernels (kernels/gpt_oss.hip):
 *   - the SwiGLU of gpt-oss's experts: gate = h[2i], up = h[2i+1] (rows interleaved), gate ≤ limit (no lower
 *     clamp), −limit ≤ up ≤ limit, act = gate·σ(α·gate)·(up + 1), written (g / (1 + ld_expf(−α·g)))·(u + 1) in
 *     f32 (each operation rounded, no fma), one rounding to f16. Clamps are comparisons, so a NaN passes.
 *   - the router's weights: a softmax over the k chosen logits only, m = max over them (ld_max_step, in the
 *     ascending-id order of the chosen experts), p_j = ld_expf(z_j − m), l = sequential f32 sum in that order,
 *     w_j = p_j / l.
 */
#ifndef LD_GPT_OSS_H
#define LD_GPT_OSS_H

#include "ld_deepseek.h" /* ld_topk_before: the top-k order every router and indexer shares */
#include "ld_numerics.h"

LD_INLINE float ld_oss_swiglu_f32(float g, float u, float limit, float alpha) {
  if (g > limit) g = limit;
  if (u > limit) u = limit;
  if (u < -limit) u = -limit;
  const float ag = alpha * g;
  return (g / (1.0f + ld_expf(-ag))) * (u + 1.0f);
}

LD_INLINE uint16_t ld_oss_swiglu_f16(uint16_t g, uint16_t u, float limit, float alpha) {
  return ld_f32_to_f16(ld_oss_swiglu_f32(ld_f16_to_f32(g), ld_f16_to_f32(u), limit, alpha));
}

/* The biased router logit of expert e: z_e = f32(logit_e + bias_e) (bias NULL: the logit). */
LD_INLINE float ld_oss_router_z(const float* logits, const float* bias, int e) { return bias != 0 ? logits[e] + bias[e] : logits[e]; }

/* The routing weights of one token: logits [E] and bias [E] (or NULL) of the token, ids the k chosen experts
 * ascending; w[j] = softmax over z[ids[0..k)] (see the file comment for the order). */
LD_INLINE void ld_oss_router_weights(const float* logits, const float* bias, const int32_t* ids, int k, float* w) {
  float m = -INFINITY;
  for (int j = 0; j < k; j++) m = ld_max_step(m, ld_oss_router_z(logits, bias, ids[j]));
  float l = 0.0f;
  for (int j = 0; j < k; j++) {
    w[j] = ld_expf(ld_oss_router_z(logits, bias, ids[j]) - m);
    l += w[j];
  }
  for (int j = 0; j < k; j++) w[j] = w[j] / l;
}

#endif /* LD_GPT_OSS_H */
