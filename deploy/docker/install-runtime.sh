#!/usr/bin/env bash
# Set-up shared by the Dockerfile's runtime stages (cpu and cuda), run as root while building:
#   install-runtime.sh PACKAGE_LIST
# 1. installs the packages in PACKAGE_LIST (runtime-packages.sh's output in the build stage:
#    the owners of the shared libraries kvserve loads; no compilers, no -dev packages),
# 2. adds the unprivileged user kvserve (uid/gid 10001) and the /models mount point,
# 3. checks that every library resolves (the NVIDIA driver's excepted: the container runtime
#    mounts it from the host) and that the binary starts (`kvserve --help`).
set -euo pipefail
list=${1:?usage: install-runtime.sh PACKAGE_LIST}
export DEBIAN_FRONTEND=noninteractive

apt-get update
# --no-upgrade: what the base image already has (libc6, the CUDA runtime) stays as the image pinned it.
xargs -r -a "$list" apt-get install -y --no-install-recommends --no-upgrade
apt-get clean
rm -rf /var/lib/apt/lists/*

groupadd --gid 10001 kvserve
useradd --uid 10001 --gid kvserve --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin kvserve
mkdir -p /models

if ldd /usr/local/bin/kvserve | grep -v -E 'libcuda\.so|libnvidia-' | grep 'not found'; then
  echo "install-runtime.sh: kvserve still misses the libraries above" >&2
  exit 1
fi
/usr/local/bin/kvserve --help >/dev/null
