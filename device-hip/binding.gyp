# Two addons, built by `npm run build:native` (npm's bundled node-gyp):
#   ld_device    the `emulated` device backend (device-hip/src, numerics in include/ld_numerics.h)
#   ld_reference the reference path's FP32 GEMM, exact dequantization and the weights check's fused compare,
#                and the core's file primitives (read-ahead, mapping, BLAKE3 of byte ranges and files on several threads)
#                (reference-cpu/native)
# Flags: no -march=native (it would emit AVX-512 and the build would not run on another x86-64);
# AVX2/FMA/F16C kernels are per-function target attributes chosen at run time.
# -ffp-contract=off: the scalar fallback and the emulated numerics must not get fused multiply-adds the
# spec does not write (bit-identity with the AVX2 kernels and the HIP build depends on it).
{
  'target_defaults': {
    'dependencies': ["<!(node -p \"require('node-addon-api').targets\"):node_addon_api_except_all"],
    'cflags!': ['-fno-exceptions'],
    'cflags_cc!': ['-fno-exceptions', '-std=gnu++17'],
    'cflags': ['-O3', '-fopenmp', '-ffp-contract=off', '-fno-fast-math', '-Wall', '-Wextra'],
    'cflags_cc': ['-std=c++17', '-fexceptions'],
    'ldflags': ['-fopenmp'],
    'defines': ['NAPI_VERSION=8', 'NAPI_CPP_EXCEPTIONS'],
  },
  'targets': [
    {
      'target_name': 'ld_device',
      'include_dirs': ['include', '../harness/contracts'],
      'sources': ['src/addon.cc', 'src/dequant.cc', 'src/dequant_fp4.cc', 'src/gemm.cc', 'src/ops.cc', 'src/attention.cc', 'src/decode.cc',
                  'src/deepseek_hc.cc', 'src/deepseek_attention.cc', 'src/deepseek_moe.cc', 'src/gpt_oss.cc'],
    },
    {
      'target_name': 'ld_reference',
      'include_dirs': ['../harness/contracts'],
      'sources': ['../reference-cpu/native/gemm_f32.cc', '../reference-cpu/native/dequant_exact.cc', '../reference-cpu/native/check_f16.cc', '../reference-cpu/native/file_io.cc', '../reference-cpu/native/blake3.cc', '../reference-cpu/native/attention_f64.cc', '../reference-cpu/native/metrics_f64.cc'],
    },
    # The `hip` backend (device-hip/hip): probes and drives an AMD GPU through a dlopen'ed libamdhip64 — no
    # link-time ROCm dependency, so it builds and loads everywhere — and exposes the kernels' host reference.
    # Its action builds the kernels' code object with hipcc when this machine has an AMD GPU, else only
    # writes build/Release/ld_kernels.status (never fails the install).
    {
      'target_name': 'ld_hip',
      'include_dirs': ['include', 'kernels', 'hip'],
      'sources': ['hip/addon_hip.cc', 'hip/ld_gpu_api.cc', 'hip/ld_gpu_backend.cc'],
      'libraries': ['-ldl'],
      'actions': [
        {
          'action_name': 'hip_code_object',
          'inputs': ['hip/build-code-object.sh', 'kernels/all.hip', 'kernels/dequant.hip', 'kernels/gemm.hip',
                     'kernels/rows.hip', 'kernels/attention.hip', 'kernels/moe.hip', 'kernels/deepseek.hip', 'kernels/gpt_oss.hip', 'kernels/util.hip',
                     'kernels/ld_kernel_common.h', 'kernels/ld_kernel_args.h', 'include/ld_numerics.h', 'include/ld_deepseek.h', 'include/ld_gpt_oss.h'],
          'outputs': ['<(PRODUCT_DIR)/ld_kernels.status'],
          'action': ['bash', 'hip/build-code-object.sh', '<(PRODUCT_DIR)'],
        },
      ],
    },
  ],
}
