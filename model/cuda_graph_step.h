// One decode step captured as a CUDA graph and replayed (LibTorch's at::cuda::CUDAGraph).
#pragma once
#include <c10/core/Device.h>

#include <functional>
#include <memory>

namespace pulse::model {

/// True when this build's LibTorch has CUDA graphs (built with PULSE_TORCH_CUDA: a CUDA LibTorch such as
/// pip torch's). A CPU LibTorch (Debian's 1.13) has none.
bool cuda_graphs_available();

/// A callable captured once as a CUDA graph and replayed on the current stream. Why: a decode step of a
/// 24-layer model is several hundred small kernels; launched one by one the GPU idles between them at
/// small batch, while a graph launches them all at once (CUDA programming guide, "CUDA Graphs").
///
/// The callable must read and write only tensors that outlive this object (inputs are refreshed in place
/// before each replay()), must not synchronise with the host, and must allocate the same way every call:
/// the graph replays the very kernels and addresses of the capture. Its temporaries live in the graph's
/// private memory pool until destruction.
/// Not thread-safe; one device.
class CudaGraphStep {
 public:
  /// Runs `step` once on a side stream (the real first execution: it warms up cuBLAS and the allocator
  /// there, and its effects count), then captures a second call without executing it. The current stream
  /// is synchronised first and the side stream after, so the host sees the first call's results.
  /// Throws std::invalid_argument when the device is not CUDA or the build has no CUDA graphs
  /// (cuda_graphs_available()), c10::Error when the capture fails (e.g. the callable synchronised).
  /// share_pool_with: a graph whose memory pool this one reuses (its temporaries then overlap that
  /// graph's), safe only when that graph is never replayed again once this one is; nullptr = own pool.
  CudaGraphStep(const std::function<void()>& step, c10::Device device,
                const CudaGraphStep* share_pool_with = nullptr);
  ~CudaGraphStep();
  CudaGraphStep(const CudaGraphStep&) = delete;
  CudaGraphStep& operator=(const CudaGraphStep&) = delete;

  /// Launches the captured kernels on the current CUDA stream (asynchronous).
  void replay();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pulse::model
