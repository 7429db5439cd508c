#!/usr/bin/env bash
# Issue 17's side-by-side: 150m F16 prefill of 512 and 4096 tokens and decode at 4096 tokens of
# context, kvserve (bench_long_context: CpuBackend driven directly, chunks of 512, F32 and BF16
# compute) next to llama.cpp (llama-bench pp512 / pp4096, and decode at depth 4096 as
# (pg4096,32 - pp4096) time for 32 tokens), 2 threads, one run, written to
# bench/results/long_context_vs_llamacpp.md.
#
# Usage: [LLAMA_REV=...] [OUT=...] bash bench/long_context_vs_llamacpp.sh LLAMA_BIN_DIR [BUILD_DIR]
# (about 6 minutes; run alone on the machine)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLAMA=${1:?usage: long_context_vs_llamacpp.sh LLAMA_BIN_DIR [BUILD_DIR]}
BUILD=${2:-$ROOT/build}
OUT=${OUT:-$ROOT/bench/results/long_context_vs_llamacpp.md}
LLAMA_REV=${LLAMA_REV:-unknown revision}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$BUILD/kvserve" mkmodel --preset 150m --dtype f16 -o "$W/F16.gguf" >/dev/null

# avg_ns of llama-bench's csv row for the given test (columns by name from the header).
llama_ns() {
  "$LLAMA/llama-bench" -m "$W/F16.gguf" -t 2 -r "$1" -o csv "${@:2}" 2>/dev/null | tr -d '"' |
    awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next } { print $col["n_prompt"], $col["n_gen"], $col["avg_ns"] }'
}
llama_ns 3 -p 512,4096 -n 0 >"$W/pp.txt"
llama_ns 1 -p 0 -n 0 -pg 4096,32 >"$W/pg.txt"
"$BUILD/bench/bench_long_context" --quick >"$W/kv.txt"

awk -v rev="$LLAMA_REV" -v date="$(date -u +%F)" '
  FILENAME ~ /pp.txt$/ { pp[$1] = $1 / ($3 / 1e9); ns[$1] = $3; next }
  FILENAME ~ /pg.txt$/ { pg = $3; next }
  /^\| (512|4096) \| (f32|bf16) \|/ { split($0, f, "|"); gsub(/ /, "", f[2]); gsub(/ /, "", f[3]);
                                       pre[f[2] "," f[3]] = f[4] + 0; dec[f[2] "," f[3]] = f[5] + 0 }
  END {
    ltg = 32 / ((pg - ns[4096]) / 1e9)
    printf "# Long context: kvserve next to llama.cpp (issue 17)\n\n"
    printf "Command: `LLAMA_REV=%s bash bench/long_context_vs_llamacpp.sh LLAMA_BIN_DIR` (%s, llama.cpp %s). ", rev, date, rev
    printf "synthetic:150m F16 (dim 1024, 8 layers), F16 KV cache, 2 threads, one run. kvserve: bench_long_context --quick "
    printf "(prompt in chunks of 512, then 32 decode steps); llama.cpp: llama-bench pp512 / pp4096 (3 repetitions) and "
    printf "decode at depth 4096 = 32 tokens / (time of pg4096,32 - time of pp4096).\n\n"
    printf "| work | kvserve f32 | kvserve bf16 | llama.cpp | best kvserve / llama.cpp | issue 17 goal |\n|---|---|---|---|---|---|\n"
    row("prefill 512 tokens (tok/s)", pre["512,f32"], pre["512,bf16"], pp[512], ">= 2x")
    row("prefill 4096 tokens (tok/s)", pre["4096,f32"], pre["4096,bf16"], pp[4096], ">= 2x")
    row("decode at 4096 context (tok/s)", dec["4096,f32"], dec["4096,bf16"], ltg, ">= 1.3x")
  }
  function row(name, a, b, l, goal) { printf "| %s | %.1f | %.1f | %.1f | %.2fx | %s |\n", name, a, b, l, (a > b ? a : b) / l, goal }
' "$W/pp.txt" "$W/pg.txt" "$W/kv.txt" | tee "$OUT"
