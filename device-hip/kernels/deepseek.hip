// DeepSeek-V4's own ops (the emulation: device-hip/src/deepseek_hc.cc hcPreF16 / hcPostF16 / hcHeadF16,
// deepseek_attention.cc compressPoolF16 / indexerTopkF16 / sparseAttentionF16, deepseek_moe.cc routerF32 / swigluRowsF16),
// from the same LD_HD functions (ld_deepseek.h, ld_numerics.h) in the same reduction orders:
//   hc_pre / hc_head  one workgroup per token. The nmix + 1 dot products over the widened row x̂ [hc·D] (item 0
//                     = x̂·x̂ for ρ, item j+1 = x̂·fn_j) in the LD_LANES order: 32 groups of 8 threads, a group
//                     per item, thread l = lane l (k ≡ l mod 8, increasing k, fmaf from +0), xor-shuffle
//                     combine = ld_lanes_combine (what dot_f32 / ld_dot_f32 compute). Thread 0 then forms ρ,
//                     m_j = dot·ρ, pre/post (ld_hc_pre_weight / ld_hc_post_weight), C = scale·m + base and
//                     ld_sinkhorn_f32 exactly as the emulation's loop; the collapse u_i = ld_hc_collapse, a
//                     thread per i.
//   hc_post           thread per output element: ld_hc_expand (post·F first, then fmaf over j increasing).
//   compress_pool     thread per (block, channel): the slots built as compressPoolF16 builds them, then
//                     ld_softmax_pool (sequential over slots).
//   router            thread per token: s_e = ld_sqrt_softplusf, the top-k of f32(s + bias) in the
//                     ld_topk_before total order (k selection passes: pick j is the best element after pick
//                     j−1 — the same set partial_sort yields, since the order is total), ids ascending, the
//                     sum of the picked s sequential over ascending ids, ω = f32(routeScale·s) / sum.
//   swiglu_rows       thread per element: f16(ld_swiglu_f32(g, u, limit)·ω_row) (no weight: not multiplied).
//   indexer_topk      one workgroup per token (row t = position t0 + t; ld_index_visible): score(t, b) per
//                     8-lane group (heads sequential, dot in the ld lane order, ld_index_term); then every
//                     visible block's rank in the ld_topk_before order
//                     (picked iff rank < min(topk, visible)); thread 0 writes the picks ascending, −1 padded.
//   sparse_attention  one workgroup per (query, head), ld_attention's structure over the explicit candidate
//                     list (raw rows first, then the compressed rows of cand in list order, −1 skipped); the
//                     max starts from the sink as ld_softmax_sink_exp (a NaN sink stays the max), the
//                     denominator sequential with the sink last, P = ld_attn_prob_f32, o = Σ fmaf(P, kv).
#include "ld_kernel_common.h"

// ---- hyper-connections -------------------------------------------------------------------------------

// The nmix + 1 dot products of token t's widened row into dots[0..nmix] (dots[0] = Σx̂²). Ends synchronized.
__device__ static inline void ld_hc_dots(const LdHcArgs& a, int nmix, const uint16_t* xt, float* dots) {
  const int width = a.hc * a.D;
  const int tid = threadIdx.x, g = tid >> 3, l = tid & 7;
  for (int base = 0; base < nmix + 1; base += LD_THREADS / 8) {  // uniform trip count: shuffles stay converged
    const int it = base + g;
    float acc = 0.0f;
    if (it < nmix + 1) {
      if (it == 0) {
        for (int k = l; k < width; k += LD_LANES) {
          const float xv = ld_widen_f16(xt[k]);
          acc = fmaf(xv, xv, acc);
        }
      } else {
        const float* w = a.fn + (size_t)(it - 1) * width;
        for (int k = l; k < width; k += LD_LANES) acc = fmaf(ld_widen_f16(xt[k]), w[k], acc);
      }
    }
    const float dot = ld_lanes_combine_shfl(acc);
    if (it < nmix + 1 && l == 0) dots[it] = dot;
  }
  __syncthreads();
}

