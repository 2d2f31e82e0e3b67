// Attention with sink and sliding window, and the row softmax it uses (the emulation: device-hip/src/
// attention.cc, attentionF16; ld_softmax_sink_exp of ld_deepseek.h for the standalone softmax with a sink).
// One 256-thread workgroup per (query t, head h), in the emulation's order:
//   scores   z_s = f32(dot_ld(q, k_s) · scale), s = ld_attn_first_key(t, window) .. t: 32 groups of 8 threads,
//            each group one key, its 8 threads the 8 lanes of the ld dot (xor-shuffle combine)
//   max      m = max(z, sink) by ld_max_step: order-free (max is exact; NaN never wins; the sign of a zero
//            max cannot change ld_expf(z − m) since ld_expf(±0) = 1), so a tree equals the CPU's loop
//   exp      p_s = ld_expf(z_s − m), in parallel
//   sum      l = ((p_first + …) + p_t) + ld_expf(sink − m): ONE thread, sequential in s (the fixed order)
//   probs    P_s = ld_attn_prob_f32(p_s, l) (f16-rounded), in parallel
//   output   o[d] = f16(Σ_s fmaf(P_s, v_s[d], acc)), thread per d, sequential in s from +0
// No transcendental but ld_expf (Cephes, explicit fmaf: same bits on every target), / is correctly rounded:
// bit-identical to the emulation. LDS: q [D] + scores [min(T, window)] + a 256-float max tree.
#include "ld_kernel_common.h"

__device__ static inline float ld_block_max(float m, float* red) {
  const int tid = threadIdx.x;
  red[tid] = m;
  __syncthreads();
  for (int s = LD_THREADS / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] = ld_max_step(red[tid], red[tid + s]);
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}

LD_KERNEL void ld_attention(LdAttentionArgs a) {
  LD_DYNAMIC_SHARED(float, ld_sh_attn);
  const int nmax = a.window > 0 && a.window < a.T ? a.window : a.T;
  float* qf = ld_sh_attn;
  float* sc = qf + a.D;
  float* red = sc + nmax;
  float* misc = red + LD_THREADS;
  const int tid = threadIdx.x, th = blockIdx.x, t = th / a.Hq, h = th % a.Hq, hk = h / (a.Hq / a.Hkv);
  const int s0 = ld_attn_first_key(t, a.window), n = t - s0 + 1;
  const uint16_t* qv = a.q + (size_t)th * a.D;
  for (int d = tid; d < a.D; d += LD_THREADS) qf[d] = ld_widen_f16(qv[d]);
  __syncthreads();

  const int g = tid >> 3, l = tid & 7;
  for (int base = 0; base < n; base += LD_THREADS / 8) {  // uniform trip count: shuffles stay converged
    const int si = base + g;
    float acc = 0.0f;
    if (si < n) {
      const uint16_t* kr = a.k + ((size_t)(s0 + si) * a.Hkv + hk) * a.D;
      for (int d = l; d < a.D; d += LD_LANES) acc = fmaf(qf[d], ld_widen_f16(kr[d]), acc);
    }
    const float dot = ld_lanes_combine_shfl(acc);
    if (si < n && l == 0) sc[si] = dot * a.scale;
  }
  __syncthreads();

  float m = ld_bits_f32(0xFF800000u);
  for (int i = tid; i < n; i += LD_THREADS) m = ld_max_step(m, sc[i]);
  m = ld_block_max(m, red);
  if (a.sinks != 0) m = ld_max_step(m, a.sinks[h]);
  for (int i = tid; i < n; i += LD_THREADS) sc[i] = ld_expf(sc[i] - m);
  __syncthreads();
  if (tid == 0) {
    float lsum = 0.0f;
    for (int i = 0; i < n; i++) lsum += sc[i];
    if (a.sinks != 0) lsum += ld_expf(a.sinks[h] - m);
    misc[0] = lsum;
  }
  __syncthreads();
  const float lsum = misc[0];
  for (int i = tid; i < n; i += LD_THREADS) sc[i] = ld_attn_prob_f32(sc[i], lsum);
  __syncthreads();

  const uint16_t* vb = a.v + (size_t)s0 * a.Hkv * a.Dv + (size_t)hk * a.Dv;
  const size_t vstride = (size_t)a.Hkv * a.Dv;
  for (int d = tid; d < a.Dv; d += LD_THREADS) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc = fmaf(sc[i], ld_widen_f16(vb[(size_t)i * vstride + d]), acc);
    a.y[(size_t)th * a.Dv + d] = ld_f32_to_f16(acc);
  }
}

// Row softmax: P_i = f16(e_i / l) with e_i = ld_expf(z_i − m), m = max(z, sink), l = sequential sum of e in
// increasing i then ld_expf(sink − m) (with a sink, exactly ld_softmax_sink_exp's numbers).
LD_KERNEL void ld_softmax(LdSoftmaxArgs a) {
  LD_DYNAMIC_SHARED(float, ld_sh_softmax);
  float* sc = ld_sh_softmax;
  float* red = sc + a.n;
  float* misc = red + LD_THREADS;
  const int tid = threadIdx.x, row = blockIdx.x, n = a.n;
  const float* z = a.z + (size_t)row * n;
  float m = ld_bits_f32(0xFF800000u);
  for (int i = tid; i < n; i += LD_THREADS) {
    sc[i] = z[i];
    m = ld_max_step(m, sc[i]);
  }
  m = ld_block_max(m, red);  // its barriers also publish sc
  if (a.sinks != 0) m = ld_max_step(m, a.sinks[row]);
  for (int i = tid; i < n; i += LD_THREADS) sc[i] = ld_expf(sc[i] - m);
  __syncthreads();
  if (tid == 0) {
    float lsum = 0.0f;
    for (int i = 0; i < n; i++) lsum += sc[i];
    if (a.sinks != 0) lsum += ld_expf(a.sinks[row] - m);
    misc[0] = lsum;
  }
  __syncthreads();
  const float lsum = misc[0];
  for (int i = tid; i < n; i += LD_THREADS) a.y[(size_t)row * n + i] = ld_f32_to_f16(sc[i] / lsum);
}
