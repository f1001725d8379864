// Container format versions (sync/FORMAT.md): version 2 ends a chunk at every tensor group (so does 3, with
// tree tensor hashes), version 1 patches (every chunk but the last full) stay readable, unknown versions
// are refused by name. A real version 2 patch: tests/sync/test_format_v2_fixture.cpp.
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

/// `count` BF16 tensors of `elements` each, ~5% of the elements one ULP apart.
test::Bf16Model make(size_t count, size_t elements) {
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i) names.push_back("layer." + std::to_string(i));
  return test::Bf16Model(names, std::vector<size_t>(count, elements), 3, 20);
}

/// Rewrites the format version at byte 8 and re-seals the header checksum.
void set_version(std::vector<uint8_t>& patch, uint32_t version) {
  for (int i = 0; i < 4; ++i) patch[8 + i] = static_cast<uint8_t>(version >> (8 * i));
  test::reseal_header(patch);
}

}  // namespace

TEST_CASE("version 2 and later end a chunk at every tensor group, each chunk fits chunk_bytes",
          "[sync][patch]") {
  // 3 tensors of 4 MiB each: three groups, so at least three chunks although the payload is far below
  // the 4 MiB chunk size.
  const test::Bf16Model t = make(3, 2u << 20);
  PatchOptions opt;
  opt.values = ValueMode::Delta;
  const std::vector<uint8_t> patch = encode_patch(t.views(t.base), t.views(t.target), opt);
  const Container c = parse_container(patch.data(), patch.size(), true);
  CHECK(c.info.format_version == kPatchFormatVersion);
  CHECK(kPatchFormatVersion == 3);
  CHECK(c.chunks.size() == 3);
  for (const auto& e : c.chunks) CHECK(e.raw_bytes <= c.info.chunk_bytes);
  CHECK(c.info.payload_raw_bytes < c.info.chunk_bytes);
  // And it applies.
  std::vector<std::vector<uint16_t>> w = t.base;
  std::vector<MutableTensorView> views = t.mutable_views(w);
  REQUIRE(apply_patch(views, patch.data(), patch.size(), 1));
  CHECK(w == t.target);
}

TEST_CASE("version 1 patches are read, versions 0 and 4 are refused naming the version", "[sync][patch]") {
  // One small tensor: a single chunk, which is a valid version 1 layout too.
  const test::Bf16Model t = make(1, 5000);
  std::vector<uint8_t> patch = encode_patch(t.views(t.base), t.views(t.target), PatchOptions{});
  set_version(patch, 1);
  CHECK(inspect_patch(patch.data(), patch.size()).format_version == 1);
  std::vector<std::vector<uint16_t>> w = t.base;
  std::vector<MutableTensorView> views{
      {t.names[0], DType::BF16, {5000}, reinterpret_cast<uint8_t*>(w[0].data()), w[0].size() * 2}};
  REQUIRE(apply_patch(views, patch.data(), patch.size(), 1));
  CHECK(w == t.target);
  for (uint32_t bad : {0u, 4u}) {
    set_version(patch, bad);
    CHECK_THROWS_WITH(
        inspect_patch(patch.data(), patch.size()),
        Catch::Contains("format version " + std::to_string(bad)) && Catch::Contains("versions 1 to 3"));
  }
}
