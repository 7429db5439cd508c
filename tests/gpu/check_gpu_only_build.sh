#!/usr/bin/env bash
# tests/gpu/check_gpu_only_build.sh [BUILD_DIR] — run by .ci/run where nvcc exists: proves
# that the GPU machine's build needs nothing but the CUDA toolkit and the folder
# tests/gpu/prepare.sh makes. Prepares the folder, configures -DKVSERVE_GPU_ONLY=ON in a clean
# directory with every package searched only there (configure.sh; the server's packages
# disabled), builds gpu_tests and bench_gpu for sm_80 and sm_90, checks that each shared
# library they load comes from the folder, the toolkit or the C/C++ runtime, and runs the gpu
# tests (they skip without a device; their GpuRequired tests check that KVSERVE_GPU_REQUIRED=1
# turns skips into failures).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-$ROOT/build-gpu-only}
export PREFIX=${PREFIX:-$ROOT/tests/gpu/prefix}
start=$SECONDS
bash "$ROOT/tests/gpu/prepare.sh" "$PREFIX"
rm -rf "$BUILD"
log=$(mktemp)
bash "$ROOT/tests/gpu/configure.sh" "$BUILD" -DCMAKE_CUDA_ARCHITECTURES="80;90" >"$log" 2>&1 || { cat "$log"; exit 1; }
ninja -C "$BUILD" -j "${JOBS:-2}" gpu_tests bench_gpu
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
[ -x "$NVCC" ] || NVCC=$(command -v nvcc)
CUDA_ROOT=$(cd "$(dirname "$(readlink -f "$NVCC")")/.." && pwd)
bad=0
for bin in "$BUILD/tests/gpu_tests" "$BUILD/bench/bench_gpu"; do
  while read -r lib path; do
    case "$path" in
      "$PREFIX"/* | "$CUDA_ROOT"/* | /usr/local/cuda*) ;;
      *) case "${lib##*/}" in
           linux-vdso* | libc.so* | libm.so* | libstdc++* | libgcc_s* | libgomp* | ld-linux* | libdl.so* | \
           libpthread* | librt.so* | libcuda.so*) ;;
           *) echo "check_gpu_only_build: $bin loads $lib from $path, outside the prepared folder"; bad=1 ;;
         esac ;;
    esac
  done < <(ldd "$bin" | awk '/=>/ {print $1, $3} !/=>/ {print $1, $1}')
done
[ $bad -eq 0 ]
ctest --test-dir "$BUILD" -L gpu --output-on-failure -j "${JOBS:-2}"
echo "check_gpu_only_build: the GPU-only build works from $PREFIX alone ($((SECONDS - start)) s)"
