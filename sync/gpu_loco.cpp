#include "sync/gpu_loco.h"

#include <stdexcept>
#include <string>

#include "sync/gpu_encode.h"

#ifdef PULSE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda_device_buffer.h"
#include "kernels/loco_gate_cuda.h"
#endif

namespace pulse::sync {

#ifndef PULSE_CUDA

kernels::LocoGateResult loco_gate_cuda_to_host(const float*, const float*, float*, uint64_t, bool,
                                               std::vector<uint32_t>&, std::vector<float>&, CUstream_st*) {
  std::string why;
  cuda_encode_available(&why);
  throw std::runtime_error("loco_gate_cuda_to_host: " + why);
}

#else

kernels::LocoGateResult loco_gate_cuda_to_host(const float* global, const float* local, float* residual,
                                               uint64_t n, bool gate_open, std::vector<uint32_t>& fired_index,
                                               std::vector<float>& fired_value, CUstream_st* stream) {
  namespace kc = pulse::kernels::cuda;
  if (n >= (uint64_t{1} << 32))
    throw std::invalid_argument("loco_gate_cuda_to_host: " + std::to_string(n) +
                                " elements; PULSELoCo indices are 32-bit");
  if (n > 0 && (!global || !local || !residual))
    throw std::invalid_argument("loco_gate_cuda_to_host: null device pointer");
  std::string why;
  if (!cuda_encode_available(&why)) throw std::runtime_error("loco_gate_cuda_to_host: " + why);
  fired_index.clear();
  fired_value.clear();
  if (n == 0) return {};
  const size_t ws_bytes = kc::loco_gate_cuda_workspace_bytes(n);
  kc::DeviceBuffer index(n * sizeof(uint32_t)), value(n * sizeof(float)), ws(ws_bytes);
  const kernels::LocoGateResult r =
      kc::loco_gate_cuda(global, local, residual, n, gate_open, index.as<uint32_t>(), value.as<float>(),
                         /*index_base=*/0, ws.p, ws_bytes, stream);
  fired_index.resize(r.fired);
  fired_value.resize(r.fired);
  if (r.fired > 0) {
    kc::check(cudaMemcpyAsync(fired_index.data(), index.p, r.fired * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                              stream),
              "loco_gate_cuda_to_host", "copy fired indices");
    kc::check(
        cudaMemcpyAsync(fired_value.data(), value.p, r.fired * sizeof(float), cudaMemcpyDeviceToHost, stream),
        "loco_gate_cuda_to_host", "copy fired values");
    kc::check(cudaStreamSynchronize(stream), "loco_gate_cuda_to_host", "synchronize");
  }
  return r;
}

#endif

}  // namespace pulse::sync
