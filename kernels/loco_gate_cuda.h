// The PULSELoCo gate fused with the error-feedback update on a GPU (kernels/loco_gate_cuda.cu): the exact
// per-element rule of kernels/loco_gate.h (its CPU reference, loco_gate_portable), bit for bit: FP32
// adds and subtracts rounded to nearest even without contraction and without flush to zero, NaN s
// canonicalized to 0x7fc00000, the BF16 comparison done on integer bit patterns, and for a NaN global
// the x86 result of g - s (g quieted, so the entry does not fire unless the gate is open). The fired
// entries come out in ascending index order, as on the CPU.
//
// How: 4096 elements per thread block, fired entries compacted per tile into a scratch area, one block
// scans the tile counts, then each tile copies its entries to their final place.
//
// Torch-free: raw device pointers, the CUDA stream as a parameter. Needs a PULSE_CUDA build.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/loco_gate.h"

namespace pulse::kernels::cuda {

/// Device workspace bytes loco_gate_cuda needs for n elements (about 8 bytes per element).
size_t loco_gate_cuda_workspace_bytes(uint64_t n);

/// loco_gate (kernels/loco_gate.h) on device arrays: global, local (read only), residual (in/out),
/// fired_index / fired_value (room for n entries each), all FP32/uint32 device memory, no overlaps.
/// `workspace` holds loco_gate_cuda_workspace_bytes(n) device bytes. Queued on `stream`; returns after
/// the stream reached the end of the work (the result is copied back). Throws std::invalid_argument when
/// index_base + n exceeds 2^32 (before touching anything), for a small workspace or null pointers, and
/// std::runtime_error when a launch fails. Thread safety: calls on disjoint buffers may run concurrently.
LocoGateResult loco_gate_cuda(const float* global, const float* local, float* residual, uint64_t n,
                              bool gate_open, uint32_t* fired_index, float* fired_value, uint32_t index_base,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream);

/// kernels::loco_ulp_quantize (kernels/loco_ulp.h) on device arrays, bit for bit: for each of the n_fired
/// entries the gate wrote (fired_index, fired_value = s), the count (fired_count), the value sent
/// (fired_value) and the remainder in residual[fired_index - index_base]. global/residual are the arrays the
/// gate ran on. Deferred entries (count 0) stay in the lists; loco_ulp_compact drops them on the host.
/// Queued on `stream`; returns when done. Throws std::invalid_argument for null pointers (n_fired > 0),
/// std::runtime_error when the launch fails. Thread safety: disjoint buffers may run concurrently.
void loco_ulp_quantize_cuda(const float* global, float* residual, const uint32_t* fired_index,
                            float* fired_value, int32_t* fired_count, uint64_t n_fired, uint32_t index_base,
                            cudaStream_t stream);

}  // namespace pulse::kernels::cuda
