// run.device (app/device.h).
#include "app/device.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

#include <cstdlib>

#include "app/config_error.h"

namespace pulse::app {

std::string cuda_unavailable_reason() {
  if (torch::cuda::is_available()) return "";
  // libc10_cuda registers the CUDA device guard when it is loaded: without it this LibTorch is a CPU build
  // (Debian's libtorch 1.13) or its CUDA libraries were not linked in.
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA))
    return "this LibTorch was built without CUDA (a CPU-only build such as Debian's libtorch, or "
           "libtorch_cuda.so was not linked in; build against a CUDA LibTorch, e.g. pip torch's "
           "torch.utils.cmake_prefix_path)";
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return std::string("no CUDA device is visible (torch::cuda::device_count() = 0") +
         (visible ? std::string(", CUDA_VISIBLE_DEVICES='") + visible + "'" : std::string()) +
         "; is the NVIDIA driver loaded?)";
}

c10::Device resolve_device(const std::string& setting, int local_rank) {
  if (setting == "cpu") return c10::Device(c10::DeviceType::CPU);
  if (setting != "cuda" && setting != "auto")
    throw ConfigError("key 'run.device' must be one of cpu, cuda, auto (got '" + setting + "')");
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) {
    if (setting == "auto") return c10::Device(c10::DeviceType::CPU);
    throw ConfigError("key 'run.device' = \"cuda\" cannot be used: " + why);
  }
  const int n = static_cast<int>(torch::cuda::device_count());
  const int index = local_rank >= 0 ? local_rank % n : 0;
  return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
}

int local_rank_from_env() {
  const char* v = std::getenv("LOCAL_RANK");
  if (v == nullptr || *v == '\0') v = std::getenv("RANK");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (*end == '\0' && x >= 0 && x < (1 << 20)) ? static_cast<int>(x) : 0;
}

}  // namespace pulse::app
