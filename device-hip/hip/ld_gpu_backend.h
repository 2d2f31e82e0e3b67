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
  // w (f16 [n, k]) or wq + wscale (MXFP4, fused); y16 (f16(alpha·dot)) or y32 (dot).
  void gemm(const uint16_t* x, const uint16_t* w, const uint8_t* wq, const uint8_t* wscale, int m, int k, int n, float alpha,
            int fault, uint16_t* y16, float* y32);
  // The FP8-block GEMM: the weight dequantized on the device (the dequant kernel), then the f16 GEMM kernel.
  void gemm_fp8(const uint16_t* x, const uint8_t* w, const uint8_t* scale, size_t sbytes, int scale_is_f32, int m, int k, int n, int bo,
                int bi, float alpha, int fault, uint16_t* y16);
  // The fused NVFP4 and bitsandbytes 4-bit GEMMs, as gemm_fp8: the weight dequantized on the device (the dequant_nvfp4 /
  // dequant_bnb4 kernel) into device memory, then the f16 GEMM kernel; only x and y cross to the host.
  void gemm_nvfp4(const uint16_t* x, const uint8_t* w, const uint8_t* scale, int m, int k, int n, float global, bool divisor, float alpha,
                  int fault, uint16_t* y16);
  void gemm_bnb4(const uint16_t* x, const uint8_t* w, const uint8_t* absmax, bool absmax_is_codes, const float* quant_map,
                 const float* nested_absmax, const float* nested_map, float nested_offset, int nested_blocksize, int m, int k, int n,
                 int blocksize, float alpha, int fault, uint16_t* y16);
  void softmax(const float* z, const float* sinks, int rows, int n, uint16_t* y);
  void moe_gather(const uint16_t* x, int T, const int32_t* token, int R, int D, uint16_t* y);
  void moe_combine(const uint16_t* y, int R, const int32_t* start, const int32_t* rows, const uint16_t* shared, int T, int D,
                   uint16_t* out);
  void sinkhorn(const float* A, int T, int hc, int iters, float eps, float* C);
  // attentionDecodeF16: q [B, Tq, Hq, D], k [Bc, cap, Hkv, D], v [Bc, cap, Hkv, Dv], slot/start [B] (host arrays,
  // already range-checked by the caller), sinks [Hq] or null → y [B, Tq, Hq, Dv].
  void attention_decode(const uint16_t* q, const uint16_t* k, const uint16_t* v, const int32_t* slot, const int32_t* start,
                        const float* sinks, int B, int Tq, int Bc, int cap, int Hq, int Hkv, int D, int Dv, float scale, int window,
                        uint16_t* y);

  // The ops of the op table with a `kernel` (device-hip/ops/table.ts), generated: buffers in, one launch, outputs back.
#include "backend_ops.generated.h"

  // Every kernel the code object must hold (the launch plans' names).
  static const std::vector<std::string>& kernel_names();

 private:
  struct Buf;
  // y16 [m, n] = f16(alpha · x·Wᵀ) over an f16 W [n, k] already in device memory (dw), by the f16 GEMM kernel.
  void gemm_f16_on_device(const uint16_t* dw, const uint16_t* x, int m, int k, int n, float alpha, uint16_t* y16);
  void check(int e, const char* what);
  void launch(const ::LdLaunch& L, void* args);
  uint64_t alloc(size_t bytes);
  Api api_;
  void* module_ = nullptr;
  std::map<std::string, void*> fns_;
};

}  // namespace ldgpu
