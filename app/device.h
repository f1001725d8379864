// The compute device of a run (run.device): where the policy, the KL reference, SFT, GRPO, the FP32
// masters and Adam moments, and the inference workers' replicas (their models; the PULSESync replica
// bytes stay in host memory) live. One rule for the trainer, the worker threads of `pulse run` and the
// `pulse worker` processes:
//   "cpu"   the CPU (the default; results byte-identical to a build without this key);
//   "cuda"  cuda:(LOCAL_RANK mod the visible device count), so that the trainer ranks `pulse launch` or
//           torchrun start on one node take one GPU each; refused when this LibTorch has no CUDA or no
//           CUDA device is visible;
//   "auto"  "cuda" when a CUDA device is usable, else "cpu".
// Only APIs present in LibTorch 1.13 and 2.x are used (torch::cuda::is_available/device_count,
// c10::impl::hasDeviceGuardImpl), so this builds against Debian's CPU LibTorch and a CUDA pip LibTorch.
#pragma once
#include <c10/core/Device.h>

#include <string>

#include "app/config_error.h"

namespace pulse::app {

/// The run.device values, in the order the config documents them.
inline const char* const kDeviceSettings[] = {"cpu", "cuda", "auto"};

/// Why run.device = "cuda" cannot be used in this process, or "" when it can: "this LibTorch was built
/// without CUDA (...)" or "no CUDA device is visible (...)". Thread-safe.
std::string cuda_unavailable_reason();

/// The device of `setting` ("cpu" | "cuda" | "auto") for a process whose LOCAL_RANK is `local_rank`.
/// Throws ConfigError "key 'run.device' = \"cuda\" cannot be used: REASON" when CUDA was asked for and is
/// unavailable, and "key 'run.device' must be one of cpu, cuda, auto" for another string. Thread-safe.
c10::Device resolve_device(const std::string& setting, int local_rank = 0);

/// LOCAL_RANK from the environment (torchrun, `pulse launch`), else RANK, else 0
/// (rl::GroupOptions::from_env's rule, so that the worker threads of a trainer rank pick the trainer's GPU);
/// 0 when not a non-negative integer.
int local_rank_from_env();

}  // namespace pulse::app
