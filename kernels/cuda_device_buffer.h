// Host-side helpers of the CUDA paths (sync/gpu_*.cpp, bench/kernels/gpu_bench.cpp): a checked CUDA
// runtime call and an owning device allocation. Compiled only where PULSE_CUDA is defined.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace pulse::kernels::cuda {

/// Throws std::runtime_error("<context>: <what>: <CUDA error string>") unless e is cudaSuccess.
inline void check(cudaError_t e, const char* context, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(context) + ": " + what + ": " + cudaGetErrorString(e));
}

/// A device allocation of `bytes` (at least 1) freed on destruction; not copyable. Throws
/// std::runtime_error when cudaMalloc fails. Not thread-safe (one owner).
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    check(cudaMalloc(&p, bytes ? bytes : 1), "device buffer", "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* bytes() const { return static_cast<uint8_t*>(p); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

}  // namespace pulse::kernels::cuda
