/*
 * ld_kernel_args.h — the ABI between the HIP kernels (device-hip/kernels, one `extern "C"` entry point per op
 * and variant, each taking ONE argument struct by value) and whoever launches them: the `hip` backend's
 * module loader (device-hip/hip, hipModuleGetFunction + hipModuleLaunchKernel with kernelParams = {&args})
 * and the device check (device-hip/check/device_check.hip, triple-chevron launches through hip_to_cuda.h).
 *
 * Plain C, no HIP/CUDA headers: it compiles in the N-API addon (g++), in hipcc and in nvcc. The launch plan
 * of every op (which kernel, grid, block, dynamic shared memory) lives here too, so the backend and the
 * device check launch the same kernels the same way.
 */
#ifndef LD_KERNEL_ARGS_H
#define LD_KERNEL_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "ld_numerics.h" /* LD_INLINE: the few plan helpers the kernels also call (LDS layouts) */

#define LD_THREADS 256 /* every kernel's block size (a multiple of 64: whole wavefronts on CDNA2, warps on CUDA) */

/* GEMM tiling (gemm.hip) */
#define LD_GT_BM 64  /* x rows per block */
#define LD_GT_BN 64  /* W rows (outputs) per block */
#define LD_GT_BK 32  /* k slice staged in shared memory; a multiple of LD_LANES so lane = k & 7 stays static */
#define LD_GS_OUT 32 /* skinny GEMM: outputs per block (8 lane-threads each) */
#define LD_GS_MAXM 8 /* skinny GEMM serves m <= 8 (decode); larger m uses the tiled kernel */

#define LD_HC_MAX 8  /* Sinkhorn: hc <= 8 (DeepSeek-V4 uses 4) */
#define LD_ATTN_MAX_SHMEM 65536 /* LDS per workgroup on gfx90a; attention/softmax rows must fit */

typedef enum ld_wfmt { LD_W_F16 = 0, LD_W_MXFP4 = 1 } ld_wfmt;

/* dequant: kind 0 mxfp4 (w packed [out, in/2], scale E8M0 [out, in/32]), 1 fp8-block (w E4M3 [out, in],
 * scale [ceil(out/bo), ceil(in/bi)] E8M0 bytes or LE f32), 2 bf16, 3 f16, 4 f32 (w little-endian bytes). */
typedef struct LdDequantArgs {
  const uint8_t* w;
  const uint8_t* scale;
  uint16_t* y;
  int kind, scale_is_f32, out, in, block_out, block_in, fault;
} LdDequantArgs;

/* NVFP4 (ModelOpt, compressed-tensors): packed [out, in/2] low-even, E4M3 scales [out, in/16], one f32 global
 * scale, a multiplier or (divisor) a divisor; in % 16 == 0. */
typedef struct LdDequantNvfp4Args {
  const uint8_t* w;
  const uint8_t* scale;
  uint16_t* y;
  int out, in, divisor, fault;
  float global;
} LdDequantNvfp4Args;

/* bitsandbytes 4-bit: n codes over the flattened tensor (high-even), absmax per `blocksize` as F32 bytes or,
 * absmax_is_codes, U8 codes decoded by nested_map [256] · nested_absmax[⌊b/nested_blocksize⌋] + nested_offset. */
typedef struct LdDequantBnb4Args {
  const uint8_t* w;
  const uint8_t* absmax;
  const float* quant_map;
  const float* nested_absmax;
  const float* nested_map;
  uint16_t* y;
  long long n;
  int blocksize, absmax_is_codes, nested_blocksize, fault;
  float nested_offset;
} LdDequantBnb4Args;

/* y[i, j] = f16(alpha·dot(x[i, :], W[j, :])) (y16) or the f32 dot (y32; the other pointer NULL).
 * W is f16 [n, k] (w) or, fused, MXFP4 packed [n, k/2] + E8M0 [n, k/32] (wq, wscale; k % 32 == 0). */
typedef struct LdGemmArgs {
  const uint16_t* x;
  const uint16_t* w;
  const uint8_t* wq;
  const uint8_t* wscale;
  uint16_t* y16;
  float* y32;
  int m, k, n, wfmt, fault;
  float alpha;
} LdGemmArgs;

