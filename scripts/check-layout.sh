#!/usr/bin/env bash
# The project checks its own layout (run by ctest as `check_layout`, label `layout`):
#   1. every #include "..." of a project header points down the dependency graph
#        cli -> tools, server -> engine -> cache -> common
#      with the engine's rooms below its core: engine/backend -> engine/model ->
#      engine/tokenizer -> engine/jinja (the Jinja engine knows values, nothing else),
#      engine/grammar -> engine/tokenizer (it knows a vocabulary, never
#      the model or the backend), and server/http, server/grpc -> server/api -> server/events
#      (the KV-event publisher, which knows only cache/'s prefix events);
#      and nothing outside engine/backend picks a concrete backend: engine/, server/, tools/
#      and cli/ create backends through engine/backend/backend_factory.h, never including
#      engine/backend/cpu/ or engine/backend/cuda/;
#   2. no source file (.cpp .h .cu .cuh, tests and benchmarks included) is over 600 lines.
# Prints each violation and exits 1 if there is any.
#
#   scripts/check-layout.sh [SOURCE_DIR]        (default: the repository root)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"
max_lines=600

# What a folder's files may include (project paths; prefixes). The longest matching folder
# wins, so engine/backend/ has its own rule and engine/ holds for the engine core's files.
allowed_for() {
  case "$1" in
    common/*) echo "common/" ;;
    cache/*) echo "cache/ common/" ;;
    engine/jinja/*) echo "engine/jinja/ common/" ;;
    engine/tokenizer/*) echo "engine/tokenizer/ engine/jinja/ common/" ;;
    engine/grammar/*) echo "engine/grammar/ engine/tokenizer/ engine/jinja/ common/" ;;
    engine/model/*) echo "engine/model/ engine/tokenizer/ engine/jinja/ common/" ;;
    engine/backend/*) echo "engine/backend/ engine/model/ engine/tokenizer/ engine/jinja/ cache/ common/" ;;
    engine/*) echo "engine/ cache/ common/" ;;
    server/events/*) echo "server/events/ cache/ common/" ;;
    server/api/*) echo "server/api/ server/events/ engine/ cache/ common/" ;;
    server/http/*) echo "server/http/ server/api/ engine/ cache/ common/" ;;
    server/grpc/*) echo "server/grpc/ server/api/ engine/ cache/ common/" ;;
    tools/*) echo "tools/ engine/ cache/ common/" ;;
    cli/*) echo "cli/ server/ tools/ engine/ cache/ common/" ;;
    *) echo "" ;;  # tests/, bench/, proto/: anything
  esac
}

sources() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -co --exclude-standard -- '*.cpp' '*.h' '*.cu' '*.cuh'
  else
    find . -path ./build -prune -o -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print |
      sed 's|^\./||'
  fi
}

violations=0
while IFS= read -r file; do
  [ -f "$file" ] || continue
  lines=$(wc -l <"$file")
  if [ "$lines" -gt "$max_lines" ]; then
    echo "check-layout: $file has $lines lines (at most $max_lines: can one concept move out?)"
    violations=$((violations + 1))
  fi
  allowed=$(allowed_for "$file")
  [ -n "$allowed" ] || continue
  # Project includes only: a quoted path whose first component is a top-level folder.
  while IFS=: read -r line include; do
    case "$include" in
      common/* | cache/* | engine/* | server/* | tools/* | cli/* | tests/* | bench/*) ;;
      *) continue ;;  # generated (generation.pb.h) or system-style
    esac
    case "$file:$include" in
      engine/backend/*) ;;
      *:engine/backend/cpu/* | *:engine/backend/cuda/*)
        echo "check-layout: $file:$line includes \"$include\": create backends with engine/backend/backend_factory.h"
        violations=$((violations + 1))
        continue ;;
    esac
    ok=0
    for prefix in $allowed; do
      case "$include" in "$prefix"*) ok=1 ;; esac
    done
    if [ "$ok" -eq 0 ]; then
      echo "check-layout: $file:$line includes \"$include\", which is not below it (allowed: $allowed)"
      violations=$((violations + 1))
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" |
           sed -E 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1:\2/')
done < <(sources)

if [ "$violations" -gt 0 ]; then
  echo "check-layout: $violations violation(s)"
  exit 1
fi
echo "check-layout: ok (includes point down the dependency graph; no source file over $max_lines lines)"
