#!/usr/bin/env bash
# E2E: `kvserve serve --tls-cert-file/--tls-key-file [--tls-client-ca-file]` with certificates
# made here by the openssl CLI (a test CA, a second CA nobody trusts, expired certificates):
#   HTTPS     curl and the official OpenAI SDK (node, trusting the test CA) over TLS,
#             streaming included; a client that does not trust the CA, a server certificate
#             from the wrong CA and an expired one are refused by the client; plain HTTP to
#             the TLS port gets a 400 naming https.
#   gRPC/TLS  grpc_client.py's whole check list over a TLS channel; an insecure channel fails.
#   mutual    with --tls-client-ca-file: no client certificate, one from the wrong CA and an
#             expired one are refused, on HTTPS and gRPC; the CA's client certificate passes.
#   start-up  a key that is not the certificate's, or a certificate without a key, is refused.
#   probe     `kvserve healthcheck` (the image's HEALTHCHECK) over HTTPS, and under mutual TLS.
#
# Usage: tls_test.sh KVSERVE_BINARY PROTO_DIR E2E_DIR   (E2E_DIR: tests/e2e, for the npm SDK)
# Exit:  0 pass, 1 fail, 77 skipped (openssl, curl, python3-grpcio or protoc missing).
set -euo pipefail
[[ -n "${E2E_TRACE:-}" ]] && set -x

usage="usage: tls_test.sh KVSERVE_BINARY PROTO_DIR E2E_DIR"
KVSERVE=$(realpath "${1:?$usage}")
PROTO_DIR=$(realpath "${2:?$usage}")
E2E_DIR=$(realpath "${3:?$usage}")
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
command -v openssl >/dev/null || { echo "SKIP: openssl missing"; exit 77; }
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
cd "$WORK"

# ---- certificates (P-256 keys; SAN localhost and 127.0.0.1) ------------------------------
quiet() { "$@" >/dev/null 2>&1 || { echo "FAIL: $*"; "$@"; exit 1; }; }
new_ca() { quiet openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=$1" \
             -keyout "$1.key" -out "$1.pem"; }
# issue CA NAME USAGE DAYS: NAME.pem/NAME.key signed by CA (DAYS -1: already expired).
issue() {
  quiet openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$2" -keyout "$2.key" -out "$2.csr"
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=%s\n' "$3" >"$2.ext"
  quiet openssl x509 -req -in "$2.csr" -CA "$1.pem" -CAkey "$1.key" -CAcreateserial -days "$4" -extfile "$2.ext" -out "$2.pem"
}
new_ca ca
new_ca rogue-ca
issue ca server serverAuth 2
issue ca expired-server serverAuth -1
issue rogue-ca rogue-server serverAuth 2
issue ca client clientAuth 2
issue ca expired-client clientAuth -1
issue rogue-ca rogue-client clientAuth 2

grpc_stubs "$PROTO_DIR" "$WORK"

KEY="e2e-$RANDOM$RANDOM"
HTTPS="" GRPC=""
# serve CERT [flags...]: starts kvserve with TLS on CERT.pem/CERT.key; sets HTTPS and GRPC.
serve() {
  local cert=$1; shift
  "$KVSERVE" serve --model synthetic:tiny --host 127.0.0.1 --http-port 0 --grpc-port 0 --api-key "$KEY" \
    --tls-cert-file "$cert.pem" --tls-key-file "$cert.key" "$@" >serve.out 2>serve.err &
  SERVE_PID=$!
  ports_known() { grep -sq 'gRPC on ' serve.out && grep -sq 'HTTP on ' serve.out; }
  wait_for 120 ports_known || fail "kvserve did not print its ports"
  HTTPS=$(grep -o 'https://127.0.0.1:[0-9]*' serve.out | head -n1)
  GRPC=$(grep -o 'gRPC on [^ ]*' serve.out | head -n1 | cut -d' ' -f3)
  [[ -n "$HTTPS" ]] || fail "kvserve did not announce an https:// URL: $(cat serve.out)"
}
shutdown() {
  local rc=0
  stop "$SERVE_PID" 60 || rc=$?
  SERVE_PID=""
  [[ $rc -eq 0 ]] || fail "kvserve serve did not exit cleanly after SIGTERM (status $rc)"
}
# status URL [curl flags...]: the HTTP status, or "refused:<curl exit code>" when no answer.
status() {
  local url=$1 rc=0 code; shift
  code=$(curl -s --max-time 10 -o body.txt -w '%{http_code}' "$@" "$url") || rc=$?
  if [[ $rc -ne 0 ]]; then echo "refused:$rc"; else echo "$code"; fi
}
expect_refused() {  # expect_refused WHAT URL [curl flags...]
  local what=$1 got; shift
  got=$(status "$@")
  [[ $got == refused:* ]] || fail "$what: expected the TLS handshake to fail, got HTTP $got"
  echo "ok: $what refused (curl exit ${got#refused:})"
}
grpc_health() {  # grpc_health [ssl_channel_credentials keyword args...]: prints SERVING or the error
  PYTHONPATH="$WORK" "$GRPC_PY" - "$GRPC" "$@" <<'EOF'
import sys, grpc
target, args = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
read = lambda k: open(args[k], "rb").read() if k in args else None
if "insecure" in args:
    channel = grpc.insecure_channel(target)
else:
    channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(
        root_certificates=read("ca"), private_key=read("key"), certificate_chain=read("cert")))
try:
    reply = channel.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=10)
    print("SERVING" if reply == b"\x08\x01" else "status bytes %r" % reply)