typedef struct LdRmsnormArgs {
  const uint16_t* x;
  const uint16_t* w;
  uint16_t* y;
  int rows, dim;
  float eps;
} LdRmsnormArgs;

typedef struct LdRopeArgs {
  const uint16_t* x;
  const float* cos;
  const float* sin;
  uint16_t* y;
  int tokens, heads, head_dim, rot_offset, rot_dim, interleaved;
} LdRopeArgs;

typedef struct LdAttentionArgs {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  const float* sinks; /* [Hq] or NULL */
  uint16_t* y;
  int T, Hq, Hkv, D, Dv, window;
  float scale;
} LdAttentionArgs;

/* attentionDecodeF16 (src/decode.cc): attention of B groups of Tq new queries over a KV cache of cap slots per
 * sequence (slot s mod cap holds position s: a ring when window + Tq − 1 ≤ cap). q f16 [B, Tq, Hq, D], k f16 [Bc, cap, Hkv, D], v f16 [Bc, cap, Hkv, Dv],
 * slot int32 [B] (the cache sequence group b reads), start int32 [B] (the position of its query 0), sinks f32
 * [Hq] or NULL → y f16 [B, Tq, Hq, Dv]. max_len = max_b (start[b] + Tq): the longest row the launch sees, set by
 * the launcher from the host copies of start (it sizes LDS; the kernel trusts it). */
typedef struct LdAttentionDecodeArgs {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  const int32_t* slot;
  const int32_t* start;
  const float* sinks;
  uint16_t* y;
  int B, Tq, cap, Hq, Hkv, D, Dv, window, max_len;
  float scale;
} LdAttentionDecodeArgs;

/* Row softmax as the attention kernels do it: P = f16(e_i / l), e_i = ld_expf(z_i − m), m = max(z, sink),
 * l = sequential sum + ld_expf(sink − m) last. z f32 [rows, n], sinks f32 [rows] or NULL. */
typedef struct LdSoftmaxArgs {
  const float* z;
  const float* sinks;
  uint16_t* y;
  int rows, n;
} LdSoftmaxArgs;

typedef struct LdSwigluArgs {
  const uint16_t* g;
  const uint16_t* u;
  uint16_t* y;
  long long n;
  float limit;
} LdSwigluArgs;

typedef struct LdAddArgs {
  const uint16_t* a;
  const uint16_t* b;
  uint16_t* y;
  long long n;
} LdAddArgs;

typedef struct LdMulScalarArgs {
  const uint16_t* a;
  uint16_t* y;
  long long n;
  float s;
} LdMulScalarArgs;

/* MoE gather: y[r, :] = x[token[r], :] (rows into expert order). */
typedef struct LdMoeGatherArgs {
  const uint16_t* x;
  const int32_t* token;
  uint16_t* y;
  int R, D;
} LdMoeGatherArgs;

/* MoE combine (scatter back): out[t, i] = f16((Σ_{j in start[t]..start[t+1]} y[rows[j], i]) + shared[t, i]). */
typedef struct LdMoeCombineArgs {
  const uint16_t* y;
  const int32_t* start; /* [T + 1] */
  const int32_t* rows;  /* [R] row ids grouped by token, increasing within a token */
  const uint16_t* shared;
  uint16_t* out;
  int T, D;
} LdMoeCombineArgs;

/* Sinkhorn of T hc×hc matrices (ld_sinkhorn_f32): A f32 [T, hc, hc] → C f32 [T, hc, hc]. */
typedef struct LdSinkhornArgs {
  const float* A;
  float* C;
  int T, hc, iters;
  float eps;
} LdSinkhornArgs;

/* ---- DeepSeek-V4 ops (deepseek.hip; the emulation: src/deepseek_hc.cc, deepseek_attention.cc, deepseek_moe.cc) ---- */

/* hcPreF16 / hcHeadF16: x f16 [T, hc, D]; fn f32 [nmix, hc·D] (nmix = (2+hc)·hc for pre, hc for head); base
 * f32 [nmix]; scale f32 [3] (pre) / [1] (head). Pre: u f16 [T, D], post f32 [T, hc], comb f32 [T, hc, hc];
 * head: u = v f16 [T, D], post = comb = NULL, iters unused. */
typedef struct LdHcArgs {
  const uint16_t* x;
  const float* fn;
  const float* base;
  const float* scale;
  uint16_t* u;
  float* post;
  float* comb;
  int T, hc, D, iters;
  float norm_eps, hc_eps;
} LdHcArgs;

