// PULSESync codec properties: bit-identical round trips for every dtype, value mode and index coding;
// every corruption/truncation rejected with the weights untouched; wrong base rejected; re-apply no-op.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "sync/hash.h"
#include "sync/patch.h"
#include "sync/patch_container.h"

using namespace pulse::sync;

namespace {

/// An owned set of named tensors.
struct Model {
  struct T {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<T> tensors;

  std::vector<TensorView> views() const {
    std::vector<TensorView> v;
    for (const auto& t : tensors) v.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
    return v;
  }
  std::vector<MutableTensorView> mutable_views() {
    std::vector<MutableTensorView> v;
    for (auto& t : tensors) v.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
    return v;
  }
  bool operator==(const Model& o) const {
    if (tensors.size() != o.tensors.size()) return false;
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].name != o.tensors[i].name || tensors[i].bytes != o.tensors[i].bytes) return false;
    return true;
  }
};

// Bit patterns worth a special test: NaNs with payloads, +-Inf, -0/+0, subnormals, extremes.
std::vector<uint64_t> specials(DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return {0x7fc0, 0xffc1, 0x7f81, 0x7f80, 0xff80, 0x0000, 0x8000, 0x0001, 0x807f, 0x7f7f, 0xff7f};
    case DType::F16:
      return {0x7e00, 0xfe01, 0x7c01, 0x7c00, 0xfc00, 0x0000, 0x8000, 0x0001, 0x83ff, 0x7bff};
    case DType::F32:
      return {0x7fc00000, 0xffc00001, 0x7f800001, 0x7f800000, 0xff800000, 0, 0x80000000, 1, 0x807fffff};
    case DType::F64:
      return {0x7ff8000000000000, 0xfff0000000000001, 0x7ff0000000000000, 0, 0x8000000000000000ull, 1};
    case DType::F8_E4M3:
      return {0x7f, 0xff, 0x00, 0x80, 0x01, 0x87, 0x7e};
    case DType::F8_E5M2:
      return {0x7c, 0xfc, 0x7d, 0x00, 0x80, 0x01, 0x83};
    default:
      return {0, 1, ~0ull};
  }
}

void put(std::vector<uint8_t>& bytes, size_t i, size_t w, uint64_t v) {
  std::memcpy(bytes.data() + i * w, &v, w);
}

/// Base and target tensors: `changed_frac` of the elements differ (some by 1 ULP, some arbitrary or
/// special patterns), specials sprinkled into both.
std::pair<Model, Model> random_pair(std::mt19937_64& rng,
                                    const std::vector<std::pair<DType, std::vector<int64_t>>>& spec,
                                    double changed_frac) {
  Model base, target;
  int k = 0;
  for (const auto& [dtype, shape] : spec) {
    const size_t w = dtype_size(dtype);
    const size_t n = static_cast<size_t>(numel(shape));
    Model::T t{"layer." + std::to_string(k++) + ".weight", dtype, shape, std::vector<uint8_t>(n * w)};
    for (auto& b : t.bytes) b = static_cast<uint8_t>(rng());
    const auto sp = specials(dtype);
    for (size_t i = 0; i < n; ++i)
      if (rng() % 8 == 0) put(t.bytes, i, w, sp[rng() % sp.size()]);
    Model::T u = t;
    std::bernoulli_distribution change(changed_frac);
    for (size_t i = 0; i < n; ++i) {
      if (!change(rng)) continue;
      uint64_t v = 0;
      std::memcpy(&v, u.bytes.data() + i * w, w);
      const uint64_t r = rng() % 4;
      uint64_t nv = r == 0 ? v + 1 : r == 1 ? v - 1 : r == 2 ? sp[rng() % sp.size()] : rng();
      if (w < 8) nv &= (1ull << (8 * w)) - 1;
      if (nv == v) nv ^= 1;
      put(u.bytes, i, w, nv);
    }
    base.tensors.push_back(std::move(t));
    target.tensors.push_back(std::move(u));
  }
  return {base, target};
}

void require_rejected(Model& weights, const std::vector<uint8_t>& patch, size_t size,
                      const std::string& what) {
  const Model before = weights;
  auto views = weights.mutable_views();
  INFO(what);
  CHECK_THROWS_AS(apply_patch(views, patch.data(), size, 1), PatchError);
  CHECK(weights == before);
}

const std::vector<DType> kAllDTypes = {DType::BF16,    DType::F16,     DType::F32, DType::F64,
                                       DType::F8_E4M3, DType::F8_E5M2, DType::I8,  DType::U16,
                                       DType::I32,     DType::U64,     DType::BOOL};

}  // namespace

