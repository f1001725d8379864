// Xxh3Blocks (sync/hash.h), the apply pass's block-by-block hash: fed in pieces of any size up to the
// end, then finished from the input, equals XXH3_64bits; finished from the tail it saved before the
// input was overwritten, equals the hash of the input as it was; short inputs and misuse.
#include <unistd.h>
#include <xxhash.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "sync/hash.h"
#include "sync/io/atomic_file.h"
#include "tests/test_paths.h"

using namespace pulse::sync;

TEST_CASE("Xxh3Blocks fed in pieces equals XXH3_64bits, also from a saved tail", "[sync][hash]") {
  std::mt19937_64 rng(4);
  std::vector<uint8_t> data(300000);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (uint64_t len : {0ull, 1ull, 240ull, 241ull, 1024ull, 1025ull, 2048ull, 2049ull, 65536ull, 65537ull,
                       3ull * 65536 - 100, 299999ull}) {
    for (uint64_t piece : {1024ull, 3072ull, 5000ull, 65536ull}) {
      INFO("length " << len << " pieces of " << piece);
      const uint64_t want = XXH3_64bits(data.data(), len);
      Xxh3Blocks a(len);
      for (uint64_t end = piece; end < len; end += piece) a.add(data.data(), end);
      CHECK(a.finish(data.data()) == want);

      // The base side of an apply: tail saved first, each piece hashed before it is overwritten (the
      // pieces then end at block edges: a block an end cuts is accumulated by the next call).
      if (piece % 1024 != 0) continue;
      std::vector<uint8_t> copy(data.begin(), data.begin() + static_cast<long>(len));
      Xxh3Blocks b(len);
      b.save_tail(copy.data());
      for (uint64_t start = 0; start < len; start += piece) {
        const uint64_t end = std::min(len, start + piece);
        b.add(copy.data(), end);
        for (uint64_t i = start; i < end; ++i) copy[i] ^= 0x5a;
      }
      CHECK(b.finish_saved() == want);
    }
  }
}

TEST_CASE("Xxh3Blocks refuses to finish from a tail it did not save or blocks it did not see",
          "[sync][hash]") {
  std::vector<uint8_t> data(5000, 7);
  Xxh3Blocks a(5000);
  CHECK_THROWS_AS(a.finish_saved(), std::logic_error);
  a.save_tail(data.data());
  a.add(data.data(), 2048);
  CHECK_THROWS_AS(a.finish_saved(), std::logic_error);
  a.add(data.data(), 5000);
  CHECK(a.finish_saved() == XXH3_64bits(data.data(), 5000));
}

TEST_CASE("Xxh3Stream fed in pieces of any size equals XXH3_64bits", "[sync][hash]") {
  std::mt19937_64 rng(9);
  std::vector<uint8_t> data(200000);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  // Every length up to 2100 in random pieces (many end exactly at or just past a 1024-byte block).
  for (uint64_t len = 0; len <= 2100; ++len) {
    Xxh3Stream s;
    for (uint64_t at = 0; at < len;) {
      const uint64_t piece =
          std::min<uint64_t>(len - at, rng() % 3 == 0 ? 1024 - at % 1024 : 1 + rng() % 700);
      s.update(data.data() + at, piece);
      at += piece;
    }
    if (s.digest() != XXH3_64bits(data.data(), len)) FAIL("length " << len);
  }
  // Long inputs in fixed pieces (the encoder's 64 KiB blocks), with digests on the way.
  for (uint64_t piece : {1ull, 63ull, 64ull, 1023ull, 1024ull, 1025ull, 65536ull}) {
    const uint64_t len = piece == 1 ? 5000 : 200000 - 3;
    Xxh3Stream s;
    for (uint64_t at = 0; at < len; at += piece) {
      const uint64_t n = std::min(piece, len - at);
      s.update(data.data() + at, n);
      if (at % 7 == 0) REQUIRE(s.digest() == XXH3_64bits(data.data(), at + n));
    }
    INFO("pieces of " << piece);
    REQUIRE(s.digest() == XXH3_64bits(data.data(), len));
  }
  Xxh3Stream empty;
  empty.update(nullptr, 0);
  CHECK(empty.digest() == XXH3_64bits(nullptr, 0));
}

