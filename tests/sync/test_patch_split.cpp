// Multi-threaded encodes split big BF16 tensors' scans in two (sync/patch_encode.cpp ScanPart): the patch
// bytes must equal the single-threaded encode's for every fused-hash kernel variant.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/diff_emit16.h"
#include "sync/patch.h"

namespace {

using namespace pulse::sync;

/// A BF16 model whose big tensors (>= 4 MiB, so split at about half) exercise the join: `a` ~5% changed
/// at random, `b` with no change for 3000 elements around its half (the joined gap gets a tail) and a
/// change right at the split block, `c` with none in its second half, `d` small (never split).
struct SplitModel {
  std::vector<std::string> names{"a.weight", "b.weight", "c.weight", "d.bias"};
  std::vector<size_t> sizes{2200003, 2162688, 2100000, 4099};
  std::vector<std::vector<uint16_t>> base, target;

  SplitModel() {
    std::mt19937_64 rng(11);
    for (size_t i = 0; i < names.size(); ++i) {
      base.emplace_back(sizes[i]);
      for (auto& x : base.back()) x = static_cast<uint16_t>(rng());
      target.push_back(base.back());
      auto& t = target.back();
      for (size_t j = 0; j < t.size(); ++j) {
        const bool quiet = (i == 1 && j + 1500 >= sizes[i] / 2 && j < sizes[i] / 2 + 1500) ||
                           (i == 2 && j >= sizes[i] / 2 - 40000);
        if (!quiet && rng() % 20 == 0) t[j] = static_cast<uint16_t>(t[j] + (rng() % 2 ? 1 : -1));
      }
    }
    target[1][sizes[1] / 2 / 32768 * 32768] ^= 1;  // b: a change on the split block's first element
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

}  // namespace

TEST_CASE("split scans of big tensors give the single-threaded patch bytes", "[sync][patch][emit16]") {
  const SplitModel m;
  const auto bv = m.views(m.base), tv = m.views(m.target);
  int variants = 0;
  for (const char* isa : {"avx512", "avx2"}) {
    if (!pulse::kernels::diff_emit16_force(isa)) {
      WARN("diff_emit16 '" << isa << "' not tested: this CPU cannot run it");
      continue;
    }
    ++variants;
    INFO("variant " << isa);
    REQUIRE(pulse::kernels::diff_emit16_fuses_hash());
    for (ValueMode mode : {ValueMode::Absolute, ValueMode::Delta})
      for (bool known_root : {false, true}) {
        INFO("delta " << (mode == ValueMode::Delta) << ", known base root " << known_root);
        PatchOptions opt;
        opt.values = mode;
        if (known_root) opt.known_base_root = 0x1234;
        opt.threads = 1;
        const std::vector<uint8_t> one = encode_patch(bv, tv, opt);
        for (int threads : {2, 3}) {
          opt.threads = threads;
          INFO("threads " << threads);
          const bool same = encode_patch(bv, tv, opt) == one;  // (a bool: Catch would print megabytes)
          CHECK(same);
        }
        if (!known_root) {  // and it applies: bit-identical to the target
          std::vector<std::vector<uint16_t>> w = m.base;
          std::vector<MutableTensorView> mv;
          for (size_t i = 0; i < w.size(); ++i)
            mv.push_back({m.names[i],
                          DType::BF16,
                          {static_cast<int64_t>(w[i].size())},
                          reinterpret_cast<uint8_t*>(w[i].data()),
                          w[i].size() * 2});
          REQUIRE(apply_patch(mv, one.data(), one.size(), 2));
          const bool applied = w == m.target;
          CHECK(applied);
        }
      }
  }
  pulse::kernels::diff_emit16_force(nullptr);
  CHECK(variants > 0);  // x86-64 CPUs of this project have AVX2
}
