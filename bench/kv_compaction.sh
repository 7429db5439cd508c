#!/usr/bin/env bash
# Compaction of old context (EngineConfig::num_compact_blocks, --kv-compact-dtype): memory and
# quality over long sequences, written to bench/results/kv_compaction.md.
#
# Teacher-forced on the engine's schedule (bench_kv_perplexity --compact: every N positions,
# full blocks older than the newest M are re-encoded), scored like llama-perplexity (second
# half of each chunk), with the KL divergence against the F32 cache and the cache's bytes at
# the end of a chunk:
#   - synthetic:150m (head dim 64) over one 4096-token sequence, compacting every 512 tokens
#     and keeping the newest 1024 (the flags' defaults);
#   - stories260K over 512-token chunks (its context), every 128, keeping 128.
# The text is stories260K's own generations (temperature 1, seed 1).
#
# Usage: flock /tmp/kvserve-build.lock bash bench/kv_compaction.sh [BUILD_DIR]
# Environment: OUT (default bench/results/kv_compaction.md).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
OUT=${OUT:-$ROOT/bench/results/kv_compaction.md}
STORIES=${STORIES:-$ROOT/../shared/models/stories260K.gguf}
BENCH=$BUILD/bench/bench_kv_perplexity
[[ -x "$BENCH" ]] || { echo "build bench_kv_perplexity first" >&2; exit 2; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
TEXT=$WORK/stories.txt
"$BENCH" --model "$STORIES" --write-text "$TEXT" --tokens 6144 --ctx 512 --seed 1

table() {
  "$BENCH" --model "$1" --text "$TEXT" --ctx "$2" --chunks "$3" --kv-dtypes f32,f16,int8,int4c \
    --compact int8,int4c,int4 --compact-every "$4" --compact-keep "$5" --output "$WORK/table.md" >/dev/null
  sed -n '/^[0-9]* tokens of text/,$p' "$WORK/table.md"
}

{
  echo "# KV compaction of old context: memory and quality"
  echo
  echo "Command: \`bash bench/kv_compaction.sh\` ($(date -u +%Y-%m-%d), $(nproc) cores)."
  echo "Teacher-forced on the engine's compaction schedule; KL against the F32 cache at the same"
  echo "positions; KV MiB: the cache at the end of a chunk (both regions, scales included)."
  echo
  echo "## synthetic:150m (F16 weights), one 4096-token sequence; every 512 tokens, newest 1024 kept"
  echo
  table synthetic:150m:f16 4096 1 512 1024
  echo
  echo "## stories260K, 512-token chunks x 4; every 128 tokens, newest 128 kept"
  echo
  table "$STORIES" 512 4 128 128
} > "$OUT"
echo "wrote $OUT"
