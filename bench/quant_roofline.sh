#!/usr/bin/env bash
# Single-stream decode of quantized files larger than the CPU's last-level cache against the
# memory-bandwidth roofline of the file's bytes per token (issue 12), with llama.cpp's tg128 on
# the same files in the same run. synthetic 1b (TinyLlama's shape, 1.1 B parameters) is written
# by `kvserve mkmodel` as F16 and Q4_0; llama-quantize makes Q4_K_M, Q6_K and Q8_0 from the F16
# file. kvserve: bench_forward (CpuBackend driven directly, int8 compute, the server's default;
# bandwidth measured right before each row); llama.cpp: llama-bench -p 0 -n 128, 2 threads.
#
# Usage: [LLAMA_REV=...] [TYPES="Q4_0 Q4_K_M Q6_K Q8_0"] [OUT=...] bash bench/quant_roofline.sh LLAMA_BIN_DIR [BUILD_DIR]
# (about 10 minutes; run alone on the machine)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLAMA=${1:?usage: quant_roofline.sh LLAMA_BIN_DIR [BUILD_DIR]}
BUILD=${2:-$ROOT/build}
OUT=${OUT:-$ROOT/bench/results/quant_roofline.md}
LLAMA_REV=${LLAMA_REV:-unknown revision}
TYPES=${TYPES:-Q4_0 Q4_K_M Q6_K Q8_0}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$BUILD/kvserve" mkmodel --preset 1b --dtype f16 -o "$W/F16.gguf" >/dev/null
models=()
for t in $TYPES; do
  if [ "$t" = Q4_0 ]; then
    "$BUILD/kvserve" mkmodel --preset 1b --dtype q4_0 -o "$W/Q4_0.gguf" >/dev/null
  else
    "$LLAMA/llama-quantize" "$W/F16.gguf" "$W/$t.gguf" "$t" >/dev/null 2>&1
  fi
  models+=(--model "$W/$t.gguf")
done
{
  echo "# Quantized decode against the memory roofline (files larger than the L3 cache)"
  echo
  echo "Command: \`LLAMA_REV=$LLAMA_REV bash bench/quant_roofline.sh LLAMA_BIN_DIR\` ($(date -u +%F), llama.cpp $LLAMA_REV)."
  echo
  "$BUILD/bench/bench_forward" --compute-dtype int8 "${models[@]}" | sed -e 's/^# Forward pass on the CPU backend/## kvserve (bench_forward)/'
  echo
  echo "## llama.cpp, same files (llama-bench -p 0 -n 128 -t 2)"
  echo
  echo "| file | tg128 tok/s |"
  echo "|---|---|"
  for t in $TYPES; do
    tps=$("$LLAMA/llama-bench" -m "$W/$t.gguf" -p 0 -n 128 -t 2 -o csv 2>/dev/null | tail -1 | awk -F, '{gsub(/"/, "", $0); print $(NF-1)}')
    echo "| $t | $tps |"
  done
} | tee "$OUT"
