// CUDA graph capture and replay; see cuda_graph_step.h. Compiled against at::cuda only when this build's
// LibTorch has CUDA (PULSE_TORCH_CUDA, cmake/cuda.cmake); otherwise every entry point says why it cannot.
#include "model/cuda_graph_step.h"

#include <string>

#ifdef PULSE_TORCH_CUDA
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/version.h>

#include <map>
#include <mutex>
#include <optional>

// LibTorch 2.6 (the headers scripts/check-libtorch2.sh compiles against) and later take the capture mode and
// end a pool's allocation by pool id; earlier ones capture in global mode.
#define PULSE_TORCH_2_6 (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6))
#endif

namespace pulse::model {

#ifdef PULSE_TORCH_CUDA

bool cuda_graphs_available() {
  return true;
}

namespace {

std::mutex& capture_mutex() {
  static std::mutex m;
  return m;
}

/// This thread's capture stream and graph memory pool on one device, made on first use (under
/// capture_mutex()).
struct ThreadCapture {
  std::optional<c10::cuda::CUDAStream> stream;
  decltype(at::cuda::graph_pool_handle()) pool{0, 0};
};

ThreadCapture& thread_capture(c10::DeviceIndex device) {
  thread_local std::map<c10::DeviceIndex, ThreadCapture> per_device;
  ThreadCapture& tc = per_device[device];
  if (tc.stream) return tc;
  const auto stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device);
  const auto pool = at::cuda::graph_pool_handle();
  // Pin the pool. The allocator refuses a capture into a pool id whose graphs are all gone (it asserts
  // use_count > 0 when an id is reused), and the graphs of one generate() call are gone when the next
  // begins; so one tiny graph keeps the pool live for the thread's life. Leaked on purpose: destroying
  // it at thread or process exit could run after the CUDA runtime has shut down.
  auto* scratch = new at::Tensor(at::zeros(
      {1}, at::TensorOptions().dtype(at::kFloat).device(c10::Device(c10::DeviceType::CUDA, device))));
  auto* keeper = new at::cuda::CUDAGraph();
  {
    c10::cuda::CUDAStreamGuard stream_guard(stream);
    stream.synchronize();
#if PULSE_TORCH_2_6
    keeper->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
#else
    keeper->capture_begin(pool);
#endif
    scratch->fill_(0);
    keeper->capture_end();
    stream.synchronize();
  }
  tc.stream = stream;
  tc.pool = pool;
  return tc;
}

}  // namespace

struct CudaGraphStep::Impl {
  at::cuda::CUDAGraph graph;
};

CudaGraphStep::CudaGraphStep(const std::function<void()>& step, c10::Device device)
    : impl_(std::make_unique<Impl>()) {
  if (!device.is_cuda())
    throw std::invalid_argument("CudaGraphStep: device " + device.str() + " is not a CUDA device");
  c10::cuda::CUDAGuard device_guard(device.index());
  // Work queued on the current stream (input copies) must be done before the capture stream reads it.
  c10::cuda::getCurrentCUDAStream(device.index()).synchronize();
  std::lock_guard<std::mutex> lock(capture_mutex());
  ThreadCapture& tc = thread_capture(device.index());
  const c10::cuda::CUDAStream side = *tc.stream;
  c10::cuda::CUDAStreamGuard stream_guard(side);
  // The warm-up on the capture stream: the cuBLAS handle and workspace the capture records belong to it.
  step();
  side.synchronize();
#if PULSE_TORCH_2_6
  impl_->graph.capture_begin(tc.pool, cudaStreamCaptureModeThreadLocal);
#else
  impl_->graph.capture_begin(tc.pool);
#endif
  try {
    step();
  } catch (const std::exception& e) {
    // End the (possibly invalidated) capture so that the stream and the allocator work again.
    cudaGraph_t partial = nullptr;
    (void)cudaStreamEndCapture(side.stream(), &partial);
    if (partial != nullptr) (void)cudaGraphDestroy(partial);
    (void)cudaGetLastError();
#if PULSE_TORCH_2_6
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device.index(), tc.pool);
#endif
    throw CudaGraphCaptureError(std::string("CUDA graph capture failed: ") + e.what());
  }
  try {
    impl_->graph.capture_end();
  } catch (const std::exception& e) {
    throw CudaGraphCaptureError(std::string("CUDA graph capture failed at its end: ") + e.what());
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

CudaGraphStep::CudaGraphStep(const std::function<void()>&, c10::Device device) {
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
