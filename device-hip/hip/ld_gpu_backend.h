// ld_gpu_backend.h — the `hip` execution backend's host side: the kernels' code object loaded from bytes
// (hipModuleLoadData), each op's kernel found by name (hipModuleGetFunction) and launched with ONE argument
// struct (hipModuleLaunchKernel, kernelParams = {&args}), grid/block/LDS from the launch plans of
// kernels/ld_kernel_args.h — the same plans and structs the device check launches with.
//
// Host arrays in, host arrays out: every op allocates its device buffers, copies in, launches, synchronizes,
// copies back and frees. Simple and stateless (layerdiff validates, it does not serve); a weight cache is the
// obvious next step when speed matters.
//
// Errors throw std::runtime_error naming the call and the runtime's message; nothing aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ld_gpu_api.h"
#include "ld_kernel_args.h"

namespace ldgpu {

class Backend {
 public:
  Backend() = default;
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // Load the runtime (flavour), the code object, every kernel; then run the f16-widening self-check
  // (ld_widen_check vs ld_f16_to_f32 on all 65536 inputs). Throws with what failed.
  void open(Flavour f, const std::vector<char>& image);
  // The same over a runtime table already filled in (module_check's HIP-CPU table, check/module_check_cpu.h, which
  // steps the kernels compiled into that binary on the CPU, so this host code runs without a GPU).
  void open(const Api& api, const std::vector<char>& image);
  bool is_open() const { return module_ != nullptr; }

  void dequant(int kind, const uint8_t* w, size_t wbytes, const uint8_t* scale, size_t sbytes, int scale_is_f32, int out,
               int in, int bo, int bi, int fault, uint16_t* y);
  void dequant_nvfp4(const uint8_t* w, const uint8_t* scale, int out, int in, float global, int divisor, int fault, uint16_t* y);
  void dequant_bnb4(const uint8_t* w, const uint8_t* absmax, size_t absmax_bytes, int absmax_is_codes, const float* quant_map, const float* nested_absmax,
                    size_t nested_n, const float* nested_map, float nested_offset, int nested_blocksize, long long n, int blocksize, int fault, uint16_t* y);
  // w (f16 [n, k]) or wq + wscale (MXFP4, fused); y16 (f16(alpha·dot)) or y32 (dot).
  void gemm(const uint16_t* x, const uint16_t* w, const uint8_t* wq, const uint8_t* wscale, int m, int k, int n, float alpha,
            int fault, uint16_t* y16, float* y32);
  void rmsnorm(const uint16_t* x, const uint16_t* w, int rows, int dim, float eps, uint16_t* y);
  void rope(const uint16_t* x, const float* cs, const float* sn, int T, int H, int D, int off, int rot, int inter, uint16_t* y);
  void attention(const uint16_t* q, const uint16_t* k, const uint16_t* v, const float* sinks, int T, int Hq, int Hkv, int D,
                 int Dv, float scale, int window, uint16_t* y);
  void softmax(const float* z, const float* sinks, int rows, int n, uint16_t* y);
  void swiglu(const uint16_t* g, const uint16_t* u, long long n, float limit, uint16_t* y);
  void add(const uint16_t* a, const uint16_t* b, long long n, uint16_t* y);
  void mul_scalar(const uint16_t* a, long long n, float s, uint16_t* y);
  void moe_gather(const uint16_t* x, int T, const int32_t* token, int R, int D, uint16_t* y);
  void moe_combine(const uint16_t* y, int R, const int32_t* start, const int32_t* rows, const uint16_t* shared, int T, int D,
                   uint16_t* out);
  void sinkhorn(const float* A, int T, int hc, int iters, float eps, float* C);
  // attentionDecodeF16: q [B, Tq, Hq, D], k [Bc, cap, Hkv, D], v [Bc, cap, Hkv, Dv], slot/start [B] (host arrays,
  // already range-checked by the caller), sinks [Hq] or null → y [B, Tq, Hq, Dv].
  void attention_decode(const uint16_t* q, const uint16_t* k, const uint16_t* v, const int32_t* slot, const int32_t* start,
                        const float* sinks, int B, int Tq, int Bc, int cap, int Hq, int Hkv, int D, int Dv, float scale, int window,
                        uint16_t* y);

  // DeepSeek-V4 (kernels/deepseek.hip), the shapes of LdHcArgs … LdSwigluRowsArgs. hc_head: u only.
  void hc_pre(const uint16_t* x, const float* fn, const float* base, const float* scale, int T, int hc, int D, float norm_eps,
              float hc_eps, int iters, uint16_t* u, float* post, float* comb);
  void hc_head(const uint16_t* x, const float* fn, const float* base, const float* scale, int T, int hc, int D, float norm_eps,
               float hc_eps, uint16_t* u);
  void hc_post(const uint16_t* f, const uint16_t* x, const float* post, const float* comb, int T, int hc, int D, uint16_t* y);
  void compress_pool(const float* K, const float* Z, const float* ape, int T, int ratio, int dc, bool overlap, uint16_t* y);
  // bias, given may be null.
  void router(const float* logits, const float* bias, const int32_t* given, int T, int E, int topk, float route_scale, int32_t* ids,
              float* weights, float* scores);
  // rw may be null (no routing weight).
  void swiglu_rows(const uint16_t* g, const uint16_t* u, const float* rw, int rows, int cols, float limit, uint16_t* y);
  // Row t is the query at absolute position t0 + t.
  void indexer_topk(const uint16_t* q, const uint16_t* w, const uint16_t* e, int T, int nh, int hd, int B, int ratio, int t0, int topk,
                    float scale, float* scores, int32_t* picks);
  void sparse_attention(const uint16_t* q, const uint16_t* kv, const uint16_t* comp, const int32_t* cand, const float* sinks, int T,
                        int H, int D, int B, int window, int K, float scale, uint16_t* y);

  // gpt-oss (kernels/gpt_oss.hip), the shapes of LdOssRouterArgs, LdOssSwigluArgs; bias, given may be null.
  void oss_router(const float* logits, const float* bias, const int32_t* given, int T, int E, int topk, int32_t* ids, float* weights);
  void oss_swiglu(const uint16_t* h, int rows, int I, float limit, float alpha, uint16_t* y);

  // Every kernel the code object must hold (the launch plans' names).
  static const std::vector<std::string>& kernel_names();

 private:
  struct Buf;
  void check(int e, const char* what);
  void launch(const ::LdLaunch& L, void* args);
  uint64_t alloc(size_t bytes);
  void hc(bool head, const uint16_t* x, const float* fn, const float* base, const float* scale, int T, int hc, int D, float norm_eps,
          float hc_eps, int iters, uint16_t* u, float* post, float* comb);
  Api api_;
  void* module_ = nullptr;
  std::map<std::string, void*> fns_;
};

}  // namespace ldgpu
