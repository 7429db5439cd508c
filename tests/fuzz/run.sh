#!/usr/bin/env bash
# Runs the libFuzzer targets of a -DKVSERVE_FUZZ=ON build, each for N seconds on one core,
# JOBS (default: the number of cores) at a time. The committed corpus (tests/fuzz/<target>/) is
# read, never written: new inputs go to <build>/fuzz-corpus/<target>/, crashes to
# <build>/fuzz-artifacts/<target>/. Exits 1 if any target crashed, leaked, timed out or ran out
# of memory (libFuzzer prints the reproducer: `<build>/tests/fuzz/<target>_fuzzer <artifact>`;
# once fixed, copy the artifact into tests/fuzz/<target>/ as crash-<what>, so every build
# replays it).
#
#   tests/fuzz/run.sh [--build] [--build-dir build-fuzz] [--seconds 60] [target...]
#
# Targets: openai_request gguf tokenizer chat_template regex gbnf json_schema tool_calls (default: all). --build first configures
# the build directory with clang-14 (-DKVSERVE_FUZZ=ON) and builds the fuzzers (needs
# clang-14 libclang-rt-14-dev libomp-14-dev; KVSERVE_BUILD_LOCK=FILE wraps ninja in flock).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../../build-fuzz"
seconds=60
do_build=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --build) do_build=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -eq 0 ] && targets=(openai_request gguf tokenizer chat_template regex gbnf json_schema tool_calls)
if [ $do_build -eq 1 ]; then
  start=$SECONDS
  CC=clang-14 CXX=clang++-14 cmake -S "$here/../.." -B "$build" -G Ninja -DKVSERVE_FUZZ=ON -DKVSERVE_CUDA=OFF \
    -DKVSERVE_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 2
  lock=()
  [ -n "${KVSERVE_BUILD_LOCK:-}" ] && lock=(flock "$KVSERVE_BUILD_LOCK")
  "${lock[@]}" ninja -C "$build" -j"${JOBS:-2}" "${targets[@]/%/_fuzzer}" || exit 2
  echo "run.sh: fuzz build $((SECONDS - start)) s"
fi
build=$(cd "$build" && pwd) || { echo "run.sh: no build directory" >&2; exit 2; }

# One target: fuzz it for $seconds on one core, write its summary to <log>.summary (printed
# in target order once all are done), exit non-zero on a finding.
fuzz_one() {
  local t=$1 bin="$build/tests/fuzz/$1_fuzzer"
  local work="$build/fuzz-corpus/$t" artifacts="$build/fuzz-artifacts/$t/" log="$build/fuzz-artifacts/$t.log"
  mkdir -p "$work" "$artifacts"
  local dict=()
  [ -f "$here/$t.dict" ] && dict=(-dict="$here/$t.dict")
  local start=$SECONDS rc
  touch "$log.start"  # artifacts newer than this are this run's
  # OMP: the CPU backend runs one thread. ASan: fail on leaks too, but a finding must end the
  # process fast: an input may hold at most 1 GiB (-malloc_limit_mb, the RSS limit's default),
  # so LeakSanitizer never walks a multi-GiB heap at exit, and a process that still does not
  # end is killed (SIGKILL) a minute after its time: the stage can fail, never hang.
  OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
    timeout -s KILL $((seconds + 60)) \
    "$bin" "$work" "$here/$t" "${dict[@]}" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
      -malloc_limit_mb=1024 -max_len=16384 -artifact_prefix="$artifacts" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  {
    echo "== $t: ${seconds} s"
    grep -E '^stat::(number_of_executed_units|peak_rss_mb|new_units_added)|^#[0-9]+ +DONE' "$log" | sed 's/^/   /'
    echo "   corpus: $(ls "$work" | wc -l) inputs in $work; $((SECONDS - start)) s; exit $rc"
    if [ $rc -ne 0 ]; then
      [ $rc -eq 137 ] && echo "   KILLED: still running $((seconds + 60)) s after its start"
      echo "   FAILED: see $log"
      grep -E 'ERROR|FUZZ_CHECK|SUMMARY|Test unit written|Slowest unit' "$log" | head -20
      # The inputs that failed, so CI's log alone reproduces them (their first 512 bytes).
      find "$artifacts" -type f -newer "$log.start" | while read -r a; do
        echo "   artifact $a ($(stat -c %s "$a") bytes), hex:"
        head -c 512 "$a" | od -An -tx1 -v | tr -d ' \n' | fold -w 96 | sed 's/^/     /'
        echo
      done
    fi
  } >"$log.summary"
  return $rc
}

for t in "${targets[@]}"; do
  if [ ! -x "$build/tests/fuzz/${t}_fuzzer" ]; then
    echo "run.sh: $build/tests/fuzz/${t}_fuzzer not built (configure with CC=clang-14 CXX=clang++-14 -DKVSERVE_FUZZ=ON)" >&2
    exit 2
  fi
done
# JOBS targets at a time (default: one per core), each a single-threaded libFuzzer process with
# its whole time budget: on 2 cores four 60 s targets take 2 minutes, not 4.
jobs=${JOBS:-$(nproc)}
failed=0
pids=()
names=()
for t in "${targets[@]}"; do
  fuzz_one "$t" &
  pids+=($!)
  names+=("$t")
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed=1
  cat "$build/fuzz-artifacts/${names[$i]}.log.summary"
done
exit $failed
