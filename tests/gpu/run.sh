#!/usr/bin/env bash
# tests/gpu/run.sh — the one-shot GPU check, for the bare, offline GPU machine (CUDA toolkit,
# CMake, ninja and a compiler; nothing can be installed there). Before the run, on the
# development machine: `bash tests/gpu/prepare.sh`, then carry tests/gpu/prefix with the
# working tree (it holds the few packages the GPU-only build needs and the reference model
# and goldens). This script installs nothing.
#   0. checks the GPU (nvidia-smi), the driver and the toolkit and prints them; a toolkit newer
#      than the driver supports fails here, before anything is built;
#   1. configures the GPU-only build against the prepared folder alone (configure.sh) for this
#      GPU's architecture and builds gpu_tests and bench_gpu;
#   2. runs the `gpu` tests with KVSERVE_GPU_REQUIRED=1: no device, a broken driver or missing
#      reference files fail instead of skipping, and any skipped test fails the run;
#   3. runs bench_gpu (1B and 7B shapes, F16 vs Q4_K weights, F16 vs INT8 KV, batch 1/16/64/128,
#      prefill);
#   4. writes the report to $OUT (the device tool's output folder) or bench/results/gpu/.
# Budget: 8 minutes from the end of step 0. Exit status 0 only when everything above passed.
#
# Environment: PREFIX (default tests/gpu/prefix), BUILD_DIR (default build-gpu), CUDA_ARCH
# (default: this GPU's), BENCH_ARGS (extra bench_gpu arguments), JOBS, OUT.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PREFIX=${PREFIX:-$ROOT/tests/gpu/prefix}
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
JOBS=${JOBS:-$(nproc)}
DATE=$(date -u +%Y-%m-%d)
RESULTS_DIR=${OUT:-$ROOT/bench/results/gpu}
RESULTS=$RESULTS_DIR/gpu-$DATE.md
LOG=$(mktemp -d)/run
BUDGET=480
say() { echo "[run.sh] $*"; }
fail() { echo "run.sh: $*" >&2; exit 1; }

# ---- 0. GPU, driver, toolkit, prepared folder -------------------------------------------------
NVCC=/usr/local/cuda/bin/nvcc
[ -x "$NVCC" ] || NVCC=$(command -v nvcc || true)
[ -n "$NVCC" ] || fail "nvcc not found"
export NVCC PREFIX
TOOLKIT=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
command -v nvidia-smi >/dev/null || fail "no nvidia-smi: this is not a GPU machine (the GPU tests would only skip)"
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -1) ||
  fail "nvidia-smi failed: $GPU"
DRIVER_CUDA=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)
CAP=$(echo "$GPU" | awk -F', ' '{print $4}' | tr -d '.')
ARCH=${CUDA_ARCH:-$CAP}
say "GPU: $GPU; driver supports CUDA $DRIVER_CUDA; toolkit (nvcc) $TOOLKIT; building for sm_$ARCH"
[ -n "$ARCH" ] || fail "cannot read the GPU's compute capability from nvidia-smi"
if [ -n "$DRIVER_CUDA" ] && [ -n "$TOOLKIT" ] &&
   [ "$(printf '%s\n%s\n' "$TOOLKIT" "$DRIVER_CUDA" | sort -V | tail -1)" != "$DRIVER_CUDA" ]; then
  fail "the toolkit (CUDA $TOOLKIT) is newer than the driver supports (CUDA $DRIVER_CUDA)"
fi
[ -d "$PREFIX/usr/include" ] || fail "no $PREFIX: run tests/gpu/prepare.sh on the development machine and carry it"
SHARED=$PREFIX/shared
[ -f "$ROOT/../shared/models/stories260K.gguf" ] && SHARED=$ROOT/../shared
for f in models/stories260K.gguf golden/stories260K-greedy.jsonl refmodels/llamacpp-refs.jsonl refmodels/llama-q4_k_m.gguf; do
  [ -f "$SHARED/$f" ] || fail "reference file $SHARED/$f is missing (prepare.sh copies it)"
