#!/usr/bin/env bash
# bench/gpu_check.sh: the GPU check of issues 13, 30 and 33 in one run (<= 9 minutes) on a machine with an
# NVIDIA GPU and python3's torch (and transformers, for gen_hf); writes one JSON file with everything it
# found (a "summary" block first) and one tar holding it with every log and run record.
#
#   bench/gpu_check.sh [RESULT_JSON]     default: $OUT/gpu_check.json when $OUT is set, else
#                                        runs/gpu_check.json; the tar is RESULT_JSON with .tar.gz
#
# Before: bench/gpu_debs.sh (after the last commit: the prebuilt binaries record theirs) on the machine
# with nvcc and a package mirror, then carry the working tree plus bench/gpu-debs/ (git-ignored, ~16 MB:
# name it in the run tool's `carry`) to the GPU machine. No environment variable is needed.
# PULSE_GPU_CHECK_ELEMENTS (default 20 M) sets the benchmark size, PULSE_GPU_CHECK_BUDGET (default 520 s)
# the time budget: every step gets at most what is left of it, a step that does not fit is recorded as
# skipped (summary.skipped), and the JSON and tar are written inside 9 minutes.
#
# Steps, in this order after bench: gen_pulse, gen_hf, speed (issue 33, open), then grpo05, grpo05_verify,
# device_tests, grpo05_lr3e-6, grpo, grpo_verify, grpo_cpu. Each under a time limit; a failed step is
# recorded and the rest still run where they can:
#   env       nvidia-smi, nvcc, cmake, ninja, g++, python3's torch (version, CUDA, cmake_prefix_path)
#   prebuilt  bench/gpu-debs/prebuilt/ (made by bench/gpu_debs.sh on a machine with nvcc): the GPU tests
#             (GPU vs CPU reference, bit for bit) and kernels_report --json (each CUDA kernel vs a same-run
#             device-to-device cudaMemcpy); needs no compiler here
#   debs      EVERY carried bench/gpu-debs/*.deb, `dpkg -x` into a prefix that CMake, pkg-config, the
#             compiler and the loader are pointed at (a same-named package installed here may be another
#             version: catch2 v3, spdlog, fmt 12 in torch's include folder); bench/gpu-debs/env.sh then
#             gives a later shell the same PATH/LD_LIBRARY_PATH/CMAKE_PREFIX_PATH, and bench/gpu-debs/bin
#             (linked into /usr/local/bin when writable) holds spm_train for runs started after the script
#   build     CMake against torch's LibTorch (torch.utils.cmake_prefix_path) with -DPULSE_CUDA=ON, ninja
#             -k 0 (one failing unit still reports every other): test_kernels_cuda and kernels_report
#             first, then pulse; `pulse --version` (LibTorch and CUDA it runs with)
#   tests     build-gpu/test_kernels_cuda
#   bench     build-gpu/pulse bench kernels --json
#   grpo05    a few GRPO steps of configs/gpu-0.5b.toml (Qwen2.5-0.5B shape, BF16, two workers on the
#             GPU, lr 1e-6; SFT shortened to 20 steps, no Pass@1): per-step generate/train/encode/
#             transfer/apply/load ms, sync as a fraction of the step, patch bytes vs dense BF16, changed
#             fraction, bit_identical at every step (summary.grpo_0.5b)
#   grpo05_verify  offline root-hash check of its weights (diff, apply, verify; the verify time is the
#             host hash of the whole model, process start included:
#             summary.grpo_0.5b.verify_whole_model_host_ms)
#   grpo05_lr3e-6  the same at optimizer.lr = 3e-6 (3 GRPO steps), when >= 150 s are left after device_tests
#   speed     kernels_report --gpu-elements 1 G --model qwen2.5-7b (issue 33: hash, diff, apply at real
#             sizes; the 7B-shaped sync stages; "speed_issue33" in the JSON)
#   gen_pulse build-gpu/pulse bench generate --json --device cuda: generation tokens/s of a random-init
#             0.5B-shaped model (configs/qwen2.5-0.5b.json, BF16, temperature 1) at batch 64 and 384
#             (PULSE_GPU_CHECK_GEN_BATCHES), 64-token prompts, 256 new tokens, per decode path (eager,
#             static, cuda_graph), when >= 100 s are left
#   gen_hf    python3 bench/hf_generate_peer.py with the same settings: Hugging Face transformers' generate
#             (dynamic and static cache) on the same GPU, when >= 100 s are left and python3 has torch and
#             transformers; summary.generate_issue33 sets the two side by side (issue 33: pulse >= 2x HF)
#   grpo      a few GRPO steps of the embedded default on the GPU: configs/default.toml shortened (60 SFT
#             steps, 4 GRPO steps, no Pass@1) with --set run.device=cuda; per-step times, bit_identical
#             (every worker's root hash == the trainer's), worker versions and how many worker syncs
#             patched the model on the GPU / copied it whole (device_patch_loads, full_copy_loads) go
#             into the JSON
#   grpo_verify  offline root-hash check of the GPU run's weights: pulse sync diff (checkpoint 0 -> last),
#             apply, verify (host code, exit 0 = the applied weights are the patch's target)
#             PULSE_GPU_CHECK_GRPO_PULSE (default build-gpu/pulse) and PULSE_GPU_CHECK_GRPO_DEVICE (default
#             cuda) let a machine without a GPU try this path: =build/pulse and =cpu
#   device_tests  when >= 170 s are left after grpo05: build test_model, test_rl and test_app and run their
#             GPU tests (test_model "[gpu]": CUDA-graph decoding == the static path bit for bit, and
#             llama2.c's greedy continuation of stories260k; test_rl "[gpu]": GRPO, MasterAdam, DiLoCo/PULSELoCo rounds on CUDA; test_app "[gpu]": a tiny
#             run on cuda + resume, worker patches applied on the GPU against the host replica, the GPU
#             encoder against the CPU encode)
#   grpo_cpu  the same run as grpo with run.device=cpu, for the step-time comparison (when >= 90 s are
#             left); grpo and grpo_cpu (the tiny default) come last: the 0.5B run is the one that matters
# Without a GPU it says so in the JSON ("gpu": false, with the reason) and exits 0 after the steps that
# need none (environment, the prebuilt tests, which then skip with a message).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
start=$(date +%s)
budget=${PULSE_GPU_CHECK_BUDGET:-520}
result=${1:-${OUT:+$OUT/gpu_check.json}}
result=${result:-runs/gpu_check.json}
mkdir -p "$(dirname "$result")"
work=$(mktemp -d /tmp/gpu_check.XXXXXX)
trap 'rm -rf "$work"' EXIT
elements=${PULSE_GPU_CHECK_ELEMENTS:-20000000}

