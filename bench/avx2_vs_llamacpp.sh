#!/usr/bin/env bash
# Issue 40's table: 150m F16, Q8_0 and Q4_K_M on AVX2 kernels, side by side with llama.cpp in
# one run (../shared/docs/BASELINE.md's workload and method):
#   serving  1 and 16 clients streaming 128 tokens: bench/quant_serve_vs_llamacpp.sh, with
#            kvserve's kernels forced to AVX2 (KVSERVE_ISA=avx2) unless ISA says otherwise
#   prefill  a 512-token prompt: kvserve's server answer time for max_tokens 1 (prefix caching
#            off; median of 3), against `llama-bench -p 512 -n 0 -t 2`
# On a machine with AVX-512, build llama.cpp for AVX2 too, so both sides run AVX2 code:
#   cmake -B DIR -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON \
#     -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DLLAMA_CURL=OFF
# The CPU's flags are printed with the table.
#
# Usage: [TYPES="F16 Q8_0 Q4_K_M"] [ISA=avx2] [OUT=...] bash bench/avx2_vs_llamacpp.sh LLAMA_BIN_DIR [BUILD_DIR]
# (hold the build lock; LD_LIBRARY_PATH must find llama.cpp's shared libraries if it has any)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLAMA=${1:?usage: avx2_vs_llamacpp.sh LLAMA_BIN_DIR [BUILD_DIR]}
BUILD=${2:-$ROOT/build}
OUT=${OUT:-$ROOT/bench/results/avx2_vs_llamacpp.md}
TYPES=${TYPES:-F16 Q8_0 Q4_K_M}
export KVSERVE_ISA=${ISA:-avx2}
source "$ROOT/bench/serve_lib.sh"

# The serving rows; that script makes the files in $W/models, where the prefill rows find them.
mkdir "$W/models"
TYPES="$TYPES" CLIENTS="1 16" OUT="$W/serving.md" MODELS_DIR="$W/models" \
  bash "$ROOT/bench/quant_serve_vs_llamacpp.sh" "$LLAMA" "$BUILD" >/dev/null

# kvserve_prefill FILE PORT: tokens/s of a 512-token prompt, from the median of 3 answers with
# max_tokens 1 (a fresh prompt each time, prefix caching off).
kvserve_prefill() {
  kvserve_on "$BUILD" "$1" "$2" --no-prefix-caching
  python3 - "$2" <<'PY'
import json, random, statistics, sys, time, urllib.request
url = "http://127.0.0.1:%s/v1/completions" % sys.argv[1]
model = json.load(urllib.request.urlopen(url.replace("completions", "models")))["data"][0]["id"]
times = []
for r in range(4):  # the first warms up
    prompt = [random.Random(r).randrange(3, 32000) for _ in range(512)]
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
    t = time.perf_counter()
    urllib.request.urlopen(urllib.request.Request(url, body, {"Content-Type": "application/json"})).read()
    times.append(time.perf_counter() - t)
print("%.0f" % (512 / statistics.median(times[1:])))
PY
  stop
}

{
  echo "# 150m on AVX2 kernels: kvserve next to llama.cpp"
  echo
  echo "Command: \`TYPES=\"$TYPES\" ISA=$KVSERVE_ISA bash bench/avx2_vs_llamacpp.sh LLAMA_BIN_DIR\`, $(date -u +%Y-%m-%d),"
  echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) vCPUs; CPU flags:"
  echo "$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512f|avx512_vnni|avx_vnni|avx512_bf16|amx_tile)$' | xargs)."
  echo "kvserve's kernels: KVSERVE_ISA=$KVSERVE_ISA. One run, fresh servers."
  echo
  echo "## Serving (BASELINE.md's workload)"
  echo
  tail -n +6 "$W/serving.md"
  echo
  echo "## Prefill of 512 tokens"
  echo
  echo "| file | kvserve tok/s (server, max_tokens 1) | llama-bench pp512 tok/s | ratio |"
  echo "|---|---|---|---|"
  port=18530
  for name in $TYPES; do
    port=$((port + 1))
    k=$(kvserve_prefill "$W/models/$name.gguf" $port)
    l=$("$LLAMA/llama-bench" -m "$W/models/$name.gguf" -p 512 -n 0 -t 2 -r 3 -o json | python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)[0]["avg_ts"])')
    echo "| $name | $k | $l | $(awk -v a="$k" -v b="$l" 'BEGIN {printf "%.2fx", a / b}') |"
  done
} >"$OUT"
echo "wrote $OUT"
