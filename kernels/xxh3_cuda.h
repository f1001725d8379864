// XXH3-64 (seed 0) of a tensor in device memory (kernels/xxh3_cuda.cu), bit for bit libxxhash's
// XXH3_64bits, without copying the tensor to the host. XXH3's long-input loop accumulates 16 stripes of
// 64 bytes per 1024-byte block and then scrambles the accumulators; the accumulation is a sum, so every
// block's contribution is computed in parallel (one pass over the tensor at memory bandwidth), and only
// the scramble chain (a few integer operations per block and lane) runs sequentially on 8 threads. The
// accumulators and the last <= 1024 bytes then come back to the host, which finishes the hash with
// libxxhash's code (kernels/xxh3_tail.h). Inputs under 241 bytes are copied and hashed on the host.
// xxh3_64_cuda_many hashes many inputs (a model's tensors) in one batch: one synchronization instead of
// one per tensor, and the chains of all tensors run side by side.
//
// Torch-free: raw device pointers, the CUDA stream as a parameter. Needs a PULSE_CUDA build.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

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

/// Device workspace bytes xxh3_64_cuda_many needs to hash inputs of lengths lens[0 .. count) in one
/// batch (64 bytes per 1 KiB of input, plus <= 1 KiB of each input's last bytes and 64 bytes of state).
size_t xxh3_cuda_many_workspace_bytes(const uint64_t* lens, size_t count);

/// The workspace cap sync/'s device paths hash with (xxh3_cuda_many_workspace_capped): 128 MiB of
/// contributions, i.e. ~2 GiB of tensors per batch.
constexpr size_t kXxh3CudaWorkspaceCap = size_t{128} << 20;

/// The workspace to give xxh3_64_cuda_many for these inputs: all of them in one batch when that takes at
/// most `cap` bytes, else `cap` or the largest single input's need if that is more (the contributions take
/// 1/16 of the input: a cap bounds the device memory hashing a whole model takes).
size_t xxh3_cuda_many_workspace_capped(const uint64_t* lens, size_t count, size_t cap);

/// hashes[i] = XXH3_64bits(data[i], lens[i]) for i < count, of device memory (any alignment), queued on
/// `stream`; returns after the stream reached the end of the work. A batch costs one host-to-device copy
/// (its item table), three kernel launches, one device-to-host copy and one synchronization whatever its
/// count: the block contributions of every
/// input in one pass, the scramble chains of all inputs side by side (8 threads each: the sequential
/// part then takes the longest input's time, not the sum), and every input's last bytes (whole inputs
/// under 241 bytes) gathered beside the accumulators for the host to finish (kernels/xxh3_tail.h).
/// Consecutive inputs go into one batch while xxh3_cuda_many_workspace_bytes of the batch fits
/// `workspace_bytes`; a smaller workspace means more batches. Throws std::invalid_argument when one
/// input alone does not fit or a pointer is null with lens[i] > 0, std::runtime_error when a launch or
/// copy fails. Thread safety: calls on disjoint workspaces may run concurrently.
void xxh3_64_cuda_many(const void* const* data, const uint64_t* lens, size_t count, void* workspace,
                       size_t workspace_bytes, cudaStream_t stream, uint64_t* hashes);

/// Where xxh3_64_cuda_many cuts inputs of lengths lens[0 .. count) into batches for a workspace of
/// `workspace_bytes`: the end index of each batch, ascending, the last == count (none for count 0).
/// Greedy: a batch takes consecutive inputs while xxh3_cuda_many_workspace_bytes of the batch fits.
/// Host code only (testable without a GPU). Throws std::invalid_argument when one input alone does not
/// fit. Reentrant.
std::vector<size_t> xxh3_cuda_many_batch_ends(const uint64_t* lens, size_t count, size_t workspace_bytes);

}  // namespace pulse::kernels::cuda