left() { echo $((budget - ($(date +%s) - start))); }

# step NAME LIMIT_S CMD...: runs CMD with a timeout (at most what is left of the budget), logs to
# $work/NAME.log, records rc and seconds in $work/NAME.step.
step() {
  local name=$1 limit=$2
  shift 2
  local l
  l=$(left)
  if [ "$l" -lt 10 ]; then
    echo "124 0 out-of-budget" >"$work/$name.step"
    echo "gpu_check: $name skipped (time budget spent)" >&2
    return 124
  fi
  [ "$limit" -gt $((l - 5)) ] && limit=$((l - 5))
  local t0 rc
  t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >"$work/$name.log" 2>&1
  rc=$?
  echo "$rc $(($(date +%s) - t0)) ran" >"$work/$name.step"
  echo "gpu_check: $name rc=$rc ($(($(date +%s) - t0)) s)" >&2
  return $rc
}

skip() {  # skip NAME REASON
  echo "0 0 skipped" >"$work/$1.step"
  echo "$2" >"$work/$1.log"
  echo "gpu_check: $1 skipped: $2" >&2
}

# ---- env -----------------------------------------------------------------------------------------
gpu=false
gpu_reason=""
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >"$work/nvidia-smi-L.txt" 2>&1 && grep -q GPU "$work/nvidia-smi-L.txt"; then
  gpu=true
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader >"$work/gpu.txt" 2>&1 ||
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$work/gpu.txt" 2>&1
else
  gpu_reason="no NVIDIA GPU: $(command -v nvidia-smi >/dev/null 2>&1 && head -c 300 "$work/nvidia-smi-L.txt" || echo 'nvidia-smi not found')"
