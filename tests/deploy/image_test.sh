#!/usr/bin/env bash
# The CPU image, built and run (ctest label `image`; .ci/run runs it after the suite). No
# Docker engine or registry is needed (../shared/docs/BUILD-NOTES.md, "Containers"):
#   1. the base images debian:12 and debian:12-slim are made from Debian's packages with
#      debootstrap and imported, unless they are there already;
#   2. `buildah bud --target cpu --format docker` builds the Dockerfile (the docker format
#      keeps HEALTHCHECK);
#   3. the image runs with `buildah run` (its ENTRYPOINT + CMD, a model mounted read-only) and
#      is checked from the host: /ready 200, a completion, /metrics, gRPC health SERVING, the
#      server's UID is not 0, the image's HEALTHCHECK command passes inside the container and
#      fails once the server is gone, SIGTERM during a stream drains it and exits 0, the
#      image holds no compiler and no -dev package, and with a certificate mounted it serves
#      HTTPS and its HEALTHCHECK passes over HTTPS. The image and layer sizes are printed.
#
# Usage: image_test.sh SOURCE_DIR KVSERVE_BINARY   (the host's kvserve writes the test model)
# Environment: KVSERVE_IMAGE_KEEP=1 keeps the built image (kvserve:cpu-test).
# Exit: 0 pass, 1 fail, 77 skipped (buildah missing; scripts/install-deps.sh --image).
set -euo pipefail
[[ -n "${E2E_TRACE:-}" ]] && set -x

SRC=$(cd "${1:?usage: image_test.sh SOURCE_DIR KVSERVE_BINARY}" && pwd)
KVSERVE=${2:?usage: image_test.sh SOURCE_DIR KVSERVE_BINARY}
IMAGE=localhost/kvserve:cpu-test
if ! command -v buildah >/dev/null; then
  echo "SKIP: buildah is not installed (scripts/install-deps.sh --image)"; exit 77
fi
for tool in podman debootstrap curl python3 openssl; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool missing (scripts/install-deps.sh --image)"; exit 1; }
done

WORK=$(mktemp -d)
CONTAINER=""
RUN_PID=""
cleanup() {
  local rc=$?
  [[ -n "$RUN_PID" ]] && { kill -KILL "$RUN_PID" 2>/dev/null || true; }
  [[ -n "$CONTAINER" ]] && { buildah rm "$CONTAINER" >/dev/null 2>&1 || true; }
  if [[ $rc -ne 0 ]]; then echo "--- container output (tail)"; tail -n 30 "$WORK/run.log" 2>/dev/null || true; fi
  [[ -z "${KVSERVE_IMAGE_KEEP:-}" ]] && { buildah rmi "$IMAGE" >/dev/null 2>&1 || true; }
  rm -rf "$WORK"
}
trap cleanup EXIT
# shellcheck source=../e2e/lib/common.sh
source "$SRC/tests/e2e/lib/common.sh"

# ---- 1. base images (made with debootstrap unless they are there) ----------------------------
bash "$SRC/tests/deploy/make_base_images.sh" || fail "the base images"

# ---- 2. build ---------------------------------------------------------------------------------
t=$SECONDS
buildah bud --isolation chroot --network host --pull=never --layers --format docker --target cpu -t "$IMAGE" "$SRC" \
  >"$WORK/build.log" 2>&1 || { tail -n 40 "$WORK/build.log"; fail "buildah bud --target cpu"; }