template <bool HEAD>
__device__ static inline void ld_hc_body(const LdHcArgs& a) {
  __shared__ float dots[LD_HC_NMIX_MAX + 1];
  __shared__ float pre[LD_HC_MAX];
  const int hc = a.hc, D = a.D, t = blockIdx.x;
  const int nmix = HEAD ? hc : (2 + hc) * hc;
  const uint16_t* xt = a.x + (size_t)t * hc * D;
  ld_hc_dots(a, nmix, xt, dots);
  if (threadIdx.x == 0) {
    const float rho = ld_hc_rho(dots[0], hc * D, a.norm_eps);
    float m[LD_HC_NMIX_MAX];
    for (int j = 0; j < nmix; j++) m[j] = dots[j + 1] * rho;
    for (int j = 0; j < hc; j++) {
      pre[j] = ld_hc_pre_weight(a.scale[0], m[j], a.base[j], a.hc_eps);
      if (!HEAD) a.post[(size_t)t * hc + j] = ld_hc_post_weight(a.scale[1], m[hc + j], a.base[hc + j]);
    }
    if (!HEAD) {
      float C[LD_HC_MAX * LD_HC_MAX];
      for (int q = 0; q < hc * hc; q++) C[q] = a.scale[2] * m[2 * hc + q] + a.base[2 * hc + q];
      ld_sinkhorn_f32(C, hc, a.iters, a.hc_eps);
      for (int q = 0; q < hc * hc; q++) a.comb[(size_t)t * hc * hc + q] = C[q];
    }
  }
  __syncthreads();
  float pr[LD_HC_MAX];
  for (int j = 0; j < hc; j++) pr[j] = pre[j];
  for (int i = threadIdx.x; i < D; i += LD_THREADS) a.u[(size_t)t * D + i] = ld_f32_to_f16(ld_hc_collapse(pr, xt + i, hc, (size_t)D));
}

LD_KERNEL void ld_hc_pre(LdHcArgs a) { ld_hc_body<false>(a); }
LD_KERNEL void ld_hc_head(LdHcArgs a) { ld_hc_body<true>(a); }

LD_KERNEL void ld_hc_post(LdHcPostArgs a) {
  LD_GRID_STRIDE(e, (long long)a.T * a.hc * a.D) {
    const long long tk = e / a.D;
    const int i = (int)(e % a.D), t = (int)(tk / a.hc), k = (int)(tk % a.hc);
    const uint16_t* xt = a.x + (size_t)t * a.hc * a.D + i;
    const float f = ld_widen_f16(a.f[(size_t)t * a.D + i]);
    a.y[e] = ld_f32_to_f16(ld_hc_expand(a.post[tk], f, a.comb + (size_t)t * a.hc * a.hc, k, xt, a.hc, (size_t)a.D));
  }
}

// ---- compressor pooling --------------------------------------------------------------------------------

LD_KERNEL void ld_compress_pool(LdCompressPoolArgs a) {
  const int r = a.ratio, dc = a.dc, w = (a.overlap ? 2 : 1) * dc, n = a.overlap ? 2 * r : r;
  const long long nout = (long long)(a.T / r) * dc;
  LD_GRID_STRIDE(e, nout) {
    const int b = (int)(e / dc), ch = (int)(e % dc);
    float score[LD_POOL_MAX], kv[LD_POOL_MAX];
    for (int i = 0; i < r; i++) {
      const size_t cur = (size_t)b * r + i;
      if (a.overlap) {
        score[r + i] = a.Z[cur * w + dc + ch] + a.ape[(size_t)i * w + dc + ch];
        kv[r + i] = a.K[cur * w + dc + ch];
        if (b > 0) {
          score[i] = a.Z[(cur - r) * w + ch] + a.ape[(size_t)i * w + ch];
          kv[i] = a.K[(cur - r) * w + ch];
        } else {
          score[i] = ld_bits_f32(0xFF800000u);
          kv[i] = 0.0f;
        }
      } else {
        score[i] = a.Z[cur * w + ch] + a.ape[(size_t)i * w + ch];
        kv[i] = a.K[cur * w + ch];
      }
    }
    a.y[e] = ld_f32_to_f16(ld_softmax_pool(score, kv, n));
  }
}