except grpc.RpcError as e:
    print("error %s" % e.code().name)
EOF
}

# ---- start-up refusals -----------------------------------------------------------------------
rc=0
"$KVSERVE" serve --model synthetic:tiny --http-port 0 --grpc-port -1 --tls-cert-file server.pem \
  --tls-key-file client.key >bad.out 2>bad.err || rc=$?
[[ $rc -ne 0 ]] && grep -q "is not the key of the certificate" bad.err || fail "a mismatched key was accepted ($rc): $(cat bad.err)"
rc=0
"$KVSERVE" serve --model synthetic:tiny --http-port 0 --grpc-port -1 --tls-cert-file server.pem >bad.out 2>bad.err || rc=$?
[[ $rc -ne 0 ]] && grep -q "needs both --tls-cert-file and --tls-key-file" bad.err || fail "a certificate without key was accepted"
echo "ok: a mismatched key and a missing key are refused at start-up"

# ---- TLS -------------------------------------------------------------------------------------
serve server
grep -q "gRPC on .* (TLS)" serve.out || fail "gRPC did not announce TLS"
wait_for 60 test "$(status "$HTTPS/ready" --cacert ca.pem)" = 200 || fail "$HTTPS/ready never answered 200"
code=$(status "$HTTPS/v1/completions" --cacert ca.pem -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -d '{"model":"synthetic:tiny","prompt":"Hello","max_tokens":8,"temperature":0}')
[[ $code == 200 ]] && grep -q '"completion_tokens":8' body.txt || fail "completion over HTTPS: $code $(cat body.txt)"
echo "ok: /ready and a completion over HTTPS"
code=$(status "${HTTPS/https:/http:}/health")
[[ $code == 400 ]] && grep -q 'https://' body.txt || fail "plain HTTP to the TLS port: expected 400 naming https, got $code $(cat body.txt)"
echo "ok: plain HTTP to the TLS port gets 400: $(cat body.txt)"
expect_refused "a client that does not trust the CA" "$HTTPS/health"
expect_refused "a client trusting only another CA" "$HTTPS/health" --cacert rogue-ca.pem

if command -v node >/dev/null && [[ -d "$E2E_DIR/node_modules/openai" ]]; then
  # --eval resolves "openai" from the working directory: tests/e2e's node_modules.
  sdk_check=$(cat <<'EOF'
import OpenAI from "openai";
const [url, key] = process.argv.slice(1);
const client = new OpenAI({ baseURL: url + "/v1", apiKey: key, maxRetries: 0 });
const completion = await client.completions.create({ model: "synthetic:tiny", prompt: "Hi", max_tokens: 5, temperature: 0 });
if (completion.usage.completion_tokens !== 5) throw new Error("completion: " + JSON.stringify(completion));
let chunks = 0;
let usage = null;
const stream = await client.chat.completions.create({
  model: "synthetic:tiny", messages: [{ role: "user", content: "Hi" }], max_tokens: 6, stream: true,
  stream_options: { include_usage: true } });
for await (const chunk of stream) { chunks++; if (chunk.usage) usage = chunk.usage; }
if (!usage || usage.completion_tokens !== 6) throw new Error("stream usage: " + JSON.stringify(usage));
console.log(`ok: OpenAI SDK over HTTPS: a completion and a stream of ${chunks} chunks`);
EOF
)
  (cd "$E2E_DIR" && NODE_EXTRA_CA_CERTS="$WORK/ca.pem" node --input-type=module -e "$sdk_check" "$HTTPS" "$KEY") \
    || fail "OpenAI SDK over HTTPS"
