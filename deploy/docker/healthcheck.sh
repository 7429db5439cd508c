#!/usr/bin/env bash
# Container health probe without curl: GET /health (or the path given) from kvserve's HTTP port
# over bash's /dev/tcp; exit 0 on HTTP 200, 1 otherwise. The Dockerfile's HEALTHCHECK runs it
# as `kvserve-healthcheck`; Kubernetes uses httpGet probes instead (deploy/k8s/deployment.yaml).
#
#   kvserve-healthcheck [PATH]          PATH: /health (liveness, default) or /ready
#
# Environment (the same variables `kvserve serve` reads, so the probe follows the server):
#   KVSERVE_HTTP_PORT            port (default 8080; the probe cannot follow --http-port 0)
#   KVSERVE_HOST                 used when it names one address (not 0.0.0.0 / ::)
#   KVSERVE_HEALTHCHECK_HOST     overrides the address (default 127.0.0.1)
#   KVSERVE_HEALTHCHECK_TIMEOUT  seconds for connect + answer (default 3)
#   KVSERVE_HEALTHCHECK_API_KEY  Bearer token, needed only with --protect-observability;
#                                default: the first key of KVSERVE_API_KEY
set -u
path=${1:-/health}
port=${KVSERVE_HTTP_PORT:-8080}
host=${KVSERVE_HEALTHCHECK_HOST:-}
if [[ -z "$host" ]]; then
  case "${KVSERVE_HOST:-}" in
    "" | 0.0.0.0 | "::" | "[::]") host=127.0.0.1 ;;
    *) host=$KVSERVE_HOST ;;
  esac
fi
key=${KVSERVE_HEALTHCHECK_API_KEY:-${KVSERVE_API_KEY:-}}
key=${key%%,*}
auth=""
[[ -n "$key" ]] && auth="Authorization: Bearer $key"$'\r\n'

# The child shell opens the connection, sends the request and prints the status line;
# `timeout` bounds all of it (a server that accepts and never answers is unhealthy too).
status_line=$(timeout "${KVSERVE_HEALTHCHECK_TIMEOUT:-3}" bash -c '
  exec 3<>"/dev/tcp/$1/$2" || exit 1
  printf "GET %s HTTP/1.1\r\nHost: %s:%s\r\n%sConnection: close\r\n\r\n" "$3" "$1" "$2" "$4" >&3
  IFS= read -r line <&3 || exit 1
  printf "%s" "$line"
' probe "$host" "$port" "$path" "$auth" 2>/dev/null)
code=$(printf '%s' "$status_line" | awk '{print $2}')
if [[ "$code" == 200 ]]; then
  exit 0
fi
if [[ -z "$status_line" ]]; then
  echo "kvserve-healthcheck: no answer from http://$host:$port$path" >&2
else
  echo "kvserve-healthcheck: http://$host:$port$path answered '${status_line%$'\r'}'" >&2
fi
exit 1
