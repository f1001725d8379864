// Regressions on forged or cut patch headers. A forged anchor header describing enormous tensors made
// an empty replica's OwnedTensors::zeros_like throw std::bad_alloc out of sync_to (or wake the OOM
// killer); it must be a PatchError, raised before anything is allocated. An empty patch was reported as
// "bad magic".
#include <catch2/catch.hpp>

#include <cstdint>

#include "sync/patch.h"
#include "sync/version_store.h"

using namespace pulse::sync;

TEST_CASE("zeros_like refuses tensor sets larger than the machine's memory", "[sync][regress]") {
  PatchInfo info;
  info.anchor = true;
  info.target_version = 12;
  PatchTensorInfo t;
  t.name = "model.embed_tokens.weight";
  t.dtype = DType::BF16;
  t.shape = {int64_t{1} << 30, int64_t{1} << 20};  // 2^50 elements: 2 PiB
  info.tensors.push_back(t);
  CHECK_THROWS_AS(OwnedTensors::zeros_like(info), PatchError);
  CHECK_THROWS_WITH(OwnedTensors::zeros_like(info),
                    Catch::Contains("target version 12") && Catch::Contains("memory"));
  // Many tensors whose sum overflows 64 bits are refused too.
  info.tensors.clear();
  for (int i = 0; i < 20; ++i) {
    t.name = "t" + std::to_string(10 + i);
    t.shape = {int64_t{1} << 30, int64_t{1} << 29};
    info.tensors.push_back(t);
  }
  CHECK_THROWS_AS(OwnedTensors::zeros_like(info), PatchError);
  // A real size still works.
  info.tensors.resize(1);
  info.tensors[0].shape = {3, 5};
  const OwnedTensors small = OwnedTensors::zeros_like(info);
  REQUIRE(small.views().size() == 1);
  CHECK(small.views()[0].nbytes == 30);
}

TEST_CASE("an empty or cut-short patch says so, not 'bad magic'", "[sync][regress]") {
  CHECK_THROWS_WITH(inspect_patch(nullptr, 0), Catch::Contains("empty (0 bytes)"));
  const uint8_t prefix[5] = {'P', 'U', 'L', 'S', 'E'};
  CHECK_THROWS_WITH(inspect_patch(prefix, 5), Catch::Contains("truncated: 5 bytes"));
  const uint8_t other[5] = {'P', 'K', 3, 4, 0};
  CHECK_THROWS_WITH(inspect_patch(other, 5), Catch::Contains("bad magic"));
}
