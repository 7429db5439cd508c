#!/usr/bin/env bash
# Quantized 150m files served by kvserve and by llama.cpp's llama-server, side by side in one
# run (issue 12's 1- and 16-client goals; ../shared/docs/BASELINE.md's workload): clients stream
# /v1/completions of 128 tokens (greedy, ignore_eos, include_usage) from BASELINE's prompt,
# each client sending its requests one after another, through `kvserve bench-serve` on the
# same 2 vCPUs. A fresh server per row: `kvserve serve --threads 2` (its defaults: weights as
# stored, int8 compute) and `llama-server -np 16 -c 8192 -t 2 -tb 2 --cont-batching` (F16 KV
# cache), alternating. The files: `kvserve mkmodel --preset 150m --dtype f16`, then
# `llama-quantize` (Q4_K_M and Q5_K_M its mixes, other types --pure; F16 is that file itself).
#
# Usage: [TYPES="Q4_K_M Q5_K_M Q6_K Q8_0"] [CLIENTS="1 16"] [OUT=...] [MODELS_DIR=...] \
#   bash bench/quant_serve_vs_llamacpp.sh LLAMA_BIN_DIR [BUILD_DIR]   (hold the build lock)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLAMA=${1:?usage: quant_serve_vs_llamacpp.sh LLAMA_BIN_DIR [BUILD_DIR]}
BUILD=${2:-$ROOT/build}
OUT=${OUT:-$ROOT/bench/results/quant_serving.md}
TYPES=${TYPES:-Q4_K_M Q5_K_M Q6_K Q8_0}
CLIENTS=${CLIENTS:-1 16}
LLAMA_REV=${LLAMA_REV:-$("$LLAMA/llama-server" --version 2>&1 | grep -o 'version: .*' | head -1)}
source "$ROOT/bench/serve_lib.sh"

# The files, in MODELS_DIR when given (made there unless it holds them already, so a calling
# script can use them too), else in this run's temporary folder.
MODELS=${MODELS_DIR:-$W}
if [[ ! -f "$MODELS/F16.gguf" ]]; then
  "$BUILD/kvserve" mkmodel --preset 150m --dtype f16 -o "$MODELS/F16.gguf" >/dev/null
fi
for name in $TYPES; do
  [[ -f "$MODELS/$name.gguf" ]] && continue
  case $name in
    Q4_K_M | Q5_K_M) "$LLAMA/llama-quantize" "$MODELS/F16.gguf" "$MODELS/$name.gguf" "$name" >/dev/null 2>&1 ;;
    *) "$LLAMA/llama-quantize" --pure "$MODELS/F16.gguf" "$MODELS/$name.gguf" "$name" >/dev/null 2>&1 ;;
  esac
done

# row WHICH FILE CLIENTS PORT: "tok/s ttft_p50_ms" from a fresh kvserve or llama-server.
row() {
  if [[ $1 == kvserve ]]; then
    kvserve_on "$BUILD" "$2" "$4"
  else
    serve_on "$4" "$LLAMA/llama-server" -m "$2" -np 16 -c 8192 -t 2 -tb 2 --cont-batching --host 127.0.0.1 --port "$4"
  fi
  clients "$BUILD" "$4" "$3"
}

{
  echo "# Quantized weights served: kvserve next to llama.cpp's server"
  echo
  echo "Command: \`TYPES=\"$TYPES\" CLIENTS=\"$CLIENTS\" bash bench/quant_serve_vs_llamacpp.sh LLAMA_BIN_DIR\` (llama.cpp $LLAMA_REV),"
  echo "$(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) vCPUs; one run, fresh servers."
  echo
  echo "| file | clients | kvserve tok/s | llama.cpp tok/s | ratio | TTFT p50 kvserve / llama.cpp (ms) |"
  echo "|---|---|---|---|---|---|"
  port=18430
  for name in $TYPES; do
    for c in $CLIENTS; do
      port=$((port + 2))
      read -r kt kf < <(row kvserve "$MODELS/$name.gguf" "$c" $port)
      read -r lt lf < <(row llama "$MODELS/$name.gguf" "$c" $((port + 1)))
      ratio=$(awk -v a="$kt" -v b="$lt" 'BEGIN {printf "%.2fx", a / b}')
      echo "| $name | $c | $kt | $lt | $ratio | $kf / $lf |"
    done
  done
} >"$OUT"
echo "wrote $OUT"
