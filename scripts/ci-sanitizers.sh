#!/usr/bin/env bash
# Sanitizer CI step (see RELIABILITY.md):
#   build-asan  AddressSanitizer + UndefinedBehaviorSanitizer with clang-14 and libFuzzer's
#               coverage (-DKVSERVE_FUZZ=ON): the unit tests (labels unit/*, including the fuzz
#               corpora replays) and the end-to-end tests (label e2e: a sanitized
#               `kvserve serve` driven by real clients), and the libFuzzer targets, which
#               tests/fuzz/run.sh --build-dir build-asan then runs. One sanitized build serves
#               both (they were two: GCC ASan for the tests, clang for the fuzzers);
#   build-tsan  ThreadSanitizer (-DKVSERVE_TSAN=ON, GCC): the engine and cache tests only, with
#               OMP_NUM_THREADS=1 (uninstrumented gRPC and libgomp give false reports).
# Any sanitizer report fails the run (halt_on_error / abort_on_error).
#
#   scripts/ci-sanitizers.sh [asan|tsan|all]     (default: all; from the repository root)
#
# Needs clang-14, libclang-rt-14-dev and libomp-14-dev (scripts/install-deps.sh --fuzz).
# Environment: JOBS (default 2); KVSERVE_BUILD_LOCK=FILE to take `flock FILE` around each
# build (shared machines); CTEST_ARGS for extra ctest arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
jobs=${JOBS:-2}
# -g1: line tables and function names, all a sanitizer report needs; full debug info made the
# ASan build a third slower on 2 cores. -O1, as the sanitizers' documentation advises: the HTTP
# connection's Beast templates alone took 279 s of clang ASan at -O2, 103 s at -O1.
common=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
        -DKVSERVE_CUDA=OFF -DKVSERVE_BUILD_BENCH=OFF)

build() {  # build DIR TARGETS...
  local dir=$1
  shift
  if [ -n "${KVSERVE_BUILD_LOCK:-}" ]; then
    flock "$KVSERVE_BUILD_LOCK" ninja -C "$dir" -j"$jobs" "$@"
  else
    ninja -C "$dir" -j"$jobs" "$@"
  fi
}

start=$SECONDS
if [ "$what" = asan ] || [ "$what" = all ]; then
  t=$SECONDS
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-asan "${common[@]}" -DKVSERVE_FUZZ=ON >/dev/null
  build build-asan kvserve common_tests cache_tests model_tests tokenizer_tests grammar_tests backend_tests \
    engine_tests server_tests tools_tests cli_tests \
    openai_request_replay gguf_replay tokenizer_replay chat_template_replay regex_replay gbnf_replay json_schema_replay \
    tool_calls_replay tool_calls_fuzzer \
    openai_request_fuzzer gguf_fuzzer tokenizer_fuzzer chat_template_fuzzer regex_fuzzer gbnf_fuzzer json_schema_fuzzer
  echo "ci-sanitizers: ASan+UBSan build $((SECONDS - t)) s"
  t=$SECONDS
  # detect_leaks: LeakSanitizer runs at every exit; the server must exit clean too.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" -L '^unit/|^e2e$' ${CTEST_ARGS:-}
  echo "ci-sanitizers: ASan+UBSan tests $((SECONDS - t)) s"
fi
if [ "$what" = tsan ] || [ "$what" = all ]; then
  t=$SECONDS
  cmake -S . -B build-tsan "${common[@]}" -DKVSERVE_TSAN=ON >/dev/null
  build build-tsan engine_tests cache_tests
  echo "ci-sanitizers: TSan build $((SECONDS - t)) s"
  t=$SECONDS
  OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure -j"$jobs" -L '^unit/(engine|cache)$' ${CTEST_ARGS:-}
  echo "ci-sanitizers: TSan tests $((SECONDS - t)) s"
fi
echo "ci-sanitizers: passed in $((SECONDS - start)) s"
