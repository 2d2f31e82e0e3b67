// Emulated MI250 kernels of DeepSeek-V4's attention (spec §4.5): the compressor's gated pooling, the indexer's
// scores and top-k, and attention over an explicit candidate set with a sink and one shared K=V head.
//
// compressPoolF16: K, Z are the compressor projections in f32 (DeepSeek computes them in fp32; the device
//   keeps the FP32 GEMM output rather than rounding gate scores to FP16), ape f32. Per block b and channel
//   ch, the slots of §4.5 step 3 (overlap: r slots of block b−1 on channels [0, dc), empty for b = 0, then r
//   slots of block b on [dc, 2dc); else r slots of block b) pool by ld_softmax_pool in f32; the entry is
//   stored f16 (the caller norms and rotates it with rmsnormF16 / ropeF16, like any f16 activation).
// indexerTopkF16: score(t, b) = Σ_h ld_index_term(·, f32(w[t,h])·scale, dot_ld(qI[t,h], e[b])) over h
//   increasing, f32; row t is the query at absolute position t0 + t, and blocks b ≥ ⌊(t0+t+1)/ratio⌋ are
//   invisible (−∞; ld_index_visible). Picks: the top min(topk, #visible) in the ld_topk_before order (ties →
//   lowest block), returned ascending and padded with −1.
// sparseAttentionF16: for query t, head h the candidates are the raw rows s = max(0, t−window+1)..t in
//   increasing s (window 0: from 0), then the compressed rows cand[t][·] in list order (−1 entries skipped).
//   Same numerics as attentionF16 with the sink (attention.cc): z = f32(dot_ld(q, k)·scale),
//   ld_softmax_sink_exp, P = f16(e/l), o = f16(Σ fmaf(P, k, acc)) — the key row is also the value row.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "deepseek.h"
#include "ld_deepseek.h"
#include "ops_emulated.generated.h"

