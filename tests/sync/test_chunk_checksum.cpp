// sync/patch_container.h: a chunk's checksum is computed by whichever compress_planned_frame call
// finishes its last frame (frames compressed in any order, on any thread), and assemble_container appends
// such chunks without recomputing it. The checksum must equal XXH3-64 of the stored frames, and patches
// that mix compressed and raw chunks must still read back (read_payload verifies every checksum).
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "sync/hash.h"
#include "sync/patch.h"
#include "sync/patch_container.h"
#include "tests/sync/patch_test_util.h"

using namespace pulse::sync;

namespace {

/// `n` bytes: skewed (compressible) when `skewed`, else uniform (stored raw by the codec).
std::vector<uint8_t> stream_bytes(size_t n, bool skewed, uint32_t seed) {
  std::mt19937 rng(seed);
  std::geometric_distribution<int> geo(0.3);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(skewed ? geo(rng) : rng());
  return out;
}

}  // namespace

TEST_CASE("the frame that finishes a chunk checksums its frames, in any order", "[sync][container]") {
  const auto a = stream_bytes(200000, true, 1), b = stream_bytes(70000, true, 2),
             c = stream_bytes(9000, true, 3);
  const std::vector<PayloadSegment> chunk = {
      {a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  ChunkPlan plan = plan_chunk(chunk, 3);
  REQUIRE(plan.pieces.size() == 3);
  // Frames 2 and 1 on two threads at once, then frame 0 last: only that call may checksum.
  std::thread t1([&] { compress_planned_frame(plan, 2); });
  std::thread t2([&] { compress_planned_frame(plan, 1); });
  t1.join();
  t2.join();
  CHECK_FALSE(plan.chunk.frames_checksummed);
  compress_planned_frame(plan, 0);
  REQUIRE(plan.chunk.frames_checksummed);
  std::vector<uint8_t> stored;
  for (const auto& f : plan.chunk.frames) stored.insert(stored.end(), f.data(), f.data() + f.size());
  CHECK(plan.chunk.frames_checksum == xxh3_64(stored.data(), stored.size()));
  const CompressedChunk done = finish_chunk(std::move(plan));
  CHECK(done.codec == kChunkZstd);
  CHECK(done.frames_checksummed);
}

TEST_CASE("a patch of compressed and raw chunks applies with verified checksums", "[sync][container]") {
  // "a": 1 in 30 elements one ULP apart (compressed chunks); "b", in the mixed case, every element
  // rewritten with random bits (its low value plane does not shrink: raw chunks).
  for (const bool mixed : {false, true}) {
    test::Bf16Model m({"a", "b"}, {300000, 200000}, 7, 30);
    std::mt19937 rng(11);
    if (mixed)
      for (auto& x : m.target[1]) x = static_cast<uint16_t>(rng());
    PatchOptions opt;
    opt.chunk_bytes = 128 << 10;
    opt.threads = 2;
    const auto patch = encode_patch(m.views(m.base), m.views(m.target), opt);
    const Container c = parse_container(patch.data(), patch.size(), true);
    bool any_raw = false, any_zstd = false;
    for (const auto& e : c.chunks) {
      any_raw |= e.codec == kChunkRaw;
      any_zstd |= e.codec == kChunkZstd;
      CHECK(e.checksum == xxh3_64(patch.data() + e.file_offset, e.stored_bytes));
    }
    CHECK(any_zstd);
    CHECK(any_raw == mixed);
    auto w = m.base;
    auto views = m.mutable_views(w);
    REQUIRE(apply_patch(views, patch.data(), patch.size()));
    CHECK(w == m.target);
    // A flipped bit in a compressed chunk's stored bytes is caught by its checksum.
    std::vector<uint8_t> bad = patch;
    bad[c.chunks[0].file_offset + c.chunks[0].stored_bytes / 2] ^= 0x10;
    auto w2 = m.base;
    auto views2 = m.mutable_views(w2);
    CHECK_THROWS_WITH(apply_patch(views2, bad.data(), bad.size()), Catch::Contains("checksum"));
    CHECK(w2 == m.base);
  }
}
