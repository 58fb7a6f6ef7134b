# syntax=docker/dockerfile:1
# kubeps-server: the job's scheduler and its parameter-server shards (the
# KUBEPS_ROLE environment variable picks which, see common/node_config.h).
# It carries kubeps-reshard too, for a pod that mounts a job's checkpoint
# volume (it loads no library the server does not; docs/reliability.md).
# Build from the repository root:
#
#   docker build -f docker/server.Dockerfile -t kubeps-server:dev .
#
# Base images are pinned to a Debian 12 (bookworm) point release. For
# byte-for-byte reproducible builds pin their digests as well, e.g.
#   docker buildx imagetools inspect debian:12.11-slim
# then FROM debian:12.11-slim@sha256:<digest> (not done here: digests could
# not be looked up where this file was written, and a wrong one fails the build).

FROM debian:12.11 AS build
ARG DEBIAN_FRONTEND=noninteractive
# The build packages of scripts/install-deps.sh (its test, benchmark and
# data set packages are not needed to build one binary).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config ca-certificates \
      libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev \
      libyaml-cpp-dev nlohmann-json3-dev prometheus-cpp-dev libcpprest-dev libcli11-dev libabsl-dev libssl-dev \
      libopenblas-openmp-dev libdnnl-dev ocl-icd-opencl-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# The folders the root CMakeLists.txt adds (tests and benchmarks are off).
COPY CMakeLists.txt ./
COPY proto proto
COPY common common
COPY api api
COPY operator operator
COPY ps-server ps-server
COPY worker-agent worker-agent
COPY tools tools
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DKUBEPS_BUILD_TESTS=OFF -DKUBEPS_WITH_CUDA=OFF \
 && cmake --build build --target kubeps-server kubeps-reshard

FROM debian:12.11-slim AS runtime
ARG DEBIAN_FRONTEND=noninteractive
# Runtime counterparts of the -dev packages kubeps-server links (gRPC pulls
# in abseil, c-ares, re2 and OpenSSL); tests/integration/test_docker_files.py
# checks this list against the libraries of the binary built on Debian.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libyaml-cpp0.7 libprometheus-cpp-core1.0 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 kubeps \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin kubeps
COPY --from=build /src/build/bin/kubeps-server /usr/local/bin/kubeps-server
COPY --from=build /src/build/bin/kubeps-reshard /usr/local/bin/kubeps-reshard
# Fails the build if a shared library is missing.
RUN ! ldd /usr/local/bin/kubeps-server /usr/local/bin/kubeps-reshard | grep 'not found'
# Numeric, so that Kubernetes' runAsNonRoot can check it.
USER 10001:10001
# gRPC and metrics ports are set by KUBEPS_* variables (the operator names
# the metrics port `metrics`).
ENTRYPOINT ["/usr/local/bin/kubeps-server"]
