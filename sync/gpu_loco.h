// The PULSELoCo gate for FP32 weights that live on a GPU: kernels/loco_gate_cuda.h (the gate fused with
// the error-feedback update, bit for bit the CPU rule of kernels/loco_gate.h) run on the device, and only
// the fired (index, value) entries copied to the host, where the contribution is encoded and exchanged
// (sync/loco_exchange.h). A round then moves a few bytes per fired entry across PCIe instead of the
// whole FP32 local weights (4 bytes per element).
//
// Needs a PULSE_CUDA build and a CUDA device; otherwise loco_gate_cuda_to_host throws and
// cuda_encode_available (sync/gpu_encode.h) says why. This header has no CUDA include.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/loco_gate.h"

struct CUstream_st;  // = cudaStream_t's pointee (cuda_runtime_api.h)

namespace pulse::sync {

/// Device scratch for loco_gate_cuda_to_host calls, kept across the tensors of one round and grown for
/// the largest: a round of hundreds of tensors then costs a few cudaMalloc / cudaFree (cudaFree
/// synchronizes the device) instead of three each. Freed on destruction. Not thread safe: one per caller.
class LocoGateScratch {
 public:
  LocoGateScratch();
  ~LocoGateScratch();
  LocoGateScratch(const LocoGateScratch&) = delete;
  LocoGateScratch& operator=(const LocoGateScratch&) = delete;
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// kernels::loco_gate on device arrays of n FP32 elements: global and local (read only), residual
/// (in/out: the new error feedback), all on the current CUDA device, no overlaps. The fired entries
/// (ascending index, indices 0-based within the tensor) are copied into the host vectors, which are
/// resized to LocoGateResult::fired. Device scratch (~16 bytes per element) comes from `scratch` (grown
/// when needed), or with nullptr is allocated for the call and freed before it returns. Queued on `stream`
/// (nullptr = the default stream); returns when done. Throws std::invalid_argument for n >= 2^32 or null
/// pointers (nothing touched), std::runtime_error when CUDA is unavailable or a CUDA call fails. Thread
/// safety: calls on disjoint buffers may run concurrently.
kernels::LocoGateResult loco_gate_cuda_to_host(const float* global, const float* local, float* residual,
                                               uint64_t n, bool gate_open, std::vector<uint32_t>& fired_index,
                                               std::vector<float>& fired_value,
                                               LocoGateScratch* scratch = nullptr,
                                               CUstream_st* stream = nullptr);

/// loco_gate_cuda_to_host, then the ulp value coding (kernels/loco_ulp.h) of the fired entries on the
/// device (kernels::cuda::loco_ulp_quantize_cuda): the residual gets the remainders, and the host lists
/// hold only the entries sent (deferred ones, count 0, dropped; ascending index): fired_count[k] the
/// count or kernels::kLocoUlpEscape, fired_value[k] the FP32 value sent (count * step, or s for an
/// escape). LocoGateResult::fired = entries sent. A round with a non-finite s is not coded (the caller
/// refuses it). Same contract and errors as loco_gate_cuda_to_host otherwise.
kernels::LocoGateResult loco_gate_ulp_cuda_to_host(
    const float* global, const float* local, float* residual, uint64_t n, bool gate_open,
    std::vector<uint32_t>& fired_index, std::vector<float>& fired_value, std::vector<int32_t>& fired_count,
    LocoGateScratch* scratch = nullptr, CUstream_st* stream = nullptr);

}  // namespace pulse::sync