fi
# nvcc: on PATH, in the usual toolkit place, or from pip's nvidia-cuda-nvcc wheel beside torch.
nvcc_bin=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } ||
  python3 -c 'import os, nvidia.cuda_nvcc as m; p = os.path.join(list(m.__path__)[0], "bin", "nvcc"); print(p if os.access(p, os.X_OK) else "")' 2>/dev/null ||
  true)
python3 - >"$work/torch.json" 2>"$work/torch.err" <<'PY' || true
import json, os
try:
    import torch
    print(json.dumps({"version": torch.__version__, "cuda": torch.version.cuda,
                      "cuda_available": torch.cuda.is_available(),
                      "cmake_prefix_path": torch.utils.cmake_prefix_path,
                      "include_dir": os.path.join(os.path.dirname(torch.__file__), "include"),
                      "cxx11_abi": bool(torch.compiled_with_cxx11_abi())}))
except Exception as e:  # noqa: BLE001
    print(json.dumps({"error": repr(e)}))
PY
torch_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2],""))' "$work/torch.json" "$1" 2>/dev/null || true; }
torch_prefix=$(torch_field cmake_prefix_path)
torch_include=$(torch_field include_dir)
{
  echo "nvcc: ${nvcc_bin:-none} $([ -n "$nvcc_bin" ] && "$nvcc_bin" --version | tail -2 | head -1)"
  echo "cmake: $(cmake --version 2>/dev/null | head -1 || echo none)"
  echo "ninja: $(ninja --version 2>/dev/null || echo none)"
  echo "g++: $(g++ --version 2>/dev/null | head -1 || echo none)"
  echo "cores: $(nproc)"
} >"$work/tools.txt"

# ---- prebuilt GPU binaries (carried) ------------------------------------------------------------------
pre=bench/gpu-debs/prebuilt
# Which commit the prebuilt binaries were built from (bench/gpu_debs.sh writes it): stale binaries test
# old kernels.
if [ -f "$pre/BUILD_INFO" ]; then
  cp "$pre/BUILD_INFO" "$work/prebuilt_info.txt"
  head=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  if ! grep -q "^commit $head" "$pre/BUILD_INFO"; then
    echo "prebuilt binaries are NOT from HEAD $head: rerun bench/gpu_debs.sh before carrying" >>"$work/prebuilt_info.txt"
    echo "gpu_check: warning: $pre was not built from HEAD $head (rerun bench/gpu_debs.sh)" >&2
  fi
elif [ -d "$pre" ]; then
  echo "no $pre/BUILD_INFO: built before bench/gpu_debs.sh recorded the commit (stale?)" >"$work/prebuilt_info.txt"
fi
if [ -x "$pre/test_kernels_cuda" ]; then
  step prebuilt_tests 150 env LD_LIBRARY_PATH="$root/$pre:${LD_LIBRARY_PATH:-}" "$pre/test_kernels_cuda"
  if $gpu; then
    step prebuilt_bench 150 env LD_LIBRARY_PATH="$root/$pre:${LD_LIBRARY_PATH:-}" "$pre/kernels_report" --json \
      --elements "$elements" --no-cpu
  else
    skip prebuilt_bench "$gpu_reason"
  fi
