// device_check — builds with hipcc (AMD) or nvcc (NVIDIA, through kernels/hip_to_cuda.h), runs every kernel of
// device-hip/kernels on seeded random inputs, and prints one table row per case:
//   op, shape | mism = outputs whose bits differ from the host reference (ld_host_ref.h: the LD_HD element
//   functions + the documented accumulation orders = what the `emulated` backend computes; NaN == NaN) |
//   ulp = the largest distance to it, in units of the output type (f16 or f32) | f64 = the largest error
//   against a float64 evaluation of the same formula (libm exp/sqrt in double), in output-type ulps |
//   time per call | achieved GB/s and TFLOP/s, against the ceilings measured first (a 16-byte copy kernel for
//   bandwidth, an FMA-chain kernel for FP32 FMA throughput).
// Large cases verify a random sample of outputs (marked "sampled"); everything else is checked in full.
// Exit status: 0 when every case is bit-identical, 1 otherwise, 2 when no GPU could be used.
#include "all.hip"
#include "ld_host_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

// ------------------------------------------------------------------------------------------------------
// Plumbing
// ------------------------------------------------------------------------------------------------------
static void ck(hipError_t e, const char* what, int line) {
  if (e != hipSuccess) {
    fprintf(stderr, "device_check: %s failed at line %d: %s\n", what, line, hipGetErrorString(e));
    fflush(stdout);
    exit(3);
  }
}
#define CK(x) ck((x), #x, __LINE__)

template <class T>
struct DBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DBuf(size_t count) : n(count) { CK(hipMalloc((void**)&p, (count == 0 ? 1 : count) * sizeof(T))); }
  DBuf(const std::vector<T>& h) : DBuf(h.size()) { up(h); }
  ~DBuf() { (void)hipFree(p); }
  DBuf(const DBuf&) = delete;
  DBuf& operator=(const DBuf&) = delete;
  void up(const std::vector<T>& h) { CK(hipMemcpy(p, h.data(), h.size() * sizeof(T), hipMemcpyHostToDevice)); }
  std::vector<T> down() const {
    std::vector<T> h(n);
    CK(hipMemcpy(h.data(), p, n * sizeof(T), hipMemcpyDeviceToHost));
    return h;
  }
};

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uni() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double sym(double a) { return (2.0 * uni() - 1.0) * a; }
};

// Parallel fill: each chunk its own stream, seeded from (seed, chunk), so results do not depend on threads.
template <class F>
static void pfill(size_t n, uint64_t seed, F&& f) {
  const size_t chunk = 1 << 16;
  const long long nch = (long long)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
  for (long long c = 0; c < nch; c++) {
    Rng r(seed * 1000003ull + (uint64_t)c);
    const size_t e = std::min(n, (size_t)(c + 1) * chunk);
    for (size_t i = (size_t)c * chunk; i < e; i++) f(i, r);
  }
}

static std::vector<uint16_t> rand_f16(size_t n, double amp, uint64_t seed) {
  std::vector<uint16_t> v(n);
  pfill(n, seed, [&](size_t i, Rng& r) { v[i] = ld_f32_to_f16((float)r.sym(amp)); });
  return v;
}
static std::vector<float> rand_f32(size_t n, double lo, double hi, uint64_t seed) {
  std::vector<float> v(n);
  pfill(n, seed, [&](size_t i, Rng& r) { v[i] = (float)(lo + (hi - lo) * r.uni()); });
  return v;
}
static std::vector<uint8_t> rand_bytes(size_t n, int lo, int hi, uint64_t seed) {  // [lo, hi]
  std::vector<uint8_t> v(n);
  pfill(n, seed, [&](size_t i, Rng& r) { v[i] = (uint8_t)(lo + (int)(r.next() % (uint64_t)(hi - lo + 1))); });
  return v;
}

static double f16v(uint16_t h) { return (double)ld_f16_to_f32(h); }
static bool nan16(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }
static long long ord16(uint16_t h) { return (h & 0x8000) ? -(long long)(h & 0x7FFF) : (long long)h; }
static bool nan32(float f) { return f != f; }
static long long ord32(float f) {
  const uint32_t u = ld_f32_bits(f);
  return (u & 0x80000000u) ? -(long long)(u & 0x7FFFFFFFu) : (long long)u;
}
static double ulp16(double r) {
  const double a = fabs(r);
  if (a < 6.103515625e-05) return 5.9604644775390625e-08;
  return ldexp(1.0, (int)floor(log2(a)) - 10);
}
static double ulp32(double r) {
  const double a = fabs(r);
  if (a < 1.1754943508222875e-38) return ldexp(1.0, -149);
  return ldexp(1.0, (int)floor(log2(a)) - 23);
}

// ------------------------------------------------------------------------------------------------------
// Comparison and the table
// ------------------------------------------------------------------------------------------------------
struct Cmp {
  long long checked = 0, mism = 0, nan_mism = 0, maxulp = 0;
  long long first = -1;
  double f64err = 0.0;  // max |gpu − f64| / ulp(f64), over finite in-range references
  double f64abs = 0.0, f64ref = 0.0;  // max |gpu − f64| and max |f64|: "rel" = their ratio (normwise)
  bool f64 = false;
};

static void cmp16(Cmp& c, long long idx, uint16_t g, uint16_t r) {
  c.checked++;
  const bool gn = nan16(g), rn = nan16(r);
  if (gn && rn) return;
  if (gn != rn || g != r) {
    if (c.first < 0) c.first = idx;
    c.mism++;
    if (gn != rn) c.nan_mism++;
    else c.maxulp = std::max(c.maxulp, std::llabs(ord16(g) - ord16(r)));
  }
}
static void cmp32(Cmp& c, long long idx, float g, float r) {
  c.checked++;
  const bool gn = nan32(g), rn = nan32(r);
  if (gn && rn) return;
  if (gn != rn || ld_f32_bits(g) != ld_f32_bits(r)) {
    if (c.first < 0) c.first = idx;
    c.mism++;
    if (gn != rn) c.nan_mism++;
    else c.maxulp = std::max(c.maxulp, std::llabs(ord32(g) - ord32(r)));
  }
}
static void f64_16(Cmp& c, uint16_t g, double r) {
  if (!std::isfinite(r) || fabs(r) > 65504.0) return;
  c.f64 = true;
  const double gv = f16v(g);
  const double e = std::isfinite(gv) ? fabs(gv - r) / ulp16(r) : INFINITY;
  if (e > c.f64err) c.f64err = e;
  c.f64abs = std::max(c.f64abs, std::isfinite(gv) ? fabs(gv - r) : INFINITY);
  c.f64ref = std::max(c.f64ref, fabs(r));
}
static void f64_32(Cmp& c, float g, double r) {
  if (!std::isfinite(r)) return;
  c.f64 = true;
  const double e = std::isfinite(g) ? fabs((double)g - r) / ulp32(r) : INFINITY;
  if (e > c.f64err) c.f64err = e;
  c.f64abs = std::max(c.f64abs, std::isfinite(g) ? fabs((double)g - r) : INFINITY);
  c.f64ref = std::max(c.f64ref, fabs(r));
}

static double g_bw = 0.0, g_fma = 0.0;  // measured ceilings: bytes/s, FLOP/s
static int g_fail = 0, g_rows = 0;

static void row(const char* op, const std::string& shape, const char* out, const Cmp& c, bool sampled, double ms,
                double bytes, double flops) {
  g_rows++;
  if (c.mism > 0) g_fail++;
  char mism[48], ulp[32], f64[32], rel[32], t[32], gbs[32], tfs[32], pct[32];
  snprintf(mism, sizeof mism, "%lld/%lld%s", c.mism, c.checked, sampled ? " s" : "");
  if (c.nan_mism > 0) snprintf(ulp, sizeof ulp, "NaN%lld", c.nan_mism);
  else snprintf(ulp, sizeof ulp, "%lld", c.maxulp);
  if (c.f64) {
    snprintf(f64, sizeof f64, "%.2f", c.f64err);
    snprintf(rel, sizeof rel, "%.1e", c.f64ref > 0 ? c.f64abs / c.f64ref : c.f64abs);
  } else {
    snprintf(f64, sizeof f64, "-");
    snprintf(rel, sizeof rel, "-");
  }
  if (ms > 0) snprintf(t, sizeof t, "%.4f", ms);
  else snprintf(t, sizeof t, "-");
  gbs[0] = tfs[0] = pct[0] = 0;
  snprintf(gbs, sizeof gbs, "-");
  snprintf(tfs, sizeof tfs, "-");
  snprintf(pct, sizeof pct, "-");
  if (ms > 0) {
    const double s = ms * 1e-3;
    if (bytes > 0) snprintf(gbs, sizeof gbs, "%.0f", bytes / s * 1e-9);
    if (flops > 0) snprintf(tfs, sizeof tfs, "%.2f", flops / s * 1e-12);
    const bool compute = flops > 0 && g_fma > 0 && g_bw > 0 && flops / (bytes > 0 ? bytes : 1) > g_fma / g_bw;
    if (compute) snprintf(pct, sizeof pct, "%.0f%% fma", 100.0 * flops / s / g_fma);
    else if (bytes > 0 && g_bw > 0) snprintf(pct, sizeof pct, "%.0f%% copy", 100.0 * bytes / s / g_bw);
  }
  printf("| %-23s | %-34s | %-3s | %-16s | %-5s | %-7s | %-7s | %-8s | %-5s | %-7s | %-9s |\n", op, shape.c_str(), out, mism, ulp,
         f64, rel, t, gbs, tfs, pct);
  if (c.mism > 0) printf("|   first mismatch at flat index %lld\n", c.first);
  fflush(stdout);
}

// Time a launch sequence: one warm-up, one probe, then enough repetitions for ~40 ms (3..50).
template <class F>
static double time_ms(F&& launch) {
  hipEvent_t a, b;
  CK(hipEventCreate(&a));
  CK(hipEventCreate(&b));
  launch();
  CK(hipGetLastError());
  CK(hipDeviceSynchronize());
  CK(hipEventRecord(a, 0));
  launch();
  CK(hipEventRecord(b, 0));
  CK(hipEventSynchronize(b));
  float one = 0;
  CK(hipEventElapsedTime(&one, a, b));
  int reps = one > 0 ? (int)(40.0 / one) : 50;
  reps = std::max(3, std::min(50, reps));
  CK(hipEventRecord(a, 0));
  for (int i = 0; i < reps; i++) launch();
  CK(hipEventRecord(b, 0));
  CK(hipEventSynchronize(b));
  float tot = 0;
  CK(hipEventElapsedTime(&tot, a, b));
  CK(hipGetLastError());
  (void)hipEventDestroy(a);
  (void)hipEventDestroy(b);
  return tot / reps;
}

