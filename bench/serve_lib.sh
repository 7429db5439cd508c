# Sourced by the bench scripts that start servers on fixed ports (quant_serve_vs_llamacpp.sh,
# avx2_vs_llamacpp.sh, ab_serve.sh): a temporary folder W, the running server's PID (killed
# and W removed on exit), and the steps every row takes. (No shebang: not run on its own.)
W=$(mktemp -d)
PID=""
cleanup() {
  [[ -n "$PID" ]] && { kill -KILL "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; }
  rm -rf "$W"
}
trap cleanup EXIT

# serve_on PORT COMMAND...: starts the server command in the background (PID, output in
# $W/server.log) and waits until it answers /v1/models on PORT. Every server gets a port of its
# own (a closed server's connections may hold its port a while).
serve_on() {
  local port=$1
  shift
  "$@" >"$W/server.log" 2>&1 &
  PID=$!
  for _ in $(seq 600); do
    [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models")" == 200 ]] && return 0
    kill -0 "$PID" 2>/dev/null || { cat "$W/server.log" >&2; exit 1; }
    sleep 0.2
  done
  echo "$1 never answered on port $port" >&2
  exit 1
}

# kvserve_on BUILD FILE PORT [FLAGS...]: serve_on with `kvserve serve --threads 2` from BUILD.
kvserve_on() {
  local build=$1 file=$2 port=$3
  shift 3
  serve_on "$port" "$build/kvserve" serve --model "$file" --threads 2 --host 127.0.0.1 --http-port "$port" \
    --grpc-port -1 --log-level warn "$@"
}

stop() {
  kill -TERM "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  PID=""
}

# clients BUILD PORT CLIENTS: BASELINE.md's workload from `kvserve bench-serve` (CLIENTS clients
# streaming 128 tokens; 48 requests, 8 with one client), then stops the server; prints
# "tok/s ttft_p50_ms".
clients() {
  "$1/kvserve" bench-serve --url "http://127.0.0.1:$2" --concurrency "$3" --num-requests $(($3 == 1 ? 8 : 48)) \
    --max-tokens 128 --ignore-eos --stream --include-usage --warmup 1 --no-progress --output-json "$W/out.json" \
    >/dev/null
  stop
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["summary"]; assert s["failed"] == 0, s; print("%.1f %.0f" % (s["output_tokens_per_s"], s["ttft_ms"]["p50"]))' "$W/out.json"
}