else
  skip prebuilt_tests "no $pre (run bench/gpu_debs.sh on a machine with nvcc and carry bench/gpu-debs)"
  skip prebuilt_bench "no $pre"
fi

# ---- carried -dev packages -------------------------------------------------------------------------------
prefix="$root/bench/gpu-debs/root"
extracted=0
if ls bench/gpu-debs/*.deb >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1; then
  mkdir -p "$prefix"
  skipped=""
  # Every carried package, installed here or not: an installed package of the same name may be another
  # version (the image's catch2 v3 has no catch2/catch.hpp; its spdlog expects another fmt), and a -dev
  # package needs its own runtime package's files (fmt-targets.cmake names libfmt.so.9.1.0).
  for deb in bench/gpu-debs/*.deb; do
    pkg=$(dpkg-deb -f "$deb" Package)
    # torch's ProcessGroupGloo.hpp goes with the gloo headers torch ships, when it ships them.
    if [ "$pkg" = libgloo-dev ] && [ -f "$torch_include/gloo/rendezvous/store.h" ]; then
      skipped="$skipped $pkg(torch's own gloo headers)"
      continue
    fi
    dpkg -x "$deb" "$prefix" && extracted=$((extracted + 1))
  done
  # pkg-config files name prefix=/usr (some exec_prefix=/usr too): point them at the extracted tree.
  find "$prefix" -name '*.pc' -exec sed -i -e "s#^prefix=/usr#prefix=$prefix/usr#" \
    -e "s#^exec_prefix=/usr#exec_prefix=$prefix/usr#" {} + 2>/dev/null || true
  # A -dev package's lib*.so names its own version's runtime file (libzstd.so -> libzstd.so.1.5.4); should
  # its runtime package be missing from the carried set, the link dangles and -lzstd fails: point it at
  # this system's library of the same soname (libzstd.so.1).
  repointed=""
  while IFS= read -r link; do
    target=$(readlink "$link")
    soname=$(basename "$target" | sed -E 's/^(lib.*\.so\.[0-9]+).*/\1/')
    for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
      if [ -e "$d/$soname" ]; then
        ln -sf "$d/$soname" "$link" && repointed="$repointed $(basename "$link")->$d/$soname"
        break
      fi
    done
  done < <(find "$prefix" -name 'lib*.so' -xtype l 2>/dev/null)
  {
    echo "extracted $extracted packages into $prefix"
    echo "not extracted:${skipped:- none}"
    echo "dangling -dev links pointed at this system's libraries:${repointed:- none}"
    echo "still dangling: $(find "$prefix" -name 'lib*.so' -xtype l 2>/dev/null | tr '\n' ' ')"
  } >"$work/debs.log"
  echo "0 0 ran" >"$work/debs.step"
else
  skip debs "no bench/gpu-debs/*.deb or no dpkg"
fi
arch_lib="$prefix/usr/lib/x86_64-linux-gnu"
# The carried libraries and headers come first: they are the versions pulse's build was written against.
export PKG_CONFIG_PATH="$arch_lib/pkgconfig:$prefix/usr/share/pkgconfig:${PKG_CONFIG_PATH:-}"
export CPATH="$prefix/usr/include:${CPATH:-}"
export LIBRARY_PATH="$arch_lib:${LIBRARY_PATH:-}"
export LD_LIBRARY_PATH="$arch_lib:${LD_LIBRARY_PATH:-}"
export CMAKE_PREFIX_PATH="$prefix/usr${torch_prefix:+;$torch_prefix}${CMAKE_PREFIX_PATH:+;$CMAKE_PREFIX_PATH}"
# Tools for this script and for runs started after it (pulse spawns spm_train through PATH to train the
# embedded default's tokenizer, model/tokenizer.cpp): wrappers in bench/gpu-debs/bin that set the loader
# path themselves, so they work from any shell. The carried spm_train (sentencepiece + libsentencepiece0);
# without it, python3's sentencepiece module takes the same flags (the CLI's --minloglevel is dropped).
tool_bin="$root/bench/gpu-debs/bin"
mkdir -p "$tool_bin"
if [ -x "$prefix/usr/bin/spm_train" ]; then
  printf '#!/bin/sh
