// Regression: a patch header whose target_root_hash disagrees with its own tensor table (FORMAT.md: the
// target root is the root hash over the table's names, dtypes, shapes and target hashes) was applied:
// apply_patch verified every tensor hash, returned true, and a WorkerReplica then threw std::logic_error
// ("codec bug") out of sync_to with its version already advanced, instead of rejecting the patch.
// The header checksum is no signature, so such a header is what a corrupting or hostile server sends.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sync/hash.h"
#include "sync/patch.h"

using namespace pulse::sync;

namespace {

struct Model {
  std::vector<std::string> names{"a.weight", "b.weight"};
  std::vector<std::vector<uint16_t>> base, target;
  Model() {
    std::mt19937 rng(5);
    for (size_t i = 0; i < names.size(); ++i) {
      base.emplace_back(3000 + 1000 * i);
      for (auto& x : base.back()) x = static_cast<uint16_t>(0x3c00 + rng() % 512);
      target.push_back(base.back());
      for (auto& x : target.back())
        if (rng() % 10 == 0) ++x;
    }
  }
  std::vector<TensorView> views(const std::vector<std::vector<uint16_t>>& d) const {
    std::vector<TensorView> v;
    for (size_t i = 0; i < d.size(); ++i)
      v.push_back({names[i],
                   DType::BF16,
                   {static_cast<int64_t>(d[i].size())},
                   reinterpret_cast<const uint8_t*>(d[i].data()),
                   d[i].size() * 2});
    return v;
  }
};

uint64_t get_u64(const std::vector<uint8_t>& p, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[at + i]) << (8 * i);
  return v;
}

void put_u64(std::vector<uint8_t>& p, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

/// Overwrites target_root_hash (FORMAT.md layout; model_id must be empty) and re-seals the header.
void set_target_root(std::vector<uint8_t>& patch, uint64_t root) {
  REQUIRE((get_u64(patch, 40) & 0xffffffffu) == 0);  // model_id: u32 length 0
  const size_t at = 40 + 4 + 8 + 8 + 8;
  put_u64(patch, at, root);
  const uint64_t header_bytes = get_u64(patch, 16);
  put_u64(patch, header_bytes - 8, xxh3_64(patch.data(), header_bytes - 8));
}

}  // namespace

TEST_CASE("a patch whose target root disagrees with its tensor table is rejected, weights unchanged",
          "[sync][regress][patch]") {
  const Model m;
  PatchOptions opt;  // model_id "", base_version 0
  for (const bool anchor : {false, true}) {
    std::vector<uint8_t> patch = anchor ? encode_anchor(m.views(m.target), opt)
                                        : encode_patch(m.views(m.base), m.views(m.target), opt);
    const PatchInfo good = inspect_patch(patch.data(), patch.size());
    REQUIRE(good.target_root_hash == root_hash(m.views(m.target)));
    set_target_root(patch, good.target_root_hash ^ 0x5a5a);
    REQUIRE(xxh3_64(patch.data(), good.header_bytes - 8) == get_u64(patch, good.header_bytes - 8));

    std::vector<std::vector<uint16_t>> w = m.base;
    std::vector<MutableTensorView> views;
    for (size_t i = 0; i < w.size(); ++i)
      views.push_back({m.names[i],
                       DType::BF16,
                       {static_cast<int64_t>(w[i].size())},
                       reinterpret_cast<uint8_t*>(w[i].data()),
                       w[i].size() * 2});
    CHECK_THROWS_AS(apply_patch(views, patch.data(), patch.size(), 1), PatchError);
    const bool unchanged = w == m.base;
    CHECK(unchanged);
  }
}

TEST_CASE("a trusted root equal to a self-contradicting target root is no no-op", "[sync][regress][patch]") {
  const Model m;
  std::vector<uint8_t> patch = encode_patch(m.views(m.base), m.views(m.target), PatchOptions{});
  const uint64_t forged_root = inspect_patch(patch.data(), patch.size()).target_root_hash ^ 1;
  set_target_root(patch, forged_root);
  std::vector<std::vector<uint16_t>> w = m.target;
  std::vector<MutableTensorView> views;
  for (size_t i = 0; i < w.size(); ++i)
    views.push_back({m.names[i],
                     DType::BF16,
                     {static_cast<int64_t>(w[i].size())},
                     reinterpret_cast<uint8_t*>(w[i].data()),
                     w[i].size() * 2});
  ApplyOptions options;
  options.trusted_root = forged_root;
  CHECK_THROWS_AS(apply_patch(views, patch.data(), patch.size(), options), PatchError);
  const bool unchanged = w == m.target;
  CHECK(unchanged);
}
