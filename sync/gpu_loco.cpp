#include "sync/gpu_loco.h"

#include <memory>
#include <stdexcept>
#include <string>

#include "sync/gpu_encode.h"

#ifdef PULSE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda_device_buffer.h"
#include "kernels/loco_gate_cuda.h"
#include "kernels/loco_ulp.h"
#endif

namespace pulse::sync {

#ifndef PULSE_CUDA

struct LocoGateScratch::Impl {};

kernels::LocoGateResult loco_gate_cuda_to_host(const float*, const float*, float*, uint64_t, bool,
                                               std::vector<uint32_t>&, std::vector<float>&, LocoGateScratch*,
                                               CUstream_st*) {
  std::string why;
  cuda_encode_available(&why);
  throw std::runtime_error("loco_gate_cuda_to_host: " + why);
}

kernels::LocoGateResult loco_gate_ulp_cuda_to_host(const float*, const float*, float*, uint64_t, bool,
                                                   std::vector<uint32_t>&, std::vector<float>&,
                                                   std::vector<int32_t>&, LocoGateScratch*, CUstream_st*) {
  std::string why;
  cuda_encode_available(&why);
  throw std::runtime_error("loco_gate_ulp_cuda_to_host: " + why);
}

#else

namespace kc = pulse::kernels::cuda;

/// A device allocation grown (never shrunk) on demand; the old contents are not kept.
struct GrowBuffer {
  std::unique_ptr<kc::DeviceBuffer> buf;
  size_t cap = 0;
  void* get(size_t bytes) {
    if (!buf || bytes > cap) {
      buf.reset();
      buf = std::make_unique<kc::DeviceBuffer>(bytes);
      cap = bytes;
    }
    return buf->p;
  }
};

struct LocoGateScratch::Impl {
  GrowBuffer index, value, count, workspace;
};

namespace {

/// The gate on the device, then (fired_count non-null) the ulp coding of the fired entries there too; the
/// fired lists come to the host, where deferred ulp entries are dropped.
kernels::LocoGateResult gate_to_host(const char* fn, const float* global, const float* local, float* residual,
                                     uint64_t n, bool gate_open, std::vector<uint32_t>& fired_index,
                                     std::vector<float>& fired_value, std::vector<int32_t>* fired_count,
                                     LocoGateScratch* scratch, CUstream_st* stream) {
  if (n >= (uint64_t{1} << 32))
    throw std::invalid_argument(std::string(fn) + ": " + std::to_string(n) +
                                " elements; PULSELoCo indices are 32-bit");
  if (n > 0 && (!global || !local || !residual))
    throw std::invalid_argument(std::string(fn) + ": null device pointer");
  std::string why;
  if (!cuda_encode_available(&why)) throw std::runtime_error(std::string(fn) + ": " + why);
  fired_index.clear();
  fired_value.clear();
  if (fired_count) fired_count->clear();
  if (n == 0) return {};
  const size_t ws_bytes = kc::loco_gate_cuda_workspace_bytes(n);
  LocoGateScratch own;  // used only without the caller's
  LocoGateScratch::Impl& sc = scratch ? scratch->impl() : own.impl();
  auto* index = static_cast<uint32_t*>(sc.index.get(n * sizeof(uint32_t)));
  auto* value = static_cast<float*>(sc.value.get(n * sizeof(float)));
  void* ws = sc.workspace.get(ws_bytes);
  kernels::LocoGateResult r = kc::loco_gate_cuda(global, local, residual, n, gate_open, index, value,
                                                 /*index_base=*/0, ws, ws_bytes, stream);
  int32_t* count = nullptr;
  if (fired_count && r.fired > 0 && !r.nonfinite) {  // a non-finite round is refused: nothing to code
    count = static_cast<int32_t*>(sc.count.get(n * sizeof(int32_t)));
    kc::loco_ulp_quantize_cuda(global, residual, index, value, count, r.fired, /*index_base=*/0, stream);
  }
  fired_index.resize(r.fired);
  fired_value.resize(r.fired);
  if (count) fired_count->resize(r.fired);
  if (r.fired > 0) {
    kc::check(cudaMemcpyAsync(fired_index.data(), index, r.fired * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                              stream),
              fn, "copy fired indices");
    kc::check(
        cudaMemcpyAsync(fired_value.data(), value, r.fired * sizeof(float), cudaMemcpyDeviceToHost, stream),
        fn, "copy fired values");
    if (count)
      kc::check(cudaMemcpyAsync(fired_count->data(), count, r.fired * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                stream),
                fn, "copy fired counts");
    kc::check(cudaStreamSynchronize(stream), fn, "synchronize");
  }
  if (count) {
    r.fired = kernels::loco_ulp_compact(fired_index.data(), fired_value.data(), fired_count->data(), r.fired);
    fired_index.resize(r.fired);
    fired_value.resize(r.fired);
    fired_count->resize(r.fired);
  }
  return r;
}

}  // namespace

kernels::LocoGateResult loco_gate_cuda_to_host(const float* global, const float* local, float* residual,
                                               uint64_t n, bool gate_open, std::vector<uint32_t>& fired_index,
                                               std::vector<float>& fired_value, LocoGateScratch* scratch,
                                               CUstream_st* stream) {
  return gate_to_host("loco_gate_cuda_to_host", global, local, residual, n, gate_open, fired_index,
                      fired_value, nullptr, scratch, stream);
}

kernels::LocoGateResult loco_gate_ulp_cuda_to_host(const float* global, const float* local, float* residual,
                                                   uint64_t n, bool gate_open,
                                                   std::vector<uint32_t>& fired_index,
                                                   std::vector<float>& fired_value,
                                                   std::vector<int32_t>& fired_count,
                                                   LocoGateScratch* scratch, CUstream_st* stream) {
  return gate_to_host("loco_gate_ulp_cuda_to_host", global, local, residual, n, gate_open, fired_index,
                      fired_value, &fired_count, scratch, stream);
}

#endif

LocoGateScratch::LocoGateScratch() : impl_(std::make_unique<Impl>()) {}
LocoGateScratch::~LocoGateScratch() = default;

}  // namespace pulse::sync