done
mkdir -p "$RESULTS_DIR"
START=$(date +%s)  # the budget starts here
elapsed() { echo $(( $(date +%s) - START )); }
left() { echo $(( BUDGET - $(elapsed) )); }
# limit MAX RESERVE: at most MAX seconds, leaving RESERVE of the budget for later phases.
limit() { local l=$(( $(left) - $2 )); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 10 ] && l=10; echo "$l"; }

# ---- 1. Build ----------------------------------------------------------------------------------
NCCL=OFF
[ -f "$(dirname "$NVCC")/../include/nccl.h" ] && NCCL=ON
bash "$ROOT/tests/gpu/configure.sh" "$BUILD" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DKVSERVE_NCCL=$NCCL \
  -DKVSERVE_SHARED_DIR="$SHARED" >"$LOG.configure" 2>&1
CONFIGURE_RC=$?
BUILD_RC=1
if [ $CONFIGURE_RC -eq 0 ]; then
  timeout "$(limit 330 150)" ninja -C "$BUILD" -j "$JOBS" gpu_tests bench_gpu >"$LOG.build" 2>&1
  BUILD_RC=$?
  [ $BUILD_RC -eq 0 ] || tail -40 "$LOG.build"
else
  tail -30 "$LOG.configure"
fi
say "$(elapsed)s: configure exit $CONFIGURE_RC, build exit $BUILD_RC"

# ---- 2. GPU tests (no skips allowed) ------------------------------------------------------------
TEST_RC=1
SKIPPED=0
if [ $BUILD_RC -eq 0 ]; then
  (cd "$BUILD" && KVSERVE_GPU_REQUIRED=1 timeout "$(limit 150 90)" ctest -L gpu -j 4 --output-on-failure \
     --timeout 240) >"$LOG.tests" 2>&1
  TEST_RC=$?
  SKIPPED=$(grep -c "\*\*\*Skipped\|(Skipped)" "$LOG.tests")
  [ "$SKIPPED" -eq 0 ] || { say "$SKIPPED test(s) skipped on a GPU machine: failing"; TEST_RC=1; }
  grep -E "tests passed|tests failed|Skipped|\*\*\*Failed|Total Test time" "$LOG.tests" | tail -30
fi
say "$(elapsed)s: gpu tests exit $TEST_RC"

# ---- 3. Benchmark --------------------------------------------------------------------------------
BENCH_RC=1
if [ $BUILD_RC -eq 0 ]; then
  # shellcheck disable=SC2086
  timeout "$(limit 400 5)" "$BUILD/bench/bench_gpu" --out "$LOG.bench.md" ${BENCH_ARGS:-} 2>"$LOG.bench.err" >/dev/null
  BENCH_RC=$?
  cat "$LOG.bench.err"
fi
say "$(elapsed)s: benchmark exit $BENCH_RC"

# ---- 4. Results ----------------------------------------------------------------------------------
{
  echo "# GPU run $DATE"
  echo
  echo "- GPU: $GPU (driver supports CUDA $DRIVER_CUDA)"
  if COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null); then
    git -C "$ROOT" diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT (with local changes)"
  else
    COMMIT="unknown (no git checkout)"
  fi
  echo "- Commit: $COMMIT"
  echo "- nvcc: $("$NVCC" --version | tail -1)"
  echo "- Command: bash tests/gpu/run.sh (GPU-only build from tests/gpu/prefix, KVSERVE_GPU_REQUIRED=1)"
  echo "- Build (sm_$ARCH): exit $BUILD_RC; gpu tests: exit $TEST_RC ($SKIPPED skipped); benchmark: exit $BENCH_RC;" \
       "$(elapsed) s after the checks"
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
[ -f "$LOG.tests" ] && cp "$LOG.tests" "$RESULTS_DIR/gpu-tests-$DATE.log"
say "wrote $RESULTS"
[ $BUILD_RC -eq 0 ] && [ $TEST_RC -eq 0 ] && [ $BENCH_RC -eq 0 ]
