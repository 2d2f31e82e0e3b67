// Exports of dequant_exact.cc on the `ld_reference` addon (the module's init lives in gemm_f32.cc).
#pragma once
#include <napi.h>

void register_dequant_exact(Napi::Env env, Napi::Object exports);