LD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"
' \
    "$arch_lib" "$prefix/usr/bin/spm_train" >"$tool_bin/spm_train"
  chmod +x "$tool_bin/spm_train"
elif python3 -c 'import sentencepiece' >/dev/null 2>&1; then
  cat >"$tool_bin/spm_train" <<'SPM'
#!/usr/bin/env python3
import sys
import sentencepiece as spm
spm.SentencePieceTrainer.Train(" ".join(a for a in sys.argv[1:] if not a.startswith("--minloglevel=")))
SPM
  chmod +x "$tool_bin/spm_train"
fi
for tool in pkg-config pkgconf; do
  if [ -x "$prefix/usr/bin/$tool" ]; then
    printf '#!/bin/sh
LD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"
' \
      "$arch_lib" "$prefix/usr/bin/$tool" >"$tool_bin/$tool"
    chmod +x "$tool_bin/$tool"
  fi
done
# A later shell that has no spm_train finds this one on its default PATH.
linked=""
if [ -x "$tool_bin/spm_train" ] && ! command -v spm_train >/dev/null 2>&1 && [ -w /usr/local/bin ]; then
  ln -sf "$tool_bin/spm_train" /usr/local/bin/spm_train && linked="/usr/local/bin/spm_train -> $tool_bin/spm_train"
fi
export PATH="$PATH:$tool_bin"  # after the system's own tools, as before
# The same environment for a later shell: `. bench/gpu-debs/env.sh`.
{
  echo "# Written by bench/gpu_check.sh: the carried packages' prefix for a later shell."
  echo "export PATH=\"\$PATH:$tool_bin\""
  echo "export LD_LIBRARY_PATH=\"$arch_lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
  echo "export PKG_CONFIG_PATH=\"$arch_lib/pkgconfig:$prefix/usr/share/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}\""
  echo "export CPATH=\"$prefix/usr/include\${CPATH:+:\$CPATH}\""
  echo "export LIBRARY_PATH=\"$arch_lib\${LIBRARY_PATH:+:\$LIBRARY_PATH}\""
  echo "export CMAKE_PREFIX_PATH=\"$CMAKE_PREFIX_PATH\""
} >"$root/bench/gpu-debs/env.sh" 2>/dev/null || true
{
  echo "pkg-config: $(command -v pkg-config || command -v pkgconf || echo none)"
  echo "spm_train: $(command -v spm_train || echo 'none (the embedded default cannot train its tokenizer)')"
  echo "spm_train for later shells: ${linked:-$(command -v spm_train >/dev/null 2>&1 && echo "on PATH here; else . bench/gpu-debs/env.sh")}"
} >>"$work/tools.txt"

# ---- build against torch's LibTorch -----------------------------------------------------------------------
built=false
keep_going=(-- -k 0)
if [ -z "$torch_prefix" ]; then
  skip configure "python3's torch not found: $(head -c 300 "$work/torch.json")"
elif [ -z "$nvcc_bin" ]; then
  skip configure "no nvcc on this machine (the prebuilt binaries are the GPU check then)"
else
  gen=()
  keep_going=(-- -k)  # make: go on past a failing target
  if command -v ninja >/dev/null 2>&1; then
    gen=(-G Ninja)
    keep_going=(-- -k 0)  # ninja: go on past every failure, so one run reports them all
  fi
  cap=$(cut -d, -f4 "$work/gpu.txt" 2>/dev/null | head -1 | tr -d ' .')
  # The prefix's libraries in the binaries' RPATH: they run from any later shell without LD_LIBRARY_PATH.
  if step configure 120 cmake -S . -B build-gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DPULSE_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$nvcc_bin" -DPULSE_CUDA_ARCHITECTURES="${cap:-90}" \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" -DCMAKE_BUILD_RPATH="$arch_lib"; then
    step build_kernels 150 cmake --build build-gpu -j"$(nproc)" --target test_kernels_cuda kernels_report \
      "${keep_going[@]}" && built=true
    step build_pulse 300 cmake --build build-gpu -j"$(nproc)" --target pulse "${keep_going[@]}"
  fi
