#!/usr/bin/env bash
# Installs every Debian package pulse needs to build, test and run. Idempotent: packages already
# present are not fetched again, and apt-get update runs only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config python3
  libtorch-dev libgloo-dev libopenblas0-pthread
  libsentencepiece-dev sentencepiece
  libzstd-dev zstd libxxhash-dev
  libcpp-httplib-dev nlohmann-json3-dev libtomlplusplus-dev libcli11-dev libspdlog-dev
  libpcre2-dev catch2 bubblewrap gnuplot-nox
  chromium  # headless browser for the report.html layout test (tests/app/test_report_browser.cpp)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
