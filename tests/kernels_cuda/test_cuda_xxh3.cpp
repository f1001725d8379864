// XXH3-64 of device memory (kernels/xxh3_cuda.h) equals libxxhash's XXH3_64bits on the same bytes, for
// short inputs (host path), lengths around the 64-byte stripe and 1024-byte block edges, a multi-MB
// input and misaligned device pointers; xxh3_64_cuda_many on a batch of such inputs, in one batch and in
// several. Without a GPU each device case WARNs and returns; the host-side refusals run everywhere.
#include <xxhash.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <initializer_list>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/xxh3_cuda.h"
#include "tests/kernels_cuda/cuda_test_util.h"

using pulse::test::DeviceBuffer;
using pulse::test::to_device;

namespace {

/// Inputs laid out back to back in a buffer of `capacity` bytes: each length at offset misalignment 0 and
/// then `misalign`, skipping those that no longer fit. lens[i] bytes at offs[i].
struct Inputs {
  std::vector<uint64_t> lens, offs;
};
Inputs lay_out(std::initializer_list<uint64_t> lengths, uint64_t misalign, uint64_t capacity) {
  Inputs in;
  uint64_t at = 0;
  for (uint64_t len : lengths)
    for (uint64_t m : {uint64_t{0}, misalign}) {
      if (at + m + len > capacity) continue;
      in.offs.push_back(at + m);
      in.lens.push_back(len);
      at += m + len;
    }
  return in;
}

}  // namespace

TEST_CASE("cuda xxh3: equals XXH3_64bits at every length class and alignment", "[cuda][xxh3]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  std::mt19937_64 rng(9);
  std::vector<uint8_t> data(8'000'003);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  DeviceBuffer d(data.size() + 16);
  to_device(d.get<uint8_t>(), data);
  for (uint64_t len : {0ull, 1ull, 16ull, 240ull, 241ull, 256ull, 1023ull, 1024ull, 1025ull, 1087ull, 1088ull,
                       1089ull, 2048ull, 2049ull, 65536ull, 1000003ull, 7999999ull}) {
    for (uint64_t off : {0ull, 1ull, 2ull, 8ull}) {
      if (off + len > data.size()) continue;
      INFO("len " << len << " offset " << off);
      const size_t ws_bytes = pulse::kernels::cuda::xxh3_cuda_workspace_bytes(len);
      DeviceBuffer ws(ws_bytes);
      const uint64_t got =
          pulse::kernels::cuda::xxh3_64_cuda(d.get<uint8_t>() + off, len, ws.get(), ws_bytes, nullptr);
      REQUIRE(got == XXH3_64bits(data.data() + off, len));
    }
  }
}

TEST_CASE("cuda xxh3 many: a batch of inputs equals XXH3_64bits of each, in one batch or many",
          "[cuda][xxh3]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  namespace kc = pulse::kernels::cuda;
  std::mt19937_64 rng(11);
  std::vector<uint8_t> data(6'000'017);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  DeviceBuffer d(data.size());
  to_device(d.get<uint8_t>(), data);
  // Every length class of the single-input test, at several offsets, interleaved so that inputs without
  // blocks (short ones, and 241..1024 bytes) sit between inputs with blocks.
  const auto [lens, offs] = lay_out(
      {1000003, 0, 1, 2049, 240, 241, 65536, 1024, 1025, 16, 1087, 1088, 1089, 2048, 1023, 256, 3000001}, 3,
      data.size());
  std::vector<const void*> ptrs;
  for (uint64_t off : offs) ptrs.push_back(d.get<uint8_t>() + off);
  std::vector<uint64_t> want;
  for (size_t i = 0; i < lens.size(); ++i) want.push_back(XXH3_64bits(data.data() + offs[i], lens[i]));

  for (const bool one_batch : {true, false}) {
    INFO((one_batch ? "one batch" : "several batches"));
    // cap 1: the workspace of the largest input alone, so the inputs go in several batches.
    const size_t all = kc::xxh3_cuda_many_workspace_bytes(lens.data(), lens.size());
    const size_t ws_bytes =
        one_batch ? all : kc::xxh3_cuda_many_workspace_capped(lens.data(), lens.size(), 1);
    if (!one_batch) REQUIRE(ws_bytes < all);
    DeviceBuffer ws(ws_bytes);
    std::vector<uint64_t> got(lens.size(), 0);
    kc::xxh3_64_cuda_many(ptrs.data(), lens.data(), lens.size(), ws.get(), ws_bytes, nullptr, got.data());
    for (size_t i = 0; i < lens.size(); ++i) {
      INFO("input " << i << ": " << lens[i] << " bytes at offset " << offs[i]);
      REQUIRE(got[i] == want[i]);
    }
  }
}

