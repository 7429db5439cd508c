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