fi
# What pulse runs with (LibTorch headers and library, LibTorch's CUDA, the kernels' CUDA and devices), and
# that it starts at all without LD_PRELOAD (issue 30: std::filesystem bound into pip's libtorch.so).
if [ -x build-gpu/pulse ]; then
  step version 30 build-gpu/pulse --version
  step stdcxx_binding 60 python3 tests/check_stdcxx_binding.py --run build-gpu/pulse
else
  skip version "build-gpu/pulse was not built"
  skip stdcxx_binding "build-gpu/pulse was not built"
fi
if $built; then
  step tests 120 build-gpu/test_kernels_cuda
else
  skip tests "the GPU tests were not built here"
fi
if [ -x build-gpu/pulse ] && $gpu; then
  step bench 120 build-gpu/pulse bench kernels --json --elements "$elements"
elif [ -x build-gpu/kernels_report ] && $gpu; then
  step bench 120 build-gpu/kernels_report --json --elements "$elements"
else
  skip bench "no built pulse or no GPU"
fi

# ---- speed (issue 33): the hash, diff/compact and apply at real sizes, the 7B-shaped sync stages ------------
# A block of its own (h-speed); kernels_report needs no LibTorch, so the prebuilt one serves too. Sizes:
# PULSE_GPU_CHECK_LARGE_ELEMENTS (default 1 G elements per tensor) and PULSE_GPU_CHECK_MODEL_SCALE (default
# 1: Qwen2.5-7B's real 7.6 G elements, ~100 GB of device memory; 2 or 4 where less fits or time is short).
speed_steps() {
  local kr=""
  if [ -x build-gpu/kernels_report ]; then
    kr=build-gpu/kernels_report
  elif [ -x "$pre/kernels_report" ]; then
    kr="$pre/kernels_report"
  fi
  if [ -z "$kr" ] || ! $gpu; then
    skip speed "no kernels_report or no GPU"
    return
  fi
  step speed 300 env LD_LIBRARY_PATH="$root/$pre:${LD_LIBRARY_PATH:-}" "$kr" --json --no-cpu \
    --elements "$elements" --gpu-elements "${PULSE_GPU_CHECK_LARGE_ELEMENTS:-1073741824}" \
    --model qwen2.5-7b --model-scale "${PULSE_GPU_CHECK_MODEL_SCALE:-1}" --no-model-cpu --reps 3
}

# ---- gen_pulse, gen_hf (issue 33): generation tokens/s, pulse vs Hugging Face transformers on this GPU ------
# The same model shape (random weights), batches, prompt and output lengths, sampling and seed for both;
# each prints one JSON object (bench/generate_bench.h, bench/hf_generate_peer.py).
gen_args=(--model-config configs/qwen2.5-0.5b.json --batch "${PULSE_GPU_CHECK_GEN_BATCHES:-64,384}"
  --prompt-tokens 64 --new-tokens 256 --temperature 1 --seed 0 --device cuda --dtype bfloat16)
if ! $gpu || [ ! -x build-gpu/pulse ]; then
  skip gen_pulse "no GPU or no built pulse: ${gpu_reason:-build-gpu/pulse was not built}"
elif [ "$(left)" -ge 100 ]; then
  step gen_pulse 150 build-gpu/pulse bench generate --json "${gen_args[@]}"
else
  skip gen_pulse "less than 100 s of the time budget left"
fi
if ! $gpu; then
  skip gen_hf "no GPU: $gpu_reason"
