// Attention with sink and sliding window, its decode form over a KV cache, and the row softmax it uses (the
// emulation: device-hip/src/attention.cc attentionF16, src/decode.cc attentionDecodeF16; ld_softmax_sink_exp of
// ld_deepseek.h for the standalone softmax with a sink).
// One 256-thread workgroup per (query t, head h) — per (group b, query t, head h) for decode — in the emulation's order:
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

// One attention row, ld_attention's and ld_attention_decode's body: query qv [D] over n keys in increasing
// position, key i's K row at kb + ((first + i) mod ring)·kstride and V row likewise from vb (ring ≥ first + n:
// a plain walk; a KV-cache ring otherwise, ld_ring_slot); sink logit *sink (NULL: none); y [Dv].
// lds: q widened [D], scores [nmax ≥ n], the max tree [LD_THREADS], misc [4]. Every thread of the block calls
// it with the same n (the 8-lane shuffles need converged groups).
__device__ static inline void ld_attention_keys(const uint16_t* qv, const uint16_t* kb, const uint16_t* vb, size_t kstride,
                                                size_t vstride, int first, int ring, int n, int D, int Dv, float scale, const float* sink,
                                                uint16_t* y, float* lds, int nmax) {
  float* qf = lds;
  float* sc = qf + D;
  float* red = sc + nmax;
  float* misc = red + LD_THREADS;
  const int tid = threadIdx.x;
  for (int d = tid; d < D; d += LD_THREADS) qf[d] = ld_widen_f16(qv[d]);
  __syncthreads();

  const int g = tid >> 3, l = tid & 7;
  for (int base = 0; base < n; base += LD_THREADS / 8) {  // uniform trip count: shuffles stay converged
    const int si = base + g;
    float acc = 0.0f;
    if (si < n) {
      const uint16_t* kr = kb + ld_ring_slot(first + si, ring) * kstride;
      for (int d = l; d < D; d += LD_LANES) acc = fmaf(qf[d], ld_widen_f16(kr[d]), acc);
    }
    const float dot = ld_lanes_combine_shfl(acc);
    if (si < n && l == 0) sc[si] = dot * scale;
  }
  __syncthreads();

  float m = ld_bits_f32(0xFF800000u);
  for (int i = tid; i < n; i += LD_THREADS) m = ld_max_step(m, sc[i]);
  m = ld_block_max(m, red);
  if (sink != 0) m = ld_max_step(m, *sink);
  for (int i = tid; i < n; i += LD_THREADS) sc[i] = ld_expf(sc[i] - m);
  __syncthreads();
  if (tid == 0) {
    float lsum = 0.0f;
    for (int i = 0; i < n; i++) lsum += sc[i];
    if (sink != 0) lsum += ld_expf(*sink - m);
    misc[0] = lsum;
  }
  __syncthreads();
  const float lsum = misc[0];
  for (int i = tid; i < n; i += LD_THREADS) sc[i] = ld_attn_prob_f32(sc[i], lsum);
  __syncthreads();

  for (int d = tid; d < Dv; d += LD_THREADS) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc = fmaf(sc[i], ld_widen_f16(vb[ld_ring_slot(first + i, ring) * vstride + d]), acc);
    y[d] = ld_f32_to_f16(acc);
  }
}

LD_KERNEL void ld_attention(LdAttentionArgs a) {
  LD_DYNAMIC_SHARED(float, ld_sh_attn);
  const int nmax = a.window > 0 && a.window < a.T ? a.window : a.T;
  const int th = blockIdx.x, t = th / a.Hq, h = th % a.Hq, hk = h / (a.Hq / a.Hkv);
  const int s0 = ld_attn_first_key(t, a.window);
  ld_attention_keys(a.q + (size_t)th * a.D, a.k + (size_t)hk * a.D, a.v + (size_t)hk * a.Dv, (size_t)a.Hkv * a.D, (size_t)a.Hkv * a.Dv, s0,
                    a.T, t - s0 + 1, a.D, a.Dv, a.scale, a.sinks != 0 ? a.sinks + h : 0,
                    a.y + (size_t)th * a.Dv, ld_sh_attn, nmax);
}

// Decode over a KV cache (= attentionDecodeF16, src/decode.cc): row r = (b, t, h) is ld_attention's row for the
// query at position pos = start[b] + t over cache sequence slot[b]'s keys ld_attn_first_key(pos, window) .. pos,
// found by ld_kv_cache_row — the same keys in the same order as decode.cc, hence the same bits.
LD_KERNEL void ld_attention_decode(LdAttentionDecodeArgs a) {
  LD_DYNAMIC_SHARED(float, ld_sh_decode);
  const int r = blockIdx.x, b = r / (a.Tq * a.Hq), t = (r / a.Hq) % a.Tq, h = r % a.Hq, hk = h / (a.Hq / a.Hkv);
  const int pos = a.start[b] + t, seq = a.slot[b], s0 = ld_attn_first_key(pos, a.window);
  const size_t row0 = ld_kv_cache_row(seq, a.cap, 0, a.Hkv, hk);
  ld_attention_keys(a.q + (size_t)r * a.D, a.k + row0 * a.D, a.v + row0 * a.Dv, (size_t)a.Hkv * a.D, (size_t)a.Hkv * a.Dv, s0, a.cap, pos - s0 + 1,
                    a.D, a.Dv, a.scale, a.sinks != 0 ? a.sinks + h : 0, a.y + (size_t)r * a.Dv, ld_sh_decode, ld_decode_max_keys(&a));
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
