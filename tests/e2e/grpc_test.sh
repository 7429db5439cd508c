#!/usr/bin/env bash
# E2E: a real gRPC client (Debian's python3-grpcio, stubs generated from
# proto/kvserve/v1/generation.proto at test time) against `kvserve serve --api-key`:
# auth, health, model info, streaming == unary (greedy), chat, and a stream cancelled
# mid-way whose KV blocks are free again (read from /metrics). See grpc_client.py.
#
# Usage: grpc_test.sh KVSERVE_BINARY PROTO_DIR [MODEL]   (PROTO_DIR: the repo's proto/)
# Exit:  0 pass, 1 fail, 77 skipped (python3-grpcio, protoc or grpc_python_plugin missing).
set -euo pipefail
[[ -n "${E2E_TRACE:-}" ]] && set -x

KVSERVE=${1:?usage: grpc_test.sh KVSERVE_BINARY PROTO_DIR [MODEL]}
PROTO_DIR=${2:?usage: grpc_test.sh KVSERVE_BINARY PROTO_DIR [MODEL]}
MODEL=${3:-synthetic:tiny}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"
require_grpc_python

WORK=$(mktemp -d)
SERVE_PID=""
cleanup() {
  local rc=$?
  [[ -n "$SERVE_PID" ]] && { stop "$SERVE_PID" 10 || true; }
  if [[ $rc -ne 0 ]]; then echo "--- kvserve stderr (tail)"; tail -n 30 "$WORK/serve.err" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
grpc_stubs "$PROTO_DIR" "$WORK"

KEY="e2e-$RANDOM$RANDOM"
"$KVSERVE" serve --model "$MODEL" --host 127.0.0.1 --http-port 0 --grpc-port 0 --api-key "$KEY" \
  >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE_PID=$!
ports_known() { grep -sq 'gRPC on ' "$WORK/serve.out" && grep -sq 'HTTP on ' "$WORK/serve.out"; }
wait_for 120 ports_known || fail "kvserve did not print its ports"
HTTP=$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/serve.out" | head -n1)
GRPC=$(grep -o 'gRPC on [^ ]*' "$WORK/serve.out" | head -n1 | cut -d' ' -f3)
ready() { [[ "$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' "$HTTP/ready")" == 200 ]]; }
wait_for 120 ready || fail "kvserve never became ready"

PYTHONPATH="$WORK" "$GRPC_PY" "$HERE/grpc_client.py" --grpc "$GRPC" --http "$HTTP" --key "$KEY" || fail "grpc_client.py"

rc=0
stop "$SERVE_PID" 60 || rc=$?
SERVE_PID=""
[[ $rc -eq 0 ]] || fail "kvserve serve did not exit cleanly after SIGTERM (status $rc; 137: killed after 60 s)"