/* hcPostF16: y[t, k, i] = f16(ld_hc_expand(post[t, k], f[t, i], comb[t], k, x[t, ·, i])). */
typedef struct LdHcPostArgs {
  const uint16_t* f;
  const uint16_t* x;
  const float* post;
  const float* comb;
  uint16_t* y;
  int T, hc, D;
} LdHcPostArgs;

/* compressPoolF16: K, Z f32 [T, c·dc], ape f32 [ratio, c·dc] (c = 2 with overlap, else 1) → y f16 [T/ratio, dc]. */
typedef struct LdCompressPoolArgs {
  const float* K;
  const float* Z;
  const float* ape;
  uint16_t* y;
  int T, ratio, dc, overlap;
} LdCompressPoolArgs;

/* routerF32: logits f32 [T, E], bias f32 [E] or NULL, given int32 [T, topk] or NULL → ids int32 [T, topk]
 * (ascending), weights f32 [T, topk], scores f32 [T, E]. */
typedef struct LdRouterArgs {
  const float* logits;
  const float* bias;
  const int32_t* given;
  int32_t* ids;
  float* weights;
  float* scores;
  int T, E, topk;
  float route_scale;
} LdRouterArgs;

/* indexerTopkF16: q f16 [T, nh, hd], w f16 [T, nh], e f16 [B, hd] → scores f32 [T, B], picks int32 [T, topk].
 * Row t is the query at absolute position t0 + t (it sees ld_index_visible(t0, t, ratio, B) blocks). */
typedef struct LdIndexerArgs {
  const uint16_t* q;
  const uint16_t* w;
  const uint16_t* e;
  float* scores;
  int32_t* picks;
  int T, nh, hd, B, ratio, t0, topk;
  float scale;
} LdIndexerArgs;

/* sparseAttentionF16: q f16 [T, H, D], kv f16 [T, D] (K = V), comp f16 [B, D], cand int32 [T, K] (−1 = none),
 * sinks f32 [H] → y f16 [T, H, D]. */
typedef struct LdSparseAttnArgs {
  const uint16_t* q;
  const uint16_t* kv;
  const uint16_t* comp;
  const int32_t* cand;
  const float* sinks;
  uint16_t* y;
  int T, H, D, B, window, K;
  float scale;
} LdSparseAttnArgs;

/* swigluRowsF16: y[r, c] = f16(ld_swiglu_f32(g, u, limit) · rw[r]) (rw NULL: no weight, as swigluF16). */
typedef struct LdSwigluRowsArgs {
  const uint16_t* g;
  const uint16_t* u;
  const float* rw;
  uint16_t* y;
  int rows, cols;
  float limit;
} LdSwigluRowsArgs;

/* ossRouterF32 (gpt-oss): logits f32 [T, E], bias f32 [E] or NULL, given int32 [T, topk] or NULL → ids int32
 * [T, topk] (ascending), weights f32 [T, topk] (softmax over the chosen biased logits). */
typedef struct LdOssRouterArgs {
  const float* logits;
  const float* bias;
  const int32_t* given;
  int32_t* ids;
  float* weights;
  int T, E, topk;
} LdOssRouterArgs;

/* ossSwigluF16 (gpt-oss): h f16 [rows, 2I] (gate even, up odd) → y f16 [rows, I]. */
typedef struct LdOssSwigluArgs {
  const uint16_t* h;
  uint16_t* y;
  int rows, I;
  float limit, alpha;
} LdOssSwigluArgs;

/* Self-check of the fast f16 widening: y[h] = bits(ld_widen_f16(h)) for h < 65536. */
typedef struct LdWidenCheckArgs {
  uint32_t* y;
} LdWidenCheckArgs;

/* ---------------------------------------------------------------------------------------------------
 * Launch plans
 * ------------------------------------------------------------------------------------------------- */
typedef struct LdLaunch {
  const char* kernel; /* extern "C" name in the code object; NULL = the op cannot run on the GPU (msg says why) */
  unsigned grid_x, grid_y, block_x;
  unsigned shmem;
  const char* msg;
} LdLaunch;

static inline unsigned ld_div_up(long long a, long long b) { return (unsigned)((a + b - 1) / b); }

