#!/usr/bin/env bash
# E2E: a real Prometheus server (Debian's `prometheus` package) scrapes `kvserve serve`'s
# /metrics on loopback; the test asks Prometheus's HTTP API for kvserve_kv_cache_usage_ratio
# until it answers with a sample, then checks that the scrape target is up and that a
# completion moved kvserve_generation_tokens_total.
#
# Usage: prometheus_test.sh KVSERVE_BINARY [MODEL]   (MODEL: GGUF path or synthetic:tiny)
# Exit:  0 pass, 1 fail, 77 skipped (prometheus or curl not installed).
set -euo pipefail
[[ -n "${E2E_TRACE:-}" ]] && set -x

KVSERVE=${1:?usage: prometheus_test.sh KVSERVE_BINARY [MODEL]}
MODEL=${2:-synthetic:tiny}
for tool in prometheus promtool curl python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (apt-get install --no-install-recommends prometheus curl)"
    exit 77
  fi
done

WORK=$(mktemp -d)
SERVE_PID=""
PROM_PID=""
cleanup() {
  local rc=$?
  [[ -n "$PROM_PID" ]] && { stop "$PROM_PID" 10 || true; }
  [[ -n "$SERVE_PID" ]] && { stop "$SERVE_PID" 10 || true; }
  if [[ $rc -ne 0 ]]; then
    echo "--- kvserve stderr (tail)"; tail -n 20 "$WORK/serve.err" 2>/dev/null || true
    echo "--- prometheus log (tail)"; tail -n 20 "$WORK/prometheus.log" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"


# 1. kvserve, HTTP on a free port (printed on stdout as "HTTP on http://HOST:PORT").
"$KVSERVE" serve --model "$MODEL" --host 127.0.0.1 --http-port 0 --grpc-port -1 \
  >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE_PID=$!
wait_for 60 http_port "$WORK/serve.out" >/dev/null || fail "kvserve did not print its HTTP port"
HTTP="http://127.0.0.1:$(http_port "$WORK/serve.out")"
ready() { [[ "$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' "$HTTP/ready")" == 200 ]]; }
wait_for 120 ready || fail "kvserve never became ready"
curl -sf --max-time 30 "$HTTP/metrics" >"$WORK/metrics.txt" || fail "GET /metrics failed"
# vLLM's names of the inference gateway's protocol carry colons on purpose (an endpoint picker
# configured for vLLM reads them); promtool's lint on that is the only finding allowed.
promtool check metrics <"$WORK/metrics.txt" >"$WORK/lint.txt" 2>&1 || true
grep -q '^vllm:num_requests_waiting' "$WORK/metrics.txt" || fail "no vllm:num_requests_waiting"
if grep -v "^vllm:[a-z_]* metric names should not contain ':'$" "$WORK/lint.txt" | grep -q .; then
  cat "$WORK/lint.txt" >&2
  fail "promtool check metrics found problems"
fi

# 2. Prometheus on a free loopback port, scraping every second.
PROM="127.0.0.1:$(free_port)"
cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kvserve
    static_configs:
      - targets: ["127.0.0.1:${HTTP##*:}"]
EOF
promtool check config "$WORK/prometheus.yml" >/dev/null || fail "bad prometheus.yml"
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/data" \
  --web.listen-address="$PROM" >"$WORK/prometheus.log" 2>&1 &
PROM_PID=$!

# 3. Some traffic, so counters move.
MODEL_ID=$(curl -sf --max-time 30 "$HTTP/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
curl -sf --max-time 30 "$HTTP/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\": \"$MODEL_ID\", \"prompt\": \"Once upon a time\", \"max_tokens\": 8, \"temperature\": 0}" \
  >/dev/null || fail "POST /v1/completions failed"

# 4. Ask Prometheus. has_sample QUERY: true when the instant query returns >= 1 series.
has_sample() {
  curl -s --max-time 10 --get "http://$PROM/api/v1/query" --data-urlencode "query=$1" >"$WORK/answer.json" 2>/dev/null || return 1
  python3 - "$WORK/answer.json" <<'EOF'
import json, sys
try:
    answer = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit(1)
sys.exit(0 if answer.get("status") == "success" and answer["data"]["result"] else 1)
EOF
}
wait_for 60 has_sample 'kvserve_kv_cache_usage_ratio' || fail "Prometheus has no kvserve_kv_cache_usage_ratio sample"
echo "Prometheus answered: $(cat "$WORK/answer.json")"
wait_for 30 has_sample 'up{job="kvserve"} == 1' || fail "the kvserve target is not up"
wait_for 30 has_sample 'kvserve_generation_tokens_total >= 8' || fail "kvserve_generation_tokens_total did not reach 8"
wait_for 30 has_sample 'kvserve_info{kv_dtype!=""} == 1' || fail "kvserve_info missing"
has_sample 'kvserve_kv_cache_usage_ratio >= 0 and kvserve_kv_cache_usage_ratio <= 1' || fail "usage ratio outside [0, 1]"

# 5. kvserve drains and exits 0 on SIGTERM.
rc=0
stop "$SERVE_PID" 60 || rc=$?
SERVE_PID=""
[[ $rc -eq 0 ]] || fail "kvserve serve did not exit cleanly after SIGTERM (status $rc; 137: killed after 60 s)"
echo "PASS: Prometheus scraped kvserve and answered kvserve_kv_cache_usage_ratio"
