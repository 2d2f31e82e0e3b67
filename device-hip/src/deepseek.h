// Internal to the ld_device addon: what the DeepSeek-V4 kernels (deepseek_*.cc) share beyond addon.h.
// Their arguments are read and checked by the generated readers (ops_args.generated.h) before any kernel runs.
#pragma once

#include "addon.h"

namespace ld {

// dot product of an f32 row with an f32 row in the LD_LANES order (ld_dot_f32), dispatched AVX2 / scalar
// with the same bits (deepseek_hc.cc).
float dot_f32(const float* x, const float* w, int k);

}  // namespace ld
