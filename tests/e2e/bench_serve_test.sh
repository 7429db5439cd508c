#!/usr/bin/env bash
# E2E: `kvserve bench-serve` against a real `kvserve serve` on loopback: 20 streamed
# completions from 4 clients, then 4 chat completions; asserts zero errors, every request
# counted, tokens taken from the server's usage (20 x 16), non-zero throughput and TTFT, in
# the JSON and in the markdown table; the server then drains and exits 0 on SIGTERM.
#
# Usage: bench_serve_test.sh KVSERVE_BINARY [MODEL]   (MODEL default synthetic:tiny)
# Exit:  0 pass, 1 fail, 77 skipped (python3 missing).
set -euo pipefail
[[ -n "${E2E_TRACE:-}" ]] && set -x

KVSERVE=${1:?usage: bench_serve_test.sh KVSERVE_BINARY [MODEL]}
MODEL=${2:-synthetic:tiny}
if ! command -v python3 >/dev/null; then
  echo "SKIP: python3 is not installed"
  exit 77
fi

WORK=$(mktemp -d)
SERVE_PID=""
cleanup() {
  local rc=$?
  [[ -n "$SERVE_PID" ]] && { stop "$SERVE_PID" 10 || true; }
  if [[ $rc -ne 0 ]]; then
    echo "--- kvserve stderr (tail)"; tail -n 20 "$WORK/serve.err" 2>/dev/null || true
    echo "--- bench-serve stdout"; cat "$WORK/bench.md" 2>/dev/null || true
    echo "--- bench-serve stderr"; cat "$WORK/bench.err" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"


"$KVSERVE" serve --model "$MODEL" --host 127.0.0.1 --http-port 0 --grpc-port -1 \
  >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE_PID=$!
deadline=$((SECONDS + 60))
until http_port "$WORK/serve.out" >/dev/null; do
  (( SECONDS < deadline )) || fail "kvserve did not print its HTTP port"
  kill -0 "$SERVE_PID" 2>/dev/null || fail "kvserve exited early"
  sleep 0.1
done
URL="http://127.0.0.1:$(http_port "$WORK/serve.out")"

# 1. Streamed completions; --wait-ready polls /v1/models while the model loads.
"$KVSERVE" bench-serve --url "$URL" --wait-ready 120 --concurrency 4 --num-requests 20 --max-tokens 16 \
  --output-json "$WORK/bench.json" >"$WORK/bench.md" 2>"$WORK/bench.err" || fail "bench-serve exited with $?"
python3 - "$WORK/bench.json" <<'PY' || fail "the JSON report is wrong"
import json, sys
r = json.load(open(sys.argv[1]))
s = r["summary"]
problems = []
def want(cond, what):
    if not cond: problems.append(what)
want(s["completed"] == 20, f"completed {s['completed']} != 20")
want(s["failed"] == 0, f"failed {s['failed']} != 0 ({r['errors']}, {r['error_examples']})")
want(r["errors"] == {}, f"errors {r['errors']}")
want(s["output_tokens"] == 20 * 16, f"output tokens {s['output_tokens']} != 320")
want(s["tokens_from_usage"], "tokens not from usage")
want(s["output_tokens_per_s"] > 0, "no throughput")
want(s["requests_per_s"] > 0, "no request rate")
want(s["prompt_tokens"] > 0, "no prompt tokens")
want(0 < s["ttft_ms"]["p50"] <= s["e2e_ms"]["p50"], f"TTFT {s['ttft_ms']} vs end-to-end {s['e2e_ms']}")
want(s["itl_ms"]["count"] > 0, "no inter-token samples")
want(len(r["requests"]) == 20 and all(q["ok"] and q["output_tokens"] == 16 for q in r["requests"]),
     "a request failed or has the wrong token count")
want(r["config"]["concurrency"] == 4 and r["config"]["ignore_eos"] and r["config"]["stream"], "config echo")
if problems:
    print("\n".join(problems)); sys.exit(1)
print(f"completions: {s['completed']} requests, {s['output_tokens_per_s']:.1f} output tok/s, "
      f"TTFT p50 {s['ttft_ms']['p50']:.2f} ms")
PY
grep -q '^| successful requests | 20 |$' "$WORK/bench.md" || fail "markdown: no '| successful requests | 20 |' row"
grep -q '^| failed requests | 0 |$' "$WORK/bench.md" || fail "markdown: failed requests is not 0"
grep -q '^| time to first token |' "$WORK/bench.md" || fail "markdown: no TTFT row"

# 2. Chat completions.
"$KVSERVE" bench-serve --url "$URL" --endpoint chat --concurrency 2 --num-requests 4 --max-tokens 8 \
  --output-json "$WORK/chat.json" >"$WORK/bench.md" 2>"$WORK/bench.err" || fail "bench-serve (chat) exited with $?"
python3 - "$WORK/chat.json" <<'PY' || fail "the chat JSON report is wrong"
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
if s["completed"] != 4 or s["failed"] != 0 or s["output_tokens"] != 32 or s["output_tokens_per_s"] <= 0:
    print(s); sys.exit(1)
print(f"chat: {s['completed']} requests, {s['output_tokens_per_s']:.1f} output tok/s")
PY

rc=0
stop "$SERVE_PID" 60 || rc=$?
SERVE_PID=""
[[ $rc -eq 0 ]] || fail "kvserve serve did not exit cleanly after SIGTERM (status $rc)"
echo "PASS: bench-serve measured kvserve with zero errors"
