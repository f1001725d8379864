#!/usr/bin/env bash
# Prepares what bench/gpu_check.sh carries to a GPU machine (which cannot reach a package registry), in
# bench/gpu-debs/ (ignored by git; about 15 MB):
#   *.deb        the Debian -dev packages pulse's build needs beyond a compiler, CMake and python3's torch
#                (headers, pkg-config files, CMake configs), plus the runtime libraries of the shared ones,
#                fetched with `apt-get download` (no install here);
#   prebuilt/    the torch-free GPU binaries built here with nvcc (test_kernels_cuda, kernels_report, CUDA
#                runtime linked statically) and the one shared library they need, so that the GPU kernels
#                can be checked even where the machine has no nvcc or the torch build fails.
# Usage: bench/gpu_debs.sh [BUILD_DIR]   (default build-cuda; configured with -DPULSE_CUDA=ON if absent)
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/gpu-debs
build=${1:-build-cuda}
mkdir -p "$out/prebuilt"

packages=(
  libzstd-dev libxxhash-dev libxxhash0 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  libcpp-httplib-dev libcpp-httplib0.11 nlohmann-json3-dev libtomlplusplus-dev libtomlplusplus3
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 catch2 libcli11-dev libgloo-dev libssl-dev libbrotli-dev
  zlib1g-dev
)
(cd "$out" && rm -f ./*.deb && apt-get download "${packages[@]}")
echo "gpu_debs: $(ls "$out"/*.deb | wc -l) packages in $out"

if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPULSE_CUDA=ON
fi
flock /tmp/pulse-build.lock cmake --build "$build" -j2 --target test_kernels_cuda kernels_report
cp "$build/test_kernels_cuda" "$build/kernels_report" "$out/prebuilt/"
cp -L /lib/x86_64-linux-gnu/libxxhash.so.0 "$out/prebuilt/"
echo "gpu_debs: prebuilt GPU binaries in $out/prebuilt ($(du -sh "$out" | cut -f1) in all)"
