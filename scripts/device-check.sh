#!/usr/bin/env bash
# Build and run the GPU kernel check: every kernel of device-hip/kernels against the host reference (the LD_HD
# element functions + the documented accumulation orders = the `emulated` backend's numbers) on seeded random
# inputs, with a float64 error column and timings against measured copy / FMA ceilings; then the hip backend's
# module-launch path (device-hip/hip) through module_check.
#
#   scripts/device-check.sh            pick the toolchain: nvcc + an NVIDIA GPU, else hipcc + an AMD GPU
#   scripts/device-check.sh --cuda     NVIDIA: nvcc -x cu through kernels/hip_to_cuda.h, arch from nvidia-smi
#   scripts/device-check.sh --hip      AMD: hipcc --offload-arch=$LD_HIP_ARCH (default: rocminfo's, else gfx90a)
#   scripts/device-check.sh --cpu      no GPU: HIP-CPU (header-only CPU HIP runtime; HIP_CPU_INCLUDE=<its include/>,
#                                      libtbb-dev) steps through the same kernels, with --quick shapes, and runs
#                                      module_check over HIP-CPU (the backend's host code, kernels compiled in)
# Extra arguments after the mode go to device_check (--quick: smaller shapes).
# Exit: 0 all bit-identical, 1 a mismatch or a failed step, 2 no usable GPU/toolchain.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
mode=auto
case "${1:-}" in --cuda|--hip|--cpu|--auto) mode=${1#--}; shift ;; esac
build=${LD_CHECK_BUILD:-/tmp/layerdiff-device-check}
mkdir -p "$build"
# a binary left by an earlier build must not run in place of one that fails to build now
rm -f "$build"/device_check "$build"/device_check_cpu "$build"/module_check "$build"/module_check_cpu "$build"/ld_kernels_*
inc=(-I"$root/device-hip/include" -I"$root/device-hip/kernels" -I"$root/device-hip/hip")
jobs=$(nproc 2>/dev/null || echo 4)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$jobs}

if [ "$mode" = auto ]; then
  if command -v nvcc >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then mode=cuda
  elif command -v hipcc >/dev/null 2>&1 && [ -e /dev/kfd ]; then mode=hip
  else echo "device-check: no nvcc + NVIDIA GPU and no hipcc + AMD GPU here (try --cpu with HIP-CPU)" >&2; exit 2; fi
fi

t0=$(date +%s)
status=0
step() { echo "== $* ($(( $(date +%s) - t0 )) s)"; }

# g++ host build of module_check (no GPU headers: the runtime is dlopen'ed); OpenMP when the compiler has it.
build_module_check() {
  local omp=-fopenmp
  echo 'int main(){return 0;}' | g++ -x c++ -fopenmp - -o "$build/omp_probe" 2>/dev/null || omp=
  g++ -std=c++17 -O2 -ffp-contract=off $omp "${inc[@]}" device-hip/hip/ld_gpu_api.cc device-hip/hip/ld_gpu_backend.cc \
    device-hip/check/module_check.cc -ldl -o "$build/module_check"
}

case "$mode" in
  cuda)
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
    arch=sm_${cap:-90}
    step "nvcc $(nvcc --version | grep -o 'release [0-9.]*') for $arch: device_check, kernels cubin, module_check (parallel)"
    flags=(-x cu -arch="$arch" -O3 --fmad=false -std=c++17 "${inc[@]}")
    ( nvcc "${flags[@]}" -Xcompiler -fopenmp -lgomp device-hip/check/device_check.hip -o "$build/device_check" 2>"$build/dc.log" ||
      nvcc "${flags[@]}" device-hip/check/device_check.hip -o "$build/device_check" 2>>"$build/dc.log" ) &
    p1=$!
    nvcc "${flags[@]}" --cubin device-hip/kernels/all.hip -o "$build/ld_kernels_$arch.cubin" 2>"$build/cubin.log" &
    p2=$!
    build_module_check 2>"$build/mc.log" &
    p3=$!
    wait $p1 || { cat "$build/dc.log"; echo "device-check: device_check did not build" >&2; exit 1; }
    wait $p2 || { cat "$build/cubin.log"; status=1; }
    wait $p3 || { cat "$build/mc.log"; status=1; }
    step "device_check"
    "$build/device_check" "$@" || status=1
    if [ -f "$build/module_check" ] && [ -f "$build/ld_kernels_$arch.cubin" ]; then
      step "module_check (the hip backend's module-launch path, CUDA driver flavour)"
      "$build/module_check" cuda "$build/ld_kernels_$arch.cubin" || status=1
    fi
    ;;
  hip)
    export HIP_PLATFORM=amd
    arch=${LD_HIP_ARCH:-$(rocminfo 2>/dev/null | grep -o -m1 'gfx[0-9a-f]*' || true)}
    arch=${arch:-gfx90a}
    step "hipcc for $arch: device_check, code object, module_check"
    # the numerics the emulation assumes, stated (as .ci/hip-compile states them)
    flags=(--offload-arch="$arch" -O3 -ffp-contract=off -fno-gpu-flush-denormals-to-zero -fhip-fp32-correctly-rounded-divide-sqrt -fno-fast-math -std=c++17 "${inc[@]}")
    hipcc "${flags[@]}" device-hip/check/device_check.hip -o "$build/device_check" || exit 1
    hipcc "${flags[@]}" --genco device-hip/kernels/all.hip -o "$build/ld_kernels_$arch.co" || status=1
    build_module_check || status=1
    step "device_check"
    "$build/device_check" "$@" || status=1
    step "module_check (the hip backend's module-launch path)"
    "$build/module_check" amd "$build/ld_kernels_$arch.co" || status=1
    ;;
  cpu)
    : "${HIP_CPU_INCLUDE:?set HIP_CPU_INCLUDE to the include/ directory of HIP-CPU (github.com/ROCm/HIP-CPU)}"
    step "g++ with HIP-CPU: device_check --quick, module_check cpu (parallel)"
    cpu_flags=(-std=c++17 -O2 -ffp-contract=off -DLD_HIP_CPU -I"$HIP_CPU_INCLUDE" "${inc[@]}" -fopenmp)
    g++ "${cpu_flags[@]}" -x c++ device-hip/check/device_check.hip -o "$build/device_check_cpu" -ltbb -lpthread 2>"$build/dc_cpu.log" &
    p1=$!
    # module_check with the kernels compiled in: the backend's host code (hip/ld_gpu_backend.cc) over HIP-CPU
    g++ "${cpu_flags[@]}" device-hip/hip/ld_gpu_api.cc device-hip/hip/ld_gpu_backend.cc device-hip/check/module_check.cc \
      -o "$build/module_check_cpu" -ltbb -lpthread -ldl 2>"$build/mc_cpu.log" &
    p2=$!
    wait $p1 || { grep -v 'for simd' "$build/dc_cpu.log"; echo "device-check: device_check did not build" >&2; exit 1; }
    wait $p2 || { grep -v 'for simd' "$build/mc_cpu.log"; status=1; }
    step "device_check (kernels stepped on the CPU; timings meaningless)"
    "$build/device_check_cpu" --quick "$@" || status=1
    if [ -f "$build/module_check_cpu" ]; then
      step "module_check cpu (the hip backend's host code, kernels stepped by HIP-CPU)"
      "$build/module_check_cpu" cpu || status=1
    fi
    ;;
  *) echo "device-check: unknown mode $mode" >&2; exit 2 ;;
esac
step "done, status $status"
exit $status