elif ! hf_missing=$(python3 -c 'import torch, transformers' 2>&1); then
  skip gen_hf "python3 cannot import torch and transformers: $(echo "$hf_missing" | tail -1)"
elif [ "$(left)" -ge 100 ]; then
  step gen_hf 150 python3 bench/hf_generate_peer.py "${gen_args[@]}" --cache-implementation dynamic,static
else
  skip gen_hf "less than 100 s of the time budget left"
fi

# ---- speed, run after gen_*: issue 33's steps (open) come first after the build; issue 30's 0.5B steps
# ran on an earlier lease (bench/RESULTS.md "GPU") and follow, budget allowing --------------------------
if [ "$(left)" -ge 200 ]; then  # after gen_*: the sync figures need less budget than the 0.5B model
  speed_steps
else
  skip speed "less than 200 s of the time budget left"
fi

# ---- grpo05: a few GRPO steps of configs/gpu-0.5b.toml (Qwen2.5-0.5B shape) on the GPU ------------------
# The config as it is (BF16, FP32 masters, lr 1e-6, two workers on the GPU, the real Qwen2 tokenizer), with
# the SFT warm start cut to 20 steps and no Pass@1: the step breakdown and the sync's bytes, not learning.
grpo_pulse=${PULSE_GPU_CHECK_GRPO_PULSE:-build-gpu/pulse}
grpo_device=${PULSE_GPU_CHECK_GRPO_DEVICE:-cuda}
# Its tokenizer.path is ../shared/models/qwen2-tokenizer; a GPU machine that has the working tree only uses
# the copy bench/gpu_debs.sh carries.
qwen2_tok=../shared/models/qwen2-tokenizer
[ -f "$qwen2_tok/vocab.json" ] || qwen2_tok=bench/gpu-debs/qwen2-tokenizer
grpo05_args=(configs/gpu-0.5b.toml --quiet --log-json --set sft.steps=20 --set sft.warmup_steps=5
  --set eval.before=false --set eval.after=false --set run.checkpoint_every=0 --set run.device="$grpo_device"
  --set tokenizer.path="$qwen2_tok")
# verify_run NAME RUN_DIR: offline root-hash check of a run's last weights against its first checkpoint
# (pulse sync diff, apply, verify: host code, exit 0 = the applied weights are the patch's target); prints
# "verify_ms N", the time of one verify (hashes every tensor of the model on the host).
verify_run() {
  local name=$1 ck=$2/checkpoints last
  if [ ! -f "$ck/LATEST" ]; then
    skip "$name" "the run wrote no checkpoint"
    return
  fi
  last=$(printf 'step-%06d' "$(cat "$ck/LATEST")")
  step "$name" 120 bash -c "set -e
    '$grpo_pulse' sync diff '$ck/step-000000/model' '$ck/$last/model' -o '$work/$name.patch'
    '$grpo_pulse' sync apply '$ck/step-000000/model' '$work/$name.patch' -o '$work/$name.applied.safetensors'
    '$grpo_pulse' sync verify '$work/$name.applied.safetensors' '$work/$name.patch'
    t0=\$(date +%s%N)
    '$grpo_pulse' sync verify '$ck/$last/model' '$work/$name.patch'
    echo verify_ms \$(( (\$(date +%s%N) - t0) / 1000000 ))
    rm -f '$work/$name.patch' '$work/$name.applied.safetensors'"
}
grpo05_ran=false
if [ -x "$grpo_pulse" ] && { $gpu || [ "$grpo_device" != cuda ]; }; then
  step grpo05 200 "$grpo_pulse" run "${grpo05_args[@]}" --set rl.steps=4 --set run.dir="$work/grpo05_run"
  verify_run grpo05_verify "$work/grpo05_run"
  grpo05_ran=true
else
  skip grpo05 "no GPU or no $grpo_pulse: ${gpu_reason:-$grpo_pulse was not built}"
  skip grpo05_verify "no grpo05 run"
