#!/usr/bin/env bash
# The quick loop between full CI runs: rebuilds `build` incrementally (configuring it first if
# needed, as the README does) and runs the ctest labels of what changed, or the labels named.
#
#   scripts/dev-test.sh                 labels of the files changed since HEAD (staged,
#                                       unstaged and untracked)
#   scripts/dev-test.sh main            ... since the merge base with main (a whole branch)
#   scripts/dev-test.sh -L unit/cache   the named labels (a ctest regex; -L may repeat)
#
# A folder maps to its own tests and those of the front ends above it (common -> every unit
# label; cache -> cache, backend, engine; server -> server and e2e; ...); see labels_for below.
# Environment: BUILD (default build), JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
jobs=${JOBS:-2}

labels=()
base=""
while [ $# -gt 0 ]; do
  case "$1" in
    -L) labels+=("$2"); shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) base=$1; shift ;;
  esac
done

labels_for() {  # labels_for PATH: the ctest labels a change to PATH can break
  case "$1" in
    common/*) echo "^unit/" ;;
    cache/*) echo "^unit/(cache|backend|engine)$" ;;
    engine/tokenizer/*) echo "^unit/(tokenizer|fuzz)$" ;;
    engine/model/*) echo "^unit/(model|backend|fuzz)$|^golden$" ;;
    engine/backend/cuda/*) echo "^gpu$|^unit/backend$" ;;
    engine/backend/*) echo "^unit/backend$|^golden$" ;;
    engine/*) echo "^unit/engine$|^golden$" ;;
    server/* | proto/*) echo "^unit/server$|^e2e$" ;;
    tools/*) echo "^unit/tools$" ;;
    cli/*) echo "^unit/cli$|^cli$|^soak$" ;;
    tests/unit/*/*) echo "^unit/$(basename "$(dirname "$1")")$" ;;
    tests/golden/*) echo "^golden$" ;;
    tests/gpu/*) echo "^gpu$" ;;
    tests/fuzz/*) echo "^unit/fuzz$" ;;
    tests/e2e/*) echo "^e2e$" ;;
    tests/deploy/* | deploy/* | Dockerfile) echo "^deploy$" ;;
    CMakeLists.txt | */CMakeLists.txt | cmake/*) echo "^unit/" ;;
    *.h | *.cpp) echo "^layout$" ;;
  esac
}

if [ ${#labels[@]} -eq 0 ]; then
  if [ -n "$base" ]; then
    changed=$(git diff --name-only "$(git merge-base HEAD "$base")")
  else
    changed=$( (git diff --name-only HEAD; git ls-files --others --exclude-standard) | sort -u)
  fi
  while read -r path; do
    [ -n "$path" ] && while read -r l; do [ -n "$l" ] && labels+=("$l"); done < <(labels_for "$path")
  done <<<"$changed"
fi
if [ ${#labels[@]} -eq 0 ]; then
  echo "dev-test: nothing changed that a test covers (name labels with -L)"
  exit 0
fi
regex=$(printf '%s\n' "${labels[@]}" | sort -u | paste -sd'|')

start=$SECONDS
[ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"
echo "dev-test: built in $((SECONDS - start)) s; running labels matching $regex"
ctest --test-dir "$build" --output-on-failure -j "$jobs" -L "$regex" -LE image
echo "dev-test: passed in $((SECONDS - start)) s"
