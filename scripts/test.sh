#!/usr/bin/env bash
# The README's second command (and CI's): install what is missing, build,
# and run the whole test suite: unit tests, then integration tests that run
# real jobs on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
# The tests' scratch under $TMPDIR (run folders, checkpoints, job sockets) goes
# in one folder that goes when the suite ends: runs one after another must not
# fill the disk. Under /tmp, whatever $TMPDIR was: a socket's path stays short.
# KUBEPS_KEEP_TEST_RUNS=1 keeps it to look into a failure.
TMPDIR=$(mktemp -d /tmp/kubeps-tests-XXXXXX)
export TMPDIR
if [[ "${KUBEPS_KEEP_TEST_RUNS:-}" == 1 ]]; then
  echo "the tests' scratch stays in $TMPDIR"
else
  trap 'rm -rf "$TMPDIR" || true' EXIT
fi
ctest --output-on-failure -L unit -j "$(nproc)"
# Shared by weight: a test that computes takes two of the three slots (tests/CMakeLists.txt).
ctest --output-on-failure -L integration -j 3
