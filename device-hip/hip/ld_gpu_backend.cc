// ld_gpu_backend.cc — see ld_gpu_backend.h.
#include "ld_gpu_backend.h"

#include <cstring>
#include <stdexcept>

#include "ld_kernel_args.h"
#include "ld_numerics.h"
#include "ld_op_expr.h"

namespace ldgpu {

// A device buffer freed on scope exit (also when an exception unwinds).
struct Backend::Buf {
  Backend* b;
  uint64_t p = 0;
  Buf(Backend* be, size_t bytes) : b(be) { p = b->alloc(bytes); }
  Buf(Backend* be, const void* host, size_t bytes) : Buf(be, bytes) {
    if (bytes > 0) b->check(b->api_.htod(b->api_, p, host, bytes), "copy to device");
  }
  ~Buf() { b->api_.free(b->api_, p); }
  void down(void* host, size_t bytes) {
    if (bytes > 0) b->check(b->api_.dtoh(b->api_, host, p, bytes), "copy from device");
  }
  template <class T>
  T* ptr() const {
    return reinterpret_cast<T*>((uintptr_t)p);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

const std::vector<std::string>& Backend::kernel_names() {
  static const std::vector<std::string> names = {
      "ld_dequant_mxfp4", "ld_dequant_fp8", "ld_dequant_plain", "ld_dequant_nvfp4", "ld_dequant_bnb4", "ld_gemm_tiled_f16", "ld_gemm_tiled_mxfp4",
      "ld_gemm_skinny_f16_1", "ld_gemm_skinny_f16_2", "ld_gemm_skinny_f16_4", "ld_gemm_skinny_f16_8",
      "ld_gemm_skinny_mxfp4_1", "ld_gemm_skinny_mxfp4_2", "ld_gemm_skinny_mxfp4_4", "ld_gemm_skinny_mxfp4_8",
      "ld_rmsnorm", "ld_rope", "ld_swiglu", "ld_add", "ld_mul_scalar", "ld_attention", "ld_softmax", "ld_moe_gather",
      "ld_moe_combine", "ld_sinkhorn", "ld_widen_check", "ld_attention_decode", "ld_hc_pre", "ld_hc_head", "ld_hc_post",
      "ld_compress_pool", "ld_router", "ld_swiglu_rows", "ld_indexer_topk", "ld_sparse_attention", "ld_oss_router", "ld_oss_swiglu"};
  return names;
}

Backend::~Backend() {
  if (module_ != nullptr) api_.module_unload(api_, module_);
}

void Backend::check(int e, const char* what) {
  if (e != 0) throw std::runtime_error(std::string("hip backend: ") + what + " failed: " + api_.error_string(api_, e));
}

uint64_t Backend::alloc(size_t bytes) {
  uint64_t p = 0;
  check(api_.malloc(api_, &p, bytes), "device allocation");
  return p;
}

void Backend::open(Flavour f, const std::vector<char>& image) {
  std::string err;
  Api api;
  if (!open_api(api, f, &err)) throw std::runtime_error("hip backend: " + err);
  open(api, image);
}

void Backend::open(const Api& api, const std::vector<char>& image) {
  api_ = api;
  int count = 0;
  const int e = api_.device_count(api_, &count);
  if (e != 0 || count == 0) throw std::runtime_error("hip backend: no device (" + (e != 0 ? api_.error_string(api_, e) : std::string("0 devices")) + ")");
  check(api_.init(api_), "runtime initialisation");
  if (image.empty()) throw std::runtime_error("hip backend: empty code object");
  check(api_.module_load(api_, &module_, image.data()), "loading the kernels' code object (built for another GPU architecture?)");
  for (const std::string& n : kernel_names()) {
    void* fn = nullptr;
    const int r = api_.get_function(api_, &fn, module_, n.c_str());
    if (r != 0) throw std::runtime_error("hip backend: the code object lacks kernel " + n + ": " + api_.error_string(api_, r));
    fns_[n] = fn;
  }
  // Self-check: the hardware f16 → f32 converter the kernels use must equal ld_f16_to_f32 (NaN: any NaN).
  Buf y(this, 65536 * 4);
  LdWidenCheckArgs a{y.ptr<uint32_t>()};
  launch(ld_plan_widen_check(), &a);
  std::vector<uint32_t> got(65536);
  y.down(got.data(), got.size() * 4);
  for (int h = 0; h < 65536; h++) {
    const float want = ld_f16_to_f32((uint16_t)h), g = ld_bits_f32(got[h]);
    if (want != want ? g == g : ld_f32_bits(want) != got[h]) {
      throw std::runtime_error("hip backend: self-check failed: the device widens f16 0x" + std::to_string(h) +
                               " differently from ld_f16_to_f32 (rebuild the kernels with -DLD_NO_HW_WIDEN)");
    }
  }
}

void Backend::launch(const ::LdLaunch& L, void* args) {
  if (L.kernel == nullptr) throw std::runtime_error(std::string("hip backend: ") + L.msg);
  auto it = fns_.find(L.kernel);
  if (it == fns_.end()) throw std::runtime_error(std::string("hip backend: unknown kernel ") + L.kernel);
  void* params[] = {args};
  check(api_.launch(api_, it->second, L.grid_x, L.grid_y, L.block_x, L.shmem, params), L.kernel);
  check(api_.sync(api_), L.kernel);
}

void Backend::dequant(int kind, const uint8_t* w, size_t wbytes, const uint8_t* scale, size_t sbytes, int scale_is_f32, int out,
                      int in, int bo, int bi, int fault, uint16_t* y) {
  const size_t n = (size_t)out * in;
  Buf dw(this, w, wbytes), ds(this, scale, scale != nullptr ? sbytes : 0), dy(this, n * 2);
  LdDequantArgs a{dw.ptr<uint8_t>(), scale != nullptr ? ds.ptr<uint8_t>() : nullptr, dy.ptr<uint16_t>(), kind, scale_is_f32, out, in, bo, bi, fault};
  launch(ld_plan_dequant(&a), &a);
  dy.down(y, n * 2);
}



void Backend::gemm(const uint16_t* x, const uint16_t* w, const uint8_t* wq, const uint8_t* wscale, int m, int k, int n, float alpha,
                   int fault, uint16_t* y16, float* y32) {
  const bool mx = w == nullptr;
  Buf dx(this, x, (size_t)m * k * 2);
  Buf dw(this, w, mx ? 0 : (size_t)n * k * 2), dq(this, wq, mx ? (size_t)n * k / 2 : 0), ds(this, wscale, mx ? (size_t)n * k / 32 : 0);
  Buf dy(this, (size_t)m * n * (y16 != nullptr ? 2 : 4));
  LdGemmArgs a{dx.ptr<uint16_t>(), mx ? nullptr : dw.ptr<uint16_t>(), mx ? dq.ptr<uint8_t>() : nullptr, mx ? ds.ptr<uint8_t>() : nullptr,
               y16 != nullptr ? dy.ptr<uint16_t>() : nullptr, y16 != nullptr ? nullptr : dy.ptr<float>(), m, k, n,
               mx ? LD_W_MXFP4 : LD_W_F16, fault, alpha};
  launch(ld_plan_gemm(&a), &a);
  if (y16 != nullptr) dy.down(y16, (size_t)m * n * 2);
  else dy.down(y32, (size_t)m * n * 4);
}




// No fused FP8 kernel: the MI250 has no FP8 matrix units, and the product only has to give gemmFp8F16's bits,
// which dequantizing first gives (the same row function and GEMM order as the emulation's fused pass).
void Backend::gemm_fp8(const uint16_t* x, const uint8_t* w, const uint8_t* scale, size_t sbytes, int scale_is_f32, int m, int k, int n,
                       int bo, int bi, float alpha, int fault, uint16_t* y16) {
  Buf dq(this, w, (size_t)n * k), ds(this, scale, sbytes), dw(this, (size_t)n * k * 2);
  LdDequantArgs d{dq.ptr<uint8_t>(), ds.ptr<uint8_t>(), dw.ptr<uint16_t>(), 1, scale_is_f32, n, k, bo, bi, fault};
  launch(ld_plan_dequant(&d), &d);
  gemm_f16_on_device(dw.ptr<uint16_t>(), x, m, k, n, alpha, y16);
}

void Backend::gemm_f16_on_device(const uint16_t* dw, const uint16_t* x, int m, int k, int n, float alpha, uint16_t* y16) {
  Buf dx(this, x, (size_t)m * k * 2), dy(this, (size_t)m * n * 2);
  LdGemmArgs a{dx.ptr<uint16_t>(), dw, nullptr, nullptr, dy.ptr<uint16_t>(), nullptr, m, k, n, LD_W_F16, 0, alpha};
  launch(ld_plan_gemm(&a), &a);
  dy.down(y16, (size_t)m * n * 2);
}

void Backend::gemm_nvfp4(const uint16_t* x, const uint8_t* w, const uint8_t* scale, int m, int k, int n, float global, bool divisor, float alpha,
                         int fault, uint16_t* y16) {
  Buf dq(this, w, (size_t)n * (k / 2)), ds(this, scale, (size_t)n * (k / 16)), dw(this, (size_t)n * k * 2);
  LdDequantNvfp4Args d{};
  d.w = dq.ptr<uint8_t>();
  d.scale = ds.ptr<uint8_t>();
  d.y = dw.ptr<uint16_t>();
  d.out = n;
  d.in = k;
  d.divisor = divisor ? 1 : 0;
  d.fault = fault;
  d.global = global;
  launch(ld_plan_dequant_nvfp4(&d), &d);
  gemm_f16_on_device(dw.ptr<uint16_t>(), x, m, k, n, alpha, y16);
}

void Backend::gemm_bnb4(const uint16_t* x, const uint8_t* w, const uint8_t* absmax, bool absmax_is_codes, const float* quant_map,
                        const float* nested_absmax, const float* nested_map, float nested_offset, int nested_blocksize, int m, int k, int n,
                        int blocksize, float alpha, int fault, uint16_t* y16) {
  const long long count = (long long)n * k, blocks = (count + blocksize - 1) / blocksize;
  const long long nested = absmax_is_codes ? (blocks + nested_blocksize - 1) / nested_blocksize : 0;
  Buf dq(this, w, (size_t)(count / 2)), da(this, absmax, (size_t)blocks * (absmax_is_codes ? 1 : 4)), dm(this, quant_map, 16 * 4),
      dn(this, nested_absmax, (size_t)nested * 4), dnm(this, nested_map, absmax_is_codes ? 256 * 4 : 0), dw(this, (size_t)count * 2);
  LdDequantBnb4Args d{};
  d.w = dq.ptr<uint8_t>();
  d.absmax = da.ptr<uint8_t>();
  d.quant_map = dm.ptr<float>();
  d.nested_absmax = absmax_is_codes ? dn.ptr<float>() : nullptr;
  d.nested_map = absmax_is_codes ? dnm.ptr<float>() : nullptr;
  d.y = dw.ptr<uint16_t>();
  d.n = count;
  d.blocksize = blocksize;
  d.absmax_is_codes = absmax_is_codes ? 1 : 0;
  d.nested_blocksize = nested_blocksize;
  d.fault = fault;
  d.nested_offset = nested_offset;
  launch(ld_plan_dequant_bnb4(&d), &d);
  gemm_f16_on_device(dw.ptr<uint16_t>(), x, m, k, n, alpha, y16);
}

void Backend::softmax(const float* z, const float* sinks, int rows, int n, uint16_t* y) {
  Buf dz(this, z, (size_t)rows * n * 4), ds(this, sinks, sinks != nullptr ? (size_t)rows * 4 : 0), dy(this, (size_t)rows * n * 2);
  LdSoftmaxArgs a{dz.ptr<float>(), sinks != nullptr ? ds.ptr<float>() : nullptr, dy.ptr<uint16_t>(), rows, n};
  launch(ld_plan_softmax(&a), &a);
  dy.down(y, (size_t)rows * n * 2);
}




void Backend::moe_gather(const uint16_t* x, int T, const int32_t* token, int R, int D, uint16_t* y) {
  Buf dx(this, x, (size_t)T * D * 2), dt(this, token, (size_t)R * 4), dy(this, (size_t)R * D * 2);
  LdMoeGatherArgs a{dx.ptr<uint16_t>(), dt.ptr<int32_t>(), dy.ptr<uint16_t>(), R, D};
  launch(ld_plan_moe_gather(&a), &a);
  dy.down(y, (size_t)R * D * 2);
}

void Backend::moe_combine(const uint16_t* y, int R, const int32_t* start, const int32_t* rows, const uint16_t* shared, int T, int D,
                          uint16_t* out) {
  Buf dy(this, y, (size_t)R * D * 2), dst(this, start, (size_t)(T + 1) * 4), dr(this, rows, (size_t)R * 4);
  Buf dsh(this, shared, (size_t)T * D * 2), dout(this, (size_t)T * D * 2);
  LdMoeCombineArgs a{dy.ptr<uint16_t>(), dst.ptr<int32_t>(), dr.ptr<int32_t>(), dsh.ptr<uint16_t>(), dout.ptr<uint16_t>(), T, D};
  launch(ld_plan_moe_combine(&a), &a);
  dout.down(out, (size_t)T * D * 2);
}

void Backend::sinkhorn(const float* A, int T, int hc, int iters, float eps, float* C) {
  const size_t n = (size_t)T * hc * hc;
  Buf dA(this, A, n * 4), dC(this, n * 4);
  LdSinkhornArgs a{dA.ptr<float>(), dC.ptr<float>(), T, hc, iters, eps};
  launch(ld_plan_sinkhorn(&a), &a);
  dC.down(C, n * 4);
}

void Backend::attention_decode(const uint16_t* q, const uint16_t* k, const uint16_t* v, const int32_t* slot, const int32_t* start,
                               const float* sinks, int B, int Tq, int Bc, int cap, int Hq, int Hkv, int D, int Dv, float scale,
                               int window, uint16_t* y) {
  int max_len = 1;  // sizes the kernel's LDS: the longest row of this launch, not the whole capacity
  for (int b = 0; b < B; b++) max_len = start[b] + Tq > max_len ? start[b] + Tq : max_len;
  const size_t nq = (size_t)B * Tq * Hq, rows = (size_t)Bc * cap * Hkv;
  Buf dq(this, q, nq * D * 2), dk(this, k, rows * D * 2), dv(this, v, rows * Dv * 2);
  Buf dsl(this, slot, (size_t)B * 4), dst(this, start, (size_t)B * 4);
  Buf ds(this, sinks, sinks != nullptr ? (size_t)Hq * 4 : 0), dy(this, nq * Dv * 2);
  LdAttentionDecodeArgs a{dq.ptr<uint16_t>(), dk.ptr<uint16_t>(), dv.ptr<uint16_t>(), dsl.ptr<int32_t>(), dst.ptr<int32_t>(),
                          sinks != nullptr ? ds.ptr<float>() : nullptr, dy.ptr<uint16_t>(), B, Tq, cap, Hq, Hkv, D, Dv, window,
                          max_len, scale};
  launch(ld_plan_attention_decode(&a), &a);
  dy.down(y, nq * Dv * 2);
}












#include "backend_ops.generated.inc"

}  // namespace ldgpu
