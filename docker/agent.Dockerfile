# syntax=docker/dockerfile:1
# kubeps-agent: a training worker, on the CPU (OpenBLAS) or on NVIDIA GPUs
# (CUDA, cuBLAS, NCCL). Build from the repository root:
#
#   docker build -f docker/agent.Dockerfile -t kubeps-agent:dev .
#
# Debian vs Ubuntu. The server and operator images are Debian 12; this one
# runs on NVIDIA's CUDA runtime image, which exists for Ubuntu (and RHEL),
# not Debian. A binary built on Debian bookworm does not run there: it needs
# bookworm's sonames and glibc 2.36 (libgrpc++.so.1.51 from libgrpc++1.51,
# libyaml-cpp.so.0.7, ...), while Ubuntu 24.04 ships its own builds
# (64-bit time_t renames such as libgrpc++1.51t64, yaml-cpp 0.8). So the
# build stage is NVIDIA's *devel* image of the same CUDA version and Ubuntu
# release as the runtime stage, installs the same -dev packages from Ubuntu,
# and docker/runtime-packages.sh lists the packages that own the libraries
# the binary actually loads; the runtime stage installs exactly those that
# it lacks (the CUDA, cuBLAS and NCCL ones are already there).
#
# Base images are pinned to a CUDA release (13.0, the version this project's
# CUDA code is developed with) and an Ubuntu release. For byte-for-byte
# reproducible builds pin digests as well, e.g.
#   docker buildx imagetools inspect nvidia/cuda:13.0.1-runtime-ubuntu24.04
# then FROM nvidia/cuda:13.0.1-runtime-ubuntu24.04@sha256:<digest> (not done
# here: digests could not be looked up where this file was written).
# The host needs an NVIDIA driver for CUDA 13 (580 or newer) and the NVIDIA
# container toolkit, which mounts the driver's libcuda into the container.
# Without GPUs (gpusPerWorker: 0) the same image trains on the CPU.

FROM nvidia/cuda:13.0.1-devel-ubuntu24.04 AS build
ARG DEBIAN_FRONTEND=noninteractive
# The build packages of scripts/install-deps.sh, by the same names on Ubuntu
# 24.04; the devel image brings nvcc, cuBLAS and NCCL (libnccl-dev).
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
COPY docker/runtime-packages.sh /usr/local/bin/runtime-packages.sh
# CUDA on, and the ldd check fails the build if CMake did not find CUDA, cuBLAS
# or NCCL (it would otherwise quietly build a CPU-only agent).
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DKUBEPS_BUILD_TESTS=OFF -DKUBEPS_WITH_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="75-real;80-real;90" \
 && cmake --build build --target kubeps-agent \
 && ldd build/bin/kubeps-agent | grep -q libnccl \
 && runtime-packages.sh build/bin/kubeps-agent > /runtime-packages.txt

# The Fashion-MNIST data set, from Debian's package (Ubuntu's archive may not
# carry it): only its files are copied into the agent image.
FROM debian:12.11-slim AS dataset
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends dataset-fashion-mnist \
 && rm -rf /var/lib/apt/lists/*

FROM nvidia/cuda:13.0.1-runtime-ubuntu24.04 AS runtime
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build /runtime-packages.txt /tmp/runtime-packages.txt
RUN missing="" \
 && for package in $(cat /tmp/runtime-packages.txt); do \
      dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' \
        || missing="$missing $package"; \
    done \
 && if [ -n "$missing" ]; then \
      apt-get update && apt-get install -y --no-install-recommends $missing \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && rm /tmp/runtime-packages.txt \
 && groupadd --system --gid 10001 kubeps \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin kubeps
# The job's default dataset.path. To train on other data, mount it (a
# volume, or a PersistentVolumeClaim in the pod template) and set
# spec.dataset.path to the mount point.
COPY --from=dataset /usr/share/datasets/fashion-mnist /usr/share/datasets/fashion-mnist
COPY --from=build /src/build/bin/kubeps-agent /usr/local/bin/kubeps-agent
# Fails the build if a shared library is missing (libcuda.so.1, the
# driver's, is not linked: the CUDA runtime loads it when a GPU is used).
RUN ! ldd /usr/local/bin/kubeps-agent | grep 'not found'
# Numeric, so that Kubernetes' runAsNonRoot can check it.
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/kubeps-agent"]
