// The device-side encoder (sync/gpu_encode.h) writes the same patch bytes as the CPU encoder
// (encode_patch) for the same weights: FP32 masters cast on the GPU or BF16 targets, absolute and delta
// values, every index coding (chosen by size at low, mid and high density, and forced), tensors across a
// 4 MiB group boundary, a 0-element tensor, and with the base hashes given instead of computed; the cast
// leaves the new BF16 weights on the device. Without a GPU the encoder refuses with the reason.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernels/bf16.h"
#include "sync/gpu_encode.h"
#include "sync/hash.h"
#include "sync/patch.h"
#include "tests/kernels_cuda/cuda_test_util.h"

using namespace pulse::sync;
using pulse::test::DeviceBuffer;
using pulse::test::to_device;
using pulse::test::to_host;

namespace {

struct Case {
  std::string name;
  std::vector<int64_t> shape;
  double p;  ///< fraction of elements that change
};

}  // namespace

TEST_CASE("cuda encode: encode_patch_cuda writes the bytes encode_patch writes", "[cuda][encode]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  std::mt19937_64 rng(17);
  const std::vector<Case> cases = {{"a.small", {1}, 1.0},           {"b.sparse", {300, 7}, 0.01},
                                   {"c.big", {3'000'000}, 0.07},    {"d.bitmap", {5000}, 0.3},
                                   {"e.dense", {64, 64}, 0.9},      {"f.empty", {0, 4}, 0.5},
                                   {"g.after_group", {70000}, 0.02}};
  for (bool delta : {false, true}) {
    for (int force : {-1, 0, 1, 2}) {
      for (bool known : {false, true}) {
        INFO("delta " << delta << " force " << force << " known base hashes " << known);
        std::vector<std::vector<uint16_t>> base(cases.size()), target(cases.size());
        std::vector<std::vector<float>> master(cases.size());
        std::vector<TensorView> base_views, target_views;
        for (size_t c = 0; c < cases.size(); ++c) {
          const uint64_t n = static_cast<uint64_t>(numel(cases[c].shape));
          std::bernoulli_distribution flip(cases[c].p);
          std::normal_distribution<float> w(0.0f, 0.02f);
          base[c].resize(n);
          master[c].resize(n);
          target[c].resize(n);
          for (uint64_t i = 0; i < n; ++i) {
            base[c][i] = pulse::kernels::fp32_to_bf16_rne(w(rng));
            uint32_t bits = static_cast<uint32_t>(base[c][i]) << 16 | static_cast<uint32_t>(rng() & 0x7fff);
            if (flip(rng)) bits += static_cast<uint32_t>(rng() % 5 + 1) << 16;
            std::memcpy(&master[c][i], &bits, 4);
          }
          pulse::kernels::fp32_to_bf16_rne(master[c].data(), target[c].data(), n);
          base_views.push_back({cases[c].name, DType::BF16, cases[c].shape,
                                reinterpret_cast<const uint8_t*>(base[c].data()), 2 * n});
          target_views.push_back({cases[c].name, DType::BF16, cases[c].shape,
                                  reinterpret_cast<const uint8_t*>(target[c].data()), 2 * n});
        }
        PatchOptions opt;
        opt.values = delta ? ValueMode::Delta : ValueMode::Absolute;
        opt.force_index_coding = force;
        opt.model_id = "gpu-encode-test";
        opt.base_version = 4;
        opt.target_version = 5;
        opt.chunk_bytes = 1 << 20;
        if (known) {
          std::vector<uint64_t> hashes;
          for (const auto& v : base_views) hashes.push_back(tensor_hash(v));
          opt.known_base_tensor_hashes = hashes;
        }
        const std::vector<uint8_t> want = encode_patch(base_views, target_views, opt);

        for (bool with_master : {true, false}) {
          std::vector<std::unique_ptr<DeviceBuffer>> keep;
          std::vector<DeviceTensor> dev;
          for (size_t c = 0; c < cases.size(); ++c) {
            const size_t n = base[c].size();
            keep.push_back(std::make_unique<DeviceBuffer>(2 * n));
            to_device(keep.back()->get(), base[c]);
            DeviceTensor t{cases[c].name, DType::BF16, cases[c].shape, nullptr, keep.back()->get<uint16_t>(),
                           nullptr};
            keep.push_back(std::make_unique<DeviceBuffer>(4 * n));
            if (with_master) {
              to_device(keep.back()->get(), master[c]);
              t.master = keep.back()->get<float>();
            } else {
              to_device(keep.back()->get(), target[c]);
              t.target = keep.back()->get<uint16_t>();
            }
            dev.push_back(t);
          }
          std::reverse(dev.begin(), dev.end());  // any order in, name order out
          if (known) std::reverse(opt.known_base_tensor_hashes->begin(), opt.known_base_tensor_hashes->end());
          const std::vector<uint8_t> got = encode_patch_cuda(dev, opt);
          if (known) std::reverse(opt.known_base_tensor_hashes->begin(), opt.known_base_tensor_hashes->end());
          REQUIRE(got == want);
          if (with_master)
            for (size_t c = 0; c < cases.size(); ++c)
              REQUIRE(to_host<uint16_t>(dev[cases.size() - 1 - c].weights, base[c].size()) == target[c]);
        }
      }
    }
  }
}

TEST_CASE("cuda encode: without a usable GPU the device encoder refuses, naming why", "[cuda][encode]") {
  std::string why;
  if (cuda_encode_available(&why)) {
    WARN("a GPU is present: the refusal path is not reachable here");
    return;
  }
  REQUIRE(!why.empty());
  try {
    encode_patch_cuda({}, PatchOptions{});
    FAIL("encode_patch_cuda did not throw");
  } catch (const PatchError& e) {
    REQUIRE(std::string(e.what()).find(why) != std::string::npos);
  }
}