TEST_CASE("cuda xxh3 many: workspace sizes, and refusals before any device work", "[cuda][xxh3]") {
  // Host-side checks only: they run without a GPU as well.
  namespace kc = pulse::kernels::cuda;
  const std::vector<uint64_t> lens = {5'000'000, 100, 0, 2'000'000};
  const size_t all = kc::xxh3_cuda_many_workspace_bytes(lens.data(), lens.size());
  size_t largest = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    const size_t one = kc::xxh3_cuda_many_workspace_bytes(&lens[i], 1);
    REQUIRE(one <= all);
    largest = std::max(largest, one);
  }
  // 64 bytes of contributions per 1 KiB block: the largest input alone needs at least 5e6 / 16 bytes.
  REQUIRE(largest >= 5'000'000 / 16);
  REQUIRE(kc::xxh3_cuda_many_workspace_capped(lens.data(), lens.size(), all) == all);
  REQUIRE(kc::xxh3_cuda_many_workspace_capped(lens.data(), lens.size(), 1) == largest);
  REQUIRE(kc::xxh3_cuda_many_workspace_capped(lens.data(), lens.size(), largest + 1) == largest + 1);

  uint8_t host_byte = 0;  // never dereferenced: the calls refuse first
  std::vector<const void*> ptrs(lens.size(), &host_byte);
  std::vector<uint64_t> out(lens.size());
  CHECK_THROWS_AS(kc::xxh3_64_cuda_many(ptrs.data(), lens.data(), lens.size(), &host_byte, largest - 1,
                                        nullptr, out.data()),
                  std::invalid_argument);
  ptrs[3] = nullptr;
  CHECK_THROWS_WITH(
      kc::xxh3_64_cuda_many(ptrs.data(), lens.data(), lens.size(), &host_byte, all, nullptr, out.data()),
      Catch::Contains("input 3 is a null device pointer"));
}

TEST_CASE("cuda xxh3 many: block counts around the chain's batches of 32, in one batch and in several",
          "[cuda][xxh3]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  namespace kc = pulse::kernels::cuda;
  std::mt19937_64 rng(12);
  std::vector<uint8_t> data(3'000'000);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  DeviceBuffer d(data.size());
  to_device(d.get<uint8_t>(), data);
  // Block counts around the chain's batches of 32 (31, 32, 33, 64, 65 blocks), inputs without blocks
  // between inputs with blocks, empty inputs first, last and in the middle.
  const auto [lens, offs] = lay_out({0, 1000003, 240, 0, 241, 32 * 1024, 32 * 1024 + 1, 33 * 1024 + 1, 1024,
                                     1025, 64 * 1024 + 1, 65 * 1024 + 1, 16, 1088, 1089, 0},
                                    5, data.size());
  std::vector<const void*> ptrs;
  for (uint64_t off : offs) ptrs.push_back(d.get<uint8_t>() + off);
  // One batch, then the batches for the largest input's workspace alone and for a third of the whole's.
  const size_t all = kc::xxh3_cuda_many_workspace_bytes(lens.data(), lens.size());
  const size_t largest = kc::xxh3_cuda_many_workspace_capped(lens.data(), lens.size(), 1);
  for (const size_t ws : {all, largest, std::max(largest, all / 3)}) {
    const size_t batches = kc::xxh3_cuda_many_batch_ends(lens.data(), lens.size(), ws).size();
    INFO("workspace " << ws << ": " << batches << " batches");
    REQUIRE((ws == all ? batches == 1 : batches > 1));
    DeviceBuffer w(ws);
    std::vector<uint64_t> got(lens.size(), 0);
    kc::xxh3_64_cuda_many(ptrs.data(), lens.data(), lens.size(), w.get(), ws, nullptr, got.data());
    for (size_t i = 0; i < lens.size(); ++i) {
      INFO("input " << i << ": " << lens[i] << " bytes at offset " << offs[i]);
      REQUIRE(got[i] == XXH3_64bits(data.data() + offs[i], lens[i]));
    }
  }
}

TEST_CASE("cuda xxh3 many: batches are greedy runs of consecutive inputs that fit the workspace",
          "[cuda][xxh3]") {
  // Host code only (xxh3_64_cuda_many cuts its batches with it).
  namespace kc = pulse::kernels::cuda;
  const std::vector<uint64_t> lens = {5'000'000, 100, 0, 2'000'000, 3'000'000, 1024, 70'000, 4'000'000, 1};
  const size_t all = kc::xxh3_cuda_many_workspace_bytes(lens.data(), lens.size());
  const size_t largest = kc::xxh3_cuda_many_workspace_capped(lens.data(), lens.size(), 1);
  REQUIRE(kc::xxh3_cuda_many_batch_ends(lens.data(), 0, largest).empty());
  REQUIRE(kc::xxh3_cuda_many_batch_ends(lens.data(), lens.size(), all) == std::vector<size_t>{lens.size()});
  for (const size_t ws : {largest, largest + largest / 2, all / 2, all - 1}) {
    INFO("workspace " << ws);
    const std::vector<size_t> ends = kc::xxh3_cuda_many_batch_ends(lens.data(), lens.size(), ws);
    REQUIRE(ends.size() > 1);
    REQUIRE(ends.back() == lens.size());
    size_t begin = 0;
    for (const size_t end : ends) {
      INFO("batch [" << begin << ", " << end << ")");
      REQUIRE(end > begin);
      REQUIRE(kc::xxh3_cuda_many_workspace_bytes(lens.data() + begin, end - begin) <= ws);
      // Greedy: the next input would not have fitted.
      if (end < lens.size())
        REQUIRE(kc::xxh3_cuda_many_workspace_bytes(lens.data() + begin, end + 1 - begin) > ws);
      begin = end;
    }
  }
  CHECK_THROWS_WITH(kc::xxh3_cuda_many_batch_ends(lens.data(), lens.size(), largest - 1),
                    Catch::Contains("input 0 (5000000 bytes) needs"));
}
