// xxh3_long_accumulate (kernels/xxh3_long.h) on every variant this CPU runs, and xxh3_64bits built on it:
// bit for bit libxxhash's XXH3_64bits at every length 0..2100 (short inputs, the 240/241 edge, the
// stripe and 1024-byte block edges), around block edges further out, at a few MB, and from pointers at
// every offset in a cache line; the accumulator state after n blocks equals the portable reference's.
#include <xxhash.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/xxh3_long.h"

using namespace pulse::kernels;

namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

/// The variants this CPU runs (portable always).
std::vector<std::string> variants() {
  std::vector<std::string> out;
  for (const char* isa : {"avx512", "avx2", "portable"})
    if (xxh3_long_supported(isa)) out.push_back(isa);
  return out;
}

/// Forces `isa` while alive, the CPU's fastest again afterwards.
struct ForceXxh3 {
  explicit ForceXxh3(const std::string& isa) { REQUIRE(xxh3_long_force(isa.c_str())); }
  ~ForceXxh3() { xxh3_long_force(nullptr); }
};

}  // namespace

TEST_CASE("xxh3_long: the portable variant always runs, unknown names are refused", "[kernels][xxh3]") {
  REQUIRE(xxh3_long_supported("portable"));
  REQUIRE_FALSE(xxh3_long_supported("sse9"));
  REQUIRE_FALSE(xxh3_long_supported(nullptr));
  const std::string before = xxh3_long_isa();
  REQUIRE_FALSE(xxh3_long_force("sse9"));
  REQUIRE(xxh3_long_isa() == before);
  {
    ForceXxh3 force("portable");
    REQUIRE(std::string(xxh3_long_isa()) == "portable");
  }
  REQUIRE(xxh3_long_isa() == before);
}

TEST_CASE("xxh3_long_accumulate: every variant leaves the portable reference's state", "[kernels][xxh3]") {
  const auto data = random_bytes(64 * 1024 + 64, 5);
  for (const auto& isa : variants()) {
    ForceXxh3 force(isa);
    for (uint64_t blocks : {1ull, 2ull, 3ull, 17ull, 64ull}) {
      for (size_t misalign : {0, 1, 7, 33, 63}) {
        INFO(isa << ": " << blocks << " blocks at offset " << misalign);
        Xxh3LongState want, got;
        xxh3_long_init(want);
        xxh3_long_init(got);
        for (uint64_t b = 0; b < blocks; ++b)
          xxh3_long_accumulate_block(want, data.data() + misalign + b * kXxh3BlockBytes);
        xxh3_long_accumulate(got, data.data() + misalign, blocks);
        REQUIRE(std::memcmp(want.acc, got.acc, sizeof want.acc) == 0);
      }
      Xxh3LongState got;  // in pieces: the state carries over between calls
      xxh3_long_init(got);
      Xxh3LongState want = got;
      xxh3_long_accumulate(want, data.data(), 3);
      xxh3_long_accumulate(got, data.data(), 1);
      xxh3_long_accumulate(got, data.data() + kXxh3BlockBytes, 2);
      REQUIRE(std::memcmp(want.acc, got.acc, sizeof want.acc) == 0);
    }
  }
}

TEST_CASE("xxh3_64bits equals XXH3_64bits at every length 0..2100, unaligned, on every variant",
          "[kernels][xxh3]") {
  const auto data = random_bytes(2100 + 64, 11);
  for (const auto& isa : variants()) {
    ForceXxh3 force(isa);
    for (size_t misalign : {0, 1, 3, 8, 31, 63}) {
      const uint8_t* p = data.data() + misalign;
      for (uint64_t len = 0; len <= 2100; ++len) {
        const uint64_t want = XXH3_64bits(p, len);
        if (xxh3_64bits(p, len) != want) FAIL(isa << ": length " << len << " at offset " << misalign);
      }
    }
    REQUIRE(xxh3_64bits(nullptr, 0) == XXH3_64bits(nullptr, 0));
  }
}

TEST_CASE("xxh3_64bits equals XXH3_64bits around far block edges and at a few MB, on every variant",
          "[kernels][xxh3]") {
  const auto data = random_bytes((5u << 20) + 100, 13);
  std::vector<uint64_t> lens = {(5u << 20) + 37, 3u << 20, (1u << 20) + 1};
  for (uint64_t base : {64ull * 1024, 65ull * 1024, 1024ull * 1024})
    for (int64_t d : {-65, -64, -63, -1, 0, 1, 63, 64, 65}) lens.push_back(base + static_cast<uint64_t>(d));
  for (const auto& isa : variants()) {
    ForceXxh3 force(isa);
    for (uint64_t len : lens)
      for (size_t misalign : {0, 5}) {
        INFO(isa << ": length " << len << " at offset " << misalign);
        REQUIRE(xxh3_64bits(data.data() + misalign, len) == XXH3_64bits(data.data() + misalign, len));
      }
  }
}

TEST_CASE("xxh3_64bits equals XXH3_64bits on inputs with all bits set and all clear", "[kernels][xxh3]") {
  // Extreme lane values: the 32 x 32-bit products and the u64 sums wrap.
  for (uint8_t fill : {uint8_t{0}, uint8_t{0xff}}) {
    const std::vector<uint8_t> data(70000, fill);
    for (const auto& isa : variants()) {
      ForceXxh3 force(isa);
      for (uint64_t len : {241ull, 1025ull, 4096ull, 70000ull}) {
        INFO(isa << ": length " << len << " of byte " << int(fill));
        REQUIRE(xxh3_64bits(data.data(), len) == XXH3_64bits(data.data(), len));
      }
    }
  }
}