fi

# ---- device_tests: the GPU tests of test_model, test_rl and test_app, when the budget allows -----------------------
# (after grpo05, before the rest: bit-for-bit GPU checks matter more than the other runs). Only "[gpu]":
# test_app's other "[device]" cases are CPU runs, minutes of them.
if [ -x build-gpu/pulse ] && $gpu && [ "$(left)" -ge 170 ]; then
  if step build_device_tests 140 cmake --build build-gpu -j"$(nproc)" --target test_model test_rl test_app \
    "${keep_going[@]}"; then
    step device_tests 90 bash -c 'build-gpu/test_model "[gpu]"; m=$?; build-gpu/test_rl "[gpu]"; a=$?
      build-gpu/test_app "[gpu]"; b=$?; exit $((m | a | b))'
  else
    skip device_tests "test_model / test_rl / test_app did not build in time"
  fi
else
  skip device_tests "no built pulse, no GPU, or less than 170 s of the time budget left"
fi

# ---- grpo05_lr3e-6: the 0.5B steps at the other RL learning rate ------------------------------------------
if ! $grpo05_ran; then
  skip grpo05_lr3e-6 "no grpo05 run"
elif [ "$(left)" -ge 150 ]; then
  step grpo05_lr3e-6 140 "$grpo_pulse" run "${grpo05_args[@]}" --set rl.steps=3 --set optimizer.lr=3e-6 \
    --set run.dir="$work/grpo05_lr3e-6_run"
else
  skip grpo05_lr3e-6 "less than 150 s of the time budget left"
fi

# ---- grpo: a few GRPO steps of the embedded default on the GPU (run.device = cuda), when time is left ------
# The policy, SFT, GRPO, the FP32 masters and both worker threads' models on cuda:0; PULSESync between them
# through host memory as on the CPU. A LibTorch without CUDA fails at once naming run.device and the reason.
# model.dtype = bfloat16: the workers' parameters are BF16, so their syncs can patch them on the GPU
# (app/worker/device_weights.h); the default's float32 parameters are always copied whole.
grpo_args=(configs/default.toml --quiet --log-json --set sft.steps=60 --set sft.warmup_steps=5
  --set rl.steps=4 --set eval.before=false --set eval.after=false --set run.checkpoint_every=0
  --set model.dtype=bfloat16)
if [ -x "$grpo_pulse" ] && { $gpu || [ "$grpo_device" != cuda ]; } && [ "$(left)" -ge 100 ]; then
  step grpo 150 "$grpo_pulse" run "${grpo_args[@]}" --set run.device="$grpo_device" --set run.dir="$work/grpo_run"
  verify_run grpo_verify "$work/grpo_run"
  grpo_ran=true
elif [ -x "$grpo_pulse" ] && { $gpu || [ "$grpo_device" != cuda ]; }; then
  skip grpo "less than 100 s of the time budget left"
  skip grpo_verify "no grpo run"
  grpo_ran=false
elif [ -x "$grpo_pulse" ]; then
  skip grpo "no GPU: $gpu_reason"
  skip grpo_verify "no GPU run"
  grpo_ran=false
else
  skip grpo "$grpo_pulse was not built"
  skip grpo_verify "no GPU run"
  grpo_ran=false
fi

# ---- grpo_cpu: the same GRPO run on the CPU, for the step-time comparison --------------------------------
if ! $grpo_ran; then
  skip grpo_cpu "no GPU run to compare with"
elif [ "$(left)" -ge 90 ]; then
  step grpo_cpu 80 "$grpo_pulse" run "${grpo_args[@]}" --set run.device=cpu --set run.dir="$work/grpo_cpu_run"
else
  skip grpo_cpu "less than 90 s of the time budget left"
fi

# ---- one JSON file (summary block first) and one tar of everything ---------------------------------------
python3 bench/gpu_check_summary.py "$work" "$result" "$gpu" "$gpu_reason" "$start"
