#!/usr/bin/env bash
# Installs dependencies, builds everything and runs every Catch2 test through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
