// ld_gpu_backend.cc — see ld_gpu_backend.h.
#include "ld_gpu_backend.h"

#include <cstring>
#include <stdexcept>

#include "ld_kernel_args.h"
#include "ld_numerics.h"

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
      "ld_dequant_mxfp4", "ld_dequant_fp8", "ld_dequant_plain", "ld_gemm_tiled_f16", "ld_gemm_tiled_mxfp4",
      "ld_gemm_skinny_f16_1", "ld_gemm_skinny_f16_2", "ld_gemm_skinny_f16_4", "ld_gemm_skinny_f16_8",
      "ld_gemm_skinny_mxfp4_1", "ld_gemm_skinny_mxfp4_2", "ld_gemm_skinny_mxfp4_4", "ld_gemm_skinny_mxfp4_8",
      "ld_rmsnorm", "ld_rope", "ld_swiglu", "ld_add", "ld_mul_scalar", "ld_attention", "ld_softmax", "ld_moe_gather",
      "ld_moe_combine", "ld_sinkhorn", "ld_widen_check"};
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
  if (!open_api(api_, f, &err)) throw std::runtime_error("hip backend: " + err);
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

void Backend::rmsnorm(const uint16_t* x, const uint16_t* w, int rows, int dim, float eps, uint16_t* y) {
  const size_t n = (size_t)rows * dim;
  Buf dx(this, x, n * 2), dw(this, w, (size_t)dim * 2), dy(this, n * 2);
  LdRmsnormArgs a{dx.ptr<uint16_t>(), dw.ptr<uint16_t>(), dy.ptr<uint16_t>(), rows, dim, eps};
  launch(ld_plan_rmsnorm(&a), &a);
  dy.down(y, n * 2);
}

void Backend::rope(const uint16_t* x, const float* cs, const float* sn, int T, int H, int D, int off, int rot, int inter, uint16_t* y) {
  const size_t n = (size_t)T * H * D, nc = (size_t)T * (rot / 2);
  Buf dx(this, x, n * 2), dc(this, cs, nc * 4), dsn(this, sn, nc * 4), dy(this, n * 2);
  LdRopeArgs a{dx.ptr<uint16_t>(), dc.ptr<float>(), dsn.ptr<float>(), dy.ptr<uint16_t>(), T, H, D, off, rot, inter};
  launch(ld_plan_rope(&a), &a);
  dy.down(y, n * 2);
}

void Backend::attention(const uint16_t* q, const uint16_t* k, const uint16_t* v, const float* sinks, int T, int Hq, int Hkv, int D,
                        int Dv, float scale, int window, uint16_t* y) {
  Buf dq(this, q, (size_t)T * Hq * D * 2), dk(this, k, (size_t)T * Hkv * D * 2), dv(this, v, (size_t)T * Hkv * Dv * 2);
  Buf ds(this, sinks, sinks != nullptr ? (size_t)Hq * 4 : 0), dy(this, (size_t)T * Hq * Dv * 2);
  LdAttentionArgs a{dq.ptr<uint16_t>(), dk.ptr<uint16_t>(), dv.ptr<uint16_t>(), sinks != nullptr ? ds.ptr<float>() : nullptr,
                    dy.ptr<uint16_t>(), T, Hq, Hkv, D, Dv, window, scale};
  launch(ld_plan_attention(&a), &a);
  dy.down(y, (size_t)T * Hq * Dv * 2);
}

void Backend::softmax(const float* z, const float* sinks, int rows, int n, uint16_t* y) {
  Buf dz(this, z, (size_t)rows * n * 4), ds(this, sinks, sinks != nullptr ? (size_t)rows * 4 : 0), dy(this, (size_t)rows * n * 2);
  LdSoftmaxArgs a{dz.ptr<float>(), sinks != nullptr ? ds.ptr<float>() : nullptr, dy.ptr<uint16_t>(), rows, n};
  launch(ld_plan_softmax(&a), &a);
  dy.down(y, (size_t)rows * n * 2);
}

void Backend::swiglu(const uint16_t* g, const uint16_t* u, long long n, float limit, uint16_t* y) {
  Buf dg(this, g, (size_t)n * 2), du(this, u, (size_t)n * 2), dy(this, (size_t)n * 2);
  LdSwigluArgs a{dg.ptr<uint16_t>(), du.ptr<uint16_t>(), dy.ptr<uint16_t>(), n, limit};
  launch(ld_plan_swiglu(&a), &a);
  dy.down(y, (size_t)n * 2);
}

void Backend::add(const uint16_t* x, const uint16_t* z, long long n, uint16_t* y) {
  Buf da(this, x, (size_t)n * 2), db(this, z, (size_t)n * 2), dy(this, (size_t)n * 2);
  LdAddArgs a{da.ptr<uint16_t>(), db.ptr<uint16_t>(), dy.ptr<uint16_t>(), n};
  launch(ld_plan_add(&a), &a);
  dy.down(y, (size_t)n * 2);
}

void Backend::mul_scalar(const uint16_t* x, long long n, float s, uint16_t* y) {
  Buf da(this, x, (size_t)n * 2), dy(this, (size_t)n * 2);
  LdMulScalarArgs a{da.ptr<uint16_t>(), dy.ptr<uint16_t>(), n, s};
  launch(ld_plan_mul_scalar(&a), &a);
  dy.down(y, (size_t)n * 2);
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

}  // namespace ldgpu
