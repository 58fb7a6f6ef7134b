#!/usr/bin/env bash
# Configures and builds everything into build/ (binaries in build/bin).
# With ccache installed (install-deps.sh installs it), a second clone of the
# repository on the same machine rebuilds from the cache in a minute: paths
# are hashed relative to the clone, so the clones share one cache.
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" > build-configure.log || {
  cat build-configure.log; exit 1; }
cmake --build build --parallel "$(nproc)"
