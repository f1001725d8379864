// XXH3-64 of a long input finished from a copy of its last bytes (kernels/xxh3_long.h does it from the
// whole input): what a GPU hash needs, where the stripe accumulation of the full blocks runs on the device
// (kernels/xxh3_cuda.h) and only the accumulators and the tail come back to the host. Values and code
// path are libxxhash's own (XXH3 spec, "hashLong"), so the result is exactly XXH3_64bits (seed 0).
#pragma once
#include <cstdint>

#include "kernels/xxh3_long.h"

namespace pulse::kernels {

/// Where the bytes xxh3_long_finish_tail needs start, for a `len`-byte input (len >= kXxh3LongMinBytes):
/// the last partial (or last full) block and the last 64-byte stripe.
constexpr uint64_t xxh3_long_tail_offset(uint64_t len) {
  return xxh3_long_block_bytes(len) < len - 64 ? xxh3_long_block_bytes(len) : len - 64;
}

/// Finishes XXH3_64bits of a `len`-byte input (len >= kXxh3LongMinBytes) after its first
/// xxh3_long_block_bytes(len) bytes were accumulated into `state` (xxh3_long_accumulate_block, or the
/// GPU), from `tail` = the input's bytes [tail_offset, len), tail_offset <= xxh3_long_tail_offset(len).
/// Throws std::invalid_argument for a short input or a tail that starts too late. Reentrant.
uint64_t xxh3_long_finish_tail(Xxh3LongState& state, const uint8_t* tail, uint64_t tail_offset, uint64_t len);

}  // namespace pulse::kernels
