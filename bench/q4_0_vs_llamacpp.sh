#!/usr/bin/env bash
# Q4_0 weights as stored, side by side in one run: llama-bench on synthetic:150m written as a Q4_0
# GGUF by `kvserve mkmodel` (the very weights synthetic:150m:q4_0 builds in memory), on
# llama-quantize's Q4_0 of the F16 file (output in Q6_K) and on the F16 file; then kvserve's
# bench_forward (F16, Q8_0 and Q4_0 matrices, 1 and 2 threads). Results: bench/results/q4_0.md.
#
# Usage: bash bench/q4_0_vs_llamacpp.sh LLAMA_BIN_DIR [BUILD_DIR]   (hold the build lock)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLAMA=${1:?usage: q4_0_vs_llamacpp.sh LLAMA_BIN_DIR [BUILD_DIR]}
BUILD=${2:-$ROOT/build}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
$BUILD/kvserve mkmodel --preset 150m --dtype f16 -o $W/150m-f16.gguf >/dev/null
$LLAMA/llama-quantize $W/150m-f16.gguf $W/150m-q4_0.gguf Q4_0 >/dev/null 2>&1
$BUILD/kvserve mkmodel --preset 150m --dtype q4_0 -o $W/150m-q4_0-ours.gguf >/dev/null
echo "== llama-bench: mkmodel Q4_0, llama-quantize Q4_0, F16"
$LLAMA/llama-bench -m $W/150m-q4_0-ours.gguf -m $W/150m-q4_0.gguf -m $W/150m-f16.gguf -p 64 -n 128 -t 2 -r 3 2>/dev/null
echo "== kvserve bench_forward"
$BUILD/bench/bench_forward --shared "$ROOT/../shared"