// ---- router --------------------------------------------------------------------------------------------

LD_KERNEL void ld_router(LdRouterArgs a) {
  const int t = blockIdx.x * LD_THREADS + threadIdx.x;
  if (t >= a.T) return;
  const int E = a.E, k = a.topk;
  float* s = a.scores + (size_t)t * E;
  for (int e = 0; e < E; e++) s[e] = ld_sqrt_softplusf(a.logits[(size_t)t * E + e]);
  int32_t* it = a.ids + (size_t)t * k;
  if (a.given != 0) {
    for (int j = 0; j < k; j++) it[j] = a.given[(size_t)t * k + j];
  } else {
    int prev = -1;
    float pv = 0.0f;
    for (int j = 0; j < k; j++) {
      int best = -1;
      float bv = 0.0f;
      for (int e = 0; e < E; e++) {
        const float v = a.bias != 0 ? s[e] + a.bias[e] : s[e];
        if (prev >= 0 && !ld_topk_before(pv, prev, v, e)) continue;  // only what ranks after pick j − 1
        if (best < 0 || ld_topk_before(v, e, bv, best)) {
          best = e;
          bv = v;
        }
      }
      it[j] = best;
      prev = best;
      pv = bv;
    }
  }
  for (int j = 1; j < k; j++) {  // ids ascending (insertion sort)
    const int32_t v = it[j];
    int p = j - 1;
    while (p >= 0 && it[p] > v) {
      it[p + 1] = it[p];
      p--;
    }
    it[p + 1] = v;
  }
  float sum = 0.0f;
  for (int j = 0; j < k; j++) sum += s[it[j]];
  for (int j = 0; j < k; j++) a.weights[(size_t)t * k + j] = (a.route_scale * s[it[j]]) / sum;
}

// ---- expert SwiGLU with the routing weight (swigluRowsF16) ----------------------------------------------

LD_KERNEL void ld_swiglu_rows(LdSwigluRowsArgs a) {
  LD_GRID_STRIDE(e, (long long)a.rows * a.cols) {
    float v = ld_swiglu_f32(ld_widen_f16(a.g[e]), ld_widen_f16(a.u[e]), a.limit);
    if (a.rw != 0) v = v * a.rw[e / a.cols];
    a.y[e] = ld_f32_to_f16(v);
  }
}

// ---- indexer --------------------------------------------------------------------------------------------

LD_KERNEL void ld_indexer_topk(LdIndexerArgs a) {
  LD_DYNAMIC_SHARED(float, ld_sh_indexer);
  uint8_t* picked = (uint8_t*)ld_sh_indexer;
  const int tid = threadIdx.x, g = tid >> 3, l = tid & 7, t = blockIdx.x;
  const int B = a.B, vis = ld_index_visible(a.t0, t, a.ratio, B);
  float* st = a.scores + (size_t)t * B;
  for (int base = 0; base < B; base += LD_THREADS / 8) {  // uniform trip counts: shuffles stay converged
    const int b = base + g;
    float total = 0.0f;
    for (int h = 0; h < a.nh; h++) {
      float acc = 0.0f;
      if (b < vis) {
        const uint16_t* qv = a.q + ((size_t)t * a.nh + h) * a.hd;
        const uint16_t* ev = a.e + (size_t)b * a.hd;
        for (int d = l; d < a.hd; d += LD_LANES) acc = fmaf(ld_widen_f16(qv[d]), ld_widen_f16(ev[d]), acc);
      }
      const float dot = ld_lanes_combine_shfl(acc);
      total = ld_index_term(total, ld_widen_f16(a.w[(size_t)t * a.nh + h]) * a.scale, dot);
    }
    if (b < B && l == 0) st[b] = b < vis ? total : ld_bits_f32(0xFF800000u);
  }
  __syncthreads();  // the block's score writes are visible to the whole workgroup
  const int k = a.topk < vis ? a.topk : vis;
  for (int b = tid; b < vis; b += LD_THREADS) {
    const float v = st[b];
    int rank = 0;
    for (int b2 = 0; b2 < vis && rank < k; b2++) rank += ld_topk_before(st[b2], b2, v, b);
    picked[b] = rank < k;
  }
  __syncthreads();
  if (tid == 0) {
    int32_t* pt = a.picks + (size_t)t * a.topk;
    int j = 0;
    for (int b = 0; b < vis; b++)
      if (picked[b]) pt[j++] = b;
    for (; j < a.topk; j++) pt[j] = -1;
  }
}