static inline LdLaunch ld_launch(const char* kernel, unsigned gx, unsigned gy, unsigned shmem) {
  LdLaunch l;
  l.kernel = kernel;
  l.grid_x = gx;
  l.grid_y = gy;
  l.block_x = LD_THREADS;
  l.shmem = shmem;
  l.msg = 0;
  return l;
}

static inline LdLaunch ld_launch_fail(const char* msg) {
  LdLaunch l = ld_launch(0, 0, 0, 0);
  l.msg = msg;
  return l;
}

/* Elementwise kernels: one grid-stride loop; 4 waves of blocks over the elements, capped. */
static inline unsigned ld_elem_blocks(long long n) {
  unsigned b = ld_div_up(n, LD_THREADS);
  return b > 65535u * 16u ? 65535u * 16u : (b == 0 ? 1u : b);
}

/* The MXFP4 dequant kernel fills a per-block value table first: at most LD_TABLE_BLOCKS blocks, so the
 * fill is amortized over many elements per thread (grid-stride). */
#define LD_TABLE_BLOCKS 1024u
static inline unsigned ld_table_blocks(long long n) {
  unsigned b = ld_elem_blocks(n);
  return b > LD_TABLE_BLOCKS ? LD_TABLE_BLOCKS : b;
}

static inline LdLaunch ld_plan_dequant(const LdDequantArgs* a) {
  long long n = (long long)a->out * a->in;
  if (a->kind == 0) return ld_launch("ld_dequant_mxfp4", ld_table_blocks(n / 8), 1, 0);
  if (a->kind == 1) return ld_launch("ld_dequant_fp8", ld_elem_blocks(ld_div_up(a->in, 8) * (long long)a->out), 1, 0);
  return ld_launch("ld_dequant_plain", ld_elem_blocks(n), 1, 0);
}

/* NVFP4: thread per 8 outputs of a row (one 16-block), the 256×16 value table in LDS as for MXFP4. */
static inline LdLaunch ld_plan_dequant_nvfp4(const LdDequantNvfp4Args* a) {
  if (a->in % 16 != 0) return ld_launch_fail("nvfp4 dequant needs in % 16 == 0");
  return ld_launch("ld_dequant_nvfp4", ld_table_blocks((long long)a->out * a->in / 8), 1, 0);
}

/* bitsandbytes: thread per packed byte (two outputs). */
static inline LdLaunch ld_plan_dequant_bnb4(const LdDequantBnb4Args* a) {
  return ld_launch("ld_dequant_bnb4", ld_elem_blocks((a->n + 1) / 2), 1, 0);
}

static inline LdLaunch ld_plan_gemm(const LdGemmArgs* a) {
  if (a->wfmt == LD_W_MXFP4 && a->k % 32 != 0) return ld_launch_fail("mxfp4 GEMM needs k % 32 == 0");
  if (a->m <= LD_GS_MAXM) {
    static const char* const f16[] = {"ld_gemm_skinny_f16_1", "ld_gemm_skinny_f16_2", "ld_gemm_skinny_f16_4", "ld_gemm_skinny_f16_8"};
    static const char* const mx[] = {"ld_gemm_skinny_mxfp4_1", "ld_gemm_skinny_mxfp4_2", "ld_gemm_skinny_mxfp4_4", "ld_gemm_skinny_mxfp4_8"};
    int v = a->m <= 1 ? 0 : a->m <= 2 ? 1 : a->m <= 4 ? 2 : 3;
    return ld_launch(a->wfmt == LD_W_MXFP4 ? mx[v] : f16[v], ld_div_up(a->n, LD_GS_OUT), 1, 0);
  }
  return ld_launch(a->wfmt == LD_W_MXFP4 ? "ld_gemm_tiled_mxfp4" : "ld_gemm_tiled_f16", ld_div_up(a->n, LD_GT_BN),
                   ld_div_up(a->m, LD_GT_BM), 0);
}

static inline LdLaunch ld_plan_rmsnorm(const LdRmsnormArgs* a) {
  return ld_launch("ld_rmsnorm", ld_div_up(a->rows, LD_THREADS / 8), 1, 0);
}

static inline LdLaunch ld_plan_rope(const LdRopeArgs* a) {
  return ld_launch("ld_rope", ld_elem_blocks((long long)a->tokens * a->heads * a->head_dim), 1, 0);
}

