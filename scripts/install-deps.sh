#!/usr/bin/env bash
# Installs what kubeps needs to build and test, from Debian bookworm's
# packages only. Safe to run again: apt skips what is already there.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates curl python3 openssl util-linux
  # RPC and serialisation
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  # manifests, JSON, metrics, Kubernetes REST
  libyaml-cpp-dev nlohmann-json3-dev prometheus-cpp-dev libcpprest-dev libcli11-dev libabsl-dev
  # the job token's constant-time compare
  libssl-dev
  # CPU math: the OpenMP build of OpenBLAS (see CMakeLists.txt for why); oneDNN
  # for the convolutions (the library PyTorch's CPU convolutions run on)
  libopenblas-openmp-dev libdnnl-dev zlib1g-dev
  # dnnl-config.cmake looks for OpenCL (a Recommends of libdnnl-dev, which
  # --no-install-recommends leaves out)
  ocl-icd-opencl-dev
  # tests and benchmarks (faketime: a worker restarted with its clock behind)
  libgtest-dev libgmock-dev libbenchmark-dev clang-format faketime
  # the Python client (python/) and its tests: torch for Debian's python3, and
  # what an offline `pip install --no-build-isolation ./python` into a venv needs
  python3-torch python3-venv python3-pip python3-setuptools python3-wheel
  # the real data set
  dataset-fashion-mnist
  # a real Prometheus (and promtool) for the monitoring tests; kubectl comes with the machine
  prometheus
  # Go's text/template and sprig, to render the Helm chart in tests as Helm does
  golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v2-dev
  # YAML in the Kubernetes tests (rendered manifests)
  python3-yaml
  # nft: the Kubernetes emulator's kubelet enforces NetworkPolicy with nftables
  nftables
)

# The Kubernetes stand-in's API server runs CRDs' CEL rules with Buf's CEL for
# ECMAScript (tests/k8s/cel/), on the machine's Node.js (20.19 or later), or
# Debian's where there is none.
if ! command -v node > /dev/null; then PACKAGES+=(nodejs npm); fi

missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: every Debian package is installed"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# What package-lock.json names, unless it is there already.
cel=tests/k8s/cel
if ! npm ls --prefix "$cel" --all > /dev/null 2>&1; then
  echo "install-deps: installing $cel's npm packages"
  npm ci --prefix "$cel" --no-audit --no-fund --loglevel=error
fi
