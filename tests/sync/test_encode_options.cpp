// PatchOptions::known_base_root / known_base_tensor_hashes (the trainer skips re-hashing a base it
// published) and the encoder's fused hashes (the target and base hashed block by block during the diff
// scan) against the one-shot tensor_hash / root_hash.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sync/hash.h"
#include "sync/patch.h"

using namespace pulse::sync;

namespace {

struct Owned {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<TensorView> views(const std::vector<Owned>& m) {
  std::vector<TensorView> v;
  for (const auto& t : m) v.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
  return v;
}

std::vector<MutableTensorView> mutable_views(std::vector<Owned>& m) {
  std::vector<MutableTensorView> v;
  for (auto& t : m) v.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
  return v;
}

/// A base of random tensors (sizes crossing the encoder's 64 KiB scan blocks, every element width) and
/// a target with ~`density` of the elements changed.
void make_pair(std::vector<Owned>& base, std::vector<Owned>& target, double density, uint32_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<std::pair<DType, int64_t>> specs = {
      {DType::BF16, 81'931}, {DType::F32, 40'000}, {DType::F64, 9'000},  {DType::F8_E4M3, 70'001},
      {DType::F16, 1},       {DType::BF16, 0},     {DType::BF16, 32'768}};
  // Names deliberately not in sorted order: the patch sorts tensors by name.
  const char* names[] = {"z.w", "b.w", "m.w", "a.w", "q.w", "e.w", "c.w"};
  base.clear();
  for (size_t i = 0; i < specs.size(); ++i) {
    Owned t{names[i], specs[i].first, {specs[i].second}, {}};
    t.bytes.resize(static_cast<size_t>(specs[i].second) * dtype_size(t.dtype));
    for (auto& b : t.bytes) b = static_cast<uint8_t>(rng());
    base.push_back(std::move(t));
  }
  target = base;
  std::bernoulli_distribution flip(density);
  for (auto& t : target) {
    const size_t w = dtype_size(t.dtype);
    for (size_t e = 0; e * w < t.bytes.size(); ++e)
      if (flip(rng)) t.bytes[e * w + rng() % w] ^= static_cast<uint8_t>(1 + rng() % 255);
  }
}

std::vector<uint64_t> hashes_of(const std::vector<Owned>& m) {
  std::vector<uint64_t> h;
  for (const auto& tv : views(m)) h.push_back(tensor_hash(tv));
  return h;
}

}  // namespace

TEST_CASE("fused scan hashes equal tensor_hash and root_hash", "[sync][encode]") {
  for (double density : {0.0, 0.01, 0.3, 1.0}) {
    std::vector<Owned> base, target;
    make_pair(base, target, density, 7);
    for (ValueMode mode : {ValueMode::Absolute, ValueMode::Delta}) {
      PatchOptions opt;
      opt.values = mode;
      opt.threads = 2;
      const std::vector<uint8_t> patch = encode_patch(views(base), views(target), opt);
      const PatchInfo info = inspect_patch(patch.data(), patch.size());
      REQUIRE(info.tensors.size() == target.size());
      for (const auto& e : info.tensors) {
        const auto it =
            std::find_if(target.begin(), target.end(), [&](const Owned& t) { return t.name == e.name; });
        REQUIRE(it != target.end());
        const TensorView tv{it->name, it->dtype, it->shape, it->bytes.data(), it->bytes.size()};
        CHECK(e.target_hash == tensor_hash(tv));
      }
      CHECK(info.target_root_hash == root_hash(views(target)));
      CHECK(info.base_root_hash == root_hash(views(base)));
    }
  }
}

TEST_CASE("a known base root or known base hashes give the same patch without hashing the base",
          "[sync][encode]") {
  std::vector<Owned> base, target;
  make_pair(base, target, 0.02, 11);
  PatchOptions opt;
  opt.values = ValueMode::Delta;
  opt.base_version = 4;
  opt.target_version = 5;
  const std::vector<uint8_t> plain = encode_patch(views(base), views(target), opt);

  PatchOptions by_root = opt;
  by_root.known_base_root = root_hash(views(base));
  CHECK(encode_patch(views(base), views(target), by_root) == plain);

  PatchOptions by_hashes = opt;
  by_hashes.known_base_tensor_hashes = hashes_of(base);
  CHECK(encode_patch(views(base), views(target), by_hashes) == plain);

  // The trainer's chain: the hashes of the patch that produced the base, matched by name.
  std::vector<Owned> next = target;
  next[0].bytes[3] ^= 1;
  const PatchInfo info = inspect_patch(plain.data(), plain.size());
  std::vector<uint64_t> from_header;
  for (const auto& t : target)
    for (const auto& e : info.tensors)
      if (e.name == t.name) from_header.push_back(e.target_hash);
  PatchOptions chained = opt;
  chained.base_version = 5;
  chained.target_version = 6;
  PatchOptions chained_known = chained;
  chained_known.known_base_tensor_hashes = from_header;
  CHECK(encode_patch(views(target), views(next), chained_known) ==
        encode_patch(views(target), views(next), chained));

  PatchOptions wrong_size = opt;
  wrong_size.known_base_tensor_hashes = std::vector<uint64_t>(base.size() - 1, 0);
  CHECK_THROWS_AS(encode_patch(views(base), views(target), wrong_size), PatchError);
}

TEST_CASE("a wrong known base hash makes a patch the worker rejects, weights unchanged", "[sync][encode]") {
  std::vector<Owned> base, target;
  make_pair(base, target, 0.05, 13);
  for (ValueMode mode : {ValueMode::Absolute, ValueMode::Delta}) {
    for (int claim = 0; claim < 2; ++claim) {
      PatchOptions opt;
      opt.values = mode;
      opt.base_version = 8;
      opt.target_version = 9;
      if (claim == 0) {
        opt.known_base_root = root_hash(views(base)) ^ 0x10;
      } else {
        std::vector<uint64_t> h = hashes_of(base);
        h[2] += 1;
        opt.known_base_tensor_hashes = h;
      }
      const std::vector<uint8_t> patch = encode_patch(views(base), views(target), opt);
      std::vector<Owned> worker = base;
      std::vector<MutableTensorView> w = mutable_views(worker);
      CHECK_THROWS_AS(apply_patch(w, patch.data(), patch.size()), PatchError);
      for (size_t i = 0; i < base.size(); ++i) CHECK(worker[i].bytes == base[i].bytes);
      // A worker that trusts its own (right) root still refuses: the root is not the patch's base root.
      ApplyOptions trusted;
      trusted.trusted_root = root_hash(views(base));
      CHECK_THROWS_AS(apply_patch(w, patch.data(), patch.size(), trusted), PatchError);
      for (size_t i = 0; i < base.size(); ++i) CHECK(worker[i].bytes == base[i].bytes);
    }
  }
}
