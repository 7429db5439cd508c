#!/usr/bin/env bash
# Quantized weights read as stored, side by side with llama.cpp in one run, written to
# bench/results/quant_weights.md. synthetic:150m is written as an F16 GGUF by `kvserve mkmodel`
# and as Q4_0 (mkmodel: the very weights synthetic:150m:q4_0 builds in memory); llama-quantize
# makes Q4_K_M and Q5_K_M (Q4_K/Q5_K with Q6_K for some tensors, its mixes) and a pure Q4_K
# from the F16 file. For each file: llama-bench (pp64, tg128, 2 threads, 3 repeats)
# and `kvserve generate` (a 42-token prompt, then 128 tokens, 2 threads, median of 3), with the
# weights as stored in the default compute mode (int8 activations: integer dot products), as
# stored with --compute-dtype f32 (every weight widened to F32), and converted to F16 at load
# (--weight-dtype f16, what kvserve did before it read these types as stored). TYPES picks the files: any other
# llama-quantize type name (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS, ...) is made with
# --pure, every matrix in that type.
#
# Usage: [TYPES="Q4_0 Q4_K Q4_K_M F16"] [OUT=...] bash bench/quant_weights_vs_llamacpp.sh LLAMA_BIN_DIR [BUILD_DIR]
# (hold the build lock)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLAMA=${1:?usage: quant_weights_vs_llamacpp.sh LLAMA_BIN_DIR [BUILD_DIR]}
BUILD=${2:-$ROOT/build}
OUT=${OUT:-$ROOT/bench/results/quant_weights.md}
LLAMA_REV=${LLAMA_REV:-$("$LLAMA/llama-bench" --version 2>&1 | head -1)}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$BUILD/kvserve" mkmodel --preset 150m --dtype f16 -o "$W/F16.gguf" >/dev/null
"$BUILD/kvserve" mkmodel --preset 150m --dtype q4_0 -o "$W/Q4_0.gguf" >/dev/null
TYPES=${TYPES:-Q4_0 Q4_K Q4_K_M F16}
for name in $TYPES; do
  case $name in
    F16 | Q4_0) ;;
    Q4_K_M | Q5_K_M) "$LLAMA/llama-quantize" "$W/F16.gguf" "$W/$name.gguf" "$name" >/dev/null 2>&1 ;;
    Q4_K) "$LLAMA/llama-quantize" --pure "$W/F16.gguf" "$W/Q4_K.gguf" Q4_K_M >/dev/null 2>&1 ;;
    *) "$LLAMA/llama-quantize" --pure "$W/F16.gguf" "$W/$name.gguf" "$name" >/dev/null 2>&1 ;;
  esac
done
PROMPT="Once upon a time there was a little girl named Lily who loved to play outside in the sun with her friends and her dog"

# Median of 3 `kvserve generate` runs: "prefill tok/s | decode tok/s".
kvserve_row() {
  local file=$1 weights=$2 compute=$3 runs=()
  for _ in 1 2 3; do
    runs+=("$("$BUILD/kvserve" generate --model "$file" -p "$PROMPT" -n 128 --ignore-eos -t 2 --weight-dtype "$weights" --compute-dtype "$compute" 2>&1 |
              sed -n 's/.*prompt: [0-9]* tokens in [0-9.]* ms (\([0-9.]*\) tokens\/s); generation: [0-9]* tokens in [0-9.]* ms (\([0-9.]*\) tokens\/s).*/\2 \1/p')")
  done
  printf '%s\n' "${runs[@]}" | sort -n | sed -n 2p | awk '{printf "%.0f / %.1f", $2, $1}'
}

{
  echo "# Quantized weights read as stored: kvserve next to llama.cpp"
  echo
  echo "Command: \`TYPES=\"$TYPES\" LLAMA_REV=$LLAMA_REV bash bench/quant_weights_vs_llamacpp.sh LLAMA_BIN_DIR\` (llama.cpp $LLAMA_REV)."
  echo "synthetic:150m (dim 1024, 8 layers, vocab 32000), 2 threads, one run on this 2-vCPU machine."
  echo "kvserve: \`kvserve generate\` end to end (tokenizer, engine, sampling), a 42-token prompt then 128"
  echo "tokens; llama.cpp: llama-bench pp64 / tg128."
  echo
  echo "| file | MiB | llama.cpp pp64 | llama.cpp tg128 | kvserve as stored, int8 activations: prefill / decode tok/s | as stored, f32 compute | converted to F16 | decode: kvserve int8 / llama.cpp |"
  echo "|---|---|---|---|---|---|---|---|"
  for name in $TYPES; do
    file=$W/$name.gguf
    bench=$("$LLAMA/llama-bench" -m "$file" -p 64 -n 128 -t 2 -r 3 -o csv 2>/dev/null)
    pp=$(echo "$bench" | awk -F, '/"64","0"/ {gsub(/"/, "", $0); print $0}' | awk -F, '{print $(NF-1)}' | head -1)
    tg=$(echo "$bench" | awk -F, '/"0","128"/ {gsub(/"/, "", $0); print $0}' | awk -F, '{print $(NF-1)}' | head -1)
    stored=$(kvserve_row "$file" auto int8)
    f32=$([[ $name == F16 ]] && echo "(same)" || kvserve_row "$file" auto f32)
    converted=$([[ $name == F16 ]] && echo "(same)" || kvserve_row "$file" f16 f32)
    ratio=$(awk -v a="${stored##*/ }" -v b="$tg" 'BEGIN {printf "%.2fx", a / b}')
    mib=$(awk -v b="$(stat -c %s "$file")" 'BEGIN {printf "%.1f", b / 1048576}')
    printf '| %s | %s | %.0f | %.1f | %s | %s | %s | %s |\n' "$name" "$mib" "$pp" "$tg" "$stored" "$f32" "$converted" "$ratio"
  done
} >"$OUT"
echo "wrote $OUT"
