// One decode step captured as a CUDA graph and replayed (LibTorch's at::cuda::CUDAGraph).
#pragma once
#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <stdexcept>

namespace pulse::model {

/// True when this build's LibTorch has CUDA graphs (built with PULSE_TORCH_CUDA: a CUDA LibTorch such as
/// pip torch's). A CPU LibTorch (Debian's 1.13) has none.
bool cuda_graphs_available();

/// The capture itself failed (an op that cannot be captured, e.g. one that synchronises); the stream is
/// out of capture mode again and the device usable. What a caller may answer by running uncaptured.
struct CudaGraphCaptureError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A callable captured once as a CUDA graph and replayed on the current stream. Why: a decode step of a
/// 24-layer model is several hundred small kernels; launched one by one the GPU idles between them at
/// small batch, while a graph launches them all at once (CUDA programming guide, "CUDA Graphs").
///
/// The callable must read and write only tensors that outlive this object (inputs are refreshed in place
/// before each replay()), must not synchronise with the host, must allocate the same way every call, and
/// must leave nothing it allocated alive (results are copied into preallocated tensors): the graph replays
/// the very kernels and addresses of the capture, and every graph a thread captures on a device shares
/// that thread's memory pool for temporaries (kept live for the thread's life by a tiny pinned graph, so
/// memory stays bounded by one step's working set however many graphs and generate() calls there are),
/// so any replay order is then safe.
///
/// Threads: each thread captures on its own stream in CUDA's thread-local capture mode, so other threads
/// may keep allocating and computing on the device meanwhile (a worker applying a patch while another
/// captures); captures themselves are serialised process-wide. One object: one thread.
class CudaGraphStep {
 public:
  /// Runs `step` once on this thread's capture stream (the real first execution: it warms up cuBLAS and
  /// the allocator there, and its effects count), then captures a second call without executing it. The
  /// current stream is synchronised first and the capture stream after, so the host sees the first
  /// call's results. Throws std::invalid_argument when the device is not CUDA or the build has no CUDA
  /// graphs (cuda_graphs_available()); whatever the first call throws; CudaGraphCaptureError when the
  /// capture fails (the capture is then ended and the device left usable).
  CudaGraphStep(const std::function<void()>& step, c10::Device device);
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
