#!/usr/bin/env bash
# tests/gpu/run.sh — the one-shot GPU check, on a machine with a CUDA GPU (sized for one H200)
# and the CUDA toolkit in /usr/local/cuda:
#   1. checks the Debian packages of the README (installs the missing ones when root and
#      online), configures a Release build with -DKVSERVE_CUDA=ON for this GPU's architecture
#      only (sm_90 on an H200) and builds just what it needs (gpu_tests, bench_gpu);
#   2. runs the `gpu` ctest label (kernels vs CPU references, backend vs CPU backend,
#      stories260K goldens);
#   3. runs bench/bench_gpu (synthetic 1B and 7B shapes, F16 vs INT8 KV, batch 1/16/64/128);
#   4. writes everything to bench/results/gpu-<UTC date>.md and prints it.
# Budget: 8 minutes in all (typically ~2 min build on 16 cores, <1 min tests, 1-2 min bench).
# Exit status: 0 when the build, every gpu test and the benchmark succeeded.
#
# Environment: BUILD_DIR (default build-gpu), CUDA_ARCH (default: this GPU's, else 90),
# BENCH_ARGS (extra bench_gpu arguments), JOBS.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
JOBS=${JOBS:-$(nproc)}
DATE=$(date -u +%Y-%m-%d)
RESULTS=$ROOT/bench/results/gpu-$DATE.md
LOG=$(mktemp -d)/run
START=$(date +%s)
BUDGET=480
mkdir -p "$ROOT/bench/results"

elapsed() { echo $(( $(date +%s) - START )); }
left() { echo $(( BUDGET - $(elapsed) )); }
# limit MAX RESERVE: at most MAX seconds, leaving RESERVE of the budget for later phases.
limit() { local l=$(( $(left) - $2 )); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 10 ] && l=10; echo "$l"; }
say() { echo "[run.sh $(elapsed)s] $*"; }

# ---- 0. Toolchain and packages --------------------------------------------------------------
NVCC=/usr/local/cuda/bin/nvcc
[ -x "$NVCC" ] || NVCC=$(command -v nvcc || true)
if [ -z "$NVCC" ]; then echo "run.sh: nvcc not found (install the CUDA toolkit in /usr/local/cuda)"; exit 1; fi
PATH=$(dirname "$NVCC"):$PATH
export PATH

PACKAGES="build-essential cmake ninja-build pkg-config libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev
  protobuf-compiler libboost-dev libspdlog-dev prometheus-cpp-dev nlohmann-json3-dev libcli11-dev
  libopenblas-openmp-dev libgtest-dev libbenchmark-dev libpcre2-dev libssl-dev"
MISSING=""
for p in $PACKAGES; do
  dpkg -s "$p" >/dev/null 2>&1 || MISSING="$MISSING $p"
done
if [ -n "$MISSING" ]; then
  say "missing Debian packages:$MISSING"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=$(command -v sudo || true)
  if [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; then
    # shellcheck disable=SC2086  # $SUDO may be empty; $MISSING is a list
    if ! { timeout 180 $SUDO apt-get update -qq && timeout 240 $SUDO apt-get install -y -qq $MISSING; }; then
      say "apt-get failed; trying the build anyway"
    fi
  fi
fi

if command -v nvidia-smi >/dev/null; then
  GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader | head -1)
  CAP=$(echo "$GPU" | awk -F', ' '{print $4}' | tr -d '.')
else
  GPU="unknown (no nvidia-smi)"; CAP=""
fi
ARCH=${CUDA_ARCH:-${CAP:-90}}
say "GPU: $GPU; building for sm_$ARCH with $JOBS jobs"

# ---- 1. Build --------------------------------------------------------------------------------
# The NCCL communicator (and its test, a world of one rank per visible GPU) when NCCL is there.
NCCL=OFF
[ -f "$(dirname "$NVCC")/../include/nccl.h" ] || [ -f /usr/include/nccl.h ] && NCCL=ON
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSERVE_CUDA=ON -DKVSERVE_NCCL=$NCCL \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" >"$LOG.configure" 2>&1
CONFIGURE_RC=$?
BUILD_RC=1
if [ $CONFIGURE_RC -eq 0 ]; then
  timeout "$(limit 330 150)" ninja -C "$BUILD" -j "$JOBS" gpu_tests bench_gpu >"$LOG.build" 2>&1
  BUILD_RC=$?
else
  tail -30 "$LOG.configure"
fi
[ $BUILD_RC -eq 0 ] || { tail -40 "$LOG.build" 2>/dev/null; }
say "build: exit $BUILD_RC"

# ---- 2. GPU tests ----------------------------------------------------------------------------
TEST_RC=1
if [ $BUILD_RC -eq 0 ]; then
  (cd "$BUILD" && timeout "$(limit 150 90)" ctest -L gpu -j 4 --output-on-failure --timeout 240) >"$LOG.tests" 2>&1
  TEST_RC=$?
  grep -E "tests passed|tests failed|Skipped|\*\*\*Failed|Total Test time" "$LOG.tests" | tail -30
fi
say "gpu tests: exit $TEST_RC"

# ---- 3. Benchmark ----------------------------------------------------------------------------
BENCH_RC=1
if [ $BUILD_RC -eq 0 ]; then
  # shellcheck disable=SC2086
  timeout "$(limit 400 5)" "$BUILD/bench/bench_gpu" --out "$LOG.bench.md" ${BENCH_ARGS:-} 2>"$LOG.bench.err" >/dev/null
  BENCH_RC=$?
  cat "$LOG.bench.err"
fi
say "benchmark: exit $BENCH_RC"

# ---- 4. Results ------------------------------------------------------------------------------
# Without a device (bench_gpu exit 2) there is nothing to record: print, keep bench/results clean.
[ $BENCH_RC -eq 2 ] && RESULTS=$LOG.results.md
{
  echo "# GPU run $DATE"
  echo
  echo "- GPU: $GPU"
  if COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null); then
    git -C "$ROOT" diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT (with local changes)"
  else
    COMMIT="unknown (no git checkout)"
  fi
  echo "- Commit: $COMMIT"
  echo "- nvcc: $("$NVCC" --version | tail -1)"
  echo "- Build (sm_$ARCH): exit $BUILD_RC; gpu tests: exit $TEST_RC; benchmark: exit $BENCH_RC; total $(elapsed) s"
  echo
  echo "## gpu tests"
  echo
  echo '```'
  if [ -f "$LOG.tests" ]; then
    grep -E "Test +#|tests passed|tests failed|Total Test time" "$LOG.tests" | sed 's/^ *//'
    grep -E "^\[  FAILED  \]|Failure|diverges" "$LOG.tests" | head -40
  else
    echo "not run"
  fi
  echo '```'
  echo
  if [ -s "$LOG.bench.md" ]; then
    sed 's/^# /## /' "$LOG.bench.md"
  else
    echo "## benchmark"
    echo
    echo '```'
    tail -20 "$LOG.bench.err" 2>/dev/null || echo "not run"
    echo '```'
  fi
} >"$RESULTS"
cat "$RESULTS"
if [ $BENCH_RC -eq 2 ]; then say "no CUDA device: results not written to bench/results"; else say "wrote $RESULTS"; fi
[ $BUILD_RC -eq 0 ] && [ $TEST_RC -eq 0 ] && [ $BENCH_RC -eq 0 ]
