# syntax=docker/dockerfile:1
# kvserve images: two targets from one file (BuildKit builds only the stages a target needs).
#
#   cuda (default)  built on nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04,
#                   runs on nvidia/cuda:${CUDA_VERSION}-base-ubuntu24.04 + the libraries it links
#   cpu             built on debian:12, runs on debian:12-slim
#
#   docker build -t kvserve:cuda .
#   docker build --target cpu -t kvserve:cpu .
#   docker run --rm --gpus all -p 8080:8080 -p 50051:50051 -v /srv/models:/models:ro \
#       -e KVSERVE_MODEL=/models/<file>.gguf kvserve:cuda
# deploy/README.md covers running, Compose, Kubernetes and sizing.
#
# Why Ubuntu 24.04 under the CUDA target: NVIDIA publishes nvidia/cuda for Ubuntu, UBI and
# Rocky Linux only, not Debian. The project is built and tested with Debian 12's packages
# (scripts/install-deps.sh, which both build stages run). Ubuntu 24.04 (noble) has the same
# package names and, for the two libraries the build is most sensitive to, the same versions:
# gRPC 1.51 and Protobuf 3.21 (protobuf_generate without a CMake config). Its CMake 3.28 meets
# our 3.25 minimum. Ubuntu 22.04 does not fit: CMake 3.22, gRPC 1.30, Protobuf 3.12. The rest
# are newer releases on noble (GCC 13, Boost 1.83, spdlog 1.12 over fmt 9, CLI11 2.4, OpenBLAS
# 0.3.26); GCC 13 is a supported host compiler of CUDA 13.0's nvcc.
#
# Why the "base" flavour at run time: nvidia/cuda:*-runtime adds every CUDA math library and
# NCCL (gigabytes); kvserve links cudart and cuBLAS only. The base image has cudart and
# NVIDIA's apt repository, which supplies libcublas-13-0.
#
# Runtime libraries: each build stage lists the packages that own the shared libraries the
# binary loads (deploy/docker/runtime-packages.sh: ldd + dpkg -S), and its runtime stage
# installs exactly that list, then fails the build if ldd still misses a library or the binary
# does not start (deploy/docker/install-runtime.sh). For today's binary on Debian 12 the list is
#   libabsl20220623 libc-ares2 libc6 libfmt9 libgcc-s1 libgomp1 libgrpc++1.51 libgrpc29
#   libpcre2-8-0 libprometheus-cpp-core1.0 libprotobuf32 libre2-9 libspdlog1.10 libssl3
#   libstdc++6 libzmq5 zlib1g
# (OpenBLAS joins by itself once the backend calls it); the CUDA build adds cuda-cudart-13-0
# and libcublas-13-0 (cuBLAS is opened with dlopen on first use, so its build stage names the
# library to runtime-packages.sh). No compilers, no -dev packages.

ARG CUDA_VERSION=13.0.2

# ---- cpu: build on Debian 12 ----------------------------------------------------------------
FROM debian:12 AS build-cpu
# The packages of the README's build (scripts/install-deps.sh, without the --test tools).
COPY scripts/install-deps.sh /tmp/
RUN bash /tmp/install-deps.sh && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the build reads (tests and benchmarks are off), so editing docs keeps the cache.
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY common/ common/
COPY cache/ cache/
COPY engine/ engine/
COPY proto/ proto/
COPY server/ server/
COPY tools/ tools/
COPY cli/ cli/
COPY deploy/docker/runtime-packages.sh /usr/local/bin/
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSERVE_CUDA=OFF \
      -DKVSERVE_BUILD_TESTS=OFF -DKVSERVE_BUILD_BENCH=OFF \
    && cmake --build /build --target kvserve \
    && install -D -m 0755 /build/kvserve /out/kvserve \
    && bash /usr/local/bin/runtime-packages.sh /out/kvserve | tee /out/runtime-packages.txt

# ---- cpu: run on Debian 12 slim -------------------------------------------------------------
FROM debian:12-slim AS cpu
COPY --from=build-cpu /out/kvserve /usr/local/bin/kvserve
COPY --from=build-cpu /out/runtime-packages.txt /tmp/kvserve-setup/
COPY deploy/docker/install-runtime.sh /tmp/kvserve-setup/
RUN bash /tmp/kvserve-setup/install-runtime.sh /tmp/kvserve-setup/runtime-packages.txt \
    && rm -rf /tmp/kvserve-setup
# Every `kvserve serve` flag also reads KVSERVE_<FLAG>; mount the model directory at /models.
ENV KVSERVE_MODEL=/models/model.gguf \
    KVSERVE_HOST=0.0.0.0 \
    KVSERVE_HTTP_PORT=8080 \
    KVSERVE_GRPC_PORT=50051
USER 10001:10001
EXPOSE 8080 50051
# `kvserve healthcheck`: GET /health on the server's port, over HTTPS when KVSERVE_TLS_CERT_FILE is set.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 CMD ["kvserve", "healthcheck"]
ENTRYPOINT ["kvserve"]
CMD ["serve"]

# ---- cuda: build on the CUDA devel image ----------------------------------------------------
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04 AS build-cuda
# GPU generations to compile kernels for (sm_80 A100, sm_90 H100/H200), as CMakeLists.txt.
ARG CUDA_ARCHITECTURES="80;90"
# The same package names on Ubuntu 24.04 (see the top of this file).
COPY scripts/install-deps.sh /tmp/
RUN bash /tmp/install-deps.sh && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY common/ common/
COPY cache/ cache/
COPY engine/ engine/
COPY proto/ proto/
COPY server/ server/
COPY tools/ tools/
COPY cli/ cli/
COPY deploy/docker/runtime-packages.sh /usr/local/bin/
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSERVE_CUDA=ON \
      -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
      "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}" \
      -DKVSERVE_BUILD_TESTS=OFF -DKVSERVE_BUILD_BENCH=OFF \
    && cmake --build /build --target kvserve \
    && install -D -m 0755 /build/kvserve /out/kvserve \
    && bash /usr/local/bin/runtime-packages.sh /out/kvserve "$(readlink -f /usr/local/cuda/lib64/libcublas.so)" \
       | tee /out/runtime-packages.txt

# ---- cuda: run on the CUDA base image (the default target) ----------------------------------
FROM nvidia/cuda:${CUDA_VERSION}-base-ubuntu24.04 AS cuda
COPY --from=build-cuda /out/kvserve /usr/local/bin/kvserve
COPY --from=build-cuda /out/runtime-packages.txt /tmp/kvserve-setup/
COPY deploy/docker/install-runtime.sh /tmp/kvserve-setup/
RUN bash /tmp/kvserve-setup/install-runtime.sh /tmp/kvserve-setup/runtime-packages.txt \
    && rm -rf /tmp/kvserve-setup
ENV KVSERVE_MODEL=/models/model.gguf \
    KVSERVE_HOST=0.0.0.0 \
    KVSERVE_HTTP_PORT=8080 \
    KVSERVE_GRPC_PORT=50051
USER 10001:10001
EXPOSE 8080 50051
# `kvserve healthcheck`: GET /health on the server's port, over HTTPS when KVSERVE_TLS_CERT_FILE is set.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 CMD ["kvserve", "healthcheck"]
ENTRYPOINT ["kvserve"]
CMD ["serve"]
