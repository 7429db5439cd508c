#!/usr/bin/env bash
# Two or more kvserve builds served side by side on one file: per round, a fresh
# `kvserve serve --threads 2` from each build in turn and BASELINE.md's clients (CLIENTS of
# them streaming 128 tokens), the builds alternated so a shared machine's drift hits them
# alike. Prints each build's tok/s per round, then the medians.
#
# Usage: [ROUNDS=3] [CLIENTS=16] bash bench/ab_serve.sh FILE.gguf BUILD_DIR...   (KVSERVE_ISA passes through)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FILE=${1:?usage: ab_serve.sh FILE.gguf BUILD_DIR...}
shift
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-16}
source "$ROOT/bench/serve_lib.sh"
port=19000
for r in $(seq "$ROUNDS"); do
  for b in "$@"; do
    port=$((port + 1))
    kvserve_on "$b" "$FILE" $port
    clients "$b" $port "$CLIENTS" >"$W/row"  # in this shell, so it waits for the server's exit
    read -r toks _ <"$W/row"
    echo "$b $toks" | tee -a "$W/rows"
  done
done
echo "medians:"
python3 - "$W/rows" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    b, v = line.split()
    rows.setdefault(b, []).append(float(v))
for b, v in rows.items():
    print("%s %.1f tok/s" % (b, statistics.median(v)))
PY
