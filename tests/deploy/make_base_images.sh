#!/usr/bin/env bash
# Makes the base images the Dockerfile's cpu target starts from, debian:12 and debian:12-slim,
# from Debian's own packages (debootstrap --variant=minbase, imported with podman): no registry
# is reachable here (../shared/docs/BUILD-NOTES.md, "Containers"). Does nothing when both exist.
# image_test.sh calls it (CI's image stage; docs/ci.md says why not beside stage 1's build).
# A lock makes a second caller wait for the first rather than debootstrap twice.
#
# Needs debootstrap and podman (scripts/install-deps.sh --image). Exit 0 when the images exist.
set -euo pipefail
have_image() { buildah inspect --type image "$1" >/dev/null 2>&1; }
exec 9>/tmp/kvserve-base-images.lock
flock 9
if have_image docker.io/library/debian:12 && have_image docker.io/library/debian:12-slim; then
  exit 0
fi
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
t=$SECONDS
debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -n 20 "$work/debootstrap.log"; echo "FAIL: debootstrap from $mirror"; exit 1; }
tar -C "$work/rootfs" -c . | podman import - docker.io/library/debian:12 >/dev/null
podman tag docker.io/library/debian:12 docker.io/library/debian:12-slim
echo "base image debian:12 made with debootstrap ($mirror) in $((SECONDS - t)) s"
