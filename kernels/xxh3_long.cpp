#include "kernels/xxh3_long.h"

// libxxhash's own definitions (constants, scalar accumulate/scramble, merge), private to this file.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace pulse::kernels {

static_assert(sizeof(XXH3_kSecret) == 192, "XXH3 default secret is 192 bytes");

void xxh3_long_init(Xxh3LongState& state) {
  const uint64_t init[8] = XXH3_INIT_ACC;
  for (int i = 0; i < 8; ++i) state.acc[i] = init[i];
}

const uint8_t* xxh3_default_secret() {
  return XXH3_kSecret;
}

void xxh3_long_accumulate_block(Xxh3LongState& state, const uint8_t* block) {
  for (uint64_t s = 0; s < kXxh3BlockBytes / XXH_STRIPE_LEN; ++s)
    XXH3_accumulate_512_scalar(state.acc, block + s * XXH_STRIPE_LEN,
                               XXH3_kSecret + s * XXH_SECRET_CONSUME_RATE);
  XXH3_scrambleAcc_scalar(state.acc, XXH3_kSecret + sizeof(XXH3_kSecret) - XXH_STRIPE_LEN);
}

uint64_t xxh3_long_finish(Xxh3LongState& state, const uint8_t* input, uint64_t len) {
  // XXH3_hashLong_internal_loop after its block loop, then XXH3_hashLong_64b_internal's merge.
  const uint64_t done = xxh3_long_block_bytes(len);
  const uint64_t stripes = (len - 1 - done) / XXH_STRIPE_LEN;
  for (uint64_t s = 0; s < stripes; ++s)
    XXH3_accumulate_512_scalar(state.acc, input + done + s * XXH_STRIPE_LEN,
                               XXH3_kSecret + s * XXH_SECRET_CONSUME_RATE);
  XXH3_accumulate_512_scalar(state.acc, input + len - XXH_STRIPE_LEN,
                             XXH3_kSecret + sizeof(XXH3_kSecret) - XXH_STRIPE_LEN - XXH_SECRET_LASTACC_START);
  return XXH3_mergeAccs(state.acc, XXH3_kSecret + XXH_SECRET_MERGEACCS_START,
                        static_cast<uint64_t>(len) * XXH_PRIME64_1);
}

}  // namespace pulse::kernels