TEST_CASE("patch round trip is bit-identical for every dtype, mode and coding", "[sync][patch]") {
  std::mt19937_64 rng(1234);
  const std::vector<std::vector<int64_t>> shapes = {{0}, {}, {1}, {7}, {3, 5}, {64, 33}, {2, 0, 4}, {1000}};
  for (double frac : {0.0, 0.001, 0.02, 0.3, 1.0}) {
    for (DType dtype : kAllDTypes) {
      std::vector<std::pair<DType, std::vector<int64_t>>> spec;
      for (const auto& s : shapes) spec.push_back({dtype, s});
      auto [base, target] = random_pair(rng, spec, frac);
      for (ValueMode mode : {ValueMode::Absolute, ValueMode::Delta}) {
        for (int coding : {-1, 0, 1, 2}) {
          for (int level : {0, 1}) {
            INFO("dtype " << dtype_name(dtype) << " frac " << frac << " mode " << int(mode) << " coding "
                          << coding << " level " << level);
            PatchOptions opt;
            opt.values = mode;
            opt.force_index_coding = coding;
            opt.zstd_level = level;
            opt.base_version = 3;
            opt.target_version = 4;
            opt.chunk_bytes = 1000;  // several chunks
            opt.threads = 2;
            const auto patch = encode_patch(base.views(), target.views(), opt);
            const PatchInfo info = inspect_patch(patch.data(), patch.size());
            CHECK(info.base_root_hash == root_hash(base.views()));
            CHECK(info.target_root_hash == root_hash(target.views()));
            CHECK(info.total_bytes == patch.size());
            if (coding >= 0)
              for (const auto& t : info.tensors) CHECK(t.index_coding == coding);
            Model w = base;
            auto views = w.mutable_views();
            const bool changed = apply_patch(views, patch.data(), patch.size(), 2);
            CHECK(w == target);
            CHECK(changed == !(base == target));
            CHECK_FALSE(apply_patch(views, patch.data(), patch.size(), 2));  // re-apply: no-op
            CHECK(w == target);
          }
        }
      }
    }
  }
}

TEST_CASE("patch counts exactly the elements whose bit patterns differ", "[sync][patch]") {
  // -0 vs +0 and two NaN payloads compare equal as floats but are different weights.
  Model base, target;
  base.tensors.push_back({"w", DType::BF16, {4}, std::vector<uint8_t>(8, 0)});
  target = base;
  const uint16_t neg_zero = 0x8000, nan_a = 0x7fc0, nan_b = 0x7fc1;
  std::memcpy(target.tensors[0].bytes.data() + 0, &neg_zero, 2);
  std::memcpy(base.tensors[0].bytes.data() + 4, &nan_a, 2);
  std::memcpy(target.tensors[0].bytes.data() + 4, &nan_b, 2);
  const auto patch = encode_patch(base.views(), target.views(), PatchOptions{});
  const auto info = inspect_patch(patch.data(), patch.size());
  REQUIRE(info.tensors.size() == 1);
  CHECK(info.tensors[0].changed == 2);
  Model w = base;
  auto views = w.mutable_views();
  CHECK(apply_patch(views, patch.data(), patch.size()));
  CHECK(w == target);
}

TEST_CASE("every single-byte corruption and every truncation is rejected, weights untouched",
          "[sync][patch]") {
  std::mt19937_64 rng(99);
  auto [base, target] =
      random_pair(rng, {{DType::BF16, {16, 16}}, {DType::F32, {9}}, {DType::F8_E4M3, {40}}}, 0.05);
  for (ValueMode mode : {ValueMode::Absolute, ValueMode::Delta}) {
    PatchOptions opt;
    opt.values = mode;
    opt.chunk_bytes = 64;
    opt.base_version = 7;
    opt.target_version = 8;
    opt.model_id = "tiny";
    const auto patch = encode_patch(base.views(), target.views(), opt);
    INFO("patch bytes " << patch.size());
    for (size_t i = 0; i < patch.size(); ++i) {
      for (uint8_t flip : {0x01, 0x80, 0xff}) {
        auto bad = patch;
        bad[i] ^= flip;
        Model w = base;
        require_rejected(w, bad, bad.size(), "corrupt byte " + std::to_string(i));
      }
    }
    for (size_t n = 0; n < patch.size(); ++n) {
      Model w = base;
      require_rejected(w, patch, n, "truncated to " + std::to_string(n));
    }
    auto longer = patch;
    longer.push_back(0);
    Model w = base;
    require_rejected(w, longer, longer.size(), "trailing byte");
  }
}

