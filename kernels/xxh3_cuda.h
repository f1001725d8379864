// XXH3-64 (seed 0) of a tensor in device memory (kernels/xxh3_cuda.cu), bit for bit libxxhash's
// XXH3_64bits, without copying the tensor to the host. XXH3's long-input loop accumulates 16 stripes of
// 64 bytes per 1024-byte block and then scrambles the accumulators; the accumulation is a sum, so every
// block's contribution is computed in parallel (one pass over the tensor at memory bandwidth), and only
// the scramble chain (a few integer operations per block and lane) runs sequentially on 8 threads. The
// accumulators and the last <= 1088 bytes then come back to the host, which finishes the hash with
// libxxhash's code (kernels/xxh3_tail.h). Inputs under 241 bytes are copied and hashed on the host.
//
// Torch-free: raw device pointers, the CUDA stream as a parameter. Needs a PULSE_CUDA build.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace pulse::kernels::cuda {

/// Device workspace bytes xxh3_64_cuda needs for a len-byte input (64 bytes per 1 KiB of input).
size_t xxh3_cuda_workspace_bytes(uint64_t len);

/// XXH3_64bits(data, len) of device memory `data` (any alignment; 8-byte aligned takes the fast path),
/// queued on `stream`; returns after the stream reached the end of the work. `workspace` holds
/// xxh3_cuda_workspace_bytes(len) device bytes. Throws std::invalid_argument for a small workspace or a
/// null pointer with len > 0, std::runtime_error when a launch or copy fails. Thread safety: calls on
/// disjoint workspaces may run concurrently.
uint64_t xxh3_64_cuda(const void* data, uint64_t len, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream);

}  // namespace pulse::kernels::cuda
