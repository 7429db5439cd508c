#!/usr/bin/env bash
# KV cache perplexity, kvserve next to llama.cpp, written to bench/results/kv_perplexity.md.
#
# The text: stories260K's own generations (bench_kv_perplexity --write-text: temperature 1,
# seed 1, passages of 512 tokens). Scored with llama-perplexity's method by both programs on the
# same GGUF and text:
#   - stories260K (5 layers, head dim 8), 4 chunks of 512 tokens (2k tokens);
#   - synthetic:150m written as an F16 GGUF by `kvserve mkmodel` (head dim 64), 2 chunks of
#     2048 tokens (4k tokens).
# llama.cpp runs its f16, q8_0 and q4_0 KV caches with flash attention (a quantized V cache
# needs it), with the KL divergence of the quantized ones against its f16 run; a cache type it
# refuses for a model is reported as such.
#
# Usage (hold the build lock so no compile shares the cores):
#   flock /tmp/kvserve-build.lock bash bench/kv_perplexity.sh LLAMA_BIN_DIR [BUILD_DIR]
# LLAMA_BIN_DIR holds llama-perplexity (llama.cpp built outside the repository as
# ../shared/docs/BASELINE.md says). Environment: OUT (default bench/results/kv_perplexity.md).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLAMA=${1:?usage: kv_perplexity.sh LLAMA_BIN_DIR [BUILD_DIR]}
BUILD=${2:-$ROOT/build}
OUT=${OUT:-$ROOT/bench/results/kv_perplexity.md}
STORIES=${STORIES:-$ROOT/../shared/models/stories260K.gguf}
# The llama.cpp commit, for the report (an archive build's --version does not know it).
LLAMA_REV=${LLAMA_REV:-$("$LLAMA/llama-perplexity" --version 2>&1 | head -1)}
[[ -x "$LLAMA/llama-perplexity" ]] || { echo "no llama-perplexity in $LLAMA" >&2; exit 2; }
[[ -x "$BUILD/bench/bench_kv_perplexity" ]] || { echo "build bench_kv_perplexity first" >&2; exit 2; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
TEXT=$WORK/stories.txt
"$BUILD/bench/bench_kv_perplexity" --model "$STORIES" --write-text "$TEXT" --tokens 6144 --ctx 512 --seed 1
"$BUILD/kvserve" mkmodel --preset 150m --dtype f16 -o "$WORK/150m.gguf" >/dev/null

# llama.cpp on one model, context and chunk count: a table row per KV cache type, f16 first
# (it saves its log-probabilities: the base of the others' KL divergence).
llama_rows() {
  local model=$1 ctx=$2 chunks=$3 base=$WORK/base.kld log type
  for type in f16 q8_0 q4_0; do
    log=$WORK/llama-$type.log
    local args=(-m "$model" -c "$ctx" -b "$ctx" --chunks "$chunks" -t 2 -fa -ctk "$type" -ctv "$type"
                --kl-divergence-base "$base")
    [[ $type == f16 ]] && args+=(-f "$TEXT") || args+=(--kl-divergence)
    if ! "$LLAMA/llama-perplexity" "${args[@]}" >"$log" 2>&1; then
      echo "| $type | refused: $(grep -m1 -o 'GGML_ASSERT(.*' "$log" | tr -d '|' | head -c 120) | | |"
    elif [[ $type == f16 ]]; then
      echo "| f16 | $(grep -o 'Final estimate: PPL = [0-9.]*' "$log" | sed 's/.*= //') | (base) | (base) |"
    else
      echo "| $type | $(grep -o 'Mean PPL(Q) *: *[0-9.]*' "$log" | sed 's/.*: *//') |" \
           "$(grep -o 'Mean PPL(Q)/PPL(base) *: *[0-9.]*' "$log" | sed 's/.*: *//') |" \
           "$(grep -o 'Mean *KLD: *[0-9.e-]*' "$log" | sed 's/.*: *//') |"
    fi
  done
  rm -f "$base"
}

{
  echo "# KV cache perplexity: kvserve and llama.cpp on the same GGUF and text"
  echo
  echo "Command: \`LLAMA_REV=$LLAMA_REV bash bench/kv_perplexity.sh LLAMA_BIN_DIR\` (llama.cpp $LLAMA_REV)."
  echo "Text: stories260K's own generations (temperature 1, seed 1). Both score it with llama-perplexity's"
  echo "method: chunks of \`ctx\` tokens, BOS first, the second half of each chunk scored."
  echo
  # The candidate schemes on stories260K only: on 150m's random weights they all sit within
  # its noise, and 21 settings x 4k tokens take 20 minutes.
  for spec in "$STORIES 512 4 all stories260K" "$WORK/150m.gguf 2048 2 f32,f16,bf16,int8,int4,int4c synthetic:150m (F16 GGUF)"; do
    read -r model ctx chunks dtypes name <<<"$spec"
    flags=()
    [[ $dtypes != all ]] && flags=(--kv-dtypes "$dtypes")
    echo "## $name, ctx $ctx x $chunks chunks"
    echo
    echo "### kvserve"
    echo
    "$BUILD/bench/bench_kv_perplexity" --model "$model" --text "$TEXT" --ctx "$ctx" --chunks "$chunks" "${flags[@]}" |
      sed -n '/^[0-9]* tokens of text/,$p'
    echo
    echo "### llama.cpp (llama-perplexity -c $ctx -fa -ctk T -ctv T)"
    echo
    echo "| kv cache | PPL | PPL / f16's | mean KL vs f16 |"
    echo "|---|---|---|---|"
    llama_rows "$model" "$ctx" "$chunks"
    echo
  done
} >"$OUT"
echo "wrote $OUT"