TEST_CASE("a wrong base is rejected naming both versions", "[sync][patch]") {
  std::mt19937_64 rng(5);
  auto [base, target] = random_pair(rng, {{DType::BF16, {100}}, {DType::BF16, {50}}}, 0.1);
  PatchOptions opt;
  opt.values = ValueMode::Delta;
  opt.base_version = 41;
  opt.target_version = 42;
  const auto patch = encode_patch(base.views(), target.views(), opt);
  Model other = base;
  other.tensors[1].bytes[3] ^= 1;
  const Model before = other;
  auto views = other.mutable_views();
  try {
    apply_patch(views, patch.data(), patch.size());
    FAIL("wrong base accepted");
  } catch (const PatchError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("base version 41") != std::string::npos);
    CHECK(msg.find("target version 42") != std::string::npos);
  }
  CHECK(other == before);

  // Names, dtypes and shapes must match.
  Model renamed = base;
  renamed.tensors[0].name = "other";
  auto rv = renamed.mutable_views();
  CHECK_THROWS_WITH(apply_patch(rv, patch.data(), patch.size()), Catch::Contains("missing from the weights"));
  Model reshaped = base;
  reshaped.tensors[0].shape = {10, 10};
  auto sv = reshaped.mutable_views();
  CHECK_THROWS_WITH(apply_patch(sv, patch.data(), patch.size()),
                    Catch::Contains("patch shape [100], weights shape [10, 10]"));
  Model retyped = base;
  retyped.tensors[0].dtype = DType::F16;  // same size, other dtype
  auto tv = retyped.mutable_views();
  CHECK_THROWS_WITH(apply_patch(tv, patch.data(), patch.size()),
                    Catch::Contains("patch dtype BF16, weights F16"));
  Model extra = base;
  extra.tensors.push_back(extra.tensors[1]);
  extra.tensors.back().name = "zzz";
  auto ev = extra.mutable_views();
  CHECK_THROWS_WITH(apply_patch(ev, patch.data(), patch.size()),
                    Catch::Contains("weights tensor 'zzz' is not in the patch"));
  extra.tensors.back().name = extra.tensors[1].name;
  auto dv = extra.mutable_views();
  CHECK_THROWS_WITH(apply_patch(dv, patch.data(), patch.size()), Catch::Contains("twice"));
  CHECK_THROWS_AS(encode_patch(base.views(), renamed.views(), opt), PatchError);
  // The encoder names both sides' dtype and shape.
  CHECK_THROWS_WITH(encode_patch(base.views(), retyped.views(), opt),
                    Catch::Contains("base is BF16 [100], target is F16 [100]"));
  CHECK_THROWS_WITH(encode_patch(base.views(), reshaped.views(), opt),
                    Catch::Contains("base is BF16 [100], target is BF16 [10, 10]"));
}

TEST_CASE("a target hash mismatch after apply rolls every tensor back", "[sync][patch]") {
  std::mt19937_64 rng(8);
  auto [base, target] = random_pair(rng, {{DType::BF16, {300}}, {DType::F32, {200}}}, 0.2);
  for (ValueMode mode : {ValueMode::Absolute, ValueMode::Delta}) {
    PatchOptions opt;
    opt.values = mode;
    const auto patch = encode_patch(base.views(), target.views(), opt);
    // Re-container the same payload with one wrong target hash (the checksums are then valid).
    Container c = parse_container(patch.data(), patch.size(), true);
    const ScratchBuffer buffer = read_payload(c, patch.data(), patch.size(), 1);
    const std::vector<uint8_t> payload(buffer.data(), buffer.data() + buffer.size());
    c.info.tensors[1].target_hash ^= 1;
    // The target root follows the table (apply checks that before touching the weights).
    std::vector<TensorView> tv;
    std::vector<uint64_t> hashes;
    for (const auto& t : c.info.tensors) {
      tv.push_back({t.name, t.dtype, t.shape, nullptr, 0});
      hashes.push_back(t.target_hash);
    }
    c.info.target_root_hash = root_hash(tv, hashes);
    const auto forged = write_container(c.info, payload, 1, 1 << 20, 1);
    Model w = base;
    const Model before = w;
    auto views = w.mutable_views();
    CHECK_THROWS_WITH(apply_patch(views, forged.data(), forged.size()), Catch::Contains("rolled back"));
    CHECK(w == before);
  }
}

TEST_CASE("anchors restore any weights, anchored weights are a no-op", "[sync][patch]") {
  std::mt19937_64 rng(77);
  auto [junk, target] = random_pair(rng, {{DType::BF16, {33, 7}}, {DType::F16, {5}}, {DType::F32, {}}}, 1.0);
  PatchOptions opt;
  opt.target_version = 9;
  const auto anchor = encode_anchor(target.views(), opt);
  const auto info = inspect_patch(anchor.data(), anchor.size());
  CHECK(info.anchor);
  CHECK(info.target_version == 9);
  for (const auto& t : info.tensors) CHECK(t.index_coding == 2);
  Model w = junk;
  auto views = w.mutable_views();
  CHECK(apply_patch(views, anchor.data(), anchor.size()));
  CHECK(w == target);
  CHECK_FALSE(apply_patch(views, anchor.data(), anchor.size()));
}

