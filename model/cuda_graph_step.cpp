// CUDA graph capture and replay; see cuda_graph_step.h. Compiled against at::cuda only when this build's
// LibTorch has CUDA (PULSE_TORCH_CUDA, cmake/cuda.cmake); otherwise every entry point says why it cannot.
#include "model/cuda_graph_step.h"

#include <stdexcept>
#include <string>

#ifdef PULSE_TORCH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace pulse::model {

#ifdef PULSE_TORCH_CUDA

bool cuda_graphs_available() {
  return true;
}

struct CudaGraphStep::Impl {
  at::cuda::CUDAGraph graph;
};

CudaGraphStep::CudaGraphStep(const std::function<void()>& step, c10::Device device,
                             const CudaGraphStep* share_pool_with)
    : impl_(std::make_unique<Impl>()) {
  if (!device.is_cuda())
    throw std::invalid_argument("CudaGraphStep: device " + device.str() + " is not a CUDA device");
  c10::cuda::CUDAGuard device_guard(device.index());
  // Work queued on the current stream (input copies) must be done before the side stream reads it.
  c10::cuda::getCurrentCUDAStream(device.index()).synchronize();
  // Capture needs a stream other than the legacy default one; the warm-up runs there too so that the
  // cuBLAS handle and workspace the capture records belong to that stream.
  auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  {
    c10::cuda::CUDAStreamGuard stream_guard(side);
    step();
    side.synchronize();
    if (share_pool_with != nullptr)
      impl_->graph.capture_begin(share_pool_with->impl_->graph.pool());
    else
      impl_->graph.capture_begin();
    step();
    impl_->graph.capture_end();
  }
  side.synchronize();
}

void CudaGraphStep::replay() {
  impl_->graph.replay();
}

#else

bool cuda_graphs_available() {
  return false;
}

struct CudaGraphStep::Impl {};

CudaGraphStep::CudaGraphStep(const std::function<void()>&, c10::Device device, const CudaGraphStep*) {
  throw std::invalid_argument("CudaGraphStep: this pulse was built against a LibTorch without CUDA (" +
                              device.str() +
                              " requested); build against a CUDA LibTorch, e.g. pip torch's "
                              "torch.utils.cmake_prefix_path");
}

void CudaGraphStep::replay() {
  throw std::logic_error("CudaGraphStep::replay: no CUDA graphs in this build");
}

#endif

CudaGraphStep::~CudaGraphStep() = default;

}  // namespace pulse::model
