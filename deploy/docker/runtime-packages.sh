#!/usr/bin/env bash
# Prints the packages that own the shared libraries BINARY loads, one per line, sorted: what a
# runtime image must install to run it (the Dockerfile's build stages write this list and the
# runtime stages install exactly it). ldd finds the libraries, `dpkg -S` their packages; so
# the list is right for whichever distribution built the binary (Debian 12 for the cpu image,
# Ubuntu 24.04 with NVIDIA's CUDA repository for the cuda image).
#
# Libraries of the NVIDIA driver (libcuda.so.1, libnvidia-*) are skipped: the NVIDIA container
# runtime mounts them from the host. Any other library that ldd cannot find, or that no
# package owns, is an error (exit 1), so an image build stops here rather than at run time.
#
# RUNTIME_PACKAGES_IGNORE (a regex of library paths) leaves libraries out that the runtime
# image provides by other means; the deploy test sets it to ^/usr/local/cuda, where machines
# with NVIDIA's tarball toolkit keep libraries no package owns.
#
# LIBRARY arguments name libraries the binary opens with dlopen, which ldd cannot see (the CUDA
# build's cuBLAS, engine/backend/cuda/cuda_blas_loader.cpp); their packages join the list.
#
#   runtime-packages.sh BINARY [LIBRARY...]
set -euo pipefail
binary=${1:?usage: runtime-packages.sh BINARY [LIBRARY...]}
shift
[[ -x "$binary" ]] || { echo "runtime-packages.sh: '$binary' is not an executable" >&2; exit 1; }

driver_lib='^(libcuda\.so|libnvidia-|libnvcuvid\.so)'
status=0

# The libraries: "name => /path (addr)", "/lib64/ld-linux-x86-64.so.2 (addr)" (the loader),
# "name => not found", "linux-vdso.so.1 (addr)" (no file).
libs=()
while read -r first second third _; do
  if [[ "$second" == "=>" && "$third" == "not" ]]; then
    [[ "$first" =~ $driver_lib ]] && continue
    echo "runtime-packages.sh: $binary needs $first, which ldd cannot find" >&2
    status=1
  elif [[ "$second" == "=>" && "$third" == /* ]]; then
    [[ -n "${RUNTIME_PACKAGES_IGNORE:-}" && "$third" =~ $RUNTIME_PACKAGES_IGNORE ]] && continue
    [[ "$first" =~ $driver_lib ]] || libs+=("$third")
  elif [[ "$first" == /* ]]; then
    libs+=("$first")
  fi
done < <(ldd "$binary")
for lib in "$@"; do
  [[ -e "$lib" ]] || { echo "runtime-packages.sh: $lib (opened by $binary) does not exist" >&2; status=1; continue; }
  libs+=("$lib")
done

# dpkg records a file under the path its package shipped, which ldd may not print (merged
# /usr, symlinks such as /usr/local/cuda): try the path, its target, and their /lib <-> /usr/lib
# twins, all in one dpkg query (it is slow per call).
candidates() {
  local path=$1 real
  real=$(readlink -f "$path")
  printf '%s\n' "$path" "$real" "${path/#\/usr\/lib\//\/lib\/}" "${real/#\/usr\/lib\//\/lib\/}" \
                "${path/#\/lib\//\/usr\/lib\/}" "${real/#\/lib\//\/usr\/lib\/}"
}
declare -A owner=()
mapfile -t all < <(for lib in "${libs[@]}"; do candidates "$lib"; done | sort -u)
while IFS= read -r line; do
  [[ "$line" == diversion* || "$line" != *": /"* ]] && continue
  owner["${line#*: }"]=${line%%: /*}   # "/path" -> "pkg1:amd64, pkg2"
done < <(dpkg -S "${all[@]}" 2>/dev/null || true)

packages=()
for lib in "${libs[@]}"; do
  found=""
  while IFS= read -r candidate; do
    if [[ -n "${owner[$candidate]:-}" ]]; then found=${owner[$candidate]}; break; fi
  done < <(candidates "$lib")
  if [[ -z "$found" ]]; then
    echo "runtime-packages.sh: no package owns $lib (needed by $binary)" >&2
    status=1
    continue
  fi
  for name in ${found//,/ }; do packages+=("${name%%:*}"); done
done

[[ $status -eq 0 ]] || exit 1
printf '%s\n' "${packages[@]}" | sort -u
