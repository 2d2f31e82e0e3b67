// The whole code object in one translation unit: what `--genco` builds for the hip backend
// (hipModuleLoadData) and what the device check includes.
#include "dequant.hip"
#include "gemm.hip"
#include "rows.hip"
#include "attention.hip"
#include "moe.hip"
#include "deepseek.hip"
#include "gpt_oss.hip"
#include "util.hip"