// ---- sparse attention ------------------------------------------------------------------------------------

__device__ static inline float ld_ds_block_max(float m, float* red) {
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

LD_KERNEL void ld_sparse_attention(LdSparseAttnArgs a) {
  LD_DYNAMIC_SHARED(float, ld_sh_sparse);
  const int nmax = a.window > 0 && a.window < a.T ? a.window : a.T;
  float* qf = ld_sh_sparse;
  float* sc = qf + a.D;
  float* red = sc + nmax + a.K;
  float* misc = red + LD_THREADS;
  int* cid = (int*)(misc + 4);
  const int tid = threadIdx.x, th = blockIdx.x, t = th / a.H, h = th % a.H, D = a.D;
  const int s0 = ld_attn_first_key(t, a.window), nraw = t - s0 + 1;
  const uint16_t* qv = a.q + (size_t)th * D;
  for (int d = tid; d < D; d += LD_THREADS) qf[d] = ld_widen_f16(qv[d]);
  if (tid == 0) {
    int nc = 0;
    for (int j = 0; j < a.K; j++) {
      const int b = a.cand[(size_t)t * a.K + j];
      if (b >= 0) cid[nc++] = b;
    }
    misc[1] = (float)nc;
  }
  __syncthreads();
  const int n = nraw + (int)misc[1];
#define LD_SPARSE_ROW(c) ((c) < nraw ? a.kv + (size_t)(s0 + (c)) * D : a.comp + (size_t)cid[(c) - nraw] * D)

  const int g = tid >> 3, l = tid & 7;
  for (int base = 0; base < n; base += LD_THREADS / 8) {  // uniform trip count: shuffles stay converged
    const int c = base + g;
    float acc = 0.0f;
    if (c < n) {
      const uint16_t* kr = LD_SPARSE_ROW(c);
      for (int d = l; d < D; d += LD_LANES) acc = fmaf(qf[d], ld_widen_f16(kr[d]), acc);
    }
    const float dot = ld_lanes_combine_shfl(acc);
    if (c < n && l == 0) sc[c] = dot * a.scale;
  }
  __syncthreads();

  // ld_softmax_sink_exp's max: m = sink, then z > m ? z : m over the scores — order-free for a non-NaN sink
  // (max of the non-NaN scores and the sink; a ±0 tie cannot change ld_expf(z − m)); a NaN sink stays.
  const float sink = a.sinks[h];
  float m = ld_bits_f32(0xFF800000u);
  for (int i = tid; i < n; i += LD_THREADS) m = ld_max_step(m, sc[i]);
  m = ld_ds_block_max(m, red);
  m = sink != sink ? sink : ld_max_step(m, sink);
  for (int i = tid; i < n; i += LD_THREADS) sc[i] = ld_expf(sc[i] - m);
  __syncthreads();
  if (tid == 0) {
    float lsum = 0.0f;
    for (int i = 0; i < n; i++) lsum += sc[i];
    misc[0] = lsum + ld_expf(sink - m);
  }
  __syncthreads();
  const float lsum = misc[0];
  for (int i = tid; i < n; i += LD_THREADS) sc[i] = ld_attn_prob_f32(sc[i], lsum);
  __syncthreads();

  for (int d = tid; d < D; d += LD_THREADS) {
    float acc = 0.0f;
    for (int c = 0; c < n; c++) acc = fmaf(sc[c], ld_widen_f16(LD_SPARSE_ROW(c)[d]), acc);
    a.y[(size_t)th * D + d] = ld_f32_to_f16(acc);
  }
#undef LD_SPARSE_ROW
}
