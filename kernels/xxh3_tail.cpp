#include "kernels/xxh3_tail.h"

#include <stdexcept>
#include <string>

// libxxhash's own definitions (constants, scalar accumulate, merge), private to this file.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace pulse::kernels {

uint64_t xxh3_long_finish_tail(Xxh3LongState& state, const uint8_t* tail, uint64_t tail_offset,
                               uint64_t len) {
  if (len < kXxh3LongMinBytes)
    throw std::invalid_argument("xxh3_long_finish_tail: " + std::to_string(len) + "-byte input is not long");
  if (tail_offset > xxh3_long_tail_offset(len))
    throw std::invalid_argument("xxh3_long_finish_tail: tail starts at byte " + std::to_string(tail_offset) +
                                ", needs " + std::to_string(xxh3_long_tail_offset(len)) + " or earlier");
  // XXH3_hashLong_internal_loop after its block loop, then XXH3_hashLong_64b_internal's merge (as
  // xxh3_long_finish in kernels/xxh3_long.cpp, with offsets into the tail copy).
  const uint64_t done = xxh3_long_block_bytes(len);
  const uint64_t stripes = (len - 1 - done) / XXH_STRIPE_LEN;
  for (uint64_t s = 0; s < stripes; ++s)
    XXH3_accumulate_512_scalar(state.acc, tail + (done - tail_offset) + s * XXH_STRIPE_LEN,
                               XXH3_kSecret + s * XXH_SECRET_CONSUME_RATE);
  XXH3_accumulate_512_scalar(state.acc, tail + (len - XXH_STRIPE_LEN - tail_offset),
                             XXH3_kSecret + sizeof(XXH3_kSecret) - XXH_STRIPE_LEN - XXH_SECRET_LASTACC_START);
  return XXH3_mergeAccs(state.acc, XXH3_kSecret + XXH_SECRET_MERGEACCS_START,
                        static_cast<uint64_t>(len) * XXH_PRIME64_1);
}

}  // namespace pulse::kernels
