# Helpers shared by the shell e2e tests (source it; needs bash and, for free_port, python3).

fail() { echo "FAIL: $*"; exit 1; }

# stop PID SECONDS: SIGTERM, then SIGKILL after SECONDS; returns the exit status (137 when
# it had to be killed).
stop() {
  local pid=$1 deadline=$((SECONDS + $2))
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  local rc=0
  wait "$pid" 2>/dev/null || rc=$?
  return $rc
}

# Waits up to $1 seconds for the command "${@:2}" to succeed.
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    (( SECONDS < deadline )) || return 1
    sleep 0.2
  done
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The HTTP port `kvserve serve` printed ("HTTP on http://127.0.0.1:PORT") in the file $1.
http_port() { grep -s -o 'HTTP on http://127.0.0.1:[0-9]*' "$1" | grep -o '[0-9]*$'; }

# Debian's python3 with python3-grpcio and python3-protobuf (not a pyenv one), and the stub
# generator, for the Python gRPC clients.
GRPC_PY=/usr/bin/python3
GRPC_PLUGIN=/usr/bin/grpc_python_plugin
# Exits 77 (skipped) when the gRPC Python client cannot run here.
require_grpc_python() {
  if ! [[ -x "$GRPC_PY" ]] || ! "$GRPC_PY" -c 'import grpc, google.protobuf' 2>/dev/null; then
    echo "SKIP: $GRPC_PY cannot import grpc (apt-get install python3-grpcio python3-protobuf)"; exit 77
  fi
  if ! command -v protoc >/dev/null || ! [[ -x "$GRPC_PLUGIN" ]] || ! command -v curl >/dev/null; then
    echo "SKIP: protoc, $GRPC_PLUGIN (protobuf-compiler-grpc) or curl missing"; exit 77
  fi
}
# grpc_stubs PROTO_DIR OUT: kvserve/v1/generation.proto's Python stubs into OUT.
grpc_stubs() {
  protoc -I "$1" --python_out="$2" --grpc_python_out="$2" --plugin=protoc-gen-grpc_python="$GRPC_PLUGIN" \
    "$1/kvserve/v1/generation.proto"
}
