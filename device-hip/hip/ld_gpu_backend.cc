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

void Backend::dequant_nvfp4(const uint8_t* w, const uint8_t* scale, int out, int in, float global, int divisor, int fault, uint16_t* y) {
  const size_t n = (size_t)out * in;
  Buf dw(this, w, n / 2), ds(this, scale, n / 16), dy(this, n * 2);
  LdDequantNvfp4Args a{dw.ptr<uint8_t>(), ds.ptr<uint8_t>(), dy.ptr<uint16_t>(), out, in, divisor, fault, global};
  launch(ld_plan_dequant_nvfp4(&a), &a);
  dy.down(y, n * 2);
}

void Backend::dequant_bnb4(const uint8_t* w, const uint8_t* absmax, size_t absmax_bytes, int absmax_is_codes, const float* quant_map,
                           const float* nested_absmax, size_t nested_n, const float* nested_map, float nested_offset, int nested_blocksize, long long n,
                           int blocksize, int fault, uint16_t* y) {
  Buf dw(this, w, (size_t)(n + 1) / 2), da(this, absmax, absmax_bytes), dq(this, quant_map, 16 * 4), dy(this, (size_t)n * 2);
  Buf dna(this, nested_absmax, absmax_is_codes ? nested_n * 4 : 0), dnm(this, nested_map, absmax_is_codes ? 256 * 4 : 0);
  LdDequantBnb4Args a{dw.ptr<uint8_t>(), da.ptr<uint8_t>(), dq.ptr<float>(), absmax_is_codes ? dna.ptr<float>() : nullptr, absmax_is_codes ? dnm.ptr<float>() : nullptr,
                      dy.ptr<uint16_t>(), n, blocksize, absmax_is_codes, nested_blocksize, fault, nested_offset};
  launch(ld_plan_dequant_bnb4(&a), &a);
  dy.down(y, (size_t)n * 2);
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

void Backend::hc(bool head, const uint16_t* x, const float* fn, const float* base, const float* scale, int T, int hc, int D,
                 float norm_eps, float hc_eps, int iters, uint16_t* u, float* post, float* comb) {
  const size_t width = (size_t)hc * D, nmix = head ? (size_t)hc : (size_t)(2 + hc) * hc;
  Buf dx(this, x, (size_t)T * width * 2), dfn(this, fn, nmix * width * 4), dbase(this, base, nmix * 4);
  Buf dscale(this, scale, head ? 4 : 12), du(this, (size_t)T * D * 2);
  Buf dpost(this, head ? 0 : (size_t)T * hc * 4), dcomb(this, head ? 0 : (size_t)T * hc * hc * 4);
  LdHcArgs a{dx.ptr<uint16_t>(), dfn.ptr<float>(), dbase.ptr<float>(), dscale.ptr<float>(), du.ptr<uint16_t>(),
             head ? nullptr : dpost.ptr<float>(), head ? nullptr : dcomb.ptr<float>(), T, hc, D, iters, norm_eps, hc_eps};
  launch(head ? ld_plan_hc_head(&a) : ld_plan_hc_pre(&a), &a);
  du.down(u, (size_t)T * D * 2);
  if (!head) {
    dpost.down(post, (size_t)T * hc * 4);
    dcomb.down(comb, (size_t)T * hc * hc * 4);
  }
}

void Backend::hc_pre(const uint16_t* x, const float* fn, const float* base, const float* scale, int T, int hc, int D, float norm_eps,
                     float hc_eps, int iters, uint16_t* u, float* post, float* comb) {
  this->hc(false, x, fn, base, scale, T, hc, D, norm_eps, hc_eps, iters, u, post, comb);
}

void Backend::hc_head(const uint16_t* x, const float* fn, const float* base, const float* scale, int T, int hc, int D, float norm_eps,
                      float hc_eps, uint16_t* u) {
  this->hc(true, x, fn, base, scale, T, hc, D, norm_eps, hc_eps, 0, u, nullptr, nullptr);
}

void Backend::hc_post(const uint16_t* f, const uint16_t* x, const float* post, const float* comb, int T, int hc, int D, uint16_t* y) {
  const size_t n = (size_t)T * hc * D;
  Buf df(this, f, (size_t)T * D * 2), dx(this, x, n * 2), dp(this, post, (size_t)T * hc * 4), dc(this, comb, (size_t)T * hc * hc * 4);
  Buf dy(this, n * 2);
  LdHcPostArgs a{df.ptr<uint16_t>(), dx.ptr<uint16_t>(), dp.ptr<float>(), dc.ptr<float>(), dy.ptr<uint16_t>(), T, hc, D};
  launch(ld_plan_hc_post(&a), &a);
  dy.down(y, n * 2);
}

void Backend::compress_pool(const float* K, const float* Z, const float* ape, int T, int ratio, int dc, bool overlap, uint16_t* y) {
  const size_t w = (size_t)(overlap ? 2 : 1) * dc, nout = (size_t)(T / ratio) * dc;
  Buf dK(this, K, (size_t)T * w * 4), dZ(this, Z, (size_t)T * w * 4), dape(this, ape, (size_t)ratio * w * 4), dy(this, nout * 2);
  LdCompressPoolArgs a{dK.ptr<float>(), dZ.ptr<float>(), dape.ptr<float>(), dy.ptr<uint16_t>(), T, ratio, dc, overlap ? 1 : 0};
  launch(ld_plan_compress_pool(&a), &a);
  dy.down(y, nout * 2);
}

void Backend::router(const float* logits, const float* bias, const int32_t* given, int T, int E, int topk, float route_scale,
                     int32_t* ids, float* weights, float* scores) {
  const size_t nk = (size_t)T * topk;
  Buf dl(this, logits, (size_t)T * E * 4), db(this, bias, bias != nullptr ? (size_t)E * 4 : 0);
  Buf dg(this, given, given != nullptr ? nk * 4 : 0), di(this, nk * 4), dw(this, nk * 4), ds(this, (size_t)T * E * 4);
  LdRouterArgs a{dl.ptr<float>(), bias != nullptr ? db.ptr<float>() : nullptr, given != nullptr ? dg.ptr<int32_t>() : nullptr,
                 di.ptr<int32_t>(), dw.ptr<float>(), ds.ptr<float>(), T, E, topk, route_scale};
  launch(ld_plan_router(&a), &a);
  di.down(ids, nk * 4);
  dw.down(weights, nk * 4);
  ds.down(scores, (size_t)T * E * 4);
}

void Backend::swiglu_rows(const uint16_t* g, const uint16_t* u, const float* rw, int rows, int cols, float limit, uint16_t* y) {
  const size_t n = (size_t)rows * cols;
  Buf dg(this, g, n * 2), du(this, u, n * 2), drw(this, rw, rw != nullptr ? (size_t)rows * 4 : 0), dy(this, n * 2);
  LdSwigluRowsArgs a{dg.ptr<uint16_t>(), du.ptr<uint16_t>(), rw != nullptr ? drw.ptr<float>() : nullptr, dy.ptr<uint16_t>(), rows, cols, limit};
  launch(ld_plan_swiglu_rows(&a), &a);
  dy.down(y, n * 2);
}

void Backend::oss_router(const float* logits, const float* bias, const int32_t* given, int T, int E, int topk, int32_t* ids,
                         float* weights) {
  const size_t nk = (size_t)T * topk;
  Buf dl(this, logits, (size_t)T * E * 4), db(this, bias, bias != nullptr ? (size_t)E * 4 : 0);
  Buf dg(this, given, given != nullptr ? nk * 4 : 0), di(this, nk * 4), dw(this, nk * 4);
  LdOssRouterArgs a{dl.ptr<float>(), bias != nullptr ? db.ptr<float>() : nullptr, given != nullptr ? dg.ptr<int32_t>() : nullptr,
                    di.ptr<int32_t>(), dw.ptr<float>(), T, E, topk};
  launch(ld_plan_oss_router(&a), &a);
  di.down(ids, nk * 4);
  dw.down(weights, nk * 4);
}

void Backend::oss_swiglu(const uint16_t* h, int rows, int I, float limit, float alpha, uint16_t* y) {
  const size_t n = (size_t)rows * I;
  Buf dh(this, h, n * 2 * 2), dy(this, n * 2);
  LdOssSwigluArgs a{dh.ptr<uint16_t>(), dy.ptr<uint16_t>(), rows, I, limit, alpha};
  launch(ld_plan_oss_swiglu(&a), &a);
  dy.down(y, n * 2);
}

void Backend::indexer_topk(const uint16_t* q, const uint16_t* w, const uint16_t* e, int T, int nh, int hd, int B, int ratio, int t0,
                           int topk, float scale, float* scores, int32_t* picks) {
  Buf dq(this, q, (size_t)T * nh * hd * 2), dw(this, w, (size_t)T * nh * 2), de(this, e, (size_t)B * hd * 2);
  Buf ds(this, (size_t)T * B * 4), dp(this, (size_t)T * topk * 4);
  LdIndexerArgs a{dq.ptr<uint16_t>(), dw.ptr<uint16_t>(), de.ptr<uint16_t>(), ds.ptr<float>(), dp.ptr<int32_t>(), T, nh, hd, B, ratio, t0, topk, scale};
  launch(ld_plan_indexer_topk(&a), &a);
  ds.down(scores, (size_t)T * B * 4);
  dp.down(picks, (size_t)T * topk * 4);
}

void Backend::sparse_attention(const uint16_t* q, const uint16_t* kv, const uint16_t* comp, const int32_t* cand, const float* sinks,
                               int T, int H, int D, int B, int window, int K, float scale, uint16_t* y) {
  const size_t n = (size_t)T * H * D;
  Buf dq(this, q, n * 2), dkv(this, kv, (size_t)T * D * 2), dcomp(this, comp, (size_t)B * D * 2);
  Buf dcand(this, cand, (size_t)T * K * 4), ds(this, sinks, (size_t)H * 4), dy(this, n * 2);
  LdSparseAttnArgs a{dq.ptr<uint16_t>(), dkv.ptr<uint16_t>(), dcomp.ptr<uint16_t>(), dcand.ptr<int32_t>(), ds.ptr<float>(),
                     dy.ptr<uint16_t>(), T, H, D, B, window, K, scale};
  launch(ld_plan_sparse_attention(&a), &a);
  dy.down(y, n * 2);
}

}  // namespace ldgpu
