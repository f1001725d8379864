#!/usr/bin/env bash
# Compiles every LibTorch unit of build/ against Debian 13's LibTorch 2.6 headers, the CPU set
# (libtorch-dev) and the CUDA set (contrib's libtorch-cuda-dev, with the defines a CUDA LibTorch's targets
# give: USE_C10D_NCCL, and PULSE_NCCL=1 so rl/process_group.cpp's NCCL branch is compiled too, and
# PULSE_TORCH_CUDA=1 for model/cuda_graph_step.cpp's CUDA graphs), on a
# machine with neither: the GPU build cannot rot where no GPU is at hand (issue 30).
#
#   scripts/check-libtorch2.sh [--pch] [SOURCE_SUBSTRING ...]
#
# Fetches the packages with `apt-get download` through a private APT folder (its own sources.list, lists
# and cache under the cache folder; nothing is installed into the system), unpacks them with `dpkg -x`
# beside trixie's fmt, spdlog and gloo headers (what a Debian 13 build would see), then runs
# scripts/check-torch-headers.py --no-pch (each unit on its own includes; --pch force-includes
# <torch/torch.h> first as the precompiled header does) against each set. Configures build/ (cmake only, no
# compile) when build/compile_commands.json is missing.
#
# Environment: PULSE_LIBTORCH2_CACHE (default ~/.cache/pulse/libtorch2.6), PULSE_DEBIAN_MIRROR (default:
# this machine's Debian mirror from /etc/apt/sources.list*, else http://deb.debian.org/debian), CUDA_HOME
# (CUDA toolkit headers for the CUDA set: cuda_runtime_api.h, nccl.h; default /usr/local/cuda), JOBS
# (compiles at once; default the CPU count).
# Exit status: 0 all compile; 1 a unit fails; 2 trixie cannot be reached or the packages not fetched;
# 3 the CUDA set could not be checked (no CUDA toolkit headers).
# Time on the 2-core VM: README "GPU" (a few seconds to fetch, minutes to compile).
set -euo pipefail
cd "$(dirname "$0")/.."
pch=--no-pch
if [ "${1:-}" = --pch ]; then
  pch=""
  shift
fi
cache=${PULSE_LIBTORCH2_CACHE:-$HOME/.cache/pulse/libtorch2.6}
jobs=${JOBS:-$(nproc)}
t0=$(date +%s)

# ---- the mirror and the private APT folder ------------------------------------------------------------
mirror=${PULSE_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  # deb822 (URIs: ...) or one-line (deb URI suite ...) entries; the main archive, not -security.
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
    grep -v '^[[:space:]]*#' | grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -1 | tr -d ' ' || true)
  mirror=${mirror:-http://deb.debian.org/debian}
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || keyring=/usr/share/keyrings/debian-archive-trixie-automatic.gpg
if [ ! -f "$keyring" ]; then
  echo "check-libtorch2: no Debian archive keyring ($keyring): install debian-archive-keyring" >&2
  exit 2
fi
apt_dir=$cache/apt
mkdir -p "$apt_dir/state/lists/partial" "$apt_dir/archives/partial" "$apt_dir/etc" "$cache/debs"
echo "deb [signed-by=$keyring] $mirror trixie main contrib" >"$apt_dir/etc/sources.list"
apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/etc/sources.list" -o "Dir::Etc::sourceparts=$apt_dir/etc/none"
  -o "Dir::Etc::preferences=$apt_dir/etc/none" -o "Dir::Etc::preferencesparts=$apt_dir/etc/none"
  -o "Dir::State=$apt_dir/state" -o "Dir::State::status=/var/lib/dpkg/status" -o "Dir::Cache=$apt_dir" -o "Dir::Cache::archives=$apt_dir/archives"
  -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)")
if ! timeout 300 apt-get "${apt_opts[@]}" -q update >"$apt_dir/update.log" 2>&1 ||
  grep -qE '^(E:|W: Failed to fetch)' "$apt_dir/update.log"; then
  echo "check-libtorch2: cannot reach Debian 13 (trixie) at $mirror: apt-get update failed:" >&2
  tail -5 "$apt_dir/update.log" >&2
  echo "check-libtorch2: set PULSE_DEBIAN_MIRROR to a reachable Debian mirror; nothing was checked" >&2
  exit 2
