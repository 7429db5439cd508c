#!/usr/bin/env bash
# MaskBench side by side: kvserve's grammar engine (`kvserve maskbench`) and llama.cpp's
# (llama_grammar_bench, built by build_llama_grammar_bench.sh) over the same files and
# vocabulary, one after the other in one run, each on one thread; then a table of both.
#
# usage: side_by_side.sh KVSERVE LLAMA_GRAMMAR_BENCH VOCAB.gguf OUT_DIR EVERY FOLDER [TIME_LIMIT_S]
#   EVERY: take every EVERY-th file of FOLDER's *.json in name order (1: all of them); llama.cpp
#   needs milliseconds per mask, so a full run of its engine takes hours.
#   TIME_LIMIT_S: per file, for both (default 20).
# Writes OUT_DIR/files.txt, OUT_DIR/kvserve.jsonl, OUT_DIR/llama.jsonl and prints the table.
set -euo pipefail
if [ $# -lt 6 ]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
kvserve=$1 llama=$2 vocab=$3 out=$4 every=$5 folder=$6 limit=${7:-20}
mkdir -p "$out"
find "$folder" -maxdepth 1 -name '*.json' | sort | awk -v n="$every" '(NR - 1) % n == 0' > "$out/files.txt"
echo "side_by_side: $(wc -l < "$out/files.txt") files, vocabulary $(basename "$vocab"), $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
t=$SECONDS
xargs -a "$out/files.txt" "$kvserve" maskbench --vocab "$vocab" --time-limit-s "$limit" > "$out/kvserve.jsonl" || true
echo "side_by_side: kvserve $((SECONDS - t)) s"
t=$SECONDS
xargs -a "$out/files.txt" "$llama" --vocab "$vocab" --time-limit-s "$limit" > "$out/llama.jsonl" || true
echo "side_by_side: llama.cpp $((SECONDS - t)) s"
python3 - "$out/kvserve.jsonl" "$out/llama.jsonl" <<'EOF'
import json, sys
print("| engine | files | passing | compile err | validation err | invalidation err | timeout | TBM p50 / p99 / max (us) | TTFM p50 / p99 (us) |")
print("|---|---|---|---|---|---|---|---|---|")
for name, path in (("kvserve", sys.argv[1]), ("llama.cpp", sys.argv[2])):
    s = json.loads(open(path).read().strip().splitlines()[-1])["summary"]
    tbm, ttfm = s["tbm_us"], s["ttfm_us"]
    pct = 100.0 * s["passing"] / max(1, s["files"])
    print(f"| {name} | {s['files']:,} | {s['passing']:,} ({pct:.1f} %) | {s['compile_error']:,} | {s['validation_error']:,} | "
          f"{s['invalidation_error']:,} | {s['timeout']:,} | {tbm['p50']:,} / {tbm['p99']:,} / {tbm['max']:,} | "
          f"{ttfm['p50']:,} / {ttfm['p99']:,} |")
EOF