echo "built $IMAGE in $((SECONDS - t)) s"
buildah inspect --type image "$IMAGE" >"$WORK/image.json"
# entrypoint + cmd, user, healthcheck command, one per line (the command's words joined by \x1f).
python3 - "$WORK/image.json" >"$WORK/config.txt" <<'EOF'
import json, sys
config = json.load(open(sys.argv[1]))["Docker"]["config"]
print("\x1f".join((config.get("Entrypoint") or []) + (config.get("Cmd") or [])))
print(config.get("User", ""))
test = (config.get("Healthcheck") or {}).get("Test") or []
print("\x1f".join(test[1:]) if test[:1] == ["CMD"] else "unsupported:" + " ".join(test))
EOF
IFS=$'\x1f' read -r -a SERVE_CMD < <(sed -n 1p "$WORK/config.txt")
USER_SPEC=$(sed -n 2p "$WORK/config.txt")
IFS=$'\x1f' read -r -a HEALTH_CMD < <(sed -n 3p "$WORK/config.txt")
[[ "${SERVE_CMD[*]}" == "kvserve serve" ]] || fail "ENTRYPOINT+CMD is '${SERVE_CMD[*]}', expected 'kvserve serve'"
[[ -n "$USER_SPEC" && "${USER_SPEC%%:*}" != 0 && "${USER_SPEC%%:*}" != root ]] || fail "image USER is '$USER_SPEC'"
[[ ${#HEALTH_CMD[@]} -gt 0 && "${HEALTH_CMD[0]}" != unsupported:* ]] || fail "no HEALTHCHECK CMD in the image: ${HEALTH_CMD[*]:-none}"
echo "image: USER $USER_SPEC, HEALTHCHECK ${HEALTH_CMD[*]}"
size() { podman image inspect --format '{{.Size}}' "$1" | awk '{printf "%.1f MB", $1 / 1e6}'; }
echo "image size $(size "$IMAGE") (base debian:12-slim $(size docker.io/library/debian:12-slim)); layers:"
podman history --format '{{.Size}}\t{{.CreatedBy}}' "$IMAGE" | cut -c1-150 | sed 's/^/  /'

# ---- 3. run -----------------------------------------------------------------------------------
mkdir -m 0755 "$WORK/models"
"$KVSERVE" mkmodel --preset tiny -o "$WORK/models/tiny.gguf" >/dev/null
chmod 0644 "$WORK/models/tiny.gguf"
HTTP_PORT=$(free_port)
GRPC_PORT=$(free_port)
[[ "$GRPC_PORT" != "$HTTP_PORT" ]] || GRPC_PORT=$(free_port)
ENV=(-e KVSERVE_MODEL=/models/tiny.gguf -e KVSERVE_HOST=127.0.0.1 -e "KVSERVE_HTTP_PORT=$HTTP_PORT"
     -e "KVSERVE_GRPC_PORT=$GRPC_PORT")
CONTAINER=$(buildah from --pull=never "$IMAGE")
in_container() { buildah run --isolation chroot --network host "${ENV[@]}" "$CONTAINER" -- "$@"; }
# A 10 ms pause per engine step (the test hook --inject-step-delay-ms) keeps the stream of the
# drain check running for seconds on a model that is otherwise done in milliseconds.
buildah run --isolation chroot --network host -v "$WORK/models:/models:ro" "${ENV[@]}" "$CONTAINER" -- \
  "${SERVE_CMD[@]}" --inject-step-delay-ms 10 >"$WORK/run.log" 2>&1 &
RUN_PID=$!
URL=http://127.0.0.1:$HTTP_PORT
ready() { [[ "$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$URL/ready")" == 200 ]]; }
wait_for 120 ready || fail "$URL/ready never answered 200"
echo "ok: /ready 200"

body=$(curl -sf --max-time 30 "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model":"tiny","prompt":"Hello","max_tokens":8,"temperature":0}') || fail "completion request"
grep -q '"completion_tokens":8' <<<"$body" || fail "completion: $body"
echo "ok: a completion of 8 tokens"
# Read whole before grep: `curl | grep -q` under pipefail fails when grep exits before curl's
# last write (curl gets EPIPE, exit 23), about 1 run in 300 here.
metrics=$(curl -sf --max-time 10 "$URL/metrics") || fail "GET /metrics"
grep -q '^kvserve_kv_cache_blocks' <<<"$metrics" || fail "/metrics has no kvserve_kv_cache_blocks"
echo "ok: /metrics"
health=$(/usr/bin/python3 - "127.0.0.1:$GRPC_PORT" <<'EOF' 2>&1
import sys
try:
    import grpc
except ImportError:
    print("SKIP (python3-grpcio missing)"); sys.exit(0)
reply = grpc.insecure_channel(sys.argv[1]).unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=10)
print("SERVING" if reply == b"\x08\x01" else "not serving: %r" % reply)
EOF
) || true
[[ $health == SERVING || $health == SKIP* ]] || fail "gRPC health: $health"
echo "ok: gRPC health $health"

# The host pid of the process listening on the container's HTTP port.
listener_pid() { ss -ltnpH "sport = :$HTTP_PORT" | grep -o 'pid=[0-9]*' | head -n1 | cut -d= -f2; }
server_pid=$(listener_pid)
[[ -n "$server_pid" ]] || fail "no process listens on $HTTP_PORT"
uid=$(awk '/^Uid:/ {print $2}' "/proc/$server_pid/status")
[[ "$uid" != 0 ]] || fail "the server runs as root"
[[ "$(readlink "/proc/$server_pid/root")" != / ]] || fail "the server is not in the container's root"
echo "ok: the server (host pid $server_pid) runs as UID $uid in the container's root"

in_container "${HEALTH_CMD[@]}" || fail "the image's HEALTHCHECK (${HEALTH_CMD[*]}) fails against a healthy server"
echo "ok: HEALTHCHECK passes"

packages=$(in_container dpkg-query -W -f '${Package}\n')
bad=$(grep -E -e '-dev$' -e '^(gcc|g\+\+|cpp|clang|binutils|make|cmake)(-[0-9.]+)?$' <<<"$packages" || true)
[[ -z "$bad" ]] || fail "the runtime image holds build packages: $(tr '\n' ' ' <<<"$bad")"
compilers=$(in_container sh -c 'for c in cc c++ gcc g++ clang ld; do command -v $c || true; done')
[[ -z "$compilers" ]] || fail "the runtime image holds compilers: $compilers"
echo "ok: no compiler or -dev package ($(wc -l <<<"$packages") packages)"

# SIGTERM while a stream is running: the stream ends with [DONE], the server exits 0.
curl -sN --max-time 60 "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model":"tiny","prompt":"Once","max_tokens":300,"stream":true,"ignore_eos":true}' >"$WORK/stream.txt" &
stream_pid=$!
wait_for 30 grep -q '^data: {' "$WORK/stream.txt" || fail "the stream did not start"
! grep -q '^data: \[DONE\]' "$WORK/stream.txt" || fail "the stream ended before SIGTERM; the drain was not tested"
kill -TERM "$server_pid"
wait "$stream_pid" || fail "the stream failed during the drain"
grep -q '^data: \[DONE\]' "$WORK/stream.txt" || fail "the stream did not end with [DONE] during the drain"
rc=0
wait "$RUN_PID" || rc=$?
RUN_PID=""
[[ $rc -eq 0 ]] || fail "the container exited with status $rc after SIGTERM"
echo "ok: SIGTERM drained a running stream and the container exited 0"
if in_container "${HEALTH_CMD[@]}" 2>/dev/null; then fail "HEALTHCHECK passes with the server stopped"; fi
echo "ok: HEALTHCHECK fails once the server is stopped"

# TLS: the same image serving HTTPS on a certificate mounted read-only; its HEALTHCHECK
# follows the server's variables and probes over HTTPS.
mkdir -m 0755 "$WORK/tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$WORK/tls/key.pem" -out "$WORK/tls/cert.pem" 2>/dev/null
chmod 0644 "$WORK/tls/key.pem" "$WORK/tls/cert.pem"
ENV+=(-e KVSERVE_TLS_CERT_FILE=/tls/cert.pem -e KVSERVE_TLS_KEY_FILE=/tls/key.pem)
buildah run --isolation chroot --network host -v "$WORK/models:/models:ro" -v "$WORK/tls:/tls:ro" "${ENV[@]}" \
  "$CONTAINER" -- "${SERVE_CMD[@]}" >"$WORK/run.log" 2>&1 &
RUN_PID=$!
ready_tls() {
  [[ "$(curl -s --max-time 5 --cacert "$WORK/tls/cert.pem" -o /dev/null -w '%{http_code}' \
        "https://127.0.0.1:$HTTP_PORT/ready")" == 200 ]]
}
wait_for 120 ready_tls || fail "https://127.0.0.1:$HTTP_PORT/ready never answered 200"
in_container "${HEALTH_CMD[@]}" || fail "HEALTHCHECK fails against the HTTPS server"
kill -TERM "$(listener_pid)"
rc=0
wait "$RUN_PID" || rc=$?
RUN_PID=""
[[ $rc -eq 0 ]] || fail "the TLS container exited with status $rc after SIGTERM"
echo "ok: HTTPS with a mounted certificate; HEALTHCHECK passes over HTTPS"
echo "PASS"
