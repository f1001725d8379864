// apply_patch without a trusted root hashes the weights' base bytes inside its apply pass (each 64 KiB
// block right before its changes are written) and decides no-op / wrong base only after that pass: a
// wrong base anywhere (first or last byte of a tensor, either side of a 64 KiB block edge, a short
// tensor, a tensor the patch leaves alone) is reported with the weights' true root and leaves them byte
// for byte as they were; weights already at the target return false and stay as they are; for every
// index coding (the BF16 SIMD kernel, the generic varint loop, bitmap, dense), both value modes, 1 and 2
// threads.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sync/hash.h"
#include "sync/patch.h"

using namespace pulse::sync;

namespace {

struct Tensor {
  std::string name;
  DType dtype;
  std::vector<uint8_t> bytes;
};

struct Model {
  std::vector<Tensor> tensors;
  std::vector<TensorView> views() const {
    std::vector<TensorView> v;
    for (const auto& t : tensors)
      v.push_back({t.name,
                   t.dtype,
                   {static_cast<int64_t>(t.bytes.size() / dtype_size(t.dtype))},
                   t.bytes.data(),
                   t.bytes.size()});
    return v;
  }
  std::vector<MutableTensorView> mutable_views() {
    std::vector<MutableTensorView> v;
    for (auto& t : tensors)
      v.push_back({t.name,
                   t.dtype,
                   {static_cast<int64_t>(t.bytes.size() / dtype_size(t.dtype))},
                   t.bytes.data(),
                   t.bytes.size()});
    return v;
  }
  bool operator==(const Model& o) const {
    if (tensors.size() != o.tensors.size()) return false;
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].bytes != o.tensors[i].bytes) return false;
    return true;
  }
};

/// Base and target: tensors spanning several 64 KiB blocks with a partial last one, a short tensor
/// (< 241 bytes: hashed by libxxhash's short path) and one the patch leaves alone; ~5% changed (one
/// step up in the low byte of the element, as Adam moves BF16 weights).
std::pair<Model, Model> make_pair() {
  std::mt19937_64 rng(2026);
  Model base;
  base.tensors = {{"a.big", DType::BF16, std::vector<uint8_t>(2 * 200000)},
                  {"b.f32", DType::F32, std::vector<uint8_t>(4 * 40000)},
                  {"c.short", DType::BF16, std::vector<uint8_t>(2 * 50)},
                  {"d.same", DType::BF16, std::vector<uint8_t>(2 * 3000)},
                  {"e.odd", DType::BF16, std::vector<uint8_t>(2 * (32768 + 37))}};
  for (auto& t : base.tensors)
    for (auto& b : t.bytes) b = static_cast<uint8_t>(rng());
  Model target = base;
  for (auto& t : target.tensors) {
    if (t.name == "d.same") continue;
    const size_t w = dtype_size(t.dtype);
    for (size_t i = 0; i < t.bytes.size() / w; ++i)
      if (rng() % 20 == 0) ++t.bytes[i * w];
    t.bytes[t.bytes.size() - w] ^= 0x10;  // the last element changes: the tail is written
  }
  return {base, target};
}

}  // namespace

TEST_CASE("one-pass apply: a wrong base found after the pass leaves the weights byte-identical",
          "[sync][patch][apply]") {
  auto [base, target] = make_pair();
  struct Flip {
    size_t tensor, byte;
  };
  const std::vector<Flip> flips = {
      {0, 0},     {0, 65535}, {0, 65536}, {0, 2 * 200000 - 1}, {0, 2 * 199000}, {1, 4 * 40000 - 1},
      {1, 70000}, {2, 0},     {2, 99},    {3, 3000},           {4, 65536 + 5},  {4, 2 * (32768 + 37) - 1}};
  for (ValueMode mode : {ValueMode::Absolute, ValueMode::Delta}) {
    for (int coding : {-1, 0, 1, 2}) {
      PatchOptions opt;
      opt.values = mode;
      opt.base_version = 7;
      opt.target_version = 8;
      opt.force_index_coding = coding;
      const auto patch = encode_patch(base.views(), target.views(), opt);
      for (const Flip& f : flips) {
        for (int threads : {1, 2}) {
          Model wrong = base;
          wrong.tensors[f.tensor].bytes[f.byte] ^= 0x40;
          const Model before = wrong;
          const std::string root = hash_hex(root_hash(wrong.views()));
          auto views = wrong.mutable_views();
          INFO("mode " << int(mode) << " coding " << coding << " tensor " << wrong.tensors[f.tensor].name
                       << " byte " << f.byte << " threads " << threads);
          try {
            apply_patch(views, patch.data(), patch.size(), threads);
            FAIL("a wrong base was applied");
          } catch (const PatchError& e) {
            // The message of the check before an apply, with the root the pass hashed.
            const std::string msg = e.what();
            CHECK(msg.find("patch base mismatch: the patch goes from base version 7") != std::string::npos);
            CHECK(msg.find("but the weights have root " + root + " (neither the base nor the target)") !=
                  std::string::npos);
          }
          CHECK(wrong == before);
        }
      }
      // The right base still applies, bit for bit, and then is at the target.
      Model w = base;
      auto views = w.mutable_views();
      CHECK(apply_patch(views, patch.data(), patch.size(), 2));
      CHECK(w == target);
    }
  }
}

TEST_CASE("one-pass apply: weights already at the target return false and keep their bytes",
          "[sync][patch][apply]") {
  auto [base, target] = make_pair();
  for (ValueMode mode : {ValueMode::Absolute, ValueMode::Delta}) {
    for (int coding : {-1, 0, 1, 2}) {
      PatchOptions opt;
      opt.values = mode;
      opt.force_index_coding = coding;
      const auto patch = encode_patch(base.views(), target.views(), opt);
      for (int threads : {1, 2}) {
        INFO("mode " << int(mode) << " coding " << coding << " threads " << threads);
        Model w = target;
        auto views = w.mutable_views();
        CHECK_FALSE(apply_patch(views, patch.data(), patch.size(), threads));  // a delta would move them
        CHECK(w == target);
        Model b = base;  // applied once, a no-op the second time
        auto bv = b.mutable_views();
        CHECK(apply_patch(bv, patch.data(), patch.size(), threads));
        CHECK_FALSE(apply_patch(bv, patch.data(), patch.size(), threads));
        CHECK(b == target);
      }
    }
  }
}
