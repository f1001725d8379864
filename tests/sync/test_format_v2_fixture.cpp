// A patch written by pulse before format version 3 (tests/assets/sync_format_v2_patch.pulse, from the
// inputs tests/assets/sync_format_v2_patch.py describes, rebuilt here byte for byte) is still read and
// applied: its tensor hashes are XXH3-64 of the whole tensor (HashScheme::Xxh3), not tree hashes, for
// tensors over one 64 KiB chunk (BF16 240 000 bytes, F32 280 000 bytes, BF16 65 600 bytes: a last chunk
// of 64 bytes) and under (200 bytes), with and without a trusted root; and a new patch of the same
// change is version 3 with tree hashes.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kernels/tree_hash.h"
#include "sync/hash.h"
#include "sync/patch.h"
#include "sync/patch_container.h"
#include "tests/test_paths.h"

using namespace pulse::sync;

namespace {

struct FixtureTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  size_t width;
};

const std::vector<FixtureTensor> kTensors{{"a.weight", DType::BF16, {300, 400}, 2},
                                          {"b.bias", DType::BF16, {100}, 2},
                                          {"c.f32", DType::F32, {70000}, 4},
                                          {"d.tail", DType::BF16, {32800}, 2}};

/// The generator's bytes (sync_format_v2_patch.py): a hashed index per byte, ~1% of the elements with
/// their low byte flipped in the target.
std::vector<uint8_t> fixture_bytes(size_t ti, bool target) {
  const FixtureTensor& t = kTensors[ti];
  const uint64_t n = static_cast<uint64_t>(numel(t.shape));
  std::vector<uint8_t> b(n * t.width);
  for (uint64_t j = 0; j < b.size(); ++j)
    b[j] = static_cast<uint8_t>(((j * 2654435761ull + ti * 40503) >> 13) & 0xff);
  if (target)
    for (uint64_t e = 0; e < n; ++e)
      if ((e * 7919 + ti) % 97 == 0) b[e * t.width] ^= 1;
  return b;
}

std::vector<uint8_t> read_asset() {
  std::ifstream in(pulse::test::source_path("tests/assets/sync_format_v2_patch.pulse"), std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("a format version 2 patch from before the tree hash is read and applied", "[sync][patch][format]") {
  const std::vector<uint8_t> patch = read_asset();
  const PatchInfo info = inspect_patch(patch.data(), patch.size());
  REQUIRE(info.format_version == 2);
  REQUIRE(info.tensors.size() == kTensors.size());
  std::vector<std::vector<uint8_t>> base, target;
  std::vector<TensorView> target_views;
  for (size_t i = 0; i < kTensors.size(); ++i) {
    base.push_back(fixture_bytes(i, false));
    target.push_back(fixture_bytes(i, true));
    target_views.push_back(
        {kTensors[i].name, kTensors[i].dtype, kTensors[i].shape, target[i].data(), target[i].size()});
    // Its hashes are XXH3 of the whole tensor; the tree hash differs past one chunk.
    INFO(kTensors[i].name);
    CHECK(info.tensors[i].target_hash == tensor_hash(target_views[i], HashScheme::Xxh3));
    if (target[i].size() > pulse::kernels::kTreeHashChunkBytes)
      CHECK(info.tensors[i].target_hash != tensor_hash(target_views[i], HashScheme::Tree));
  }
  CHECK(info.target_root_hash == root_hash(target_views, [&] {
          std::vector<uint64_t> h;
          for (const auto& v : target_views) h.push_back(tensor_hash(v, HashScheme::Xxh3));
          return h;
        }()));
  for (bool trusted : {false, true}) {
    INFO("trusted root " << trusted);
    std::vector<std::vector<uint8_t>> w = base;
    std::vector<MutableTensorView> views;
    for (size_t i = 0; i < kTensors.size(); ++i)
      views.push_back({kTensors[i].name, kTensors[i].dtype, kTensors[i].shape, w[i].data(), w[i].size()});
    ApplyOptions options;
    options.threads = 1;
    if (trusted) options.trusted_root = info.base_root_hash;
    REQUIRE(apply_patch(views, patch.data(), patch.size(), options));
    CHECK(w == target);
    // Applied again: the weights are the target already (a no-op, found with the version 2 hashes).
    CHECK_FALSE(apply_patch(views, patch.data(), patch.size(), 1));
    CHECK(w == target);
  }

  // The same change encoded now: version 3, tree hashes.
  std::vector<TensorView> base_views;
  for (size_t i = 0; i < kTensors.size(); ++i)
    base_views.push_back(
        {kTensors[i].name, kTensors[i].dtype, kTensors[i].shape, base[i].data(), base[i].size()});
  PatchOptions opt;
  opt.threads = 1;
  const std::vector<uint8_t> v3 = encode_patch(base_views, target_views, opt);
  const PatchInfo info3 = inspect_patch(v3.data(), v3.size());
  CHECK(info3.format_version == kPatchFormatVersion);
  CHECK(kPatchFormatVersion == 3);
  for (size_t i = 0; i < kTensors.size(); ++i) {
    INFO(kTensors[i].name);
    CHECK(info3.tensors[i].target_hash == tensor_hash(target_views[i], HashScheme::Tree));
    CHECK(info3.tensors[i].changed == info.tensors[i].changed);
  }
}
