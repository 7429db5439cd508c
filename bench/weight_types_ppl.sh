#!/usr/bin/env bash
# Every GGUF weight type kvserve reads, against llama.cpp on the same file and text, written to
# bench/results/weight_types.md: ../shared/refmodels/llama-f16.gguf is quantized by
# llama-quantize to each type, the other refmodels architectures and the `kvserve mkmodel`
# presets are added as they are, and both programs compute each file's perplexity on
# stories260K's own generations (llama-perplexity's method: 4 chunks of 512 tokens, second halves scored, F32 KV
# cache). A wrong decoder shows as a PPL far from llama.cpp's; activation rounding inside
# llama.cpp's quantized matrix products (Q8 activations) accounts for small differences.
#
# Usage: bash bench/weight_types_ppl.sh LLAMA_BIN_DIR [BUILD_DIR]
# LLAMA_BIN_DIR holds llama-perplexity and llama-quantize (llama.cpp built outside the
# repository as ../shared/docs/BASELINE.md says). Environment: OUT (default
# bench/results/weight_types.md), TYPES (llama-quantize type names).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLAMA=${1:?usage: weight_types_ppl.sh LLAMA_BIN_DIR [BUILD_DIR]}
BUILD=${2:-$ROOT/build}
OUT=${OUT:-$ROOT/bench/results/weight_types.md}
SOURCE=${SOURCE:-$ROOT/../shared/refmodels/llama-f16.gguf}
STORIES=${STORIES:-$ROOT/../shared/models/stories260K.gguf}
# The llama.cpp commit, for the report (an archive build's --version does not know it).
LLAMA_REV=${LLAMA_REV:-$("$LLAMA/llama-perplexity" --version 2>&1 | head -1)}
TYPES=${TYPES:-"F16 Q8_0 Q6_K Q5_K_M Q5_1 Q5_0 Q4_K_M Q4_1 Q4_0 IQ4_NL IQ4_XS Q3_K_M Q2_K"}
for tool in llama-perplexity llama-quantize; do
  [[ -x "$LLAMA/$tool" ]] || { echo "no $tool in $LLAMA" >&2; exit 2; }
done
PPL=$BUILD/bench/bench_kv_perplexity
[[ -x "$PPL" ]] || { echo "build bench_kv_perplexity first" >&2; exit 2; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
TEXT=$WORK/stories.txt
"$PPL" --model "$STORIES" --write-text "$TEXT" --tokens 2200 --ctx 512 --seed 1

# One table row: llama.cpp's and kvserve's perplexity of the text with GGUF $2 (label $1).
row() {
  local label=$1 file=$2 theirs types ours mib ratio
  "$LLAMA/llama-perplexity" -m "$file" -f "$TEXT" -c 512 -b 512 --chunks 4 -t 2 -ctk f32 -ctv f32 \
    >"$WORK/ppl.log" 2>&1
  theirs=$(grep -o 'Final estimate: PPL = [0-9.]*' "$WORK/ppl.log" | sed 's/.*= //')
  # Tensor types as llama.cpp's loader logs them (newer builds do not log them: "-").
  types=$( (grep -o -- '- type *[A-Za-z0-9_]*: *[0-9]* tensors' "$WORK/ppl.log" || true) |
          awk '$3 != "f32:" {print $3 " x" $4}' | tr -d ':' | paste -sd, - | sed 's/,/, /g')
  types=${types:--}
  ours=$("$PPL" --model "$file" --text "$TEXT" --ctx 512 --chunks 4 --kv-dtypes f32 |
         awk -F'|' '$2 ~ /f32/ {gsub(/ /, "", $3); print $3}')
  mib=$(awk -v b="$(stat -c %s "$file")" 'BEGIN {printf "%.2f", b / 1048576}')
  ratio=$(awk -v a="$ours" -v b="$theirs" 'BEGIN {printf "%.5f", a / b}')
  echo "| $label | $mib | $types | $theirs | $ours | $ratio |"
}

{
  echo "# GGUF weight types and architectures: kvserve and llama.cpp on the same files"
  echo
  echo "Command: \`LLAMA_REV=$LLAMA_REV bash bench/weight_types_ppl.sh LLAMA_BIN_DIR\` (llama.cpp $LLAMA_REV)."
  echo "Perplexity of stories260K's own generations (temperature 1, seed 1), 4 chunks of 512 tokens, F32 KV"
  echo "cache, by llama-perplexity and by bench_kv_perplexity (the same method). The models have random weights,"
  echo "so their perplexity is high; what matters is that both programs agree on each file."
  echo
  echo "## Weight types: $(basename "$SOURCE") quantized by llama-quantize"
  echo
  echo "| type | file MiB | tensor types | llama.cpp PPL | kvserve PPL | kvserve / llama.cpp |"
  echo "|---|---|---|---|---|---|"
  for type in $TYPES; do
    "$LLAMA/llama-quantize" "$SOURCE" "$WORK/$type.gguf" "$type" >"$WORK/quantize.log" 2>&1
    row "$type" "$WORK/$type.gguf"
  done
  echo
  echo "## Architectures: ../shared/refmodels and \`kvserve mkmodel\` presets (F16)"
  echo
  echo "Phi-3: llama.cpp builds from mid-2025 on ignore the sliding window of phi3 files (their loader warns"
  echo "\"Phi SWA is currently disabled\"); kvserve applies the window the file states, as llama.cpp c392e509 (Feb"
  echo "2025, the build that made ../shared/refmodels) does, so with a newer llama.cpp the phi3 rows differ."
  echo
  echo "| model | file MiB | tensor types | llama.cpp PPL | kvserve PPL | kvserve / llama.cpp |"
  echo "|---|---|---|---|---|---|"
  for name in llama-ropefreqs-f16 qwen2-f16 gemma2-f16 phi3-f16; do
    row "refmodels/$name" "$(dirname "$SOURCE")/$name.gguf"
  done
  for preset in tiny gemma2-tiny phi3-tiny qwen3-tiny gemma-tiny; do
    "$BUILD/kvserve" mkmodel --preset "$preset" --dtype f16 -o "$WORK/$preset.gguf" >/dev/null
    row "mkmodel $preset" "$WORK/$preset.gguf"
  done
} >"$OUT"
echo "wrote $OUT"
