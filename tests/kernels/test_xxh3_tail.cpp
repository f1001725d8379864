// xxh3_long_finish_tail (kernels/xxh3_tail.h), the host half of the GPU hash: accumulating the full
// blocks with the portable reference and finishing from a copy of only the last bytes gives exactly
// libxxhash's XXH3_64bits, at lengths around the stripe and block edges, with the tail copy starting
// exactly at xxh3_long_tail_offset or earlier; a short input or a late tail is refused.
#include <xxhash.h>
#include <catch2/catch.hpp>

#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/xxh3_long.h"
#include "kernels/xxh3_tail.h"

using namespace pulse::kernels;

TEST_CASE("xxh3_long_finish_tail equals XXH3_64bits from the last bytes alone", "[kernels][xxh3]") {
  std::mt19937_64 rng(21);
  std::vector<uint8_t> data(300000);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (uint64_t len : {241ull, 255ull, 256ull, 1023ull, 1024ull, 1025ull, 1087ull, 1088ull, 1089ull, 2047ull,
                       2048ull, 2049ull, 4096ull + 63, 4096ull + 64, 4096ull + 65, 299999ull}) {
    for (uint64_t earlier : {0ull, 1ull, 100ull}) {
      const uint64_t offset =
          xxh3_long_tail_offset(len) >= earlier ? xxh3_long_tail_offset(len) - earlier : 0;
      INFO("len " << len << " tail offset " << offset);
      Xxh3LongState state;
      xxh3_long_init(state);
      for (uint64_t b = 0; b < xxh3_long_block_bytes(len); b += kXxh3BlockBytes)
        xxh3_long_accumulate_block(state, data.data() + b);
      const std::vector<uint8_t> tail(data.begin() + static_cast<long>(offset),
                                      data.begin() + static_cast<long>(len));
      REQUIRE(xxh3_long_finish_tail(state, tail.data(), offset, len) == XXH3_64bits(data.data(), len));
    }
  }
  Xxh3LongState state;
  xxh3_long_init(state);
  REQUIRE_THROWS_AS(xxh3_long_finish_tail(state, data.data(), 0, 240), std::invalid_argument);
  REQUIRE_THROWS_AS(xxh3_long_finish_tail(state, data.data(), xxh3_long_tail_offset(5000) + 1, 5000),
                    std::invalid_argument);
}
