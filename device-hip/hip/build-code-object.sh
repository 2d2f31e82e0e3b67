#!/usr/bin/env bash
# Build the hip backend's code object (device-hip/kernels/all.hip → ld_kernels_<arch>.co, hipcc --genco) into
# <dir> — at install (npm run build:native runs it through binding.gyp), or on demand (--device hip).
# Never fails the install: without hipcc, or on a machine without an AMD GPU (no /dev/kfd; set
# LAYERDIFF_BUILD_HIP=1 to build anyway), it only writes <dir>/ld_kernels.status saying why it skipped.
#   LAYERDIFF_HIP_ARCH  target (default: the GPU's gfx from rocminfo, else gfx90a)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$here/build/Release}
mkdir -p "$dir"
status="$dir/ld_kernels.status"
hipcc=$(command -v hipcc || ls /opt/rocm/bin/hipcc 2>/dev/null || true)
if [ -z "$hipcc" ]; then echo "skipped: hipcc not found" >"$status"; exit 0; fi
if [ ! -e /dev/kfd ] && [ "${LAYERDIFF_BUILD_HIP:-0}" != 1 ]; then echo "skipped: no AMD GPU (/dev/kfd) on this machine" >"$status"; exit 0; fi
arch=${LAYERDIFF_HIP_ARCH:-$(rocminfo 2>/dev/null | grep -o -m1 'gfx[0-9a-f]*' || true)}
arch=${arch:-gfx90a}
export HIP_PLATFORM=amd
# the numerics the emulation assumes, stated (as .ci/hip-compile states them)
if "$hipcc" --offload-arch="$arch" -O3 -ffp-contract=off -fno-gpu-flush-denormals-to-zero -fhip-fp32-correctly-rounded-divide-sqrt -fno-fast-math -std=c++17 --genco -I"$here/include" -I"$here/kernels" \
    "$here/kernels/all.hip" -o "$dir/ld_kernels_$arch.co" 2>"$dir/ld_kernels.log"; then
  echo "built ld_kernels_$arch.co with $hipcc" >"$status"
else
  echo "failed: hipcc --genco for $arch (see ld_kernels.log)" >"$status"
fi
exit 0
