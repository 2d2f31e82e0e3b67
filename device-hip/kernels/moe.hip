// DeepSeek-V4 MoE data movement and the hyper-connection Sinkhorn (the emulation: device-hip/src/
// deepseek_moe.cc moeCombineF16, device-hip/deepseek_v4/moe.ts's row gather, deepseek_hc.cc's hcPreF16 via
// ld_sinkhorn_f32 of ld_deepseek.h — the DeepSeek engineer's LD_HD function, called here unchanged).
#include "ld_kernel_common.h"

// Gather: expert-ordered rows y[r, :] = x[token[r], :] (a copy: exact).
LD_KERNEL void ld_moe_gather(LdMoeGatherArgs a) {
  LD_GRID_STRIDE(e, (long long)a.R * a.D) {
    const long long r = e / a.D;
    a.y[e] = a.x[(size_t)a.token[r] * a.D + (size_t)(e % a.D)];
  }
}

// Combine (scatter back): thread per output element; f32 adds from +0 over the token's routed rows in
// increasing row order, the shared expert's value last, one rounding — moeCombineF16's order.
LD_KERNEL void ld_moe_combine(LdMoeCombineArgs a) {
  LD_GRID_STRIDE(e, (long long)a.T * a.D) {
    const int t = (int)(e / a.D), i = (int)(e % a.D);
    float acc = 0.0f;
    for (int j = a.start[t]; j < a.start[t + 1]; j++) acc = ld_acc_add_f16(acc, a.y[(size_t)a.rows[j] * a.D + i]);
    acc = ld_acc_add_f16(acc, a.shared[e]);
    a.out[e] = ld_f32_to_f16(acc);
  }
}

// Sinkhorn: thread per token, its hc×hc matrix in registers/scratch, ld_sinkhorn_f32 as written.
LD_KERNEL void ld_sinkhorn(LdSinkhornArgs a) {
  const int t = blockIdx.x * LD_THREADS + threadIdx.x;
  if (t >= a.T) return;
  const int q = a.hc * a.hc;
  float C[LD_HC_MAX * LD_HC_MAX];
  for (int i = 0; i < q; i++) C[i] = a.A[(size_t)t * q + i];
  ld_sinkhorn_f32(C, a.hc, a.iters, a.eps);
  for (int i = 0; i < q; i++) a.C[(size_t)t * q + i] = C[i];
}
