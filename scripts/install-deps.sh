#!/usr/bin/env bash
# Installs kvserve's dependencies from Debian 12 packages (run as root).
#   scripts/install-deps.sh          what building and running needs
#   scripts/install-deps.sh --test   also what the end-to-end and deployment tests use: a real
#                                    Prometheus (and promtool), Python gRPC/YAML/ZMQ/msgpack for the
#                                    clients,
#                                    curl, Debian's chromium for the console's browser test, and
#                                    the official OpenAI SDK and playwright-core from the npm
#                                    registry (when npm is installed; otherwise those tests skip)
#   scripts/install-deps.sh --image  also buildah, podman and debootstrap, which build and run the
#                                    CPU image without a Docker engine (tests/deploy/image_test.sh)
#   scripts/install-deps.sh --fuzz   also clang-14 and its libFuzzer/OpenMP runtimes for the
#                                    fuzz build (tests/fuzz/run.sh --build)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y build-essential cmake ninja-build pkg-config \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
  libboost-dev libspdlog-dev prometheus-cpp-dev nlohmann-json3-dev libcli11-dev \
  libopenblas-openmp-dev libdnnl-dev libgtest-dev libbenchmark-dev libssl-dev libpcre2-dev \
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev
if [ "${1:-}" = "--image" ]; then
  apt-get install -y --no-install-recommends buildah podman debootstrap fuse-overlayfs uidmap iproute2 curl openssl python3 \
    python3-grpcio
fi
if [ "${1:-}" = "--fuzz" ]; then
  apt-get install -y --no-install-recommends clang-14 libclang-rt-14-dev libomp-14-dev
fi
if [ "${1:-}" = "--test" ]; then
  apt-get install -y --no-install-recommends prometheus python3-grpcio python3-protobuf python3-yaml python3-zmq python3-msgpack \
    python3-jinja2 curl chromium
  # kubectl for `kubectl kustomize deploy/k8s` (any recent one that is already there will do).
  command -v kubectl >/dev/null 2>&1 || apt-get install -y --no-install-recommends kubernetes-client
  if command -v npm >/dev/null 2>&1; then
    (cd "$(dirname "$0")/../tests/e2e" && npm ci --no-audit --no-fund)
  else
    echo "install-deps: npm not found; the OpenAI SDK end-to-end test will be skipped" >&2
  fi
fi
