// The encoder's scan for 2-byte elements on a GPU (kernels/diff_emit16.cu): the FP32 master -> BF16
// round-to-nearest-even cast (kernels/bf16.h rule, NaN -> quiet NaN with sign and payload top bits kept),
// fused with the diff against the previous BF16 weights and the stream compaction of the changes into
// the four streams of sync/FORMAT.md's varint-gap coding (head, tail, value planes lo and hi), in the
// same order and with the same bytes as the CPU encoder (kernels/diff_emit16.h, diff_emit16_portable
// on the whole tensor): gap = position - (previous change + 1), head = gap & 127 | 128 if tail bytes
// follow, tail = LEB128 of gap >> 7, stored value = new bit pattern or, with `delta`,
// zigzag(new - old) modulo 2^16. What zstd and the container do with the streams is the host's part.
//
// How: 4096 elements per thread block; each block casts and compares its elements, compacts its changes
// (in order) into a per-tile scratch area and records (count, first, last, tail bytes); one block scans
// the tile records (change offsets, the gap of each tile's first change, tail offsets); then each
// non-empty tile copies its compacted streams to their final place. Inputs are read once; the scratch
// traffic is proportional to the changes.
//
// Torch-free: raw device pointers, the CUDA stream as a parameter. Needs a PULSE_CUDA build.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace pulse::kernels::cuda {

/// Device pointers to the four output streams of one tensor. Room: head, lo and hi n bytes each,
/// tail emit16_cuda_tail_room(n) bytes.
struct Emit16Streams {
  uint8_t* head = nullptr;
  uint8_t* tail = nullptr;
  uint8_t* lo = nullptr;
  uint8_t* hi = nullptr;
};

/// What a scan found (copied to the host when the stream reaches the end of the scan).
struct Emit16Totals {
  uint64_t changed = 0;     ///< changes = bytes written to head, lo and hi
  uint64_t tail_bytes = 0;  ///< bytes written to tail
};

/// Tail bytes a scan of n elements may write (one per change plus up to 9 per 4096-element tile).
uint64_t emit16_cuda_tail_room(uint64_t n);

/// Device workspace bytes cast_diff_emit16_cuda needs for n elements (about 4 bytes per element).
size_t emit16_cuda_workspace_bytes(uint64_t n);

/// One tensor of n 2-byte elements on the current device:
///   master   FP32[n] (device) or nullptr. Given: target[i] = BF16_RNE(master[i]) is written (the cast of
///            the masters) and compared with prev. nullptr: target is read only (a BF16 vs BF16 diff).
///   prev     the previous bit patterns [n] (device, read only); may equal target when master is given
///            (in place: each element is read before the cast overwrites it), else must not overlap it
///   target   [n] (device): written with master, read without
///   delta    store zigzag(target - prev) instead of the target's bit pattern
///   out      the streams (device, room as documented at Emit16Streams)
///   workspace, workspace_bytes  device memory of at least emit16_cuda_workspace_bytes(n)
///   totals   host memory: written asynchronously when the stream reaches the end of the work
///            (pinned memory), or before return (pageable memory: cudaMemcpyAsync then blocks)
///   stream   the CUDA stream every kernel and copy is queued on
/// Alignment: none required (16-byte aligned pointers take the vector path). Throws std::invalid_argument
/// for a small workspace or null pointers where n > 0, std::runtime_error when a launch fails.
/// Thread safety: calls on disjoint buffers may run concurrently.
void cast_diff_emit16_cuda(const float* master, const uint16_t* prev, uint16_t* target, uint64_t n,
                           bool delta, const Emit16Streams& out, void* workspace, size_t workspace_bytes,
                           Emit16Totals* totals, cudaStream_t stream);

}  // namespace pulse::kernels::cuda
