#include "app/version.h"

#include <dlfcn.h>

#include <ATen/Version.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include "sync/gpu_runtime.h"

namespace pulse::app {

const char* const kPulseVersion = "0.1";

namespace {

/// The file of the LibTorch library this process loaded (where at::show_config lives): the headers'
/// version says what pulse was compiled against, the path which build it runs with.
std::string loaded_libtorch() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&at::show_config), &info) == 0 || info.dli_fname == nullptr)
    return "unknown";
  return info.dli_fname;
}

std::string torch_cuda() {
  try {
    const auto& hooks = at::detail::getCUDAHooks();
    if (!hooks.hasCUDA() && !torch::cuda::is_available()) {
      // Either a CPU build or a CUDA build on a machine without a usable device: the CUDART version
      // query tells them apart (it throws in a build without libtorch_cuda).
      try {
        const long v = hooks.versionCUDART();
        return "built with CUDA " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) +
               "; no usable device";
      } catch (const std::exception&) {
        return "this LibTorch was built without CUDA";
      }
    }
    const long v = hooks.versionCUDART();
    const auto n = torch::cuda::device_count();
    return "built with CUDA " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) +
           "; available, " + std::to_string(n) + (n == 1 ? " device" : " devices");
  } catch (const std::exception& e) {
    return std::string("unknown (") + e.what() + ")";
  }
}

}  // namespace

std::string version_text() {
  return std::string("pulse ") + kPulseVersion + "\nLibTorch " + TORCH_VERSION + " (headers), library " +
         loaded_libtorch() + "\nLibTorch CUDA: " + torch_cuda() +
         "\nCUDA kernels: " + sync::cuda_runtime_summary();
}

}  // namespace pulse::app
