// Regression: FORMAT.md makes the header's chunk_bytes "the most raw payload bytes a chunk holds" (in
// 1..2^31, what the encoder accepts), but parse_container took any value, so a header whose chunks are
// bigger than its own chunk_bytes (or whose chunk_bytes is 0) was applied. Such a header is malformed
// and must be rejected (the checksum is re-sealed here, as a hostile server would).
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "sync/hash.h"
#include "sync/patch.h"
#include "sync/patch_container.h"
#include "tests/sync/patch_test_util.h"

using namespace pulse::sync;

namespace {

/// The patch with its header's chunk_bytes (offset 32) replaced and the header checksum re-sealed.
std::vector<uint8_t> with_chunk_bytes(std::vector<uint8_t> patch, uint64_t chunk_bytes) {
  test::put_u64(patch, 32, chunk_bytes);
  test::reseal_header(patch);
  return patch;
}

}  // namespace

TEST_CASE("a chunk bigger than the header's chunk_bytes is rejected", "[sync][regress][patch]") {
  std::vector<uint16_t> base(20000), target;
  std::mt19937 rng(9);
  for (auto& x : base) x = static_cast<uint16_t>(rng());
  target = base;
  for (auto& x : target)
    if (rng() % 5 == 0) x ^= 0x21;
  const std::vector<TensorView> b{
      {"w", DType::BF16, {20000}, reinterpret_cast<const uint8_t*>(base.data()), 40000}};
  const std::vector<TensorView> t{
      {"w", DType::BF16, {20000}, reinterpret_cast<const uint8_t*>(target.data()), 40000}};
  PatchOptions opt;
  opt.chunk_bytes = 4096;
  const std::vector<uint8_t> patch = encode_patch(b, t, opt);
  const Container c = parse_container(patch.data(), patch.size(), true);
  REQUIRE(c.chunks.size() > 2);
  uint64_t biggest = 0;
  for (const auto& e : c.chunks) biggest = std::max(biggest, e.raw_bytes);
  REQUIRE(biggest == 4096);

  // The untouched patch parses; the same header claiming smaller (or zero, or huge) chunk_bytes does not.
  CHECK_NOTHROW(parse_container(with_chunk_bytes(patch, 4096).data(), patch.size(), true));
  for (const uint64_t claim : {uint64_t{4095}, uint64_t{1}, uint64_t{0}, (uint64_t{1} << 31) + 1}) {
    INFO("chunk_bytes claimed " << claim);
    const std::vector<uint8_t> forged = with_chunk_bytes(patch, claim);
    CHECK_THROWS_AS(inspect_patch(forged.data(), forged.size()), PatchError);
    std::vector<uint16_t> w = base;
    std::vector<MutableTensorView> views{
        {"w", DType::BF16, {20000}, reinterpret_cast<uint8_t*>(w.data()), 40000}};
    CHECK_THROWS_AS(apply_patch(views, forged.data(), forged.size(), 1), PatchError);
    const bool unchanged = w == base;
    CHECK(unchanged);
  }
}
