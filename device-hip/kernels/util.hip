// Self-checks the backend runs on the device before trusting it.
#include "ld_kernel_common.h"

// y[h] = f32 bits of ld_widen_f16(h) for all 65536 f16 patterns; the host compares with ld_f16_to_f32
// (equal bits for every non-NaN, NaN for NaN). Guards the hardware-converter shortcut of ld_kernel_common.h.
LD_KERNEL void ld_widen_check(LdWidenCheckArgs a) {
  const int h = blockIdx.x * LD_THREADS + threadIdx.x;
  if (h < 65536) a.y[h] = ld_f32_bits(ld_widen_f16((uint16_t)h));
}
