#!/usr/bin/env bash
# tests/gpu/prepare.sh — run on the development machine (Debian 12, with its package registry)
# before a GPU run. The GPU machine is bare and offline: it has the CUDA toolkit, CMake, ninja
# and a compiler, nothing else. This gathers what the GPU-only build (-DKVSERVE_GPU_ONLY=ON)
# needs beyond that — spdlog and fmt, OpenSSL's libcrypto, PCRE2, GoogleTest/GoogleMock and
# nlohmann-json — from Debian's packages (`apt-get download`, unpacked with dpkg-deb, never
# installed) into one git-ignored folder that travels with the working tree (the device
# tool's `carry`); tests/gpu/run.sh points CMake at it.
#
#   tests/gpu/prepare.sh [DIR]      (default tests/gpu/prefix; prints its size)
#
# The folder is a sysroot-like tree: DIR/usr/{include,lib/x86_64-linux-gnu,...}. Symlinks are
# resolved into plain files (the working-tree copy need not keep links). The reference
# material the golden and refmodel GPU tests read (../shared/models/stories260K.gguf,
# ../shared/golden and ../shared/refmodels, which do not travel) is copied to DIR/shared.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${1:-$ROOT/tests/gpu/prefix}
PACKAGES="libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libssl-dev libssl3 libpcre2-dev libpcre2-8-0
  libgtest-dev libgmock-dev nlohmann-json3-dev"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2086  # a list of package names
if ! (cd "$work" && apt-get download $PACKAGES >/dev/null 2>&1); then
  apt-get update >/dev/null
  (cd "$work" && apt-get download $PACKAGES >/dev/null)
fi
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
rm -rf "$OUT"
mkdir -p "$OUT"
# Headers, libraries and CMake package files; no documentation, and of the static libraries
# only GoogleTest's (the others are linked shared).
(cd "$work/root" && find usr/include usr/lib usr/share/cmake \( -type f -o -type l \) \
   \( ! -name '*.a' -o -name 'libg[tm]*.a' \)) >"$work/files"
while IFS= read -r f; do
  [ -e "$work/root/$f" ] || continue  # a link to a library of a package not taken (pcre2-16/32)
  mkdir -p "$OUT/$(dirname "$f")"
  cp -L "$work/root/$f" "$OUT/$f"
done <"$work/files"
SHARED=${KVSERVE_SHARED_DIR:-$ROOT/../shared}
# Of the reference models, the llama files the CUDA refmodel test reads (tests/gpu/
# cuda_refmodels_test.cpp, kCudaRefModels): all of them would pass the device tool's 64 MiB.
REFMODELS="llamacpp-refs.jsonl llama-f16.gguf llama-q8_0.gguf llama-q4_0.gguf llama-q4_k_m.gguf llama-q5_k_m.gguf
  llama-q6_k.gguf"
if [ -f "$SHARED/models/stories260K.gguf" ] && [ -d "$SHARED/golden" ] && [ -d "$SHARED/refmodels" ]; then
  mkdir -p "$OUT/shared/models" "$OUT/shared/refmodels"
  cp "$SHARED/models/stories260K.gguf" "$OUT/shared/models/"
  cp -r "$SHARED/golden" "$OUT/shared/"
  for f in $REFMODELS; do cp "$SHARED/refmodels/$f" "$OUT/shared/refmodels/"; done
else
  echo "prepare.sh: no reference material in $SHARED (the GPU run will fail its golden tests)" >&2
fi
echo "prepare.sh: $(du -sh "$OUT" | cut -f1) in $OUT ($(wc -l <"$work/files") files from: $(echo $PACKAGES))"
