#!/usr/bin/env bash
# Renders deploy/'s plain manifests from the Helm chart (scripts/render_deploy.py
# says which file holds what). --check writes nothing and fails when a
# committed file differs from the rendering.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/render_deploy.py "$@"