TEST_CASE("delta mode on BF16 Adam-like updates is compact", "[sync][patch]") {
  // FP32 masters ~N(0, 0.02) moved by +-3e-6: the BF16 patterns that change move by one ULP.
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.f, 0.02f);
  const size_t n = 1 << 18;
  Model base, target;
  base.tensors.push_back({"w", DType::BF16, {static_cast<int64_t>(n)}, std::vector<uint8_t>(2 * n)});
  target = base;
  size_t changed = 0;
  std::vector<double> hist(65536, 0.0);  // of the bit-pattern differences
  for (size_t i = 0; i < n; ++i) {
    const float m = normal(rng);
    const uint16_t a = pulse::kernels::fp32_to_bf16_rne(m);
    const uint16_t b = pulse::kernels::fp32_to_bf16_rne(m + (rng() & 1 ? 3e-6f : -3e-6f));
    std::memcpy(base.tensors[0].bytes.data() + 2 * i, &a, 2);
    std::memcpy(target.tensors[0].bytes.data() + 2 * i, &b, 2);
    changed += a != b;
    if (a != b) hist[static_cast<uint16_t>(b - a)] += 1;
  }
  PatchOptions opt;
  opt.values = ValueMode::Delta;
  const auto delta = encode_patch(base.views(), target.views(), opt);
  opt.values = ValueMode::Absolute;
  const auto absolute = encode_patch(base.views(), target.views(), opt);
  REQUIRE(changed > 0);
  CHECK(inspect_patch(delta.data(), delta.size()).tensors[0].changed == changed);
  // Entropy bound per change: positions (binary entropy of the density per change) + value changes.
  const double p = double(changed) / n;
  double value_bits = 0;
  for (double h : hist)
    if (h > 0) value_bits -= h / changed * std::log2(h / changed);
  const double bound_bits = (-p * std::log2(p) - (1 - p) * std::log2(1 - p)) / p + value_bits;
  CHECK(8.0 * delta.size() / changed < 1.15 * bound_bits);
  CHECK(delta.size() < absolute.size());
}

TEST_CASE("a trusted root skips hashing the base but every target hash is still checked", "[sync][patch]") {
  std::mt19937_64 rng(17);
  // The third tensor is left unchanged by the patch.
  auto [base, target] =
      random_pair(rng, {{DType::BF16, {300}}, {DType::F32, {7, 9}}, {DType::BF16, {40}}}, 0.05);
  target.tensors[2] = base.tensors[2];
  for (ValueMode mode : {ValueMode::Absolute, ValueMode::Delta}) {
    PatchOptions opt;
    opt.values = mode;
    opt.base_version = 3;
    opt.target_version = 4;
    const auto patch = encode_patch(base.views(), target.views(), opt);
    const PatchInfo info = inspect_patch(patch.data(), patch.size());
    REQUIRE(info.tensors[2].changed == 0);
    ApplyOptions ao;
    ao.threads = 2;

    // Correct claim: applies, bit-identical.
    Model w = base;
    auto views = w.mutable_views();
    ao.trusted_root = info.base_root_hash;
    CHECK(apply_patch(views, patch.data(), patch.size(), ao));
    CHECK(w == target);
    // Claimed to be at the target: no-op.
    ao.trusted_root = info.target_root_hash;
    CHECK_FALSE(apply_patch(views, patch.data(), patch.size(), ao));
    CHECK(w == target);

    // A root that is neither: a base mismatch naming the trusted root; weights untouched.
    Model b2 = base;
    auto v2 = b2.mutable_views();
    ao.trusted_root = info.base_root_hash ^ 1;
    CHECK_THROWS_WITH(apply_patch(v2, patch.data(), patch.size(), ao), Catch::Contains("trusted root"));
    CHECK(b2 == base);

    // A false claim: the weights differ from the base (in a changed tensor, at an element the patch does
    // not touch; and in the unchanged tensor): caught by the target hashes, everything rolled back.
    for (size_t t : {0, 2}) {
      Model wrong = base;
      const PatchInfo& pi = info;
      size_t at = 0;  // an element the patch leaves alone
      for (; t == 0 && at < 300; ++at)
        if (std::memcmp(base.tensors[0].bytes.data() + 2 * at, target.tensors[0].bytes.data() + 2 * at, 2) ==
            0)
          break;
      wrong.tensors[t].bytes[2 * at] ^= 4;
      const Model before = wrong;
      auto wv = wrong.mutable_views();
      ao.trusted_root = pi.base_root_hash;
      INFO("tensor " << t);
      CHECK_THROWS_AS(apply_patch(wv, patch.data(), patch.size(), ao), PatchError);
      CHECK(wrong == before);
    }
  }
}