fi

# ---- the packages: each header set with trixie's fmt, spdlog and gloo ------------------------------------
common=(libfmt-dev libspdlog-dev)
cpu_pkgs=(libtorch-dev libgloo-dev "${common[@]}")
cuda_pkgs=(libtorch-cuda-dev libgloo-cuda-dev "${common[@]}")
if ! (cd "$cache/debs" && timeout 600 apt-get "${apt_opts[@]}" -q download "${cpu_pkgs[@]}" libtorch-cuda-dev \
  libgloo-cuda-dev >"$apt_dir/download.log" 2>&1); then
  echo "check-libtorch2: apt-get download from trixie failed:" >&2
  tail -5 "$apt_dir/download.log" >&2
  exit 2
fi

# unpack SET PACKAGE...: dpkg -x the newest downloaded .deb of each package into $cache/SET (again only when
# the set of .debs changed: SET.stamp names them).
unpack() {
  local set=$1 debs=() p d
  shift
  for p in "$@"; do
    # shellcheck disable=SC2012  # Debian's .deb names: no spaces or newlines
    d=$(ls -t "$cache/debs/${p}_"*.deb 2>/dev/null | head -1)
    if [ -z "$d" ]; then
      echo "check-libtorch2: $p was not downloaded" >&2
      exit 2
    fi
    debs+=("$d")
  done
  if [ "$(cat "$cache/$set.stamp" 2>/dev/null)" != "${debs[*]}" ]; then
    rm -rf "${cache:?}/$set" "$cache/$set.stamp"
    for d in "${debs[@]}"; do dpkg -x "$d" "$cache/$set"; done
    echo "${debs[*]}" >"$cache/$set.stamp"
  fi
  for d in "${debs[@]}"; do echo "  $(basename "$d")"; done
}
echo "check-libtorch2: Debian 13 packages from $mirror (fetched in $(($(date +%s) - t0)) s):"
unpack cpu "${cpu_pkgs[@]}"
unpack cuda "${cuda_pkgs[@]}"

# ---- compile ----------------------------------------------------------------------------------------------
if [ ! -f build/compile_commands.json ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
status=0
t1=$(date +%s)
echo "check-libtorch2: CPU set (libtorch-dev)"
python3 scripts/check-torch-headers.py $pch -j"$jobs" "$cache/cpu/usr/include" "$@" >"$cache/cpu.log" 2>&1 || status=1
grep -v '^ok ' "$cache/cpu.log" || true
t2=$(date +%s)
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ -f "$cuda_home/include/cuda_runtime_api.h" ] && [ -f "$cuda_home/include/nccl.h" ]; then
  echo "check-libtorch2: CUDA set (libtorch-cuda-dev, USE_C10D_NCCL, PULSE_NCCL=1, CUDA headers of $cuda_home)"
  python3 scripts/check-torch-headers.py $pch -j"$jobs" --cxxflag=-DUSE_C10D_NCCL --cxxflag=-DPULSE_NCCL=1 --cxxflag=-DPULSE_TORCH_CUDA=1 \
    --cxxflag=-isystem"$cuda_home/include" "$cache/cuda/usr/include" "$@" >"$cache/cuda.log" 2>&1 || status=1
  grep -v '^ok ' "$cache/cuda.log" || true
else
  echo "check-libtorch2: CUDA set NOT checked: no cuda_runtime_api.h and nccl.h under $cuda_home/include" \
    "(set CUDA_HOME to a CUDA toolkit with NCCL's header)" >&2
  [ "$status" = 0 ] && status=3
fi
t3=$(date +%s)
echo "check-libtorch2: fetch $((t1 - t0)) s, CPU set $((t2 - t1)) s, CUDA set $((t3 - t2)) s;" \
  "logs in $cache/{cpu,cuda}.log; exit $status"
exit $status
