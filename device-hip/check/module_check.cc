// module_check — drives the `hip` backend's host code (device-hip/hip/ld_gpu_backend.cc: code object from bytes,
// kernels by name, one argument struct per launch, the launch plans of ld_kernel_args.h) on a real GPU and compares
// every op with the host reference (ld_host_ref.h), bit for bit.
//   module_check amd  <code object built by hipcc --genco --offload-arch=gfx90a>   (an MI250: the real backend)
//   module_check cuda <cubin built by nvcc --cubin from the same kernels/all.hip>  (the lent NVIDIA GPU: the CUDA
//                      driver's module API, called through the same Backend class)
//   module_check cpu   (built with -DLD_HIP_CPU against HIP-CPU: module_check_cpu.h's runtime table steps the kernels
//                      compiled into the binary on the CPU — the backend's host code checked without a GPU)
// Plain C++: no HIP or CUDA headers, the runtime is dlopen'ed. Exit 0 all equal, 1 a mismatch, 2 no GPU/library.
#include <stdio.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ld_gpu_backend.h"
#include "ld_host_ref.h"
#ifdef LD_HIP_CPU
#include "module_check_cpu.h"
#endif

namespace {

uint64_t g_s = 12345;
uint64_t rnd() {
  uint64_t z = (g_s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double uni() { return (double)(rnd() >> 11) / 9007199254740992.0; }
std::vector<uint16_t> f16s(size_t n, double a) {
  std::vector<uint16_t> v(n);
  for (auto& h : v) h = ld_f32_to_f16((float)((2 * uni() - 1) * a));
  return v;
}
std::vector<float> f32s(size_t n, double lo, double hi) {
  std::vector<float> v(n);
  for (auto& f : v) f = (float)(lo + (hi - lo) * uni());
  return v;
}
std::vector<uint8_t> bytes(size_t n, int lo, int hi) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = (uint8_t)(lo + (int)(rnd() % (uint64_t)(hi - lo + 1)));
  return v;
}

int g_bad = 0;
template <class T>
void report(const char* op, const std::vector<T>& got, const std::vector<T>& want) {
  size_t mism = 0, first = 0;
  for (size_t i = 0; i < got.size(); i++) {
    uint64_t a = 0, b = 0;
    memcpy(&a, &got[i], sizeof(T));
    memcpy(&b, &want[i], sizeof(T));
    const bool an = sizeof(T) == 2 ? ((a & 0x7C00) == 0x7C00 && (a & 0x3FF)) : (got[i] != got[i]);
    const bool bn = sizeof(T) == 2 ? ((b & 0x7C00) == 0x7C00 && (b & 0x3FF)) : (want[i] != want[i]);
    if ((an && bn) || a == b) continue;
    if (mism++ == 0) first = i;
  }
  printf("module_check %-28s %8zu outputs: %s", op, got.size(), mism == 0 ? "bit-identical\n" : "");
  if (mism > 0) {
    printf("%zu differ (first at %zu)\n", mism, first);
    g_bad++;
  }
}

void run(ldgpu::Backend& b) {
  {  // dequant mxfp4 with a fault, fp8 with f32 scales
    const int out = 64, in = 256;
    auto w = bytes((size_t)out * in / 2, 0, 255), s = bytes((size_t)out * in / 32, 118, 130);
    std::vector<uint16_t> g((size_t)out * in), r(g.size());
    b.dequant(0, w.data(), w.size(), s.data(), s.size(), 0, out, in, 1, 32, 5, g.data());
    ldref::dequant(0, w.data(), s.data(), 0, out, in, 1, 32, 5, r.data());
    report("dequant mxfp4 (scale-stride)", g, r);
    auto w8 = bytes((size_t)out * in, 0, 255);
    auto sf = f32s(1 * 2, 1e-3, 4e-3);
    std::vector<uint8_t> s8(sf.size() * 4);
    memcpy(s8.data(), sf.data(), s8.size());
    b.dequant(1, w8.data(), w8.size(), s8.data(), s8.size(), 1, out, in, 128, 128, 0, g.data());
    ldref::dequant(1, w8.data(), s8.data(), 1, out, in, 128, 128, 0, r.data());
    report("dequant fp8 (f32 scales)", g, r);
    // NVFP4 (ModelOpt multiplier, compressed-tensors divisor with scale-block-size), E4M3 scale bytes not NaN
    auto e4 = bytes((size_t)out * in / 16, 0x20, 0x5f);
    b.dequantNvfp4ToF16(w.data(), e4.data(), out, in, 1.5e-4f, false, 0, g.data());
    ldref::dequant_nvfp4(w.data(), e4.data(), out, in, 1.5e-4f, 0, 0, r.data());
    report("dequant nvfp4 (modelopt)", g, r);
    b.dequantNvfp4ToF16(w.data(), e4.data(), out, in, 7264.9f, true, 9, g.data());
    ldref::dequant_nvfp4(w.data(), e4.data(), out, in, 7264.9f, 1, 9, r.data());
    report("dequant nvfp4 (ct, block-size)", g, r);
    // bitsandbytes NF4 with double quant (blocks of 64, nested 256), flat over out·in
    const long long n = (long long)out * in;
    const int nb = (int)(n / 64);
    auto codes = bytes((size_t)nb, 0, 255);
    auto qm = f32s(16, -1, 1), nabs = f32s((size_t)(nb + 255) / 256, 0.5, 2), nmap = f32s(256, -1, 1);
    b.dequantBnb4ToF16(w.data(), codes.data(), true, qm.data(), nabs.data(), nmap.data(), 0.25f, 256, out, in, 64, 0, g.data());
    ldref::dequant_bnb4(w.data(), codes.data(), 1, qm.data(), nabs.data(), nmap.data(), 0.25f, 256, n, 64, 0, r.data());
    report("dequant bnb4 (double quant)", g, r);
  }
  for (int m : {1, 5, 70}) {  // skinny and tiled, f16 and fused MXFP4, f16 and f32 outputs
    const int k = 544, n = 97;
    auto x = f16s((size_t)m * k, 2), w = f16s((size_t)n * k, 0.5);
    auto q = bytes((size_t)n * k / 2, 0, 255), s = bytes((size_t)n * k / 32, 118, 126);
    std::vector<uint16_t> g((size_t)m * n), r(g.size());
    std::vector<float> g32((size_t)m * n), r32(g32.size());
    b.gemm(x.data(), w.data(), nullptr, nullptr, m, k, n, 0.3f, 0, g.data(), nullptr);
    ldref::gemm(x.data(), w.data(), nullptr, nullptr, m, k, n, 0.3f, 0, r.data(), nullptr);
    report(m <= 8 ? "gemm f16 skinny" : "gemm f16 tiled", g, r);
    b.gemm(x.data(), nullptr, q.data(), s.data(), m, k, n, 1.0f, 0, nullptr, g32.data());
    ldref::gemm(x.data(), nullptr, q.data(), s.data(), m, k, n, 1.0f, 0, nullptr, r32.data());
    report(m <= 8 ? "gemm mxfp4 fused skinny f32" : "gemm mxfp4 fused tiled f32", g32, r32);
    // FP8 blocks (E8M0 scales, ragged last blocks both ways, a fault): dequant kernel, then the f16 GEMM
    auto w8 = bytes((size_t)n * k, 0, 255), s8 = bytes((size_t)((n + 63) / 64) * ((k + 127) / 128), 118, 130);
    b.gemm_fp8(x.data(), w8.data(), s8.data(), s8.size(), 0, m, k, n, 64, 128, 0.3f, 4, g.data());
    ldref::gemm_fp8(x.data(), w8.data(), s8.data(), 0, m, k, n, 64, 128, 0.3f, 4, r.data());
    report(m <= 8 ? "gemm fp8 skinny (scale-axis)" : "gemm fp8 tiled (scale-axis)", g, r);
    // NVFP4 (a divisor global scale, a fault) and bitsandbytes double quant (blocks of 32 whole in each row): the dequant
    // kernel into device memory, then the f16 GEMM
    auto s4 = bytes((size_t)n * k / 16, 0x20, 0x60);
    b.gemm_nvfp4(x.data(), q.data(), s4.data(), m, k, n, 448.0f * 6.0f, true, 0.3f, 2, g.data());
    ldref::gemm_nvfp4(x.data(), q.data(), s4.data(), m, k, n, 448.0f * 6.0f, 1, 0.3f, 2, r.data());
    report(m <= 8 ? "gemm nvfp4 skinny (nibble-swap)" : "gemm nvfp4 tiled (nibble-swap)", g, r);
    const int nb = n * k / 32;
    auto codes = bytes((size_t)nb, 0, 255);
    auto qm = f32s(16, -1, 1), nabs = f32s((size_t)(nb + 255) / 256, 0.5, 2), nmap = f32s(256, -1, 1);
    b.gemm_bnb4(x.data(), q.data(), codes.data(), true, qm.data(), nabs.data(), nmap.data(), 0.25f, 256, m, k, n, 32, 0.3f, 0, g.data());
    ldref::gemm_bnb4(x.data(), q.data(), codes.data(), 1, qm.data(), nabs.data(), nmap.data(), 0.25f, 256, m, k, n, 32, 0.3f, 0, r.data());
    report(m <= 8 ? "gemm bnb4 skinny (double quant)" : "gemm bnb4 tiled (double quant)", g, r);
  }
  {
    const int rows = 33, dim = 1000;
    auto x = f16s((size_t)rows * dim, 3), w = f16s(dim, 1.5);
    std::vector<uint16_t> g(x.size()), r(x.size());
    b.rmsnormF16(x.data(), w.data(), rows, dim, 1e-6f, g.data());
    ldref::rmsnorm(x.data(), w.data(), rows, dim, 1e-6f, r.data());
    report("rmsnorm", g, r);
  }
  {
    const int T = 9, H = 4, D = 128, off = 64, rot = 64;
    auto x = f16s((size_t)T * H * D, 8);
    auto c = f32s((size_t)T * rot / 2, -1, 1), s = f32s((size_t)T * rot / 2, -1, 1);
    std::vector<uint16_t> g(x.size()), r(x.size());
    b.ropeF16(x.data(), c.data(), s.data(), T, H, D, off, rot, true, g.data());
    ldref::rope(x.data(), c.data(), s.data(), T, H, D, off, rot, 1, r.data());
    report("rope interleaved", g, r);
  }
  {
    const int T = 45, Hq = 8, Hkv = 2, D = 64, Dv = 48;
    auto q = f16s((size_t)T * Hq * D, 3), k = f16s((size_t)T * Hkv * D, 3), v = f16s((size_t)T * Hkv * Dv, 2);
    auto sk = f32s(Hq, -4, 4);
    std::vector<uint16_t> g((size_t)T * Hq * Dv), r(g.size());
    b.attentionF16(q.data(), k.data(), v.data(), T, Hq, Hkv, D, Dv, 0.125f, 16, sk.data(), g.data());
    ldref::attention(q.data(), k.data(), v.data(), sk.data(), T, Hq, Hkv, D, Dv, 0.125f, 16, r.data());
    report("attention window+sink", g, r);
  }
  {
    const int rows = 17, n = 700;
    auto z = f32s((size_t)rows * n, -30, 30), sk = f32s(rows, -5, 40);
    std::vector<uint16_t> g((size_t)rows * n), r(g.size());
    b.softmax(z.data(), sk.data(), rows, n, g.data());
    ldref::softmax(z.data(), sk.data(), rows, n, r.data());
    report("softmax sink", g, r);
  }
  {
    const long long n = 100003;
    auto x = f16s(n, 12), y = f16s(n, 12);
    std::vector<uint16_t> g(n), r(n);
    b.swigluF16(x.data(), (size_t)n, y.data(), 7.0f, g.data());
    ldref::swiglu(x.data(), y.data(), n, 7.0f, r.data());
    report("swiglu limit 7", g, r);
    b.addF16(x.data(), (size_t)n, y.data(), g.data());
    ldref::add(x.data(), y.data(), n, r.data());
    report("add", g, r);
    b.mulScalarF16(x.data(), (size_t)n, 0.3f, g.data());
    ldref::mul_scalar(x.data(), n, 0.3f, r.data());
    report("mul_scalar", g, r);
  }
  {
    const int T = 40, D = 96;
    std::vector<int32_t> tok;
    for (int e = 0; e < 8; e++)
      for (int t = 0; t < T; t++)
        if ((t + e) % 3 == 0) tok.push_back(t);
    const int R = (int)tok.size();
    auto x = f16s((size_t)T * D, 4), yr = f16s((size_t)R * D, 4), sh = f16s((size_t)T * D, 4);
    std::vector<uint16_t> g((size_t)R * D), r(g.size());
    b.moe_gather(x.data(), T, tok.data(), R, D, g.data());
    ldref::moe_gather(x.data(), tok.data(), R, D, r.data());
    report("moe gather", g, r);
    std::vector<int32_t> start(T + 1), rows(R);
    ldref::moe_csr(tok.data(), R, T, start.data(), rows.data());
    std::vector<uint16_t> go((size_t)T * D), ro(go.size());
    b.moe_combine(yr.data(), R, start.data(), rows.data(), sh.data(), T, D, go.data());
    ldref::moe_combine(yr.data(), start.data(), rows.data(), sh.data(), T, D, ro.data());
    report("moe combine", go, ro);
  }
  {
    const int T = 300, hc = 4, iters = 20;
    auto A = f32s((size_t)T * hc * hc, -6, 6);
    std::vector<float> g(A.size()), r(A.size());
    b.sinkhorn(A.data(), T, hc, iters, 1e-6f, g.data());
    ldref::sinkhorn(A.data(), T, hc, iters, 1e-6f, r.data());
    report("sinkhorn", g, r);
  }
  {  // decode over a KV cache: window starting inside the cache, groups in reverse slot order, two on one sequence
    const int B = 3, Tq = 2, Bc = 2, cap = 40, Hq = 8, Hkv = 2, D = 64, Dv = 48, window = 9;
    const std::vector<int32_t> slot = {1, 0, 1}, start = {30, 3, 12};
    auto q = f16s((size_t)B * Tq * Hq * D, 3), k = f16s((size_t)Bc * cap * Hkv * D, 3), v = f16s((size_t)Bc * cap * Hkv * Dv, 2);
    auto sk = f32s(Hq, -4, 4);
    std::vector<uint16_t> g((size_t)B * Tq * Hq * Dv), r(g.size());
    b.attention_decode(q.data(), k.data(), v.data(), slot.data(), start.data(), sk.data(), B, Tq, Bc, cap, Hq, Hkv, D, Dv, 0.125f, window,
                       g.data());
    ldref::attention_decode(q.data(), k.data(), v.data(), slot.data(), start.data(), sk.data(), B, Tq, cap, Hq, Hkv, D, Dv, 0.125f,
                            window, r.data());
    report("attention_decode window+sink", g, r);
  }
  // ---- DeepSeek-V4 (deepseek.hip) ----
  {
    const int T = 7, hc = 4, D = 96, width = hc * D, iters = 20;
    for (bool head : {false, true}) {
      const int nmix = head ? hc : (2 + hc) * hc;
      auto x = f16s((size_t)T * width, 2);
      auto fn = f32s((size_t)nmix * width, -0.05, 0.05), base = f32s(nmix, -1, 1), sc = f32s(3, 0.5, 1.5);
      std::vector<uint16_t> gu((size_t)T * D), ru(gu.size());
      std::vector<float> gp((size_t)T * hc), rp(gp.size()), gc((size_t)T * hc * hc), rc(gc.size());
      if (head) b.hcHeadF16(x.data(), fn.data(), base.data(), sc.data(), T, hc, D, 1e-6f, 1e-6f, gu.data());
      else b.hcPreF16(x.data(), fn.data(), base.data(), sc.data(), T, hc, D, 1e-6f, 1e-6f, iters, gu.data(), gp.data(), gc.data());
      ldref::hc_pre_head(head, x.data(), fn.data(), base.data(), sc.data(), T, hc, D, 1e-6f, 1e-6f, iters, ru.data(), rp.data(), rc.data());
      report(head ? "hc_head" : "hc_pre u", gu, ru);
      if (!head) {
        report("hc_pre post", gp, rp);
        report("hc_pre comb", gc, rc);
      }
    }
    auto f = f16s((size_t)T * D, 3), x = f16s((size_t)T * width, 3);
    auto post = f32s((size_t)T * hc, 0, 2), comb = f32s((size_t)T * hc * hc, 0, 1);
    std::vector<uint16_t> g((size_t)T * width), r(g.size());
    b.hcPostF16(f.data(), x.data(), post.data(), comb.data(), T, hc, D, g.data());
    ldref::hc_post(f.data(), x.data(), post.data(), comb.data(), T, hc, D, r.data());
    report("hc_post", g, r);
  }
  for (bool overlap : {true, false}) {
    const int T = 67, ratio = overlap ? 4 : 16, dc = 40, w = (overlap ? 2 : 1) * dc;
    auto K = f32s((size_t)T * w, -3, 3), Z = f32s((size_t)T * w, -8, 8), ape = f32s((size_t)ratio * w, -1, 1);
    std::vector<uint16_t> g((size_t)(T / ratio) * dc), r(g.size());
    b.compressPoolF16(K.data(), Z.data(), ape.data(), T, ratio, dc, overlap, g.data());
    ldref::compress_pool(K.data(), Z.data(), ape.data(), T, ratio, dc, overlap, r.data());
    report(overlap ? "compress_pool overlap" : "compress_pool", g, r);
  }
  {
    const int T = 50, E = 64, k = 6;
    auto lg = f32s((size_t)T * E, -4, 4), bias = f32s(E, -0.5, 0.5);
    for (float& l : lg) l = (float)((int)(l * 4.0f)) / 4.0f;  // a 1/4 grid: tied scores, ties → lowest id
    std::vector<int32_t> given((size_t)T * k);
    for (auto& id : given) id = (int32_t)(rnd() % (uint64_t)E);
    for (int variant = 0; variant < 2; variant++) {
      const int32_t* gv = variant == 1 ? given.data() : nullptr;
      std::vector<int32_t> gi((size_t)T * k), ri(gi.size());
      std::vector<float> gw((size_t)T * k), rw(gw.size()), gs((size_t)T * E), rs(gs.size());
      b.routerF32(lg.data(), bias.data(), T, E, k, 2.5f, gv, gi.data(), gw.data(), gs.data());
      ldref::router(lg.data(), bias.data(), gv, T, E, k, 2.5f, ri.data(), rw.data(), rs.data());
      report(variant == 1 ? "router ids (given)" : "router ids (bias, ties)", gi, ri);
      report(variant == 1 ? "router weights (given)" : "router weights", gw, rw);
      report("router scores", gs, rs);
    }
  }
  {
    const int rows = 37, cols = 301;
    auto g = f16s((size_t)rows * cols, 12), u = f16s((size_t)rows * cols, 12);
    auto rw = f32s(rows, 0, 1);
    std::vector<uint16_t> go(g.size()), ro(g.size());
    b.swigluRowsF16(g.data(), u.data(), rows, cols, rw.data(), 7.0f, go.data());
    ldref::swiglu_rows(g.data(), u.data(), rw.data(), rows, cols, 7.0f, ro.data());
    report("swiglu_rows weights limit 7", go, ro);
  }
  {
    // gpt-oss: the router with a softmax over the chosen biased logits, and the interleaved clamped SwiGLU
    const int T = 29, E = 32, k = 4;
    auto lg = f32s((size_t)T * E, -4, 4), bias = f32s(E, -0.5, 0.5);
    for (int variant = 0; variant < 2; variant++) {
      std::vector<int32_t> given((size_t)T * k);
      for (size_t i = 0; i < given.size(); i++) given[i] = (int32_t)((i * 7 + 3) % E);
      const int32_t* gv = variant == 1 ? given.data() : nullptr;
      std::vector<int32_t> gi((size_t)T * k), ri(gi.size());
      std::vector<float> gw((size_t)T * k), rw(gw.size());
      b.ossRouterF32(lg.data(), bias.data(), T, E, k, gv, gi.data(), gw.data());
      ldref::oss_router(lg.data(), bias.data(), gv, T, E, k, ri.data(), rw.data());
      report(variant == 1 ? "oss_router ids (given)" : "oss_router ids", gi, ri);
      report(variant == 1 ? "oss_router weights (given)" : "oss_router weights", gw, rw);
    }
    const int rows = 21, I = 90;
    auto h = f16s((size_t)rows * 2 * I, 13);
    std::vector<uint16_t> go((size_t)rows * I), ro(go.size());
    b.ossSwigluF16(h.data(), rows, I, 7.0f, 1.702f, go.data());
    ldref::oss_swiglu(h.data(), rows, I, 7.0f, 1.702f, ro.data());
    report("oss_swiglu limit 7", go, ro);
  }
  {
    const int T = 97, nh = 4, hd = 40, ratio = 4, topk = 7, B = T / ratio;
    auto q = f16s((size_t)T * nh * hd, 2), w = f16s((size_t)T * nh, 1), e = f16s((size_t)B * hd, 2);
    for (int bl = 1; bl < B; bl += 2) std::copy(e.begin() + (size_t)(bl - 1) * hd, e.begin() + (size_t)bl * hd, e.begin() + (size_t)bl * hd);
    std::vector<float> gs((size_t)T * B), rs(gs.size());
    std::vector<int32_t> gp((size_t)T * topk), rp(gp.size());
    b.indexerTopkF16(q.data(), w.data(), e.data(), T, nh, hd, B, ratio, 0, topk, 0.1f, gs.data(), gp.data());
    ldref::indexer_topk(q.data(), w.data(), e.data(), T, nh, hd, B, ratio, 0, topk, 0.1f, rs.data(), rp.data());
    report("indexer_topk scores (ties)", gs, rs);
    report("indexer_topk picks", gp, rp);
    // The last rows alone (a decode step's call): row t is position t0 + t, so they must give the full
    // call's rows t0.. — expected values from the t0 = 0 reference above, not from another t0 > 0 run.
    const int t0 = 61, T2 = T - t0;
    std::vector<float> gs2((size_t)T2 * B), rs2(rs.begin() + (size_t)t0 * B, rs.end());
    std::vector<int32_t> gp2((size_t)T2 * topk), rp2(rp.begin() + (size_t)t0 * topk, rp.end());
    b.indexerTopkF16(q.data() + (size_t)t0 * nh * hd, w.data() + (size_t)t0 * nh, e.data(), T2, nh, hd, B, ratio, t0, topk, 0.1f, gs2.data(),
                   gp2.data());
    report("indexer_topk t0 61 scores", gs2, rs2);
    report("indexer_topk t0 61 picks", gp2, rp2);
  }
  {
    const int T = 45, H = 4, D = 72, B = 11, window = 8, K = 6;
    auto q = f16s((size_t)T * H * D, 3), kv = f16s((size_t)T * D, 3), comp = f16s((size_t)B * D, 3);
    auto sk = f32s(H, -4, 4);
    std::vector<int32_t> cand((size_t)T * K);
    for (auto& c : cand) c = (int32_t)(rnd() % (uint64_t)(B + 1)) - 1;
    std::vector<uint16_t> g((size_t)T * H * D), r(g.size());
    b.sparseAttentionF16(q.data(), kv.data(), comp.data(), T, H, D, B, window, cand.data(), K, sk.data(), 0.125f, g.data());
    ldref::sparse_attention(q.data(), kv.data(), comp.data(), cand.data(), sk.data(), T, H, D, window, K, 0.125f, r.data());
    report("sparse_attention window+sink", g, r);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc >= 2 ? argv[1] : "";
#ifdef LD_HIP_CPU
  // The HIP-CPU build: the same Backend over module_check_cpu.h's table (kernels compiled in, stepped on the CPU).
  if (mode != "cpu") {
    fprintf(stderr, "usage: module_check cpu   (this is the HIP-CPU build)\n");
    return 2;
  }
  printf("module_check: HIP-CPU: the kernels compiled into this binary, stepped on the CPU (no GPU, no code object)\n");
  const std::vector<char> image = {'h', 'i', 'p', '-', 'c', 'p', 'u'};
  auto open_backend = [&](ldgpu::Backend& b) { b.open(ldcpu::api(), image); };
  const char* what = "kernels compiled in";
#else
  if (argc < 3 || (mode != "amd" && mode != "cuda")) {
    fprintf(stderr, "usage: module_check amd|cuda <code object>\n");
    return 2;
  }
  const ldgpu::Flavour f = mode == "cuda" ? ldgpu::Flavour::Cuda : ldgpu::Flavour::Amd;
  const ldgpu::ProbeResult p = f == ldgpu::Flavour::Cuda ? ldgpu::probe_cuda() : ldgpu::probe_amd();
  printf("module_check: probe: library %s (%s), %d device(s), name '%s', arch '%s', runtime %d, driver %d%s%s\n",
         p.library ? "loaded" : "missing", p.library_name.c_str(), p.device_count, p.device_name.c_str(), p.arch.c_str(),
         p.runtime_version, p.driver_version, p.error.empty() ? "" : "; ", p.error.c_str());
  if (p.device_count == 0) return 2;
  std::ifstream in(argv[2], std::ios::binary);
  const std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto open_backend = [&](ldgpu::Backend& b) { b.open(f, image); };
  const char* what = argv[2];
#endif
  try {
    ldgpu::Backend b;
    open_backend(b);
    printf("module_check: code object %s (%zu bytes) loaded, %zu kernels resolved, widen self-check passed\n", what, image.size(),
           ldgpu::Backend::kernel_names().size());
    run(b);
  } catch (const std::exception& e) {
    printf("module_check: %s\n", e.what());
    return 1;
  }
  printf("module_check: %s\n", g_bad == 0 ? "every op bit-identical to the host reference" : "MISMATCHES");
  return g_bad == 0 ? 0 : 1;
}
