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
#include "tests/sync/patch_test_util.h"

using namespace pulse::sync;

namespace {

using test::Bf16Model;
using test::get_u64;

/// The model of these tests: two tensors, ~10% of the elements changed.
Bf16Model make_model() {
  return Bf16Model({"a.weight", "b.weight"}, {3000, 4000}, 5, 10);
}

/// Overwrites target_root_hash (FORMAT.md layout; model_id must be empty) and re-seals the header.
void set_target_root(std::vector<uint8_t>& patch, uint64_t root) {
  REQUIRE((get_u64(patch, 40) & 0xffffffffu) == 0);  // model_id: u32 length 0
  const size_t at = 40 + 4 + 8 + 8 + 8;
  test::put_u64(patch, at, root);
  test::reseal_header(patch);
}

}  // namespace

TEST_CASE("a patch whose target root disagrees with its tensor table is rejected, weights unchanged",
          "[sync][regress][patch]") {
  const Bf16Model m = make_model();
  PatchOptions opt;  // model_id "", base_version 0
  for (const bool anchor : {false, true}) {
    std::vector<uint8_t> patch = anchor ? encode_anchor(m.views(m.target), opt)
                                        : encode_patch(m.views(m.base), m.views(m.target), opt);
    const PatchInfo good = inspect_patch(patch.data(), patch.size());
    REQUIRE(good.target_root_hash == root_hash(m.views(m.target)));
    set_target_root(patch, good.target_root_hash ^ 0x5a5a);
    REQUIRE(xxh3_64(patch.data(), good.header_bytes - 8) == get_u64(patch, good.header_bytes - 8));

    std::vector<std::vector<uint16_t>> w = m.base;
    std::vector<MutableTensorView> views = m.mutable_views(w);
    CHECK_THROWS_AS(apply_patch(views, patch.data(), patch.size(), 1), PatchError);
    const bool unchanged = w == m.base;
    CHECK(unchanged);
  }
}

TEST_CASE("a trusted root equal to a self-contradicting target root is no no-op", "[sync][regress][patch]") {
  const Bf16Model m = make_model();
  std::vector<uint8_t> patch = encode_patch(m.views(m.base), m.views(m.target), PatchOptions{});
  const uint64_t forged_root = inspect_patch(patch.data(), patch.size()).target_root_hash ^ 1;
  set_target_root(patch, forged_root);
  std::vector<std::vector<uint16_t>> w = m.target;
  std::vector<MutableTensorView> views = m.mutable_views(w);
  ApplyOptions options;
  options.trusted_root = forged_root;
  CHECK_THROWS_AS(apply_patch(views, patch.data(), patch.size(), options), PatchError);
  const bool unchanged = w == m.target;
  CHECK(unchanged);
}