static dim3 grid_of(const LdLaunch& L) { return dim3(L.grid_x, L.grid_y, 1); }
#define LAUNCH(fn, L, args) hipLaunchKernelGGL(fn, grid_of(L), dim3((L).block_x), (L).shmem, 0, args)

static void need(const LdLaunch& L) {
  if (L.kernel == nullptr) {
    fprintf(stderr, "device_check: plan refused: %s\n", L.msg);
    exit(3);
  }
}

// ------------------------------------------------------------------------------------------------------
// Ceilings
// ------------------------------------------------------------------------------------------------------
__global__ void ck_copy(const uint4* __restrict__ a, uint4* __restrict__ b, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) b[i] = a[i];
}
__global__ void ck_fma(float* out, int iters, float s) {
  float v[8];
  for (int j = 0; j < 8; j++) v[j] = (float)(threadIdx.x + j) * 1e-3f;
  for (int i = 0; i < iters; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = fmaf(v[j], s, 0.5f);
  float t = 0;
  for (int j = 0; j < 8; j++) t += v[j];
  if (t == 12345.678f) out[0] = t;  // keeps the chains live
}

static void ceilings(int sms) {
  const size_t bytes = (size_t)2 << 30;  // 2 GiB each way
  const size_t n = bytes / 16;
  uint4 *a, *b;
  CK(hipMalloc((void**)&a, bytes));
  CK(hipMalloc((void**)&b, bytes));
  CK(hipMemset(a, 1, bytes));
  const double ms = time_ms([&] { hipLaunchKernelGGL(ck_copy, dim3(sms * 8), dim3(512), 0, 0, a, b, n); });
  g_bw = 2.0 * bytes / (ms * 1e-3);
  (void)hipFree(a);
  (void)hipFree(b);
  float* o;
  CK(hipMalloc((void**)&o, 4));
  const int iters = 1 << 14, blocks = sms * 16, threads = 256;
  const double ms2 = time_ms([&] { hipLaunchKernelGGL(ck_fma, dim3(blocks), dim3(threads), 0, 0, o, iters, 0.999f); });
  g_fma = 2.0 * 8.0 * iters * (double)blocks * threads / (ms2 * 1e-3);
  (void)hipFree(o);
  printf("ceilings: copy %.0f GB/s (read+write, 2 GiB, %.3f ms); FP32 FMA %.2f TFLOP/s (%.3f ms)\n\n", g_bw * 1e-9, ms,
         g_fma * 1e-12, ms2);
}

static void header() {
  printf("| %-23s | %-34s | %-3s | %-16s | %-5s | %-7s | %-7s | %-8s | %-5s | %-7s | %-9s |\n", "op", "shape", "out",
         "mism/checked", "ulp", "f64 ulp", "f64 rel", "ms", "GB/s", "TFLOP/s", "of ceiling");
  const int w[] = {25, 36, 5, 18, 7, 9, 9, 10, 7, 9, 11};
  std::string sep = "|";
  for (int x : w) sep += std::string(x, '-') + "|";
  printf("%s\n", sep.c_str());
}

// ------------------------------------------------------------------------------------------------------
// Cases
// ------------------------------------------------------------------------------------------------------
static void case_widen() {
  DBuf<uint32_t> y(65536);
  LdWidenCheckArgs a{y.p};
  const LdLaunch L = ld_plan_widen_check();
  LAUNCH(ld_widen_check, L, a);
  CK(hipDeviceSynchronize());
  const std::vector<uint32_t> g = y.down();
  Cmp c;
  for (int h = 0; h < 65536; h++) cmp32(c, h, ld_bits_f32(g[h]), ld_f16_to_f32((uint16_t)h));
  row("widen_f16 (hw cvt)", "all 65536 f16", "f32", c, false, 0, 0, 0);
}

static double e2m1d(int c) {
  static const double m[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (c & 8 ? -1 : 1) * m[c & 7];
}

static void case_dequant_mxfp4(int out, int in, int fault, bool timed, const char* label) {
  const std::vector<uint8_t> w = rand_bytes((size_t)out * in / 2, 0, 255, 11 + fault);
  const std::vector<uint8_t> s = rand_bytes((size_t)out * in / 32, 112, 138, 12 + fault);
  DBuf<uint8_t> dw(w), ds(s);
  DBuf<uint16_t> dy((size_t)out * in);
  LdDequantArgs a{dw.p, ds.p, dy.p, 0, 0, out, in, 1, 32, fault};
  const LdLaunch L = ld_plan_dequant(&a);
  need(L);
  double ms = 0;
  if (timed) ms = time_ms([&] { LAUNCH(ld_dequant_mxfp4, L, a); });
  else LAUNCH(ld_dequant_mxfp4, L, a);
  CK(hipDeviceSynchronize());
  const std::vector<uint16_t> g = dy.down();
  std::vector<uint16_t> r((size_t)out * in);
  ldref::dequant(0, w.data(), s.data(), 0, out, in, 1, 32, fault, r.data());
  Cmp c;
  for (size_t i = 0; i < r.size(); i++) cmp16(c, (long long)i, g[i], r[i]);
  if (fault == 0) {
    for (size_t i = 0; i < r.size(); i += 7) {
      const size_t o = i / in, k = i % in;
      const int nib = (w[o * (in / 2) + k / 2] >> (4 * (k & 1))) & 15;
      f64_16(c, g[i], e2m1d(nib) * ldexp(1.0, (int)s[o * (in / 32) + k / 32] - 127));
    }
  }
  char sh[64];
  snprintf(sh, sizeof sh, "[%d×%d] fault %d", out, in, fault);
  row(label, sh, "f16", c, false, ms, (double)out * in * (0.5 + 1.0 / 32 + 2), 0);
}

// NVFP4: every output against ldref (the element function), and, without a fault, against the format's
// definition in double: E2M1 · float32(e4m3(s) · g) or float32(e4m3(s) / g), rounded once to FP16.
static double e4m3d(uint8_t b);
static void case_dequant_nvfp4(int out, int in, float g, int divisor, int fault, bool timed, const char* label) {
  const std::vector<uint8_t> w = rand_bytes((size_t)out * in / 2, 0, 255, 31 + fault);
  const std::vector<uint8_t> s = rand_bytes((size_t)out * in / 16, 0x10, 0x76, 32 + fault);  // no NaN code
  DBuf<uint8_t> dw(w), ds(s);
  DBuf<uint16_t> dy((size_t)out * in);
  LdDequantNvfp4Args a{dw.p, ds.p, dy.p, out, in, divisor, fault, g};
  const LdLaunch L = ld_plan_dequant_nvfp4(&a);
  need(L);
  double ms = 0;
  if (timed) ms = time_ms([&] { LAUNCH(ld_dequant_nvfp4, L, a); });
  else LAUNCH(ld_dequant_nvfp4, L, a);
  CK(hipDeviceSynchronize());
  const std::vector<uint16_t> gpu = dy.down();
  std::vector<uint16_t> r((size_t)out * in);
  ldref::dequant_nvfp4(w.data(), s.data(), out, in, g, divisor, fault, r.data());
  Cmp c;
  for (size_t i = 0; i < r.size(); i++) cmp16(c, (long long)i, gpu[i], r[i]);
  if (fault == 0) {
    for (size_t i = 0; i < r.size(); i += 7) {
      const size_t o = i / in, k = i % in;
      const int nib = (w[o * (in / 2) + k / 2] >> (4 * (k & 1))) & 15;
      const float sc = divisor ? (float)e4m3d(s[o * (in / 16) + k / 16]) / g : (float)e4m3d(s[o * (in / 16) + k / 16]) * g;
      f64_16(c, gpu[i], (double)(float)(e2m1d(nib) * (double)sc));
    }
  }
  char sh[64];
  snprintf(sh, sizeof sh, "[%d×%d] g %s%g fault %d", out, in, divisor ? "/" : "·", g, fault);
  row(label, sh, "f16", c, false, ms, (double)out * in * (0.5 + 1.0 / 16 + 2), 0);
}

// bitsandbytes 4-bit with and without double quant: every output against ldref.
static void case_dequant_bnb4(int out, int in, int blocksize, bool dq, int fault, bool timed, const char* label) {
  const long long n = (long long)out * in;
  const int nb = (int)((n + blocksize - 1) / blocksize);
  const std::vector<uint8_t> w = rand_bytes((size_t)(n + 1) / 2, 0, 255, 41 + fault);
  std::vector<uint8_t> am;
  std::vector<float> qm(16), nabs((size_t)(nb + 255) / 256), nmap(256);
  for (int c = 0; c < 16; c++) qm[c] = ld_nf4_to_f32(c);
  for (int c = 0; c < 256; c++) nmap[c] = -1.0f + (float)c / 128.0f;
  for (size_t k = 0; k < nabs.size(); k++) nabs[k] = 0.01f * (float)(k + 1);
  if (dq) am = rand_bytes((size_t)nb, 0, 255, 42);
  else {
    am.resize((size_t)nb * 4);
    for (int b = 0; b < nb; b++) {
      const float v = 0.001f + 0.0007f * (float)(b % 97);
      memcpy(&am[(size_t)b * 4], &v, 4);
    }
  }
  DBuf<uint8_t> dw(w), da(am);
  DBuf<float> dq_(qm), dna(nabs), dnm(nmap);
  DBuf<uint16_t> dy((size_t)n);
  LdDequantBnb4Args a{dw.p, da.p, dq_.p, dna.p, dnm.p, dy.p, n, blocksize, dq ? 1 : 0, 256, fault, 0.0123f};
  const LdLaunch L = ld_plan_dequant_bnb4(&a);
  need(L);
  double ms = 0;
  if (timed) ms = time_ms([&] { LAUNCH(ld_dequant_bnb4, L, a); });
  else LAUNCH(ld_dequant_bnb4, L, a);
  CK(hipDeviceSynchronize());
  const std::vector<uint16_t> gpu = dy.down();
  std::vector<uint16_t> r((size_t)n);
  ldref::dequant_bnb4(w.data(), am.data(), dq ? 1 : 0, qm.data(), nabs.data(), nmap.data(), 0.0123f, 256, n, blocksize, fault, r.data());
  Cmp c;
  for (size_t i = 0; i < r.size(); i++) cmp16(c, (long long)i, gpu[i], r[i]);
  char sh[64];
  snprintf(sh, sizeof sh, "[%d×%d] bs %d%s fault %d", out, in, blocksize, dq ? " dq" : "", fault);
  row(label, sh, "f16", c, false, ms, (double)n * (0.5 + 2) + (double)am.size(), 0);
}

static double e4m3d(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const double sg = b & 0x80 ? -1 : 1;
  if (e == 15 && m == 7) return NAN;
  if (e == 0) return sg * m * ldexp(1.0, -9);
  return sg * (1 + m / 8.0) * ldexp(1.0, e - 7);
}

static void case_dequant_fp8(int out, int in, int bo, int bi, bool f32s, int fault, bool timed, const char* label) {
  const int R = (out + bo - 1) / bo, C = (in + bi - 1) / bi;
  const std::vector<uint8_t> w = rand_bytes((size_t)out * in, 0, 255, 21 + fault);
  std::vector<uint8_t> s;
  if (f32s) {
    const std::vector<float> sf = rand_f32((size_t)R * C, 1e-4, 4e-3, 22 + fault);
    s.resize(sf.size() * 4);
    memcpy(s.data(), sf.data(), s.size());
  } else {
    s = rand_bytes((size_t)R * C, 118, 130, 22 + fault);
  }
  DBuf<uint8_t> dw(w), ds(s);
  DBuf<uint16_t> dy((size_t)out * in);
  LdDequantArgs a{dw.p, ds.p, dy.p, 1, f32s ? 1 : 0, out, in, bo, bi, fault};
  const LdLaunch L = ld_plan_dequant(&a);
  need(L);
  double ms = 0;
  if (timed) ms = time_ms([&] { LAUNCH(ld_dequant_fp8, L, a); });
  else LAUNCH(ld_dequant_fp8, L, a);
  CK(hipDeviceSynchronize());
  const std::vector<uint16_t> g = dy.down();
  std::vector<uint16_t> r((size_t)out * in);
  ldref::dequant(1, w.data(), s.data(), f32s, out, in, bo, bi, fault, r.data());
  Cmp c;
  for (size_t i = 0; i < r.size(); i++) cmp16(c, (long long)i, g[i], r[i]);
  if (fault == 0) {
    for (size_t i = 0; i < r.size(); i += 7) {
      const size_t o = i / in, k = i % in, at = (o / bo) * C + k / bi;
      double sc;
      if (f32s) sc = (double)ld_load_f32le(s.data() + 4 * at);
      else sc = ldexp(1.0, (int)s[at] - 127);
      f64_16(c, g[i], e4m3d(w[i]) * sc);
    }
  }
  char sh[80];
  snprintf(sh, sizeof sh, "[%d×%d] blk %d×%d %s f%d", out, in, bo, bi, f32s ? "f32s" : "e8m0", fault);
  row(label, sh, "f16", c, false, ms, (double)out * in * 3 + (double)s.size(), 0);
}

static void case_dequant_plain(int kind, int out, int in) {
  const size_t n = (size_t)out * in, esz = kind == 4 ? 4 : 2;
  std::vector<uint8_t> w(n * esz);
  if (kind == 4) {
    const std::vector<float> f = rand_f32(n, -70000.0, 70000.0, 31);
    memcpy(w.data(), f.data(), w.size());
  } else {
    w = rand_bytes(n * esz, 0, 255, 32);
  }
  DBuf<uint8_t> dw(w);
  DBuf<uint16_t> dy(n);
  LdDequantArgs a{dw.p, nullptr, dy.p, kind, 0, out, in, 1, 1, 0};
  const LdLaunch L = ld_plan_dequant(&a);
  const double ms = time_ms([&] { LAUNCH(ld_dequant_plain, L, a); });
  const std::vector<uint16_t> g = dy.down();
  std::vector<uint16_t> r(n);
  ldref::dequant(kind, w.data(), nullptr, 0, out, in, 1, 1, 0, r.data());
  Cmp c;
  for (size_t i = 0; i < n; i++) cmp16(c, (long long)i, g[i], r[i]);
  for (size_t i = 0; i < n; i += 5) {
    double v;
    if (kind == 4) v = (double)ld_load_f32le(w.data() + 4 * i);
    else v = (double)ld_bf16_to_f32((uint16_t)(w[2 * i] | (w[2 * i + 1] << 8)));
    f64_16(c, g[i], v);
  }
  char sh[48];
  snprintf(sh, sizeof sh, "[%d×%d]", out, in);
  row(kind == 4 ? "dequant_f32" : "dequant_bf16", sh, "f16", c, false, ms, (double)n * (esz + 2), 0);
}

// GEMM: wfmt 0 f16 weights, 1 fused MXFP4. f32out: y32. sample > 0: verify that many random outputs.
static void case_gemm(int m, int k, int n, int wfmt, bool f32out, int fault, long long sample, bool specials, const char* label) {
  std::vector<uint16_t> x = rand_f16((size_t)m * k, 2.0, 41 + m + k);
  std::vector<uint16_t> w;
  std::vector<uint8_t> wq, wsc;
  if (wfmt == LD_W_F16) w = rand_f16((size_t)n * k, 0.5, 42 + n);
  else {
    wq = rand_bytes((size_t)n * k / 2, 0, 255, 43 + n);
    wsc = rand_bytes((size_t)n * k / 32, 118, 126, 44 + n);
  }
  if (specials) {  // an Inf in row 0 and a NaN in column 2, and alpha 2^16 overflows some outputs
    x[3 % x.size()] = 0x7C00;
    if (wfmt == LD_W_F16 && n > 2) w[(size_t)2 * k + 5 % k] = 0x7E00;
  }
  const float alpha = specials ? 65536.0f : 0.3f;
  DBuf<uint16_t> dx(x);
  DBuf<uint16_t> dw(wfmt == LD_W_F16 ? w : std::vector<uint16_t>(1));
  DBuf<uint8_t> dq(wfmt == LD_W_MXFP4 ? wq : std::vector<uint8_t>(1)), ds(wfmt == LD_W_MXFP4 ? wsc : std::vector<uint8_t>(1));
  DBuf<uint16_t> dy16(f32out ? 1 : (size_t)m * n);
  DBuf<float> dy32(f32out ? (size_t)m * n : 1);
  LdGemmArgs a{dx.p, wfmt == LD_W_F16 ? dw.p : nullptr, wfmt == LD_W_MXFP4 ? dq.p : nullptr, wfmt == LD_W_MXFP4 ? ds.p : nullptr,
               f32out ? nullptr : dy16.p, f32out ? dy32.p : nullptr, m, k, n, wfmt, fault, alpha};
  const LdLaunch L = ld_plan_gemm(&a);
  need(L);
  const std::string kn = L.kernel;
  auto go = [&] {
    if (kn == "ld_gemm_tiled_f16") LAUNCH(ld_gemm_tiled_f16, L, a);
    else if (kn == "ld_gemm_tiled_mxfp4") LAUNCH(ld_gemm_tiled_mxfp4, L, a);
    else if (kn == "ld_gemm_skinny_f16_1") LAUNCH(ld_gemm_skinny_f16_1, L, a);
    else if (kn == "ld_gemm_skinny_f16_2") LAUNCH(ld_gemm_skinny_f16_2, L, a);
    else if (kn == "ld_gemm_skinny_f16_4") LAUNCH(ld_gemm_skinny_f16_4, L, a);
    else if (kn == "ld_gemm_skinny_f16_8") LAUNCH(ld_gemm_skinny_f16_8, L, a);
    else if (kn == "ld_gemm_skinny_mxfp4_1") LAUNCH(ld_gemm_skinny_mxfp4_1, L, a);
    else if (kn == "ld_gemm_skinny_mxfp4_2") LAUNCH(ld_gemm_skinny_mxfp4_2, L, a);
    else if (kn == "ld_gemm_skinny_mxfp4_4") LAUNCH(ld_gemm_skinny_mxfp4_4, L, a);
    else LAUNCH(ld_gemm_skinny_mxfp4_8, L, a);
  };
  const double ms = time_ms(go);
  Cmp c;
  const std::vector<uint16_t> g16 = f32out ? std::vector<uint16_t>() : dy16.down();
  const std::vector<float> g32 = f32out ? dy32.down() : std::vector<float>();
  // Outputs to verify: all, or a fixed random sample.
  std::vector<long long> idx;
  if (sample > 0) {
    Rng r(77);
    for (long long s = 0; s < sample; s++) idx.push_back((long long)(r.next() % (uint64_t)((long long)m * n)));
  } else {
    idx.resize((size_t)m * n);
    for (long long i = 0; i < (long long)m * n; i++) idx[i] = i;
  }
  std::vector<uint16_t> r16(idx.size());
  std::vector<float> r32(idx.size());
  std::vector<double> r64(idx.size());
  const uint16_t* wp = wfmt == LD_W_F16 ? w.data() : nullptr;
#pragma omp parallel
  {
    std::vector<uint16_t> wrow((size_t)k);
#pragma omp for schedule(dynamic, 64)
    for (long long q = 0; q < (long long)idx.size(); q++) {
      const int i = (int)(idx[q] / n), j = (int)(idx[q] % n);
      const float d = ldref::gemm_dot(x.data(), wp, wq.data(), wsc.data(), k, n, i, j, fault, wrow.data());
      r32[q] = d;
      r16[q] = ld_f32_to_f16(alpha * d);
      const uint16_t* wr = wp != nullptr ? wp + (size_t)j * k : wrow.data();
      double s = 0;
      for (int kk = 0; kk < k; kk++) s += f16v(x[(size_t)i * k + kk]) * f16v(wr[kk]);
      r64[q] = f32out ? s : (double)alpha * s;
    }
  }
  for (size_t q = 0; q < idx.size(); q++) {
    if (f32out) {
      cmp32(c, idx[q], g32[idx[q]], r32[q]);
      f64_32(c, g32[idx[q]], r64[q]);
    } else {
      cmp16(c, idx[q], g16[idx[q]], r16[q]);
      f64_16(c, g16[idx[q]], r64[q]);
    }
  }
  char sh[96];
  snprintf(sh, sizeof sh, "m%d k%d n%d%s%s", m, k, n, fault ? " fault" : "", specials ? " NaN/Inf" : "");
  if (fault) snprintf(sh, sizeof sh, "m%d k%d n%d fault %d", m, k, n, fault);
  const double wbytes = wfmt == LD_W_F16 ? 2.0 * n * k : n * (double)k * (0.5 + 1.0 / 32);
  row(label, sh, f32out ? "f32" : "f16", c, sample > 0, ms, 2.0 * m * k + wbytes + (f32out ? 4.0 : 2.0) * m * n,
      2.0 * m * (double)n * k);
}

static void case_rmsnorm(int rows, int dim) {
  const std::vector<uint16_t> x = rand_f16((size_t)rows * dim, 3.0, 51 + dim), w = rand_f16(dim, 1.5, 52);
  DBuf<uint16_t> dx(x), dw(w), dy((size_t)rows * dim);
  LdRmsnormArgs a{dx.p, dw.p, dy.p, rows, dim, 1e-6f};
  const LdLaunch L = ld_plan_rmsnorm(&a);
  const double ms = time_ms([&] { LAUNCH(ld_rmsnorm, L, a); });
  const std::vector<uint16_t> g = dy.down();
  std::vector<uint16_t> r(g.size());
  ldref::rmsnorm(x.data(), w.data(), rows, dim, 1e-6f, r.data());
  Cmp c;
  for (size_t i = 0; i < r.size(); i++) cmp16(c, (long long)i, g[i], r[i]);
  for (int rr = 0; rr < rows; rr += std::max(1, rows / 256)) {
    double ss = 0;
    for (int d = 0; d < dim; d++) ss += f16v(x[(size_t)rr * dim + d]) * f16v(x[(size_t)rr * dim + d]);
    const double inv = 1.0 / sqrt(ss / dim + (double)1e-6f);
    for (int d = 0; d < dim; d++) f64_16(c, g[(size_t)rr * dim + d], f16v(x[(size_t)rr * dim + d]) * inv * f16v(w[d]));
  }
  char sh[48];
  snprintf(sh, sizeof sh, "rows %d dim %d", rows, dim);
  row("rmsnorm", sh, "f16", c, false, ms, 4.0 * rows * dim, 0);
}

static void case_rope(int T, int H, int D, int off, int rot, int inter) {
  const int half = rot / 2;
  const std::vector<uint16_t> x = rand_f16((size_t)T * H * D, 8.0, 61 + D);
  std::vector<float> cs((size_t)T * half), sn((size_t)T * half);
  for (int t = 0; t < T; t++)
    for (int j = 0; j < half; j++) {
      const double ang = (t + 3) * pow(10000.0, -(double)j / half);
      cs[(size_t)t * half + j] = (float)cos(ang);
      sn[(size_t)t * half + j] = (float)sin(ang);
    }
  DBuf<uint16_t> dx(x), dy(x.size());
  DBuf<float> dc(cs), ds(sn);
  LdRopeArgs a{dx.p, dc.p, ds.p, dy.p, T, H, D, off, rot, inter};
  const LdLaunch L = ld_plan_rope(&a);
  const double ms = time_ms([&] { LAUNCH(ld_rope, L, a); });
  const std::vector<uint16_t> g = dy.down();
  std::vector<uint16_t> r(g.size());
  ldref::rope(x.data(), cs.data(), sn.data(), T, H, D, off, rot, inter, r.data());
  Cmp c;
  for (size_t i = 0; i < r.size(); i++) cmp16(c, (long long)i, g[i], r[i]);
  for (int th = 0; th < T * H; th += 3) {
    const int t = th / H;
    for (int j = 0; j < half; j++) {
      const size_t base = (size_t)th * D + off, ia = base + ld_rope_index_a(j, inter), ib = base + ld_rope_index_b(j, half, inter);
      const double xa = f16v(x[ia]), xb = f16v(x[ib]), cc = cs[(size_t)t * half + j], ss = sn[(size_t)t * half + j];
      f64_16(c, g[ia], xa * cc - xb * ss);
      f64_16(c, g[ib], xa * ss + xb * cc);
    }
  }
  char sh[64];
  snprintf(sh, sizeof sh, "T%d H%d D%d off%d rot%d %s", T, H, D, off, rot, inter ? "inter" : "half");
  row("rope", sh, "f16", c, false, ms, 4.0 * T * H * D + 8.0 * T * half, 0);
}

static void case_attention(int T, int Hq, int Hkv, int D, int Dv, int window, bool sinks, int sample_rows) {
  const std::vector<uint16_t> q = rand_f16((size_t)T * Hq * D, 3.0, 71 + T), k = rand_f16((size_t)T * Hkv * D, 3.0, 72 + T);
  const std::vector<uint16_t> v = rand_f16((size_t)T * Hkv * Dv, 2.0, 73 + T);
  std::vector<float> sk = rand_f32(Hq, -4.0, 4.0, 74);
  const float scale = (float)(1.0 / sqrt((double)D));
  DBuf<uint16_t> dq(q), dk(k), dv(v), dy((size_t)T * Hq * Dv);
  DBuf<float> ds(sk);
  LdAttentionArgs a{dq.p, dk.p, dv.p, sinks ? ds.p : nullptr, dy.p, T, Hq, Hkv, D, Dv, window, scale};
  const LdLaunch L = ld_plan_attention(&a);
  need(L);
  const double ms = time_ms([&] { LAUNCH(ld_attention, L, a); });
  const std::vector<uint16_t> g = dy.down();
  std::vector<int> rows;
  if (sample_rows > 0) {
    Rng r(99);
    for (int s = 0; s < sample_rows; s++) rows.push_back((int)(r.next() % (uint64_t)(T * Hq)));
    rows.push_back(T * Hq - 1);
  } else {
    for (int th = 0; th < T * Hq; th++) rows.push_back(th);
  }
  std::vector<uint16_t> r16(rows.size() * Dv);
  std::vector<double> r64(rows.size() * Dv);
#pragma omp parallel
  {
    std::vector<float> p((size_t)T);
    std::vector<double> pd((size_t)T);
#pragma omp for schedule(dynamic, 1)
    for (long long qi = 0; qi < (long long)rows.size(); qi++) {
      const int th = rows[qi], t = th / Hq, h = th % Hq, hk = h / (Hq / Hkv), s0 = ld_attn_first_key(t, window);
      ldref::attention_row(q.data(), k.data(), v.data(), sinks ? sk.data() : nullptr, T, Hq, Hkv, D, Dv, scale, window, t, h,
                           r16.data() + qi * Dv, p.data());
      double m = -INFINITY;
      for (int s = s0; s <= t; s++) {
        double z = 0;
        for (int d = 0; d < D; d++) z += f16v(q[(size_t)th * D + d]) * f16v(k[((size_t)s * Hkv + hk) * D + d]);
        pd[s] = z * (double)scale;
        m = std::max(m, pd[s]);
      }
      if (sinks) m = std::max(m, (double)sk[h]);
      double l = 0;
      for (int s = s0; s <= t; s++) l += (pd[s] = exp(pd[s] - m));
      if (sinks) l += exp((double)sk[h] - m);
      for (int d = 0; d < Dv; d++) {
        double o = 0;
        for (int s = s0; s <= t; s++) o += pd[s] / l * f16v(v[((size_t)s * Hkv + hk) * Dv + d]);
        r64[qi * Dv + d] = o;
      }
    }
  }
  Cmp c;
  for (size_t qi = 0; qi < rows.size(); qi++)
    for (int d = 0; d < Dv; d++) {
      const size_t gi = (size_t)rows[qi] * Dv + d;
      cmp16(c, (long long)gi, g[gi], r16[qi * Dv + d]);
      f64_16(c, g[gi], r64[qi * Dv + d]);
    }
  double flops = 0;
  for (int t = 0; t < T; t++) flops += (double)(t - ld_attn_first_key(t, window) + 1) * Hq * (2.0 * D + 2.0 * Dv);
  char sh[80];
  snprintf(sh, sizeof sh, "T%d Hq%d Hkv%d D%d Dv%d w%d%s", T, Hq, Hkv, D, Dv, window, sinks ? " sink" : "");
  row("attention", sh, "f16", c, sample_rows > 0, ms, 2.0 * T * (Hq * D + Hkv * D + Hkv * Dv + Hq * Dv), flops);
}

// Decode over a KV cache (ld_attention_decode = attentionDecodeF16). slot/start empty: group b reads cache sequence
// (3b + 1) mod Bc from a seeded random position (so groups share sequences and read them out of order).
static void case_attention_decode(int B, int Tq, int Bc, int cap, int Hq, int Hkv, int D, int Dv, int window, bool sinks,
                                  std::vector<int32_t> slot, std::vector<int32_t> start) {
  if (slot.empty()) {
    Rng r(301 + B);
    for (int b = 0; b < B; b++) {
      slot.push_back((3 * b + 1) % Bc);
      start.push_back((int32_t)(r.next() % (uint64_t)(cap - Tq + 1)));
    }
    start[0] = cap - Tq;  // one group ends at the last slot of the cache
  }
  const std::vector<uint16_t> q = rand_f16((size_t)B * Tq * Hq * D, 3.0, 302 + cap);
  const std::vector<uint16_t> k = rand_f16((size_t)Bc * cap * Hkv * D, 3.0, 303 + cap), v = rand_f16((size_t)Bc * cap * Hkv * Dv, 2.0, 304);
  const std::vector<float> sk = rand_f32(Hq, -4.0, 4.0, 305);
  const float scale = (float)(1.0 / sqrt((double)D));
  int max_len = 1;
  for (int b = 0; b < B; b++) max_len = std::max(max_len, start[b] + Tq);
  DBuf<uint16_t> dq(q), dk(k), dv(v), dy((size_t)B * Tq * Hq * Dv);
  DBuf<int32_t> dsl(slot), dst(start);
  DBuf<float> ds(sk);
  LdAttentionDecodeArgs a{dq.p, dk.p, dv.p, dsl.p, dst.p, sinks ? ds.p : nullptr, dy.p, B, Tq, cap, Hq, Hkv, D, Dv, window, max_len, scale};
  const LdLaunch L = ld_plan_attention_decode(&a);
  need(L);
  const double ms = time_ms([&] { LAUNCH(ld_attention_decode, L, a); });
  const std::vector<uint16_t> g = dy.down();
  std::vector<uint16_t> r(g.size());
  ldref::attention_decode(q.data(), k.data(), v.data(), slot.data(), start.data(), sinks ? sk.data() : nullptr, B, Tq, cap, Hq, Hkv, D, Dv,
                          scale, window, r.data());
  Cmp c;
  for (size_t i = 0; i < r.size(); i++) cmp16(c, (long long)i, g[i], r[i]);
  double flops = 0, bytes = 2.0 * B * Tq * Hq * (D + Dv);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < Tq; t++) {  // float64 of every row; traffic: each group's visible K/V rows once per kv head
      const int pos = start[b] + t, s0 = ld_attn_first_key(pos, window);
      flops += (double)(pos - s0 + 1) * Hq * (2.0 * D + 2.0 * Dv);
      bytes += 2.0 * (pos - s0 + 1) * Hkv * (D + Dv);
      for (int h = 0; h < Hq; h++) {
        const int hk = h / (Hq / Hkv);
        const size_t qr = ((size_t)(b * Tq + t) * Hq + h);
        std::vector<double> z((size_t)(pos - s0 + 1));
        double m = sinks ? (double)sk[h] : -INFINITY, l = 0;
        for (int s = s0; s <= pos; s++) {
          double d = 0;
          const size_t kr = ld_kv_cache_row(slot[b], cap, s, Hkv, hk) * D;
          for (int e = 0; e < D; e++) d += f16v(q[qr * D + e]) * f16v(k[kr + e]);
          z[s - s0] = d * (double)scale;
          m = std::max(m, z[s - s0]);
        }
        for (double& x : z) l += (x = exp(x - m));
        if (sinks) l += exp((double)sk[h] - m);
        for (int e = 0; e < Dv; e++) {
          double o = 0;
          for (int s = s0; s <= pos; s++) o += z[s - s0] / l * f16v(v[ld_kv_cache_row(slot[b], cap, s, Hkv, hk) * Dv + e]);
          f64_16(c, g[qr * Dv + e], o);
        }
      }
    }
  char sh[96];
  snprintf(sh, sizeof sh, "B%d Tq%d cap%d Hq%d Hkv%d D%d w%d%s", B, Tq, cap, Hq, Hkv, D, window, sinks ? " sink" : "");
  row("attention_decode", sh, "f16", c, false, ms, bytes, flops);
}

static void case_softmax(int rows, int n, bool sinks) {
  const std::vector<float> z = rand_f32((size_t)rows * n, -30.0, 30.0, 81 + n);
  const std::vector<float> sk = rand_f32(rows, -10.0, 40.0, 82);
  DBuf<float> dz(z), ds(sk);
  DBuf<uint16_t> dy((size_t)rows * n);
  LdSoftmaxArgs a{dz.p, sinks ? ds.p : nullptr, dy.p, rows, n};
  const LdLaunch L = ld_plan_softmax(&a);
  need(L);
  const double ms = time_ms([&] { LAUNCH(ld_softmax, L, a); });
  const std::vector<uint16_t> g = dy.down();
  std::vector<uint16_t> r(g.size());
  ldref::softmax(z.data(), sinks ? sk.data() : nullptr, rows, n, r.data());
  Cmp c;
  for (size_t i = 0; i < r.size(); i++) cmp16(c, (long long)i, g[i], r[i]);
  for (int rr = 0; rr < rows; rr += std::max(1, rows / 256)) {
    double m = sinks ? (double)sk[rr] : -INFINITY, l = 0;
    for (int i = 0; i < n; i++) m = std::max(m, (double)z[(size_t)rr * n + i]);
    for (int i = 0; i < n; i++) l += exp((double)z[(size_t)rr * n + i] - m);
    if (sinks) l += exp((double)sk[rr] - m);
    for (int i = 0; i < n; i++) f64_16(c, g[(size_t)rr * n + i], exp((double)z[(size_t)rr * n + i] - m) / l);
  }
  char sh[48];
  snprintf(sh, sizeof sh, "rows %d n %d%s", rows, n, sinks ? " sink" : "");
  row("softmax", sh, "f16", c, false, ms, 6.0 * rows * n, 0);
}

static void case_swiglu(long long n, float limit, bool sweep) {
  std::vector<uint16_t> g, u;
  if (sweep) {  // every f16 gate value, up = 1: SiLU through ld_expf over the whole domain
    n = 65536;
    g.resize(n);
    u.assign(n, 0x3C00);
    for (long long i = 0; i < n; i++) g[i] = (uint16_t)i;
  } else {
    g = rand_f16(n, 12.0, 91);
    u = rand_f16(n, 12.0, 92);
    g[0] = 0x7E00;  // NaN passes the clamp
    u[1] = 0xFE00;
  }
  DBuf<uint16_t> dg(g), du(u), dy(n);
  LdSwigluArgs a{dg.p, du.p, dy.p, n, limit};
  const LdLaunch L = ld_plan_swiglu(&a);
  const double ms = sweep ? 0 : time_ms([&] { LAUNCH(ld_swiglu, L, a); });
  if (sweep) {
    LAUNCH(ld_swiglu, L, a);
    CK(hipDeviceSynchronize());
  }
  const std::vector<uint16_t> gy = dy.down();
  std::vector<uint16_t> r(n);
  ldref::swiglu(g.data(), u.data(), n, limit, r.data());
  Cmp c;
  for (long long i = 0; i < n; i++) {
    cmp16(c, i, gy[i], r[i]);
    if (sweep || i % 3 == 0) {
      double gv = f16v(g[i]), uv = f16v(u[i]);
      if (limit > 0) {
        gv = std::min(gv, (double)limit);
        uv = std::max(std::min(uv, (double)limit), -(double)limit);
      }
      f64_16(c, gy[i], gv / (1.0 + exp(-gv)) * uv);
    }
  }
  char sh[48];
  if (sweep) snprintf(sh, sizeof sh, "all f16 gates, up 1");
  else snprintf(sh, sizeof sh, "n %lld limit %g", n, (double)limit);
  row("swiglu", sh, "f16", c, false, ms, 6.0 * n, 0);
}

static void case_add(long long n) {
  const std::vector<uint16_t> x = rand_f16(n, 60000.0, 95), y = rand_f16(n, 60000.0, 96);
  DBuf<uint16_t> dx(x), dy(y), dz(n);
  LdAddArgs a{dx.p, dy.p, dz.p, n};
  const LdLaunch L = ld_plan_add(&a);
  const double ms = time_ms([&] { LAUNCH(ld_add, L, a); });
  const std::vector<uint16_t> g = dz.down();
  std::vector<uint16_t> r(n);
  ldref::add(x.data(), y.data(), n, r.data());
  Cmp c;
  for (long long i = 0; i < n; i++) {
    cmp16(c, i, g[i], r[i]);
    if (i % 3 == 0) f64_16(c, g[i], f16v(x[i]) + f16v(y[i]));
  }
  char sh[48];
  snprintf(sh, sizeof sh, "n %lld", n);
  row("add", sh, "f16", c, false, ms, 6.0 * n, 0);
}

static void case_mul_scalar(long long n, float sc) {
  const std::vector<uint16_t> x = rand_f16(n, 60000.0, 97);
  DBuf<uint16_t> dx(x), dz(n);
  LdMulScalarArgs a{dx.p, dz.p, n, sc};
  const LdLaunch L = ld_plan_mul_scalar(&a);
  const double ms = time_ms([&] { LAUNCH(ld_mul_scalar, L, a); });
  const std::vector<uint16_t> g = dz.down();
  std::vector<uint16_t> r(n);
  ldref::mul_scalar(x.data(), n, sc, r.data());
  Cmp c;
  for (long long i = 0; i < n; i++) {
    cmp16(c, i, g[i], r[i]);
    if (i % 3 == 0) f64_16(c, g[i], f16v(x[i]) * (double)sc);
  }
  char sh[48];
  snprintf(sh, sizeof sh, "n %lld s %g", n, (double)sc);
  row("mul_scalar", sh, "f16", c, false, ms, 4.0 * n, 0);
}

static void case_moe(int T, int topk, int E, int D) {
  // Route each token to topk distinct experts, then lay rows out expert-major (as device-hip/deepseek_v4/moe.ts).
  Rng rg(101);
  std::vector<std::vector<int>> by_expert(E);
  for (int t = 0; t < T; t++) {
    std::vector<int> ids;
    while ((int)ids.size() < topk) {
      const int e = (int)(rg.next() % (uint64_t)E);
      if (std::find(ids.begin(), ids.end(), e) == ids.end()) ids.push_back(e);
    }
    for (int e : ids) by_expert[e].push_back(t);
  }
  std::vector<int32_t> tok;
  for (int e = 0; e < E; e++)
    for (int t : by_expert[e]) tok.push_back(t);
  const int R = (int)tok.size();
  const std::vector<uint16_t> x = rand_f16((size_t)T * D, 4.0, 102), yr = rand_f16((size_t)R * D, 4.0, 103);
  const std::vector<uint16_t> sh = rand_f16((size_t)T * D, 4.0, 104);
  std::vector<int32_t> start(T + 1), rows(R);
  ldref::moe_csr(tok.data(), R, T, start.data(), rows.data());
  DBuf<uint16_t> dx(x), dg((size_t)R * D), dyr(yr), dsh(sh), dout((size_t)T * D);
  DBuf<int32_t> dtok(tok), dst(start), drows(rows);
  {
    LdMoeGatherArgs a{dx.p, dtok.p, dg.p, R, D};
    const LdLaunch L = ld_plan_moe_gather(&a);
    const double ms = time_ms([&] { LAUNCH(ld_moe_gather, L, a); });
    const std::vector<uint16_t> g = dg.down();
    std::vector<uint16_t> r((size_t)R * D);
    ldref::moe_gather(x.data(), tok.data(), R, D, r.data());
    Cmp c;
    for (size_t i = 0; i < r.size(); i++) cmp16(c, (long long)i, g[i], r[i]);
    char s[64];
    snprintf(s, sizeof s, "T%d top%d E%d D%d (R %d)", T, topk, E, D, R);
    row("moe_gather", s, "f16", c, false, ms, 4.0 * R * D, 0);
  }
  {
    LdMoeCombineArgs a{dyr.p, dst.p, drows.p, dsh.p, dout.p, T, D};
    const LdLaunch L = ld_plan_moe_combine(&a);
    const double ms = time_ms([&] { LAUNCH(ld_moe_combine, L, a); });
    const std::vector<uint16_t> g = dout.down();
    std::vector<uint16_t> r((size_t)T * D);
    ldref::moe_combine(yr.data(), start.data(), rows.data(), sh.data(), T, D, r.data());
    Cmp c;
    for (size_t i = 0; i < r.size(); i++) cmp16(c, (long long)i, g[i], r[i]);
    for (int t = 0; t < T; t += 7)
      for (int i = 0; i < D; i++) {
        double s = f16v(sh[(size_t)t * D + i]);
        for (int j = start[t]; j < start[t + 1]; j++) s += f16v(yr[(size_t)rows[j] * D + i]);
        f64_16(c, g[(size_t)t * D + i], s);
      }
    char s[64];
    snprintf(s, sizeof s, "T%d top%d D%d (R %d)", T, topk, D, R);
    row("moe_combine", s, "f16", c, false, ms, 2.0 * R * D + 4.0 * T * D, 0);
  }
}

static void sinkhorn_f64(double* C, int hc, int iters, double eps) {
  for (int j = 0; j < hc; j++) {
    double m = C[j * hc], s = 0;
    for (int k = 1; k < hc; k++) m = std::max(m, C[j * hc + k]);
    for (int k = 0; k < hc; k++) s += (C[j * hc + k] = exp(C[j * hc + k] - m));
    for (int k = 0; k < hc; k++) C[j * hc + k] = C[j * hc + k] / s + eps;
  }
  for (int it = 0; it < iters; it++) {
    if (it > 0)
      for (int j = 0; j < hc; j++) {
        double s = 0;
        for (int k = 0; k < hc; k++) s += C[j * hc + k];
        for (int k = 0; k < hc; k++) C[j * hc + k] /= (s + eps);
      }
    for (int k = 0; k < hc; k++) {
      double s = 0;
      for (int j = 0; j < hc; j++) s += C[j * hc + k];
      for (int j = 0; j < hc; j++) C[j * hc + k] /= (s + eps);
    }
  }
}

static void case_sinkhorn(int T, int hc, int iters) {
  const float eps = 1e-6f;
  const std::vector<float> A = rand_f32((size_t)T * hc * hc, -6.0, 6.0, 111);
  DBuf<float> dA(A), dC(A.size());
  LdSinkhornArgs a{dA.p, dC.p, T, hc, iters, eps};
  const LdLaunch L = ld_plan_sinkhorn(&a);
  need(L);
  const double ms = time_ms([&] { LAUNCH(ld_sinkhorn, L, a); });
  const std::vector<float> g = dC.down();
  std::vector<float> r(A.size());
  ldref::sinkhorn(A.data(), T, hc, iters, eps, r.data());
  Cmp c;
  for (size_t i = 0; i < r.size(); i++) cmp32(c, (long long)i, g[i], r[i]);
  std::vector<double> m((size_t)hc * hc);
  for (int t = 0; t < T; t += 13) {
    for (int i = 0; i < hc * hc; i++) m[i] = A[(size_t)t * hc * hc + i];
    sinkhorn_f64(m.data(), hc, iters, (double)eps);
    for (int i = 0; i < hc * hc; i++) f64_32(c, g[(size_t)t * hc * hc + i], m[i]);
  }
  char sh[48];
  snprintf(sh, sizeof sh, "T%d hc%d iters%d", T, hc, iters);
  row("sinkhorn", sh, "f32", c, false, ms, 8.0 * T * hc * hc, 0);
}

// ------------------------------------------------------------------------------------------------------
// DeepSeek-V4 ops (deepseek.hip) against ldref (= src/deepseek_*.cc's loops). Outputs: every one checked.
// ------------------------------------------------------------------------------------------------------
static void cmp_i32(Cmp& c, long long idx, int32_t g, int32_t r) {
  c.checked++;
  if (g != r) {
    if (c.first < 0) c.first = idx;
    c.mism++;
    c.maxulp = std::max(c.maxulp, std::llabs((long long)g - (long long)r));
  }
}

static void case_hc(bool head, int T, int hc, int D, int iters) {
  const int width = hc * D, nmix = head ? hc : (2 + hc) * hc;
  const std::vector<uint16_t> x = rand_f16((size_t)T * width, 2.0, 201 + T + head);
  const std::vector<float> fn = rand_f32((size_t)nmix * width, -0.05, 0.05, 202);
  const std::vector<float> base = rand_f32(nmix, -1.0, 1.0, 203), scale = rand_f32(3, 0.5, 1.5, 204);
  const float norm_eps = 1e-6f, hc_eps = 1e-6f;
  DBuf<uint16_t> dx(x), du((size_t)T * D);
  DBuf<float> dfn(fn), dbase(base), dscale(scale), dpost((size_t)T * hc), dcomb((size_t)T * hc * hc);
  LdHcArgs a{dx.p, dfn.p, dbase.p, dscale.p, du.p, head ? nullptr : dpost.p, head ? nullptr : dcomb.p, T, hc, D, iters, norm_eps, hc_eps};
  const LdLaunch L = head ? ld_plan_hc_head(&a) : ld_plan_hc_pre(&a);
  need(L);
  const double ms = head ? time_ms([&] { LAUNCH(ld_hc_head, L, a); }) : time_ms([&] { LAUNCH(ld_hc_pre, L, a); });
  const std::vector<uint16_t> gu = du.down();
  std::vector<uint16_t> ru((size_t)T * D);
  std::vector<float> rp((size_t)T * hc), rc((size_t)T * hc * hc);
  ldref::hc_pre_head(head, x.data(), fn.data(), base.data(), scale.data(), T, hc, D, norm_eps, hc_eps, iters, ru.data(), rp.data(),
                     rc.data());
  Cmp c;
  for (size_t i = 0; i < ru.size(); i++) cmp16(c, (long long)i, gu[i], ru[i]);
  if (!head) {
    const std::vector<float> gp = dpost.down(), gc = dcomb.down();
    for (size_t i = 0; i < rp.size(); i++) cmp32(c, (long long)(ru.size() + i), gp[i], rp[i]);
    for (size_t i = 0; i < rc.size(); i++) cmp32(c, (long long)(ru.size() + rp.size() + i), gc[i], rc[i]);
  }
  char sh[64];
  snprintf(sh, sizeof sh, head ? "T%d hc%d D%d" : "T%d hc%d D%d iters%d", T, hc, D, iters);
  row(head ? "hc_head" : "hc_pre (u, post, comb)", sh, head ? "f16" : "mix", c, false, ms, 2.0 * T * width + 4.0 * nmix * width,
      2.0 * T * (nmix + 1) * width);
}

static void case_hc_post(int T, int hc, int D) {
  const std::vector<uint16_t> f = rand_f16((size_t)T * D, 3.0, 211), x = rand_f16((size_t)T * hc * D, 3.0, 212);
  const std::vector<float> post = rand_f32((size_t)T * hc, 0.0, 2.0, 213), comb = rand_f32((size_t)T * hc * hc, 0.0, 1.0, 214);
  DBuf<uint16_t> df(f), dx(x), dy((size_t)T * hc * D);
  DBuf<float> dp(post), dc(comb);
  LdHcPostArgs a{df.p, dx.p, dp.p, dc.p, dy.p, T, hc, D};
  const LdLaunch L = ld_plan_hc_post(&a);
  need(L);
  const double ms = time_ms([&] { LAUNCH(ld_hc_post, L, a); });
  const std::vector<uint16_t> g = dy.down();
  std::vector<uint16_t> r(g.size());
  ldref::hc_post(f.data(), x.data(), post.data(), comb.data(), T, hc, D, r.data());
  Cmp c;
  for (size_t i = 0; i < r.size(); i++) cmp16(c, (long long)i, g[i], r[i]);
  for (int t = 0; t < T; t += 7)
    for (int k = 0; k < hc; k++)
      for (int i = 0; i < D; i++) {
        double v = (double)post[(size_t)t * hc + k] * f16v(f[(size_t)t * D + i]);
        for (int j = 0; j < hc; j++) v += (double)comb[((size_t)t * hc + j) * hc + k] * f16v(x[((size_t)t * hc + j) * D + i]);
        f64_16(c, g[((size_t)t * hc + k) * D + i], v);
      }
  char sh[64];
  snprintf(sh, sizeof sh, "T%d hc%d D%d", T, hc, D);
  row("hc_post", sh, "f16", c, false, ms, 2.0 * T * D + 2.0 * T * hc * D * (1 + hc) / hc + 2.0 * T * hc * D, 0);
}

static void case_compress_pool(int T, int r, int dc, bool overlap) {
  const int w = (overlap ? 2 : 1) * dc, B = T / r;
  const std::vector<float> K = rand_f32((size_t)T * w, -3.0, 3.0, 221), Z = rand_f32((size_t)T * w, -8.0, 8.0, 222);
  const std::vector<float> ape = rand_f32((size_t)r * w, -1.0, 1.0, 223);
  DBuf<float> dK(K), dZ(Z), dape(ape);
  DBuf<uint16_t> dy((size_t)B * dc);
  LdCompressPoolArgs a{dK.p, dZ.p, dape.p, dy.p, T, r, dc, overlap ? 1 : 0};
  const LdLaunch L = ld_plan_compress_pool(&a);
  need(L);
  const double ms = time_ms([&] { LAUNCH(ld_compress_pool, L, a); });
  const std::vector<uint16_t> g = dy.down();
  std::vector<uint16_t> ref(g.size());
  ldref::compress_pool(K.data(), Z.data(), ape.data(), T, r, dc, overlap, ref.data());
  Cmp c;
  for (size_t i = 0; i < ref.size(); i++) cmp16(c, (long long)i, g[i], ref[i]);
  char sh[64];
  snprintf(sh, sizeof sh, "T%d ratio%d dc%d%s", T, r, dc, overlap ? " overlap" : "");
  row("compress_pool", sh, "f16", c, false, ms, 8.0 * T * w + 2.0 * B * dc, 0);
}

// ties: logits and bias on a 1/4 grid, so many selection values are equal (ties → lowest id must hold).
static void case_router(int T, int E, int k, bool bias, bool given, bool ties) {
  std::vector<float> lg = rand_f32((size_t)T * E, -4.0, 4.0, 231), bs = rand_f32(E, -0.5, 0.5, 232);
  if (ties) {
    for (float& v : lg) v = floorf(v * 4.0f) / 4.0f;
    for (float& v : bs) v = 0.0f;
  }
  std::vector<int32_t> gv((size_t)T * k);
  {
    Rng rg(233);
    for (int t = 0; t < T; t++)
      for (int j = 0; j < k; j++) gv[(size_t)t * k + j] = (int32_t)(rg.next() % (uint64_t)E);
  }
  DBuf<float> dl(lg), db(bs), dw((size_t)T * k), ds((size_t)T * E);
  DBuf<int32_t> dg(gv), di((size_t)T * k);
  LdRouterArgs a{dl.p, bias ? db.p : nullptr, given ? dg.p : nullptr, di.p, dw.p, ds.p, T, E, k, 2.5f};
  const LdLaunch L = ld_plan_router(&a);
  need(L);
  const double ms = time_ms([&] { LAUNCH(ld_router, L, a); });
  const std::vector<int32_t> gi = di.down();
  const std::vector<float> gw = dw.down(), gs = ds.down();
  std::vector<int32_t> ri((size_t)T * k);
  std::vector<float> rw((size_t)T * k), rs((size_t)T * E);
  ldref::router(lg.data(), bias ? bs.data() : nullptr, given ? gv.data() : nullptr, T, E, k, 2.5f, ri.data(), rw.data(), rs.data());
  Cmp c;
  for (size_t i = 0; i < ri.size(); i++) cmp_i32(c, (long long)i, gi[i], ri[i]);
  for (size_t i = 0; i < rw.size(); i++) cmp32(c, (long long)(ri.size() + i), gw[i], rw[i]);
  for (size_t i = 0; i < rs.size(); i++) cmp32(c, (long long)(ri.size() + rw.size() + i), gs[i], rs[i]);
  for (size_t i = 0; i < rs.size(); i++) {
    const double l = lg[i];
    f64_32(c, gs[i], sqrt(l > 20.0 ? l : log1p(exp(l))));
  }
  char sh[64];
  snprintf(sh, sizeof sh, "T%d E%d top%d%s%s%s", T, E, k, bias ? " bias" : "", given ? " given" : "", ties ? " ties" : "");
  row("router", sh, "mix", c, false, ms, 8.0 * T * E + 8.0 * T * k, 0);
}

// gpt-oss router (softmax over the top-k biased logits) and its interleaved clamped SwiGLU (gpt_oss.hip).
static void case_oss_router(int T, int E, int k, bool bias, bool given) {
  std::vector<float> lg = rand_f32((size_t)T * E, -4.0, 4.0, 241), bs = rand_f32(E, -0.5, 0.5, 242);
  std::vector<int32_t> gv((size_t)T * k);
  for (int t = 0; t < T; t++)
    for (int j = 0; j < k; j++) gv[(size_t)t * k + j] = (int32_t)((t + j) % E);  // distinct per token (k ≤ E)
  DBuf<float> dl(lg), db(bs), dw((size_t)T * k);
  DBuf<int32_t> dg(gv), di((size_t)T * k);
  LdOssRouterArgs a{dl.p, bias ? db.p : nullptr, given ? dg.p : nullptr, di.p, dw.p, T, E, k};
  const LdLaunch L = ld_plan_oss_router(&a);
  need(L);
  const double ms = time_ms([&] { LAUNCH(ld_oss_router, L, a); });
  const std::vector<int32_t> gi = di.down();
  const std::vector<float> gw = dw.down();
  std::vector<int32_t> ri((size_t)T * k);
  std::vector<float> rw((size_t)T * k);
  ldref::oss_router(lg.data(), bias ? bs.data() : nullptr, given ? gv.data() : nullptr, T, E, k, ri.data(), rw.data());
  Cmp c;
  for (size_t i = 0; i < ri.size(); i++) cmp_i32(c, (long long)i, gi[i], ri[i]);
  for (size_t i = 0; i < rw.size(); i++) cmp32(c, (long long)(ri.size() + i), gw[i], rw[i]);
  char sh[64];
  snprintf(sh, sizeof sh, "T%d E%d top%d%s%s", T, E, k, bias ? " bias" : "", given ? " given" : "");
  row("oss_router", sh, "mix", c, false, ms, 8.0 * T * E + 8.0 * T * k, 0);
}

static void case_oss_swiglu(int rows, int I) {
  const std::vector<uint16_t> h = rand_f16((size_t)rows * 2 * I, 12.0, 271);
  DBuf<uint16_t> dh(h), dy((size_t)rows * I);
  LdOssSwigluArgs a{dh.p, dy.p, rows, I, 7.0f, 1.702f};
  const LdLaunch L = ld_plan_oss_swiglu(&a);
  need(L);
  const double ms = time_ms([&] { LAUNCH(ld_oss_swiglu, L, a); });
  const std::vector<uint16_t> y = dy.down();
  std::vector<uint16_t> r(y.size());
  ldref::oss_swiglu(h.data(), rows, I, 7.0f, 1.702f, r.data());
  Cmp c;
  for (size_t i = 0; i < r.size(); i++) cmp16(c, (long long)i, y[i], r[i]);
  for (size_t i = 0; i < r.size(); i += 3) {
    const size_t row_i = i / I, col = i % I;
    const double gv = std::min(f16v(h[row_i * 2 * I + 2 * col]), 7.0);
    const double uv = std::max(std::min(f16v(h[row_i * 2 * I + 2 * col + 1]), 7.0), -7.0);
    f64_16(c, y[i], gv / (1.0 + exp(-1.702 * gv)) * (uv + 1.0));
  }
  char sh[64];
  snprintf(sh, sizeof sh, "rows %d I %d", rows, I);
  row("oss_swiglu", sh, "f16", c, false, ms, 8.0 * rows * I, 0);
}

static void case_swiglu_rows(int rows, int cols, bool weights, float limit) {
  const std::vector<uint16_t> g = rand_f16((size_t)rows * cols, 12.0, 261), u = rand_f16((size_t)rows * cols, 12.0, 262);
  const std::vector<float> rw = rand_f32(rows, 0.0, 1.0, 263);
  DBuf<uint16_t> dg(g), du(u), dy((size_t)rows * cols);
  DBuf<float> drw(rw);
  LdSwigluRowsArgs a{dg.p, du.p, weights ? drw.p : nullptr, dy.p, rows, cols, limit};
  const LdLaunch L = ld_plan_swiglu_rows(&a);
  need(L);
  const double ms = time_ms([&] { LAUNCH(ld_swiglu_rows, L, a); });
  const std::vector<uint16_t> y = dy.down();
  std::vector<uint16_t> r(y.size());
  ldref::swiglu_rows(g.data(), u.data(), weights ? rw.data() : nullptr, rows, cols, limit, r.data());
  Cmp c;
  for (size_t i = 0; i < r.size(); i++) cmp16(c, (long long)i, y[i], r[i]);
  for (size_t i = 0; i < r.size(); i += 3) {
    double gv = f16v(g[i]), uv = f16v(u[i]);
    if (limit > 0) {
      gv = std::min(gv, (double)limit);
      uv = std::max(std::min(uv, (double)limit), -(double)limit);
    }
    f64_16(c, y[i], gv / (1.0 + exp(-gv)) * uv * (weights ? (double)rw[i / cols] : 1.0));
  }
  char sh[64];
  snprintf(sh, sizeof sh, "rows %d cols %d%s limit %g", rows, cols, weights ? " weights" : "", limit);
  row("swiglu_rows", sh, "f16", c, false, ms, 6.0 * rows * cols, 0);
}

// Rows t of the call are positions t0 + t (t0 > 0: a decode step's call, without rows 0..t0−1); the blocks
// are those of all t0 + T positions.
static void case_indexer(int T, int nh, int hd, int r, int topk, bool ties, int t0) {
  const int B = (t0 + T) / r;
  std::vector<uint16_t> q = rand_f16((size_t)T * nh * hd, 2.0, 241), w = rand_f16((size_t)T * nh, 1.0, 242);
  std::vector<uint16_t> e = rand_f16((size_t)B * hd, 2.0, 243);
  if (ties)  // every other compressed row repeats its predecessor: equal scores, ties → lowest block
    for (int b = 1; b < B; b += 2) std::copy(e.begin() + (size_t)(b - 1) * hd, e.begin() + (size_t)b * hd, e.begin() + (size_t)b * hd);
  const float scale = (float)(1.0 / sqrt((double)hd * nh));
  DBuf<uint16_t> dq(q), dw(w), de(e);
  DBuf<float> ds((size_t)T * B);
  DBuf<int32_t> dp((size_t)T * topk);
  LdIndexerArgs a{dq.p, dw.p, de.p, ds.p, dp.p, T, nh, hd, B, r, t0, topk, scale};
  const LdLaunch L = ld_plan_indexer_topk(&a);
  need(L);
  const double ms = time_ms([&] { LAUNCH(ld_indexer_topk, L, a); });
  const std::vector<float> gs = ds.down();
  const std::vector<int32_t> gp = dp.down();
  std::vector<float> rs((size_t)T * B);
  std::vector<int32_t> rp((size_t)T * topk);
  ldref::indexer_topk(q.data(), w.data(), e.data(), T, nh, hd, B, r, t0, topk, scale, rs.data(), rp.data());
  Cmp c;
  for (size_t i = 0; i < rs.size(); i++) cmp32(c, (long long)i, gs[i], rs[i]);
  for (size_t i = 0; i < rp.size(); i++) cmp_i32(c, (long long)(rs.size() + i), gp[i], rp[i]);
  char sh[64];
  snprintf(sh, sizeof sh, "T%d%s nh%d hd%d B%d top%d%s", T, t0 > 0 ? (" t0 " + std::to_string(t0)).c_str() : "", nh, hd, B, topk,
           ties ? " ties" : "");
  row("indexer_topk", sh, "mix", c, false, ms, 2.0 * T * nh * hd + 2.0 * B * hd + 4.0 * T * B, (double)T * B * nh * hd);
}

static void case_sparse_attention(int T, int H, int D, int window, int B, int K) {
  const std::vector<uint16_t> q = rand_f16((size_t)T * H * D, 3.0, 251), kv = rand_f16((size_t)T * D, 3.0, 252);
  const std::vector<uint16_t> comp = rand_f16((size_t)B * D, 3.0, 253);
  const std::vector<float> sk = rand_f32(H, -4.0, 4.0, 254);
  std::vector<int32_t> cand((size_t)T * K);
  {
    Rng rg(255);
    for (auto& v : cand) v = (int32_t)(rg.next() % (uint64_t)(B + 1)) - 1;  // [−1, B)
  }
  const float scale = (float)(1.0 / sqrt((double)D));
  DBuf<uint16_t> dq(q), dkv(kv), dcomp(comp), dy((size_t)T * H * D);
  DBuf<int32_t> dcand(cand);
  DBuf<float> ds(sk);
  LdSparseAttnArgs a{dq.p, dkv.p, dcomp.p, dcand.p, ds.p, dy.p, T, H, D, B, window, K, scale};
  const LdLaunch L = ld_plan_sparse_attention(&a);
  need(L);
  const double ms = time_ms([&] { LAUNCH(ld_sparse_attention, L, a); });
  const std::vector<uint16_t> g = dy.down();
  std::vector<uint16_t> r(g.size());
  ldref::sparse_attention(q.data(), kv.data(), comp.data(), cand.data(), sk.data(), T, H, D, window, K, scale, r.data());
  Cmp c;
  for (size_t i = 0; i < r.size(); i++) cmp16(c, (long long)i, g[i], r[i]);
  char sh[80];
  snprintf(sh, sizeof sh, "T%d H%d D%d w%d B%d K%d sink", T, H, D, window, B, K);
  double flops = 0;
  for (int t = 0; t < T; t++) flops += (double)(t - ld_attn_first_key(t, window) + 1 + K) * H * 4.0 * D;
  row("sparse_attention", sh, "f16", c, false, ms, 2.0 * T * H * D * 2 + 2.0 * T * D + 2.0 * B * D + 4.0 * T * K, flops);
}

static std::string g_only;
static bool g_no_ceilings = false;  // --no-ceilings: skip the copy/FMA measurements (HIP-CPU runs)  // --only=<substring>: run the cases whose op name contains it
static bool want(const char* op) { return g_only.empty() || std::string(op).find(g_only) != std::string::npos; }

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a.rfind("--only=", 0) == 0) g_only = a.substr(7);
    else if (a == "--no-ceilings") g_no_ceilings = true;
  }
  int count = 0;
  if (hipGetDeviceCount(&count) != hipSuccess || count == 0) {
    fprintf(stderr, "device_check: no GPU (%s runtime reports %d devices)\n", LD_PLATFORM_NAME, count);
    return 2;
  }
  hipDeviceProp_t p;
  CK(hipGetDeviceProperties(&p, 0));
  int rt = 0, drv = 0;
  (void)hipRuntimeGetVersion(&rt);
  (void)hipDriverGetVersion(&drv);
  printf("device_check (%s build): %s, %d multiprocessors, %.1f GiB; runtime %d, driver %d; host threads %d\n",
         LD_PLATFORM_NAME, p.name, p.multiProcessorCount, p.totalGlobalMem / 1073741824.0, rt, drv,
#ifdef _OPENMP
         omp_get_max_threads()
#else
         1
#endif
  );
  const auto t0 = std::chrono::steady_clock::now();
  if (!g_no_ceilings) ceilings(p.multiProcessorCount);
  header();
  const int S = quick ? 8 : 1;  // --quick: smaller shapes

  if (want("widen")) case_widen();
  if (want("dequant_mxfp4")) case_dequant_mxfp4(8192 / S, 8192 / S, 0, true, "dequant_mxfp4");
  if (want("dequant_mxfp4")) for (int f = 1; f <= 6; f++) case_dequant_mxfp4(96, 320, f, false, "dequant_mxfp4");
  if (want("dequant_fp8")) case_dequant_fp8(8192 / S, 8192 / S, 128, 128, false, 0, true, "dequant_fp8");
  if (want("dequant_fp8")) case_dequant_fp8(1000, 1000, 128, 128, true, 0, true, "dequant_fp8");
  if (want("dequant_fp8")) for (int f = 1; f <= 6; f++) case_dequant_fp8(300, 260, 128, 128, f % 2 == 0, f, false, "dequant_fp8");
  if (want("dequant_nvfp4")) case_dequant_nvfp4(8192 / S, 8192 / S, 1.5e-4f, 0, 0, true, "dequant_nvfp4");
  if (want("dequant_nvfp4")) case_dequant_nvfp4(300, 160, 7264.9f, 1, 0, false, "dequant_nvfp4");
  if (want("dequant_nvfp4")) for (int f : {1, 2, 3, 4, 5, 7, 8, 9, 10}) case_dequant_nvfp4(96, 320, 0.37f, f % 2, f, false, "dequant_nvfp4");
  if (want("dequant_bnb4")) case_dequant_bnb4(8192 / S, 8192 / S, 64, true, 0, true, "dequant_bnb4");
  if (want("dequant_bnb4")) case_dequant_bnb4(301, 77, 64, false, 0, false, "dequant_bnb4");
  if (want("dequant_bnb4")) for (int f : {2, 3, 10, 11}) case_dequant_bnb4(96, 320, 64, true, f, false, "dequant_bnb4");
  if (want("dequant_plain")) case_dequant_plain(2, 4096 / S, 4096);
  if (want("dequant_plain")) case_dequant_plain(4, 4096 / S, 4096);

  if (want("gemm_f16 tiled")) case_gemm(2048 / S, 4096, 4096, LD_W_F16, false, 0, 8192, false, "gemm_f16 tiled");
  if (want("gemm_f16 tiled")) case_gemm(67, 1001, 129, LD_W_F16, false, 0, 0, false, "gemm_f16 tiled");
  if (want("gemm_f16 tiled")) case_gemm(67, 1001, 129, LD_W_F16, true, 0, 0, false, "gemm_f16 tiled");
  if (want("gemm_f16 tiled")) case_gemm(20, 45, 6, LD_W_F16, false, 0, 0, true, "gemm_f16 tiled");
  if (want("gemm_f16 skinny")) case_gemm(1, 4096, 8192 / S, LD_W_F16, false, 0, 0, false, "gemm_f16 skinny");
  if (want("gemm_f16 skinny")) case_gemm(8, 4096, 8192 / S, LD_W_F16, false, 0, 0, false, "gemm_f16 skinny");
  if (want("gemm_f16 skinny")) case_gemm(3, 1037, 77, LD_W_F16, true, 0, 0, false, "gemm_f16 skinny");
  if (want("gemm_f16 skinny")) case_gemm(4, 45, 6, LD_W_F16, false, 0, 0, true, "gemm_f16 skinny");
  if (want("gemm_mxfp4 fused skinny")) case_gemm(1, 4096, 8192 / S, LD_W_MXFP4, false, 0, 0, false, "gemm_mxfp4 fused skinny");
  if (want("gemm_mxfp4 fused skinny")) case_gemm(8, 4096, 8192 / S, LD_W_MXFP4, false, 0, 0, false, "gemm_mxfp4 fused skinny");
  if (want("gemm_mxfp4 fused tiled")) case_gemm(2048 / S, 4096, 4096, LD_W_MXFP4, false, 0, 8192, false, "gemm_mxfp4 fused tiled");
  if (want("gemm_mxfp4 fused tiled")) case_gemm(40, 512, 100, LD_W_MXFP4, false, 2, 0, false, "gemm_mxfp4 fused tiled");
  if (want("gemm_mxfp4 fused skinny")) case_gemm(5, 512, 100, LD_W_MXFP4, true, 4, 0, false, "gemm_mxfp4 fused skinny");

  if (want("rmsnorm")) case_rmsnorm(4096 / S, 4096);
  if (want("rmsnorm")) case_rmsnorm(5, 1000);
  if (want("rope")) case_rope(4096 / S, 32, 128, 0, 128, 0);
  if (want("rope")) case_rope(1024 / S, 16, 512, 448, 64, 1);
  if (want("rope")) case_rope(3, 4, 10, 2, 6, 0);
  if (want("attention")) case_attention(1024 / S, 32, 8, 128, 128, 0, false, 1024);
  if (want("attention")) case_attention(2048 / S, 16, 1, 512, 512, 128, true, 512);
  if (want("attention")) case_attention(37, 8, 2, 64, 64, 0, false, 0);
  if (want("attention")) case_attention(20, 4, 1, 36, 20, 5, true, 0);
  if (want("attention_decode")) case_attention_decode(8, 1, 8, 4096 / S, 32, 8, 128, 128, 0, false, {}, {});
  if (want("attention_decode")) case_attention_decode(4, 1, 4, 2048 / S, 16, 1, 512, 512, 128, true, {}, {});
  if (want("attention_decode")) case_attention_decode(3, 5, 2, 40, 8, 2, 36, 20, 6, true, {1, 1, 0}, {0, 17, 35});
  if (want("attention_decode")) case_attention_decode(4, 1, 4, 16, 3, 1, 8, 8, 16, false, {3, 2, 1, 0}, {15, 0, 7, 14});
  // gpt-oss's sliding layers: a ring of window + chunk − 1 slots, positions far past the capacity
  if (want("attention_decode")) case_attention_decode(2, 3, 2, 10, 4, 2, 64, 64, 8, true, {0, 1}, {37, 8});
  if (want("attention_decode")) case_attention_decode(2, 1, 2, 191, 64, 8, 64, 64, 128, true, {1, 0}, {5000, 130});
  if (want("softmax")) case_softmax(4096 / S, 4096, true);
  if (want("softmax")) case_softmax(100, 1000, false);
  if (want("swiglu")) case_swiglu(0, 0.0f, true);
  if (want("swiglu")) case_swiglu(32ll * 1024 * 1024 / S, 7.0f, false);
  if (want("add")) case_add(32ll * 1024 * 1024 / S);
  if (want("mul_scalar")) case_mul_scalar(1 << 20, 0.3f);
  if (want("moe")) case_moe(4096 / S, 6, 64, 4096);
  if (want("sinkhorn")) case_sinkhorn(65536 / S, 4, 20);
  if (want("hc_pre")) case_hc(false, quick ? 64 : 4096, 4, quick ? 256 : 4096, 20);
  if (want("hc_pre")) case_hc(false, 5, 3, 37, 3);
  if (want("hc_head")) case_hc(true, quick ? 64 : 4096, 4, quick ? 256 : 4096, 0);
  if (want("hc_head")) case_hc(true, 3, 8, 21, 0);
  if (want("hc_post")) case_hc_post(quick ? 256 : 4096, 4, quick ? 512 : 4096);
  if (want("hc_post")) case_hc_post(5, 3, 37);
  if (want("compress_pool")) case_compress_pool(quick ? 512 : 8192, 4, quick ? 128 : 512, true);
  if (want("compress_pool")) case_compress_pool(quick ? 512 : 8192, 128, quick ? 128 : 512, false);
  if (want("compress_pool")) case_compress_pool(37, 3, 7, true);
  if (want("router")) case_router(quick ? 256 : 4096, 256, 8, true, false, false);
  if (want("router")) case_router(quick ? 256 : 4096, 64, 6, false, false, true);
  if (want("router")) case_router(333, 64, 6, true, true, false);
  if (want("swiglu_rows")) case_swiglu_rows(quick ? 512 : 24576, quick ? 512 : 2048, true, 7.0f);
  if (want("swiglu_rows")) case_swiglu_rows(37, 101, false, 0.0f);
  if (want("oss_router")) case_oss_router(quick ? 256 : 4096, 32, 4, true, false);
  if (want("oss_router")) case_oss_router(333, 128, 4, false, true);
  if (want("oss_swiglu")) case_oss_swiglu(quick ? 512 : 8192, quick ? 256 : 2880);
  if (want("indexer_topk")) case_indexer(quick ? 256 : 4096, quick ? 8 : 64, quick ? 32 : 128, 4, quick ? 16 : 512, false, 0);
  if (want("indexer_topk")) case_indexer(97, 3, 20, 4, 5, true, 0);
  // a decode step: one query at the last position of a long context (what deepseek_v4_decode.ts calls)
  if (want("indexer_topk")) case_indexer(1, quick ? 8 : 64, quick ? 32 : 128, 4, quick ? 16 : 512, false, quick ? 255 : 16383);
  // a chunk whose rows straddle block completions (t0 + t + 1 = 40, 44 finish blocks 9, 10)
  if (want("indexer_topk")) case_indexer(6, 3, 20, 4, 5, true, 38);
  if (want("sparse_attention")) case_sparse_attention(quick ? 128 : 1024, quick ? 8 : 64, quick ? 64 : 512, 128, quick ? 32 : 256, quick ? 16 : 64);
  if (want("sparse_attention")) case_sparse_attention(40, 3, 36, 5, 9, 6);

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("\n%d cases, %d with bit differences from the host reference (= emulation numerics); %.1f s\n", g_rows, g_fail, secs);
  return g_fail == 0 ? 0 : 1;
}
