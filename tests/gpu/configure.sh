#!/usr/bin/env bash
# tests/gpu/configure.sh BUILD_DIR [CMAKE ARGS...] — configures the GPU-only build
# (-DKVSERVE_GPU_ONLY=ON: the core libraries, gpu_tests, bench_gpu) against nothing but the
# CUDA toolkit and the folder tests/gpu/prepare.sh made (PREFIX, default tests/gpu/prefix).
# Every package, library and header is searched only under that folder and the toolkit
# (CMAKE_FIND_ROOT_PATH in ONLY mode), and the server's packages are disabled outright, so a
# configure that succeeds here needs nothing the bare GPU machine lacks. Used by run.sh on the
# GPU machine and by check_gpu_only_build.sh in CI.
#
# Environment: PREFIX, NVCC (default /usr/local/cuda/bin/nvcc, else nvcc on PATH).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:?usage: configure.sh BUILD_DIR [CMAKE ARGS...]}
shift
PREFIX=${PREFIX:-$ROOT/tests/gpu/prefix}
[ -d "$PREFIX/usr/include" ] || { echo "configure.sh: no $PREFIX (run tests/gpu/prepare.sh first)" >&2; exit 1; }
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
[ -x "$NVCC" ] || NVCC=$(command -v nvcc || true)
[ -n "$NVCC" ] || { echo "configure.sh: nvcc not found" >&2; exit 1; }
CUDA_ROOT=$(cd "$(dirname "$(readlink -f "$NVCC")")/.." && pwd)
disabled=()
for p in gRPC Protobuf Boost prometheus-cpp CLI11 BLAS benchmark dnnl; do
  disabled+=("-DCMAKE_DISABLE_FIND_PACKAGE_$p=ON")
done
# pkg-config (FindOpenSSL asks it when it exists) sees only the folder's .pc files.
export PKG_CONFIG_LIBDIR=$PREFIX/usr/lib/x86_64-linux-gnu/pkgconfig:$PREFIX/usr/share/pkgconfig
exec cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSERVE_GPU_ONLY=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" \
  "-DCMAKE_FIND_ROOT_PATH=$PREFIX;$CUDA_ROOT" -DCMAKE_PREFIX_PATH=/usr \
  -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY \
  -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY -DOPENSSL_ROOT_DIR=/usr \
  "${disabled[@]}" "$@"
