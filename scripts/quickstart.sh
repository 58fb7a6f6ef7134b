#!/usr/bin/env bash
# The README's first command: install what is missing, build, and train the
# example TrainingJob on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/bin/kubeps run deploy/examples/fashion-mnist.yaml