namespace ld {
namespace {

constexpr size_t kParallelMin = 1 << 15;

// compressPoolF16(K, Z, ape, T, ratio, dc, overlap) → f16 [⌊T/ratio⌋, dc].
void compress_pool(const ops::CompressPoolF16Args& a, ops::CompressPoolF16Out& o) {
  const int T = a.T, r = a.ratio, dc = a.dc;
  const bool overlap = a.overlap;
  const int w = (overlap ? 2 : 1) * dc;
  const Span<const float> K = a.K, Z = a.Z, ape = a.ape;
  const int B = T / r;
  const int n = overlap ? 2 * r : r;
  uint16_t* yo = o.y.Data();
  const int nthreads = omp_get_max_threads();
  std::vector<float> scratch((size_t)nthreads * 2 * n);
  const float neg_inf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(static) num_threads(nthreads) if ((size_t)B * dc * n >= kParallelMin)
  for (int bc = 0; bc < B * dc; bc++) {
    const int b = bc / dc, ch = bc % dc;
    float* score = scratch.data() + (size_t)omp_get_thread_num() * 2 * n;
    float* kv = score + n;
    for (int i = 0; i < r; i++) {
      const size_t cur = (size_t)b * r + i;
      if (overlap) {
        score[r + i] = Z.data[cur * w + dc + ch] + ape.data[(size_t)i * w + dc + ch];
        kv[r + i] = K.data[cur * w + dc + ch];
        if (b > 0) {
          score[i] = Z.data[(cur - r) * w + ch] + ape.data[(size_t)i * w + ch];
          kv[i] = K.data[(cur - r) * w + ch];
        } else {
          score[i] = neg_inf;
          kv[i] = 0.0f;
        }
      } else {
        score[i] = Z.data[cur * w + ch] + ape.data[(size_t)i * w + ch];
        kv[i] = K.data[cur * w + ch];
      }
    }
    yo[bc] = ld_f32_to_f16(ld_softmax_pool(score, kv, n));
  }
}

// indexerTopkF16(q, w, e, T, nh, hd, B, ratio, t0, topk, scale) → { scores: f32 [T, B], picks: Int32 [T, topk] }.
void indexer_topk(const ops::IndexerTopkF16Args& a, ops::IndexerTopkF16Out& o) {
  const int T = a.T, nh = a.nh, hd = a.hd, B = a.B, r = a.ratio, t0 = a.t0, topk = a.topk;
  const float scale = a.scale;
  const Span<const uint16_t> q = a.q, w = a.w, e = a.e;
  float* so = o.scores.Data();
  int32_t* po = o.picks.Data();
  const int nthreads = omp_get_max_threads();
  std::vector<float> wsc((size_t)nthreads * nh);
  std::vector<int> idx((size_t)nthreads * (B > 0 ? B : 1));
  const float neg_inf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads) if ((size_t)T * B * nh * hd >= kParallelMin)
  for (int t = 0; t < T; t++) {
    float* wt = wsc.data() + (size_t)omp_get_thread_num() * nh;
    int* ix = idx.data() + (size_t)omp_get_thread_num() * (B > 0 ? B : 1);
    const int vis = ld_index_visible(t0, t, r, B);
    for (int h = 0; h < nh; h++) wt[h] = ld_f16_to_f32(w.data[(size_t)t * nh + h]) * scale;
    float* st = so + (size_t)t * B;
    for (int b = 0; b < B; b++) {
      if (b >= vis) {
        st[b] = neg_inf;
        continue;
      }
      float total = 0.0f;
      for (int h = 0; h < nh; h++) total = ld_index_term(total, wt[h], dot_f16(q.data + ((size_t)t * nh + h) * hd, e.data + (size_t)b * hd, hd));
      st[b] = total;
    }
    const int k = std::min(topk, vis);
    std::iota(ix, ix + vis, 0);
    std::partial_sort(ix, ix + k, ix + vis, [st](int a, int b) { return ld_topk_before(st[a], a, st[b], b) != 0; });
    std::sort(ix, ix + k);
    int32_t* pt = po + (size_t)t * topk;
    for (int j = 0; j < topk; j++) pt[j] = j < k ? ix[j] : -1;
  }
}

// sparseAttentionF16(q, kv, comp, T, H, D, B, window, cand, K, sinks, scale) → f16 [T, H, D].
// cand's entries are −1 or a row of comp (the reader's range check).
void sparse_attention(const ops::SparseAttentionF16Args& a, ops::SparseAttentionF16Out& o) {
  const int T = a.T, H = a.H, D = a.D, window = a.window, K = a.K;
  const float scale = a.scale;
  const Span<const uint16_t> q = a.q, kv = a.kv, comp = a.comp;
  const Span<const int32_t> cand = a.cand;
  const Span<const float> sinks = a.sinks;
  uint16_t* yo = o.y.Data();
  const int nthreads = omp_get_max_threads();
  // Per thread: row pointers and scores of the candidates [T + K], the output accumulator [D].
  const size_t per = (size_t)T + K;
  std::vector<const uint16_t*> rows((size_t)nthreads * per);
  std::vector<float> scratch((size_t)nthreads * (per + D));
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads) if ((long long)T * (T + K) * H * D >= (1 << 18))
  for (int th = 0; th < T * H; th++) {
    const int t = th / H, h = th % H;
    const uint16_t** rw = rows.data() + (size_t)omp_get_thread_num() * per;
    float* z = scratch.data() + (size_t)omp_get_thread_num() * (per + D);
    float* acc = z + per;
    const int s0 = window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;
    int n = 0;
    for (int s = s0; s <= t; s++) rw[n++] = kv.data + (size_t)s * D;
    for (int j = 0; j < K; j++) {
      const int b = cand.data[(size_t)t * K + j];
      if (b >= 0) rw[n++] = comp.data + (size_t)b * D;
    }
    const uint16_t* qv = q.data + (size_t)th * D;
    for (int c = 0; c < n; c++) z[c] = dot_f16(qv, rw[c], D) * scale;
    const float l = ld_softmax_sink_exp(z, n, sinks.data[h]);
    for (int d = 0; d < D; d++) acc[d] = 0.0f;
    for (int c = 0; c < n; c++) axpy_f16(ld_f16_to_f32(ld_f32_to_f16(z[c] / l)), rw[c], acc, D);
    for (int d = 0; d < D; d++) yo[(size_t)th * D + d] = ld_f32_to_f16(acc[d]);
  }
}

}  // namespace

void emu::compressPoolF16(const ops::CompressPoolF16Args& a, ops::CompressPoolF16Out& o) { compress_pool(a, o); }
void emu::indexerTopkF16(const ops::IndexerTopkF16Args& a, ops::IndexerTopkF16Out& o) { indexer_topk(a, o); }
void emu::sparseAttentionF16(const ops::SparseAttentionF16Args& a, ops::SparseAttentionF16Out& o) { sparse_attention(a, o); }

}  // namespace ld
