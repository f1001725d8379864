// XXH3-64 of long inputs with the stripe accumulation done by the caller: the encoder's scan kernel
// (kernels/diff_emit16.h) already holds every 64-byte stripe of base and target in registers, so it
// accumulates them there instead of reading the block again for libxxhash (measured: hashing both
// sides was ~15% of encode time at 7% density). Initial state, secret, the last partial block, the last
// stripe and the final merge come from libxxhash itself (XXH3 spec, "hashLong"), so the value is
// exactly XXH3_64bits (seed 0) of the input; tests compare the two.
#pragma once
#include <cstddef>
#include <cstdint>

namespace pulse::kernels {

/// XXH3's long-input accumulators (8 x u64), 64-byte aligned for vector loads.
struct alignas(64) Xxh3LongState {
  uint64_t acc[8];
};

/// Inputs longer than this use the long-input algorithm (XXH3 hashes shorter ones differently).
constexpr uint64_t kXxh3LongMinBytes = 241;
/// Bytes per accumulation block: 16 stripes of 64 bytes, a scramble after each block.
constexpr uint64_t kXxh3BlockBytes = 1024;

/// The initial accumulators (XXH3_INIT_ACC).
void xxh3_long_init(Xxh3LongState& state);

/// XXH3's default 192-byte secret.
const uint8_t* xxh3_default_secret();

/// Bytes of a `len`-byte input (len >= kXxh3LongMinBytes) that the caller accumulates itself: the full
/// blocks, (len - 1) / 1024 * 1024 bytes (the last block is finished by xxh3_long_finish even when full).
constexpr uint64_t xxh3_long_block_bytes(uint64_t len) {
  return (len - 1) / kXxh3BlockBytes * kXxh3BlockBytes;
}

/// Finishes the hash of `input` (len >= kXxh3LongMinBytes bytes) after the caller accumulated its first
/// xxh3_long_block_bytes(len) bytes into `state` (stripe s of each block with key secret + 8 s, then
/// the scramble): the remaining stripes, the last stripe and the merge. Returns XXH3_64bits(input, len).
uint64_t xxh3_long_finish(Xxh3LongState& state, const uint8_t* input, uint64_t len);

/// Portable reference of the caller's part (tests): accumulates the block at `block` (1024 bytes).
void xxh3_long_accumulate_block(Xxh3LongState& state, const uint8_t* block);

}  // namespace pulse::kernels
