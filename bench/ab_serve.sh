#!/usr/bin/env bash
# Two or more kvserve builds served side by side on one file: per round, a fresh
# `kvserve serve --threads 2` from each build in turn and `kvserve bench-serve` with CLIENTS
# clients streaming 128 tokens (48 requests; 8 with 1 client), the builds alternated so a
# shared machine's drift hits them alike. Prints each build's tok/s per round, then medians.
#
# Usage: [ROUNDS=3] [CLIENTS=16] bash bench/ab_serve.sh FILE.gguf BUILD_DIR...   (KVSERVE_ISA passes through)
set -euo pipefail
FILE=${1:?usage: ab_serve.sh FILE.gguf BUILD_DIR...}
shift
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-16}
W=$(mktemp -d)
PID=""
cleanup() {
  [[ -n "$PID" ]] && { kill -KILL "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; }
  rm -rf "$W"
}
trap cleanup EXIT
port=19000
for r in $(seq "$ROUNDS"); do
  for b in "$@"; do
    port=$((port + 1))
    "$b/kvserve" serve --model "$FILE" --threads 2 --host 127.0.0.1 --http-port $port --grpc-port -1 \
      --log-level warn >"$W/server.log" 2>&1 &
    PID=$!
    for _ in $(seq 600); do
      [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models")" == 200 ]] && break
      kill -0 "$PID" 2>/dev/null || { cat "$W/server.log" >&2; exit 1; }
      sleep 0.2
    done
    "$b/kvserve" bench-serve --url "http://127.0.0.1:$port" --concurrency "$CLIENTS" \
      --num-requests $((CLIENTS == 1 ? 8 : 48)) --max-tokens 128 --ignore-eos --stream --include-usage --warmup 1 \
      --no-progress --output-json "$W/out.json" >/dev/null
    kill -TERM "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
    PID=""
    echo "$b $(python3 -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["summary"]["output_tokens_per_s"])' "$W/out.json")" |
      tee -a "$W/rows"
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
