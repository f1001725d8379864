#include "sync/gpu_runtime.h"

#ifdef PULSE_CUDA
#include <cuda_runtime_api.h>

#include <cstdio>
#endif

namespace pulse::sync {

#ifndef PULSE_CUDA

std::string cuda_runtime_summary() {
  return "not built (PULSE_CUDA=OFF or no nvcc at configure time)";
}

#else

namespace {
/// "12.4" from CUDA's integer version 12040.
std::string cuda_version(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}
}  // namespace

std::string cuda_runtime_summary() {
  std::string out = "built with CUDA " + cuda_version(CUDART_VERSION);
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) return out + "; no CUDA driver";
  out += "; driver CUDA " + cuda_version(driver);
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return out + "; no device (" + cudaGetErrorString(e) + ")";
  out += "; " + std::to_string(n) + (n == 1 ? " device" : " devices");
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    char line[400];
    std::snprintf(line, sizeof line, "%s %d %s (sm_%d%d, %.1f GiB)", i ? "," : ":", i, p.name, p.major,
                  p.minor, static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    out += line;
  }
  return out;
}

#endif

}  // namespace pulse::sync
