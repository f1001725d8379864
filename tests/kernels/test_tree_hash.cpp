// The tree hash (kernels/tree_hash.h, PULSESync format 3's tensor hash) on every XXH3 variant this CPU
// runs equals its definition computed with libxxhash alone, at the chunk edges (empty, one chunk = plain
// XXH3, a last chunk under and over 241 bytes, more than 64 chunks: the leaves off the stack), from
// misaligned pointers; and the combine of 0 / 1 / n leaves.
#include <xxhash.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kernels/tree_hash.h"
#include "kernels/xxh3_long.h"

using namespace pulse::kernels;

namespace {

uint64_t reference(const uint8_t* p, uint64_t len) {
  if (len <= kTreeHashChunkBytes) return XXH3_64bits(p, len);
  std::vector<uint64_t> leaves;
  for (uint64_t at = 0; at < len; at += kTreeHashChunkBytes)
    leaves.push_back(XXH3_64bits(p + at, std::min<uint64_t>(kTreeHashChunkBytes, len - at)));
  return XXH3_64bits(leaves.data(), 8 * leaves.size());
}

}  // namespace

TEST_CASE("tree_hash64 equals its definition on every XXH3 variant, at chunk edges and offsets",
          "[kernels][tree_hash]") {
  std::mt19937_64 rng(3);
  std::vector<uint8_t> data(70 * kTreeHashChunkBytes + 1000);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (const char* isa : {"avx512", "avx2", "portable"}) {
    if (!xxh3_long_supported(isa)) continue;
    REQUIRE(xxh3_long_force(isa));
    for (uint64_t len :
         {uint64_t{0}, uint64_t{1}, uint64_t{240}, uint64_t{241}, kTreeHashChunkBytes - 1,
          kTreeHashChunkBytes, kTreeHashChunkBytes + 1, kTreeHashChunkBytes + 240, kTreeHashChunkBytes + 241,
          3 * kTreeHashChunkBytes + 4097, 64 * kTreeHashChunkBytes, 70 * kTreeHashChunkBytes + 999}) {
      for (uint64_t off : {0, 1, 7}) {
        INFO(isa << ": len " << len << " offset " << off);
        CHECK(tree_hash64(data.data() + off, len) == reference(data.data() + off, len));
      }
    }
  }
  xxh3_long_force(nullptr);
  // One chunk or less is plain XXH3 (format versions 1 and 2 hash such a tensor the same way).
  CHECK(tree_hash64(data.data(), 5000) == XXH3_64bits(data.data(), 5000));
  CHECK(tree_hash64(nullptr, 0) == XXH3_64bits(nullptr, 0));
}

TEST_CASE("tree_hash_combine: none is XXH3 of nothing, one is the leaf, more is XXH3 of the leaves",
          "[kernels][tree_hash]") {
  const uint64_t leaves[3] = {0x0123456789abcdefull, 42, 7};
  CHECK(tree_hash_combine(leaves, 0) == XXH3_64bits(nullptr, 0));
  CHECK(tree_hash_combine(leaves, 1) == leaves[0]);
  uint8_t bytes[24];
  for (int i = 0; i < 24; ++i) bytes[i] = static_cast<uint8_t>(leaves[i / 8] >> (8 * (i % 8)));
  CHECK(tree_hash_combine(leaves, 3) == XXH3_64bits(bytes, 24));
  CHECK(tree_hash_chunks(0) == 0);
  CHECK(tree_hash_chunks(kTreeHashChunkBytes) == 1);
  CHECK(tree_hash_chunks(kTreeHashChunkBytes + 1) == 2);
  CHECK(tree_hash_chunk_len(kTreeHashChunkBytes + 1, 1) == 1);
}