/* One workgroup per (query, head): q widened [D], the visible scores [min(T, window)], a 256-float max tree,
 * the denominator. */
static inline LdLaunch ld_plan_attention(const LdAttentionArgs* a) {
  long long nvis = a->window > 0 && a->window < a->T ? a->window : a->T;
  long long bytes = 4 * ((long long)a->D + nvis + LD_THREADS + 4);
  if (bytes > LD_ATTN_MAX_SHMEM) return ld_launch_fail("attention: D + visible keys exceed the 64 KiB of LDS a workgroup has");
  return ld_launch("ld_attention", (unsigned)a->T * (unsigned)a->Hq, 1, (unsigned)bytes);
}

/* Decode: one workgroup per (group b, query t, head h), ld_attention's row over the cache sequence's keys
 * ld_attn_first_key(pos, window) .. pos. LDS as ld_attention with min(window, max_len) visible keys. */
LD_INLINE int ld_decode_max_keys(const LdAttentionDecodeArgs* a) {
  return a->window > 0 && a->window < a->max_len ? a->window : a->max_len;
}
static inline LdLaunch ld_plan_attention_decode(const LdAttentionDecodeArgs* a) {
  // max_len: the longest row (max over groups of start + Tq); it may pass cap in a ring, never the keys a query sees
  if (a->max_len < 1 || ld_decode_max_keys(a) > a->cap) return ld_launch_fail("attention_decode: the visible keys (min(window, max_len)) must fit the cap");
  long long bytes = 4 * ((long long)a->D + ld_decode_max_keys(a) + LD_THREADS + 4);
  if (bytes > LD_ATTN_MAX_SHMEM) return ld_launch_fail("attention_decode: D + visible keys exceed the 64 KiB of LDS a workgroup has");
  return ld_launch("ld_attention_decode", (unsigned)a->B * (unsigned)a->Tq * (unsigned)a->Hq, 1, (unsigned)bytes);
}

static inline LdLaunch ld_plan_softmax(const LdSoftmaxArgs* a) {
  long long bytes = 4 * ((long long)a->n + LD_THREADS + 4);
  if (bytes > LD_ATTN_MAX_SHMEM) return ld_launch_fail("softmax: row longer than the 64 KiB of LDS a workgroup has");
  return ld_launch("ld_softmax", (unsigned)a->rows, 1, (unsigned)bytes);
}

static inline LdLaunch ld_plan_swiglu(const LdSwigluArgs* a) { return ld_launch("ld_swiglu", ld_elem_blocks(a->n), 1, 0); }
static inline LdLaunch ld_plan_add(const LdAddArgs* a) { return ld_launch("ld_add", ld_elem_blocks(a->n), 1, 0); }
static inline LdLaunch ld_plan_mul_scalar(const LdMulScalarArgs* a) { return ld_launch("ld_mul_scalar", ld_elem_blocks(a->n), 1, 0); }
static inline LdLaunch ld_plan_moe_gather(const LdMoeGatherArgs* a) {
  return ld_launch("ld_moe_gather", ld_elem_blocks((long long)a->R * a->D), 1, 0);
}
static inline LdLaunch ld_plan_moe_combine(const LdMoeCombineArgs* a) {
  return ld_launch("ld_moe_combine", ld_elem_blocks((long long)a->T * a->D), 1, 0);
}
static inline LdLaunch ld_plan_sinkhorn(const LdSinkhornArgs* a) {
  if (a->hc < 1 || a->hc > LD_HC_MAX) return ld_launch_fail("sinkhorn: hc must be 1..8");
  return ld_launch("ld_sinkhorn", ld_div_up(a->T, LD_THREADS), 1, 0);
}

/* hc_pre / hc_head: one workgroup per token (32 groups of 8 lanes: the nmix + 1 dots in the ld lane order),
 * LDS: mixes [nmix] + pre [hc] + C [hc·hc]. */
