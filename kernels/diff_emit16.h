// The encoder's inner loop for 2-byte elements (BF16, F16: every RL weight): one pass that compares base
// and target and appends, per changed element, its varint-gap index bytes and its value bytes straight
// into the patch's streams (sync/FORMAT.md: head, tail, value planes lo = byte 0, hi = byte 1).
//
// Why a dedicated kernel: at RL densities (1-10% of elements change) the per-change work dominates the
// encoder once memory is streamed; a scalar loop over the set bits of a difference mask mispredicts its
// exit about once per mask word. Variants, picked at run time through one dispatch (the build never
// assumes them; diff_emit16_force overrides, as loco_gate_force does for kernels/loco_gate.h):
//   "avx512"   AVX-512 BW + VL + VBMI + VBMI2 (+ BMI1/2, LZCNT, POPCNT): 64 elements per step without
//              data-dependent branches: vpcompressb packs the changed lanes' value bytes and in-group gaps;
//   "avx2"     AVX2 + BMI1/2 + LZCNT + POPCNT: 64-element change masks for a tile of 8 groups (vector
//              pass, with the hashes), then the tile's changes emitted from the masks: change by change
//              (tzcnt / blsr, unconditional slots) in groups of <= 8 changes, else in eight 8-lane
//              sub-groups, each packed by a pshufb control indexed by its 8-bit mask (kernels/byte_tables.h);
//   "portable" the scalar reference (64-bit word compares, a loop over set bits) on every CPU.
// In both SIMD kernels only the first change of a group needs its gap from the previous group, and XXH3
// of both sides is accumulated from the registers the scan loaded. Every variant writes the same bytes.
//
// The SIMD kernels scan in windows of 8192 elements and pick each window's path by the changes in the
// window before (Emit16Cursor::recent_changes). Where changes are sparse about half of the 64-element
// groups are empty at 1% density, at random, so a branch on an empty group mispredicts about every second
// group: there the AVX-512 kernel compares and hashes a tile of 8 groups first and then emits only the
// non-empty ones (the loop over their set bits mispredicts about once per tile, at its exit), below 2.2%;
// the AVX2 kernel, whose emission already follows its vector pass, visits the non-empty groups by their
// set bits below 2%. The crossovers were measured: bench/RESULTS.md, "Kernel measurements (moved from
// headers)".
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
  /// Changes in the last window (8192 elements, fewer at a call's end; not scaled) the SIMD kernels
  /// scanned; they read it to pick the next window's path and write it back (the portable kernel leaves
  /// it). 0 at a tensor's start. The bytes written are the same whatever it holds.
  uint64_t recent_changes = 0;
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
/// room (bytes past the returned cursors are unspecified). Alignment: none required. With `hash` (only
/// where diff_emit16_fuses_hash(); `start` a multiple of 64, and `count` too unless the call reaches the
/// tensor's end) it also accumulates XXH3 over the scanned bytes of both sides. Throws
/// std::invalid_argument when `hash` is given to the portable variant or `start` is misaligned. Runs the
/// variant diff_emit16_isa() names; reentrant (calls on disjoint cursors may run concurrently).
uint64_t diff_emit16(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count, bool delta,
                     Emit16Cursor& cursor, Emit16Hash* hash = nullptr);

/// The portable kernel alone (the reference the tests compare every variant with; no hashing).
uint64_t diff_emit16_portable(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count, bool delta,
                              Emit16Cursor& cursor);

/// Which variant diff_emit16 runs now: "avx512", "avx2" or "portable". Thread safe.
const char* diff_emit16_isa();

/// Whether the variant diff_emit16 runs now accumulates XXH3 (Emit16Hash): true for "avx512" and
/// "avx2". The encoder otherwise hashes with libxxhash.
bool diff_emit16_fuses_hash();

/// Whether this CPU (and this build) can run the variant `isa` ("avx512", "avx2", "portable").
bool diff_emit16_supported(const char* isa);

/// Makes the whole process run variant `isa` ("avx512", "avx2", "portable"; nullptr = the CPU's fastest
/// again). Returns false and changes nothing when the CPU cannot run it or the name is unknown. Meant for
/// tests and benchmarks; thread safe (an atomic), but a caller that checked diff_emit16_fuses_hash()
/// before a concurrent force may then get std::invalid_argument from diff_emit16.
bool diff_emit16_force(const char* isa);

}  // namespace pulse::kernels
