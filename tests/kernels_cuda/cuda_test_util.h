// Shared by the GPU tests (tests/kernels_cuda): whether a CUDA device is usable (a test without one
// WARNs with the reason and returns: a GPU is an input these tests cannot find in ../shared), device
// buffers that free themselves, host <-> device copies that fail the test on a CUDA error.
#pragma once
#include <cuda_runtime_api.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace pulse::test {

/// Empty when a CUDA device can run kernels; otherwise why not (cudaGetDeviceCount's error, or no device).
inline std::string cuda_unavailable() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
  if (count == 0) return "no CUDA device";
  return {};
}

/// Returns from the test case with a WARN naming the reason when there is no usable GPU.
#define PULSE_REQUIRE_GPU_OR_SKIP()                                                               \
  do {                                                                                            \
    const std::string why_ = ::pulse::test::cuda_unavailable();                                   \
    if (!why_.empty()) {                                                                          \
      WARN("skipped: no GPU (" << why_ << "); the GPU vs CPU comparison runs on a CUDA machine"); \
      return;                                                                                     \
    }                                                                                             \
  } while (0)

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) FAIL(what << ": " << cudaGetErrorString(e));
}

/// A device allocation of `bytes` bytes (at least 1), freed on destruction.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { cuda_ok(cudaMalloc(&ptr_, bytes ? bytes : 1), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

template <typename T>
void to_device(void* dst, const std::vector<T>& src) {
  if (!src.empty())
    cuda_ok(cudaMemcpy(dst, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice), "H2D");
}

template <typename T>
std::vector<T> to_host(const void* src, size_t count) {
  std::vector<T> out(count);
  if (count) cuda_ok(cudaMemcpy(out.data(), src, count * sizeof(T), cudaMemcpyDeviceToHost), "D2H");
  return out;
}

}  // namespace pulse::test