#define LD_HC_NMIX_MAX ((2 + LD_HC_MAX) * LD_HC_MAX)
static inline LdLaunch ld_plan_hc_pre(const LdHcArgs* a) {
  if (a->hc < 1 || a->hc > LD_HC_MAX) return ld_launch_fail("hc_pre: hc must be 1..8");
  return ld_launch("ld_hc_pre", (unsigned)a->T, 1, 0);
}
static inline LdLaunch ld_plan_hc_head(const LdHcArgs* a) {
  if (a->hc < 1 || a->hc > LD_HC_MAX) return ld_launch_fail("hc_head: hc must be 1..8");
  return ld_launch("ld_hc_head", (unsigned)a->T, 1, 0);
}
static inline LdLaunch ld_plan_hc_post(const LdHcPostArgs* a) {
  if (a->hc < 1 || a->hc > LD_HC_MAX) return ld_launch_fail("hc_post: hc must be 1..8");
  return ld_launch("ld_hc_post", ld_elem_blocks((long long)a->T * a->hc * a->D), 1, 0);
}
/* compress_pool: thread per (block, channel), its n = (overlap ? 2 : 1)·ratio slots in private memory. */
#define LD_POOL_MAX 256
static inline LdLaunch ld_plan_compress_pool(const LdCompressPoolArgs* a) {
  if ((a->overlap ? 2 : 1) * a->ratio > LD_POOL_MAX) return ld_launch_fail("compress_pool: (overlap ? 2 : 1)·ratio exceeds 256 slots");
  return ld_launch("ld_compress_pool", ld_elem_blocks((long long)(a->T / a->ratio) * a->dc), 1, 0);
}
/* router: thread per token (E sequential sqrt-softplus, top-k by k selection passes in the ld_topk_before
 * order, ascending ids, sequential sum). */
static inline LdLaunch ld_plan_router(const LdRouterArgs* a) {
  if (a->topk > a->E) return ld_launch_fail("router: topk exceeds E");
  return ld_launch("ld_router", ld_div_up(a->T, LD_THREADS), 1, 0);
}
/* indexer: one workgroup per token: scores by 8-lane groups (one block b per group, heads sequential), then
 * rank of every visible block in parallel (picked iff rank < k), picks written ascending by thread 0.
 * LDS: one pick flag byte per block. */
static inline LdLaunch ld_plan_indexer_topk(const LdIndexerArgs* a) {
  long long bytes = ((long long)a->B + 16) & ~15LL;
  if (bytes > LD_ATTN_MAX_SHMEM) return ld_launch_fail("indexer_topk: more compressed blocks than the 64 KiB of LDS holds flags for");
  return ld_launch("ld_indexer_topk", (unsigned)a->T, 1, (unsigned)bytes);
}
/* sparse attention: one workgroup per (query, head) as ld_attention; LDS: q [D] + scores [min(T, window) + K]
 * + max tree [256] + denominator + compacted candidate ids [K]. */
static inline LdLaunch ld_plan_sparse_attention(const LdSparseAttnArgs* a) {
  long long nvis = a->window > 0 && a->window < a->T ? a->window : a->T;
  long long bytes = 4 * ((long long)a->D + nvis + 2LL * a->K + LD_THREADS + 4);
  if (bytes > LD_ATTN_MAX_SHMEM) return ld_launch_fail("sparse_attention: D + candidates exceed the 64 KiB of LDS a workgroup has");
  return ld_launch("ld_sparse_attention", (unsigned)a->T * (unsigned)a->H, 1, (unsigned)bytes);
}
static inline LdLaunch ld_plan_swiglu_rows(const LdSwigluRowsArgs* a) {
  return ld_launch("ld_swiglu_rows", ld_elem_blocks((long long)a->rows * a->cols), 1, 0);
}
/* oss_router: thread per token (k selection passes in the ld_topk_before order, ascending ids, softmax over k). */
static inline LdLaunch ld_plan_oss_router(const LdOssRouterArgs* a) {
  if (a->topk > a->E) return ld_launch_fail("oss_router: topk exceeds E");
  return ld_launch("ld_oss_router", ld_div_up(a->T, LD_THREADS), 1, 0);
}
static inline LdLaunch ld_plan_oss_swiglu(const LdOssSwigluArgs* a) {
  return ld_launch("ld_oss_swiglu", ld_elem_blocks((long long)a->rows * a->I), 1, 0);
}
static inline LdLaunch ld_plan_widen_check(void) { return ld_launch("ld_widen_check", 65536 / LD_THREADS, 1, 0); }

#endif /* LD_KERNEL_ARGS_H */
