#!/usr/bin/env bash
# Installs dependencies, builds pulse and runs the main job on the embedded default config.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/pulse run configs/default.toml "$@"
