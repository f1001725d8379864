#!/usr/bin/env bash
# Prepares what bench/gpu_check.sh carries to a GPU machine (which cannot reach a package registry), in
# bench/gpu-debs/ (ignored by git; about 15 MB):
#   *.deb        the Debian -dev packages pulse's build needs beyond a compiler, CMake and python3's torch
#                (headers, pkg-config files, CMake configs), plus the runtime libraries of the shared ones,
#                fetched with `apt-get download` (no install here);
#   qwen2-tokenizer/  ../shared/models/qwen2-tokenizer, for configs/gpu-0.5b.toml;
#   prebuilt/    the torch-free GPU binaries built here with nvcc (test_kernels_cuda, kernels_report, CUDA
#                runtime linked statically) and the one shared library they need, so that the GPU kernels
#                can be checked even where the machine has no nvcc or the torch build fails.
# Usage: bench/gpu_debs.sh [BUILD_DIR]   (default build-cuda; configured with -DPULSE_CUDA=ON if absent)
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/gpu-debs
build=${1:-build-cuda}
mkdir -p "$out/prebuilt"

# Runtime packages of the -dev ones (libzstd1, libssl3, libfmt9, ...) too: gpu_check.sh extracts EVERY
# carried package into its prefix, installed there or not (a same-named package on the GPU machine may be
# another version: catch2 v3, spdlog, fmt 12), so each -dev symlink (libzstd.so -> libzstd.so.1.5.4) and
# CMake config (fmt-targets.cmake names libfmt.so.9.1.0) finds its own runtime file.
# pkgconf: CMake's FindPkgConfig needs a pkg-config. sentencepiece: the spm_train tool that trains the
# embedded default's tokenizer (model/tokenizer.cpp), not part of a CUDA/PyTorch image.
packages=(
  libzstd-dev libzstd1 libxxhash-dev libxxhash0 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0
  libpcre2-posix3 libcpp-httplib-dev libcpp-httplib0.11 nlohmann-json3-dev libtomlplusplus-dev
  libtomlplusplus3 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 catch2 libcli11-dev libgloo-dev libssl-dev
  libssl3 libbrotli-dev libbrotli1 zlib1g-dev zlib1g pkgconf pkgconf-bin libpkgconf3 sentencepiece
  libsentencepiece0
)
(cd "$out" && rm -f ./*.deb && apt-get download "${packages[@]}")
echo "gpu_debs: $(ls "$out"/*.deb | wc -l) packages in $out"

if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPULSE_CUDA=ON
fi
flock /tmp/pulse-build.lock cmake --build "$build" -j2 --target test_kernels_cuda kernels_report
cp "$build/test_kernels_cuda" "$build/kernels_report" "$out/prebuilt/"
cp -L /lib/x86_64-linux-gnu/libxxhash.so.0 "$out/prebuilt/"
# The real Qwen2 tokenizer of configs/gpu-0.5b.toml (4.4 MB): the GPU machine gets the working tree, not
# ../shared beside it.
rm -rf "$out/qwen2-tokenizer"
cp -r ../shared/models/qwen2-tokenizer "$out/qwen2-tokenizer"
# What the binaries were built from: gpu_check.sh puts it into its JSON and warns when it is not HEAD.
{
  echo "commit $(git rev-parse HEAD)"
  nvcc=$(grep -m1 -E '^(CMAKE_CUDA_COMPILER|PULSE_NVCC):' "$build/CMakeCache.txt" | cut -d= -f2- || true)
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) with ${nvcc:-nvcc}: $("${nvcc:-nvcc}" --version 2>/dev/null | tail -2 | head -1)"
  echo "uncommitted changes at build time:"
  git status --short --untracked-files=no
} >"$out/prebuilt/BUILD_INFO"
echo "gpu_debs: prebuilt GPU binaries in $out/prebuilt ($(du -sh "$out" | cut -f1) in all)"