else
  echo "note: node or the openai package missing (scripts/install-deps.sh --test): SDK check not run"
fi

PYTHONPATH="$WORK" "$GRPC_PY" "$E2E_DIR/grpc_client.py" --grpc "localhost:${GRPC##*:}" --http "$HTTPS" --key "$KEY" \
  --tls-ca ca.pem || fail "grpc_client.py over TLS"
[[ $(grpc_health insecure=1) == "error UNAVAILABLE" ]] || fail "an insecure gRPC channel to the TLS port worked"
[[ $(grpc_health ca=rogue-ca.pem) == "error UNAVAILABLE" ]] || fail "gRPC trusting another CA connected"
echo "ok: gRPC over TLS; insecure and wrong-CA channels fail"
# The image's HEALTHCHECK follows the server's environment: HTTPS when KVSERVE_TLS_CERT_FILE is set.
KVSERVE_HTTP_PORT=${HTTPS##*:} KVSERVE_TLS_CERT_FILE=server.pem "$KVSERVE" healthcheck /ready \
  || fail "kvserve healthcheck over HTTPS"
rc=0
KVSERVE_HTTP_PORT=${HTTPS##*:} "$KVSERVE" healthcheck 2>probe.err || rc=$?
[[ $rc -eq 1 ]] && grep -q "HTTP 400" probe.err || fail "a plain-HTTP healthcheck of the TLS port passed ($rc)"
echo "ok: kvserve healthcheck speaks HTTPS when KVSERVE_TLS_CERT_FILE is set"
shutdown

# ---- certificates the client must refuse -----------------------------------------------------
serve expired-server
grep -q "has expired" serve.err || fail "no warning for the expired certificate"
expect_refused "an expired server certificate" "$HTTPS/health" --cacert ca.pem
[[ $(grpc_health ca=ca.pem) == "error UNAVAILABLE" ]] || fail "gRPC accepted an expired server certificate"
shutdown
serve rogue-server
expect_refused "a server certificate from another CA" "$HTTPS/health" --cacert ca.pem
shutdown

# ---- mutual TLS ------------------------------------------------------------------------------
serve server --tls-client-ca-file ca.pem
grep -q "client certificates required" serve.out || fail "mutual TLS not announced"
wait_for 60 test "$(status "$HTTPS/ready" --cacert ca.pem --cert client.pem --key client.key)" = 200 \
  || fail "a client certificate from the CA was not accepted"
echo "ok: mutual TLS accepts the CA's client certificate"
expect_refused "no client certificate" "$HTTPS/health" --cacert ca.pem
expect_refused "a client certificate from another CA" "$HTTPS/health" --cacert ca.pem --cert rogue-client.pem --key rogue-client.key
expect_refused "an expired client certificate" "$HTTPS/health" --cacert ca.pem --cert expired-client.pem --key expired-client.key
[[ $(grpc_health ca=ca.pem cert=client.pem key=client.key) == SERVING ]] || fail "gRPC with a good client certificate"
for who in "" rogue- expired-; do
  args=(ca=ca.pem)
  [[ -n "$who" ]] && args+=("cert=${who}client.pem" "key=${who}client.key")
  [[ $(grpc_health "${args[@]}") == "error UNAVAILABLE" ]] || fail "gRPC mutual TLS accepted client '${who:-none}'"
done
echo "ok: gRPC mutual TLS: the CA's client certificate passes; none, another CA's and an expired one fail"
KVSERVE_HTTP_PORT=${HTTPS##*:} KVSERVE_TLS_CERT_FILE=server.pem KVSERVE_TLS_CLIENT_CA_FILE=ca.pem \
  "$KVSERVE" healthcheck || fail "kvserve healthcheck under mutual TLS (a TCP check)"
shutdown
echo "PASS"
