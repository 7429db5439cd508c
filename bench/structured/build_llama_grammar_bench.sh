#!/usr/bin/env bash
# Builds bench/structured/llama_grammar_bench.cpp (MaskBench over llama.cpp's grammar engine)
# against a llama.cpp checkout and its CMake build folder, where the static libraries `llama`
# and `common` were built (-DBUILD_SHARED_LIBS=OFF; e.g. `cmake --build BUILD --target llama
# common`). llama.cpp is the peer being measured, never a dependency of kvserve.
#
# usage: build_llama_grammar_bench.sh LLAMA_SRC LLAMA_BUILD OUT_BINARY
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 LLAMA_SRC LLAMA_BUILD OUT_BINARY" >&2
  exit 2
fi
src=$1 build=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
lib() {  # the first static library of that name under the build folder
  local f
  f=$(find "$build" -name "$1" -type f | head -n 1)
  [ -n "$f" ] || { echo "missing $1 under $build (build the llama and common targets)" >&2; exit 1; }
  echo "$f"
}
nice -n 19 g++ -O2 -std=c++17 -o "$out" "$here/llama_grammar_bench.cpp" \
  -I"$src/include" -I"$src/common" -I"$src/ggml/include" \
  "$(lib libcommon.a)" "$(lib libllama.a)" "$(lib libggml.a)" "$(lib libggml-cpu.a)" "$(lib libggml-base.a)" \
  -lpthread -ldl -lm
