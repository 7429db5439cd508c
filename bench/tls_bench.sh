#!/usr/bin/env bash
# What TLS costs: the same workload through `kvserve bench-serve` against two servers started
# alike, one plain HTTP and one HTTPS (a P-256 certificate from a CA made here; the client
# verifies it through SSL_CERT_FILE), the runs alternating plain / TLS so that machine noise
# falls on both. Written to bench/results/tls.md with the commands.
#
# Usage: bash bench/tls_bench.sh [KVSERVE_BINARY]
# Environment: OUT (default bench/results/tls.md), MODEL (default ../shared's stories260K if
# present, else synthetic:tiny: a model so small that transport costs show), CLIENTS
# (default "1 16"), REPEATS (default 7), REQUESTS (per run, default 256), MAX_TOKENS (128).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KVSERVE=$(realpath "${1:-${KVSERVE:-$ROOT/build/kvserve}}")
OUT=${OUT:-$ROOT/bench/results/tls.md}
STORIES=$ROOT/../shared/models/stories260K.gguf
MODEL=${MODEL:-$([[ -f $STORIES ]] && realpath "$STORIES" || echo synthetic:tiny)}
CLIENTS=${CLIENTS:-"1 16"}
REPEATS=${REPEATS:-7}
REQUESTS=${REQUESTS:-256}
MAX_TOKENS=${MAX_TOKENS:-128}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
  -keyout ca.key -out ca.pem 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
  -keyout server.key -out server.csr 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext \
  -out server.pem 2>/dev/null

SERVE=(serve --model "$MODEL" --threads 2 --host 127.0.0.1 --http-port 0 --grpc-port -1 --log-level warn)
# start NAME [flags...]: prints the server's base URL once it is ready.
start() {
  local name=$1; shift
  "$KVSERVE" "${SERVE[@]}" "$@" >"$name.out" 2>"$name.err" &
  PIDS+=($!)
  local deadline=$((SECONDS + 120)) url=""
  until url=$(grep -o 'https\?://127.0.0.1:[0-9]*' "$name.out" 2>/dev/null | head -n1) && [[ -n $url ]]; do
    (( SECONDS < deadline )) || { cat "$name.err" >&2; exit 1; }
    sleep 0.1
  done
  until [[ "$(curl -s --cacert ca.pem -o /dev/null -w '%{http_code}' "$url/ready")" == 200 ]]; do
    (( SECONDS < deadline )) || { echo "$name never became ready" >&2; exit 1; }
    sleep 0.1
  done
  echo "$url"
}
PLAIN=$(start plain)
TLS=$(start tls --tls-cert-file server.pem --tls-key-file server.key)

for ((run = 1; run <= REPEATS; ++run)); do
  for c in $CLIENTS; do
    for kind in plain tls; do
      url=$PLAIN; [[ $kind == tls ]] && url=$TLS
      echo "== run $run/$REPEATS: $c clients, $kind" >&2
      SSL_CERT_FILE=$WORK/ca.pem "$KVSERVE" bench-serve --url "$url" --no-progress --concurrency "$c" \
        --num-requests "$REQUESTS" --max-tokens "$MAX_TOKENS" --output-json "$kind-$c-$run.json" >/dev/null
    done
  done
done

MACHINE="$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) vCPUs"
COMMIT="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
python3 - "$WORK" "$OUT" "$CLIENTS" "$REPEATS" "$MACHINE" "$COMMIT" "$MODEL" "$REQUESTS" "$MAX_TOKENS" <<'PY'
import json, os, statistics, sys
work, out, clients, repeats, machine, commit, model, requests, max_tokens = sys.argv[1:10]
def runs(kind, c):
    return [json.load(open(os.path.join(work, f"{kind}-{c}-{r}.json")))["summary"] for r in range(1, int(repeats) + 1)]
rows = []
for c in clients.split():
    p, t = runs("plain", c), runs("tls", c)
    med = lambda xs, f: statistics.median(f(x) for x in xs)
    tok = lambda s: s["output_tokens_per_s"]
    ttft = lambda s: s["ttft_ms"]["mean"]
    itl = lambda s: s["itl_ms"]["mean"]
    failed = sum(s["failed"] for s in p + t)
    rows.append(f"| {c} | {med(p, tok):.0f} | {med(t, tok):.0f} | **{med(t, tok) / med(p, tok):.3f}** | "
                f"{med(p, ttft):.2f} / {med(t, ttft):.2f} | {med(p, itl):.3f} / {med(t, itl):.3f} | "
                f"{' / '.join(f'{tok(s):.0f}' for s in p)} | {' / '.join(f'{tok(s):.0f}' for s in t)} | {failed} |")
name = os.path.basename(model)
open(out, "w").write(f"""# TLS cost: HTTPS against plain HTTP, side by side

Produced by `bash bench/tls_bench.sh` (commit {commit}; {machine}). Two servers started alike
(`kvserve serve --model {name} --threads 2 --grpc-port -1`, one with `--tls-cert-file/--tls-key-file`,
a P-256 certificate) serve {requests} streamed completions of {max_tokens} tokens per run through
`kvserve bench-serve --concurrency C` (TLS 1.3, certificate verified through SSL_CERT_FILE). Runs
alternate plain / TLS, {repeats} of each; medians; the load generator shares the server's cores.

| clients | plain tok/s | TLS tok/s | TLS / plain | mean TTFT ms (plain / TLS) | mean ITL ms (plain / TLS) | plain runs | TLS runs | failed |
|---|---|---|---|---|---|---|---|---|
""" + "\n".join(rows) + "\n")
print(open(out).read())
PY
