#!/usr/bin/env bash
# Configures and builds everything into build/ (binaries in build/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > build-configure.log || {
  cat build-configure.log; exit 1; }
cmake --build build --parallel "$(nproc)"
