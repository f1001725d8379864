// The encoder's inner loop for 2-byte elements (BF16, F16: every RL weight): one pass that compares base
// and target and appends, per changed element, its varint-gap index bytes and its value bytes straight
// into the patch's streams (sync/FORMAT.md: head, tail, value planes lo = byte 0, hi = byte 1).
//
// Why a dedicated kernel: at RL densities (1-10% of elements change) the per-change work dominates the
// encoder once memory is streamed; a scalar loop over the set bits of a difference mask mispredicts its
// exit about once per mask word. The AVX-512 kernel (BW + VBMI + VBMI2, checked at run time) handles 64
// elements per step without data-dependent branches: vpcompressb packs the changed lanes' value bytes
// and in-group gaps; only the first change of a group needs its gap from the previous group; XXH3 of
// both sides is accumulated from the same registers. The portable kernel gives the same bytes on every
// CPU.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/xxh3_long.h"

namespace pulse::kernels {

/// Write cursors into the four streams of one tensor, advanced by diff_emit16.
struct Emit16Cursor {
  uint8_t* head = nullptr;  ///< one byte per change: gap & 127, bit 7 set when tail bytes follow
  uint8_t* tail = nullptr;  ///< LEB128 of gap >> 7, for gaps >= 128
  uint8_t* lo = nullptr;    ///< value plane 0: byte 0 of each stored value
  uint8_t* hi = nullptr;    ///< value plane 1: byte 1 of each stored value
  uint64_t next = 0;        ///< position after the previous change (origin of the next gap)
};

/// XXH3 accumulators that diff_emit16 advances over the bytes it scans (kernels/xxh3_long.h): the stripes of
/// every full 1024-byte block below `block_bytes` (= xxh3_long_block_bytes(tensor bytes)), counted from
/// the tensor's start. Null base/target: that side is not hashed.
struct Emit16Hash {
  Xxh3LongState* base = nullptr;
  Xxh3LongState* target = nullptr;
  uint64_t block_bytes = 0;
  const uint8_t* secret = nullptr;  ///< xxh3_default_secret()
};

/// Bytes diff_emit16 may write past `head`, `lo` and `hi` for `count` elements (it stores whole
/// vectors; only the changes' bytes are kept).
constexpr uint64_t emit16_room(uint64_t count) {
  return count + 64;
}
/// Bytes it may write past `tail` for `count` elements.
constexpr uint64_t emit16_tail_room(uint64_t count) {
  return 9 * (count / 32 + 2);
}

/// Compares `count` 2-byte elements of base `a` and target `b` (element positions start .. start +
/// count - 1 of the tensor, increasing across calls) and appends every changed element (bit patterns
/// differ) to the streams: gap = position - cursor.next, then the stored value: the target's bit
/// pattern, or with `delta` zigzag(target - base) modulo 2^16 (kernels/int_coding.h, sync/value_coding.h).
/// Returns the number of changes. The cursors need emit16_room(count) / emit16_tail_room(count) bytes of
/// room. With `hash` (only where diff_emit16_uses_avx512(); `start` a multiple of 64, and `count` too unless
/// the call reaches the tensor's end) it also accumulates XXH3 over the scanned bytes of both sides.
/// Throws std::invalid_argument when `hash` is given without the AVX-512 kernel or misaligned.
uint64_t diff_emit16(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count, bool delta,
                     Emit16Cursor& cursor, Emit16Hash* hash = nullptr);

/// The portable kernel alone (tests compare it with the dispatched one).
uint64_t diff_emit16_portable(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count, bool delta,
                              Emit16Cursor& cursor);

/// Whether diff_emit16 runs the AVX-512 kernel on this CPU.
bool diff_emit16_uses_avx512();

/// Makes the whole process use the portable kernel (true) or the CPU's fastest again (false): the encoder
/// then also hashes with libxxhash instead of inside the kernel. Tests only (CI CPUs may lack AVX-512).
void diff_emit16_force_portable(bool portable);

}  // namespace pulse::kernels
