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
W=$(mktemp -d)
PID=""
cleanup() {
  [[ -n "$PID" ]] && { kill -KILL "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; }
  rm -rf "$W"
}
trap cleanup EXIT

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

# serve WHICH FILE PORT: starts kvserve or llama-server and waits until it answers. Every
# server gets a port of its own (a closed server's connections may hold its port a while).
serve() {
  PORT=$3
  if [[ $1 == kvserve ]]; then
    "$BUILD/kvserve" serve --model "$2" --threads 2 --host 127.0.0.1 --http-port $PORT --grpc-port -1 \
      --log-level warn >"$W/server.log" 2>&1 &
  else
    "$LLAMA/llama-server" -m "$2" -np 16 -c 8192 -t 2 -tb 2 --cont-batching --host 127.0.0.1 --port $PORT \
      >"$W/server.log" 2>&1 &
  fi
  PID=$!
  for _ in $(seq 600); do
    [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/models")" == 200 ]] && return 0
    kill -0 "$PID" 2>/dev/null || { cat "$W/server.log" >&2; exit 1; }
    sleep 0.2
  done
  echo "$1 never answered" >&2
  exit 1
}
stop() {
  kill -TERM "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  PID=""
}
# row WHICH FILE CLIENTS PORT: "tok/s ttft_p50_ms"
row() {
  serve "$1" "$2" "$4"
  local n=$(($3 == 1 ? 8 : 48))
  "$BUILD/kvserve" bench-serve --url "http://127.0.0.1:$PORT" --concurrency "$3" --num-requests $n --max-tokens 128 \
    --ignore-eos --stream --include-usage --warmup 1 --no-progress --output-json "$W/out.json" >/dev/null
  stop
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["summary"]; assert s["failed"] == 0, s; print("%.1f %.0f" % (s["output_tokens_per_s"], s["ttft_ms"]["p50"]))' "$W/out.json"
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
