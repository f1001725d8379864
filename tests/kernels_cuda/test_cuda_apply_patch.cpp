// apply_patch_cuda (sync/gpu_apply.h) on device weights ends where apply_patch ends on host weights: for
// patches of every index coding and both value modes it turns the base into the target; an applied
// patch is a no-op; a wrong base is refused with the weights unchanged; a target hash that does not match
// after apply (weights that differ from what a trusted root claims) rolls every tensor back. Without a
// GPU the device apply refuses, naming why.
#include <catch2/catch.hpp>

#include <memory>
#include <random>
#include <vector>

#include "sync/gpu_apply.h"
#include "sync/gpu_encode.h"
#include "sync/hash.h"
#include "sync/patch.h"
#include "tests/kernels_cuda/cuda_test_util.h"

using namespace pulse::sync;
using pulse::test::DeviceBuffer;
using pulse::test::to_device;
using pulse::test::to_host;

namespace {

struct Model {
  std::vector<std::string> names{"a", "b", "c"};
  std::vector<std::vector<int64_t>> shapes{{4096}, {300, 11}, {1}};
  std::vector<std::vector<uint16_t>> data;
  std::vector<TensorView> views() const {
    std::vector<TensorView> v;
    for (size_t i = 0; i < names.size(); ++i)
      v.push_back({names[i], DType::BF16, shapes[i], reinterpret_cast<const uint8_t*>(data[i].data()),
                   2 * data[i].size()});
    return v;
  }
};

/// Device copies of a model's tensors.
struct DeviceModel {
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<DeviceMutableTensor> tensors;
  explicit DeviceModel(const Model& m) {
    for (size_t i = 0; i < m.names.size(); ++i) {
      buffers.push_back(std::make_unique<DeviceBuffer>(2 * m.data[i].size()));
      to_device(buffers.back()->get(), m.data[i]);
      tensors.push_back({m.names[i], DType::BF16, m.shapes[i], buffers.back()->get<uint16_t>()});
    }
  }
  std::vector<std::vector<uint16_t>> host() const {
    std::vector<std::vector<uint16_t>> out;
    for (const auto& t : tensors)
      out.push_back(to_host<uint16_t>(t.data, static_cast<size_t>(numel(t.shape))));
    return out;
  }
};

}  // namespace

TEST_CASE(
    "cuda apply_patch: every coding and value mode ends at the target, then a no-op, a wrong base refused",
    "[cuda][apply_patch]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  std::mt19937_64 rng(23);
  for (double p : {0.01, 0.3, 0.95}) {
    for (bool delta : {false, true}) {
      for (int force : {-1, 0, 1, 2}) {
        INFO("p " << p << " delta " << delta << " force " << force);
        Model base, target;
        std::bernoulli_distribution flip(p);
        for (const auto& s : base.shapes) {
          const size_t n = static_cast<size_t>(numel(s));
          base.data.emplace_back(n);
          target.data.emplace_back(n);
          for (size_t i = 0; i < n; ++i) {
            base.data.back()[i] = static_cast<uint16_t>(rng());
            target.data.back()[i] = flip(rng) ? static_cast<uint16_t>(rng()) : base.data.back()[i];
          }
        }
        PatchOptions opt;
        opt.values = delta ? ValueMode::Delta : ValueMode::Absolute;
        opt.force_index_coding = force;
        const std::vector<uint8_t> patch = encode_patch(base.views(), target.views(), opt);
        DeviceModel dev(base);
        REQUIRE(apply_patch_cuda(dev.tensors, patch.data(), patch.size(), ApplyOptions{}));
        REQUIRE(dev.host() == target.data);
        REQUIRE(!apply_patch_cuda(dev.tensors, patch.data(), patch.size(), ApplyOptions{}));  // already there
        // A third state is neither base nor target: refused, unchanged.
        Model other = base;
        other.data[0][7] ^= 1;
        DeviceModel wrong(other);
        REQUIRE_THROWS_AS(apply_patch_cuda(wrong.tensors, patch.data(), patch.size(), ApplyOptions{}),
                          PatchError);
        REQUIRE(wrong.host() == other.data);
        // Told (falsely) that it holds the base: applied; where tensor a then misses its target hash (delta
        // values on the wrong old value, or element 7 not rewritten) every tensor is rolled back.
        ApplyOptions trusting;
        trusting.trusted_root = root_hash(base.views());
        const bool dense_a = inspect_patch(patch.data(), patch.size()).tensors[0].index_coding == 2;
        const bool rewritten = !delta && (dense_a || base.data[0][7] != target.data[0][7]);
        if (rewritten) {
          REQUIRE(apply_patch_cuda(wrong.tensors, patch.data(), patch.size(), trusting));
          REQUIRE(wrong.host() == target.data);
        } else {
          REQUIRE_THROWS_AS(apply_patch_cuda(wrong.tensors, patch.data(), patch.size(), trusting),
                            PatchError);
          REQUIRE(wrong.host() == other.data);
        }
      }
    }
  }
}

TEST_CASE("cuda apply_patch: without a usable GPU the device apply refuses, naming why",
          "[cuda][apply_patch]") {
  std::string why;
  if (cuda_encode_available(&why)) {
    WARN("a GPU is present: the refusal path is not reachable here");
    return;
  }
  std::vector<DeviceMutableTensor> none;
  try {
    apply_patch_cuda(none, nullptr, 0, ApplyOptions{});
    FAIL("apply_patch_cuda did not throw");
  } catch (const PatchError& e) {
    REQUIRE(std::string(e.what()).find(why) != std::string::npos);
  }
}