TEST_CASE("xxh3_file equals XXH3_64bits of the file's bytes, also past one 4 MiB piece", "[sync][hash]") {
  // stories260k's weights (~1 MB) and a 9 MiB + 3 byte file: one piece and several.
  const std::string real = pulse::test::shared_path("models/stories260k/model.safetensors");
  const std::string bytes = pulse::sync::read_file(real);
  uint64_t n = 0;
  CHECK(pulse::sync::xxh3_file(real, &n) == XXH3_64bits(bytes.data(), bytes.size()));
  CHECK(n == bytes.size());
  const std::string big_path =
      (std::filesystem::temp_directory_path() / ("pulse-xxh3-file-" + std::to_string(::getpid()))).string();
  std::string big((9u << 20) + 3, '\0');
  std::mt19937_64 rng(3);
  for (auto& c : big) c = static_cast<char>(rng());
  pulse::sync::write_file_atomic(big_path, big);
  CHECK(pulse::sync::xxh3_file(big_path, &n) == XXH3_64bits(big.data(), big.size()));
  CHECK(n == big.size());
  std::filesystem::remove(big_path);
  CHECK_THROWS_WITH(pulse::sync::xxh3_file(big_path), Catch::Contains(big_path));
}

TEST_CASE("TensorHashBlocks fed in 64 KiB pieces equals tensor_hash under both schemes, also saved",
          "[sync][hash]") {
  std::mt19937_64 rng(5);
  std::vector<uint8_t> data(5 * 65536 + 300);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (HashScheme scheme : {HashScheme::Xxh3, HashScheme::Tree}) {
    for (uint64_t len :
         {0ull, 240ull, 65536ull, 65537ull, 2ull * 65536 + 240, 2ull * 65536 + 241, 5ull * 65536 + 300}) {
      for (uint64_t piece : {65536ull, 3ull * 65536}) {
        INFO("scheme " << static_cast<int>(scheme) << " length " << len << " pieces of " << piece);
        const TensorView view{"t", DType::U8, {static_cast<int64_t>(len)}, data.data(), len};
        const uint64_t want = tensor_hash(view, scheme);
        TensorHashBlocks a(len, scheme);
        for (uint64_t end = piece; end < len; end += piece) a.add(data.data(), end);
        CHECK(a.finish(data.data()) == want);
        // The base side of an apply: every piece added before it is overwritten.
        std::vector<uint8_t> copy(data.begin(), data.begin() + static_cast<long>(len));
        TensorHashBlocks b(len, scheme);
        b.save_tail(copy.data());
        for (uint64_t start = 0; start < len; start += piece) {
          const uint64_t end = std::min(len, start + piece);
          b.add(copy.data(), end);
          for (uint64_t i = start; i < end; ++i) copy[i] ^= 0x5a;
        }
        CHECK(b.finish_saved() == want);
      }
    }
  }
  // The schemes agree up to one chunk and differ past it.
  const TensorView small{"s", DType::U8, {65536}, data.data(), 65536};
  const TensorView big{"b", DType::U8, {65537}, data.data(), 65537};
  CHECK(tensor_hash(small, HashScheme::Tree) == tensor_hash(small, HashScheme::Xxh3));
  CHECK(tensor_hash(big, HashScheme::Tree) != tensor_hash(big, HashScheme::Xxh3));
  CHECK(tensor_hash(big) == pulse::kernels::tree_hash64(data.data(), 65537));
  TensorHashBlocks c(65537, HashScheme::Tree);
  c.save_tail(data.data());
  c.add(data.data(), 65536);
  CHECK_THROWS_AS(c.finish_saved(), std::logic_error);
}
