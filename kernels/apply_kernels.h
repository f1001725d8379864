// The decoder's inner loops for the common case of an RL patch: BF16/F16 tensors (2-byte values) with
// varint-gap index streams (sync/FORMAT.md, coding 0). Changes are decoded 64 at a time: the gaps of a
// batch (when every gap fits in one head byte plus at most one tail byte, i.e. < 16384: nearly always
// at RL densities) and its 64 values from the two byte planes are assembled with SIMD, then a tight
// scalar loop writes them (load old, save it as undo, store new). AVX-512 (BW + VBMI2) or AVX2 on
// x86-64 CPUs that have them, checked at run time (the build never assumes them); portable code
// elsewhere. Every path gives the same result bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>

namespace pulse::kernels {

/// Changes per batch of the varint-gap kernels.
constexpr size_t kGapBatch = 64;

/// Sums over the head bytes of a varint-gap stream (validation: sum(gap + 1) <= numel).
struct HeadSums {
  uint64_t low7 = 0;     ///< sum of (head & 127)
  uint64_t flagged = 0;  ///< heads with bit 7 set (one tail chain each)
};

/// Sums of the n head bytes at `head` (fastest path of this CPU).
HeadSums varint_head_sums(const uint8_t* head, uint64_t n);
/// The portable kernel alone (tests compare the paths).
HeadSums varint_head_sums_portable(const uint8_t* head, uint64_t n);

/// Result of decoding one batch of gaps.
struct GapBatch {
  bool ok = false;          ///< false: some gap of the batch has a tail of 2+ bytes (nothing decoded)
  uint32_t tail_bytes = 0;  ///< tail bytes the batch used (= heads with bit 7 set)
  uint32_t sum = 0;         ///< sum of gap1[0..count)
};

/// Decodes `count` (1..64) gaps of a validated varint-gap stream: heads at `head`, tails from `tail`
/// (bytes up to `tail_end` readable). Writes gap1[i] = gap_i + 1 (1..16384) for i < count; gap1 must
/// hold 64 entries (the ones past count are overwritten with unspecified values).
GapBatch decode_gap_batch(const uint8_t* head, const uint8_t* tail, const uint8_t* tail_end, size_t count,
                          uint16_t* gap1);
GapBatch decode_gap_batch_portable(const uint8_t* head, const uint8_t* tail, const uint8_t* tail_end,
                                   size_t count, uint16_t* gap1);

/// Assembles `count` (1..64) 2-byte values from their byte planes lo[i] | hi[i] << 8, un-zigzagged when
/// `delta` (kernels/int_coding.h). out must hold 64 entries (past count: unspecified values).
void assemble_u16_values(const uint8_t* lo, const uint8_t* hi, size_t count, bool delta, uint16_t* out);
void assemble_u16_values_portable(const uint8_t* lo, const uint8_t* hi, size_t count, bool delta,
                                  uint16_t* out);

/// Which kernels this CPU runs: "avx512", "avx2" or "portable".
const char* apply_kernels_isa();

/// Makes the whole process use the kernels of `isa` ("avx512", "avx2", "portable"; nullptr = the
/// CPU's fastest again). Returns false (and changes nothing) when this CPU cannot run them. Tests only.
bool apply_kernels_force(const char* isa);

/// Receives the bytes of a tensor block by block, in order (apply_varint_u16 hashes with it): calls
/// fn(ctx, data, bytes). A plain function pointer so that the kernels need no hash library type.
struct BlockSink {
  void (*fn)(void* ctx, const uint8_t* data, uint64_t bytes) = nullptr;
  void* ctx = nullptr;
  void operator()(const uint8_t* data, uint64_t bytes) const { fn(ctx, data, bytes); }
};

/// Applies a validated varint-gap patch tensor of 2-byte elements in place. `weights`: n elements
/// (2 n bytes); `streams`: the tensor's index stream (index_bytes bytes: `changed` heads, then tails)
/// followed by its value stream (lo plane, hi plane: `changed` bytes each). Saves the old value of
/// the j-th change at undo[2 j .. 2 j + 2) (2 * changed bytes). Hands the tensor to `hash` one
/// 64 KiB block at a time, right after the block's changes are written (while it is in cache), with
/// the next block prefetched, and before any change of a later block is written (so the sink may read
/// the next block's old bytes: sync/patch_apply.cpp hashes the base there). Returns nothing; the caller
/// digests its hash.
void apply_varint_u16(uint8_t* weights, uint64_t n, const uint8_t* streams, uint64_t index_bytes,
                      uint64_t changed, bool delta, uint8_t* undo, BlockSink hash);

}  // namespace pulse::kernels
