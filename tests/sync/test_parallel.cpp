// sync/parallel.h: the codec's work-sharing loops. parallel_two_stage must run every first-stage item
// and every follow-up exactly once on any thread count, whatever the backlog bound, and stop on the
// first exception; the encoder built on it must write the same bytes on every thread count.
#include <catch2/catch.hpp>

#include <atomic>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "sync/parallel.h"
#include "sync/patch.h"

using namespace pulse::sync;

TEST_CASE("parallel_two_stage runs every item and follow-up once", "[sync][parallel]") {
  for (int threads : {1, 2, 3, 8}) {
    for (uint64_t backlog : {uint64_t{0}, uint64_t{5}, uint64_t{1} << 40}) {
      INFO("threads " << threads << " backlog " << backlog);
      constexpr size_t kItems = 37;
      std::vector<std::atomic<int>> firsts(kItems), follows(kItems * 4);
      parallel_two_stage(kItems, threads, backlog, [&](size_t i, FollowUps& f) {
        ++firsts[i];
        for (size_t k = 0; k < i % 5; ++k) f.submit([&follows, i, k] { ++follows[4 * i + k]; }, k + 1);
      });
      for (size_t i = 0; i < kItems; ++i) {
        CHECK(firsts[i].load() == 1);
        for (size_t k = 0; k < 4; ++k) CHECK(follows[4 * i + k].load() == (k < i % 5 ? 1 : 0));
      }
    }
  }
  int calls = 0;
  parallel_two_stage(0, 4, 0, [&](size_t, FollowUps&) { ++calls; });
  CHECK(calls == 0);
}

TEST_CASE("parallel_two_stage rethrows the first exception of an item or a follow-up", "[sync][parallel]") {
  for (int threads : {1, 2, 4}) {
    INFO("threads " << threads);
    CHECK_THROWS_WITH(parallel_two_stage(20, threads, 0,
                                         [](size_t i, FollowUps&) {
                                           if (i == 7) throw std::runtime_error("item 7");
                                         }),
                      "item 7");
    std::atomic<int> after{0};
    CHECK_THROWS_WITH(parallel_two_stage(20, threads, 0,
                                         [&](size_t i, FollowUps& f) {
                                           f.submit(
                                               [i, &after] {
                                                 if (i == 3) throw std::runtime_error("follow-up 3");
                                                 ++after;
                                               },
                                               1);
                                         }),
                      "follow-up 3");
    CHECK(after.load() < 20);  // the failure dropped at least the failing one
  }
}

TEST_CASE("the encoder writes the same bytes on every thread count", "[sync][parallel][encode]") {
  // Several tensor groups (>= 4 MiB each) with several chunks and frames each, plus small tensors that
  // share a group and a frame with big ones.
  std::mt19937_64 rng(99);
  struct Owned {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<uint8_t> base, target;
  };
  std::vector<Owned> tensors;
  const std::vector<int64_t> sizes = {2'500'000, 2'100'000, 1'000, 3'000'000, 2'200'000, 7};
  for (size_t i = 0; i < sizes.size(); ++i) {
    Owned t{"layer" + std::to_string(i) + ".w", {sizes[i]}, {}, {}};
    t.base.resize(2 * static_cast<size_t>(sizes[i]));
    for (auto& b : t.base) b = static_cast<uint8_t>(rng());
    t.target = t.base;
    for (size_t e = 0; e < static_cast<size_t>(sizes[i]); ++e)
      if (rng() % 100 < 7) t.target[2 * e] ^= static_cast<uint8_t>(1 + rng() % 3);
    tensors.push_back(std::move(t));
  }
  std::vector<TensorView> base, target;
  for (const auto& t : tensors) {
    base.push_back({t.name, DType::BF16, t.shape, t.base.data(), t.base.size()});
    target.push_back({t.name, DType::BF16, t.shape, t.target.data(), t.target.size()});
  }
  for (ValueMode mode : {ValueMode::Absolute, ValueMode::Delta}) {
    PatchOptions opt;
    opt.values = mode;
    opt.chunk_bytes = 200'000;  // several chunks per group
    opt.threads = 1;
    const std::vector<uint8_t> one = encode_patch(base, target, opt);
    const PatchInfo info = inspect_patch(one.data(), one.size());
    CHECK(info.n_chunks >= 8);
    for (int threads : {2, 3, 7}) {
      INFO("mode " << static_cast<int>(mode) << " threads " << threads);
      opt.threads = threads;
      const bool same = encode_patch(base, target, opt) == one;  // not decomposed: no 3 MB message
      CHECK(same);
    }
  }
}
