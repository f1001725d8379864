// The decoder's scatter for 2-byte elements on a GPU (kernels/patch_apply_cuda.cu): one tensor of a
// patch with varint-gap index coding (sync/FORMAT.md coding 0) applied in place to BF16/F16 weights in
// device memory. The index stream is validated on the device first, with exactly the acceptance rule of
// sync/index_coding.cpp validate_index_stream (every tail chain complete, at most 9 bytes and fitting
// 64 bits, one chain per head with bit 7, no trailing bytes, sum(gap + 1) <= n); the scatter kernel runs
// only when that passed (it reads the verdict on the device, in the same stream) and checks every
// position against n again, so no device write ever lands outside the tensor. The verdict comes back to
// the host. CPU reference: kernels/apply_kernels.h apply_varint_u16 and sync/patch_apply.cpp.
//
// Torch-free: raw device pointers, the CUDA stream as a parameter. Needs a PULSE_CUDA build.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace pulse::kernels::cuda {

/// Why a device-side validation refused an index stream (0 = valid, applied).
enum ApplyError : uint32_t {
  kApplyOk = 0,
  kApplyGapOverflow = 1,    ///< a tail chain longer than 9 bytes or over 64 bits (at: its byte)
  kApplyTailTruncated = 2,  ///< the last tail chain is not complete (at: the stream's end)
  kApplyChainCount = 3,     ///< tail chains != heads with bit 7 (at: the stream's end, index_bytes)
  kApplyOutOfBounds = 4,    ///< a position >= n (at: the change's index)
  kApplyBadSizes = 5,       ///< changed > n or index_bytes < changed (at: 0; checked on the host)
};

/// The verdict (host memory): error code and where (a byte offset in the index stream, or a change index
/// for kApplyOutOfBounds, as validate_index_stream reports them).
struct ApplyStatus {
  uint32_t error = kApplyOk;
  uint64_t at = 0;
};

/// Human-readable name of an ApplyError.
const char* apply_error_name(uint32_t error);

/// Device workspace bytes apply_varint_u16_cuda needs (about 24 bytes per change + 16 per tail byte).
size_t apply_u16_cuda_workspace_bytes(uint64_t changed, uint64_t index_bytes);

/// Applies one validated-on-device varint-gap tensor of n 2-byte elements in place:
///   weights  [n] (device), in/out
///   index    the index stream: `changed` head bytes then index_bytes - changed tail bytes (device)
///   values   the value stream: lo plane then hi plane, `changed` bytes each (device)
///   delta    values are zigzag(new - old) (else the new bit patterns)
///   undo     nullptr or [changed] u16 (device): the old value of change j is saved at undo[j]
///   workspace, workspace_bytes  device memory of at least apply_u16_cuda_workspace_bytes(...)
///   status   host memory: the verdict; error != kApplyOk means nothing was written to weights or undo
///   stream   the CUDA stream everything is queued on; the call returns after it reached the end of the
///            work (the verdict is copied back and the stream synchronized)
/// Size errors found on the host (changed > n, index_bytes < changed) set status and launch nothing.
/// Throws std::invalid_argument for a small workspace or null pointers, std::runtime_error when a launch
/// fails. Thread safety: calls on disjoint buffers may run concurrently.
void apply_varint_u16_cuda(uint16_t* weights, uint64_t n, const uint8_t* index, uint64_t index_bytes,
                           uint64_t changed, const uint8_t* values, bool delta, uint16_t* undo,
                           void* workspace, size_t workspace_bytes, ApplyStatus* status, cudaStream_t stream);

}  // namespace pulse::kernels::cuda
