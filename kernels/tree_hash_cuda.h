// The tree hash of kernels/tree_hash.h (PULSESync format version 3's tensor hash) of device memory, bit for
// bit the CPU's kernels::tree_hash64. One CUDA block per 64 KiB chunk computes the chunk's whole XXH3-64
// on the device: its 1 KiB blocks' stripe sums in parallel (XXH3's accumulation is a sum; the scramble
// chain is then 63 steps on 8 threads, hidden by the other resident blocks), then the last stripes and
// the merge. Only the leaves (8 bytes per 64 KiB) and the last chunk of an input when it is under 241 bytes
// (XXH3's short-input paths stay on the host) come back; the host combines the leaves (kernels/tree_hash.h
// tree_hash_combine). A whole model is one batch: one host-to-device copy of its item table, two launches,
// one device-to-host copy and one synchronization.
//
// Torch-free: raw device pointers, the CUDA stream as a parameter. Needs a PULSE_CUDA build.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace pulse::kernels::cuda {

/// Device workspace bytes tree_hash_cuda_many needs for inputs of lengths lens[0 .. count): 8 bytes per
/// 64 KiB chunk, <= 240 bytes per input and a 48-byte table entry per input (256-byte rounded parts).
size_t tree_hash_cuda_workspace_bytes(const uint64_t* lens, size_t count);

/// hashes[i] = kernels::tree_hash64(data[i], lens[i]) for i < count, of device memory (any alignment; 8-byte
/// aligned inputs take the fast loads), queued on `stream`; returns after the stream reached the end of
/// the work. `workspace` holds tree_hash_cuda_workspace_bytes(lens, count) device bytes. Throws
/// std::invalid_argument for a small or null workspace or a null pointer with lens[i] > 0,
/// std::runtime_error when a launch or copy fails. Thread safety: calls on disjoint workspaces may run
/// concurrently.
void tree_hash_cuda_many(const void* const* data, const uint64_t* lens, size_t count, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream, uint64_t* hashes);

}  // namespace pulse::kernels::cuda
