// The tree hash of device memory (kernels/tree_hash_cuda.h) equals the CPU's kernels::tree_hash64 (and
// the definition of kernels/tree_hash.h, from libxxhash) byte for byte: at the chunk edges (one chunk,
// a last chunk under 241 bytes that the host finishes, one of 241 bytes and more finished on the device),
// misaligned device pointers, a whole batch with empty inputs among them. Without a GPU each device case
// WARNs and returns (the CPU emulation build runs them all).
#include <xxhash.h>
#include <catch2/catch.hpp>

#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/tree_hash.h"
#include "kernels/tree_hash_cuda.h"
#include "tests/kernels_cuda/cuda_test_util.h"

using pulse::test::DeviceBuffer;
using pulse::test::to_device;
namespace k = pulse::kernels;
namespace kc = pulse::kernels::cuda;

namespace {

/// The definition, from libxxhash alone: XXH3 of each 64 KiB chunk, XXH3 of the leaves (one chunk: its leaf).
uint64_t reference(const uint8_t* p, uint64_t len) {
  if (len <= k::kTreeHashChunkBytes) return XXH3_64bits(p, len);
  std::vector<uint64_t> leaves;
  for (uint64_t at = 0; at < len; at += k::kTreeHashChunkBytes)
    leaves.push_back(XXH3_64bits(p + at, std::min<uint64_t>(k::kTreeHashChunkBytes, len - at)));
  return XXH3_64bits(leaves.data(), 8 * leaves.size());
}

const std::vector<uint64_t> kLengths{
    0,     1,           240,         241,          1024,      65535,          65536,
    65537, 65536 + 240, 65536 + 241, 65536 + 1089, 3 * 65536, 5 * 65536 + 77, 700'001};

}  // namespace

TEST_CASE("cuda tree hash: equals tree_hash64 at every chunk edge and alignment, one input a call",
          "[cuda][tree_hash]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  std::mt19937_64 rng(33);
  std::vector<uint8_t> data(700'001 + 16);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  DeviceBuffer d(data.size());
  to_device(d.get<uint8_t>(), data);
  for (uint64_t len : kLengths) {
    for (uint64_t off : {0ull, 1ull, 8ull}) {
      if (off + len > data.size()) continue;
      INFO("len " << len << " offset " << off);
      const void* ptr = d.get<uint8_t>() + off;
      const size_t ws_bytes = kc::tree_hash_cuda_workspace_bytes(&len, 1);
      DeviceBuffer ws(ws_bytes);
      uint64_t got = 0;
      kc::tree_hash_cuda_many(&ptr, &len, 1, ws.get(), ws_bytes, nullptr, &got);
      const uint64_t want = k::tree_hash64(data.data() + off, len);
      CHECK(want == reference(data.data() + off, len));
      REQUIRE(got == want);
    }
  }
}

TEST_CASE("cuda tree hash: a batch of many inputs, empty ones among them, equals tree_hash64 of each",
          "[cuda][tree_hash]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  std::mt19937_64 rng(34);
  std::vector<uint64_t> lens, offs;
  uint64_t at = 0;
  for (uint64_t len : kLengths) {
    lens.push_back(len);
    offs.push_back(at + (len & 3));  // some misaligned
    at += len + 8;
    lens.push_back(0);  // an empty input after each
    offs.push_back(at);
  }
  std::vector<uint8_t> data(at + 8);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  DeviceBuffer d(data.size());
  to_device(d.get<uint8_t>(), data);
  std::vector<const void*> ptrs;
  for (uint64_t o : offs) ptrs.push_back(d.get<uint8_t>() + o);
  ptrs[1] = nullptr;  // an empty input may have no pointer
  const size_t ws_bytes = kc::tree_hash_cuda_workspace_bytes(lens.data(), lens.size());
  DeviceBuffer ws(ws_bytes);
  std::vector<uint64_t> got(lens.size(), 0);
  kc::tree_hash_cuda_many(ptrs.data(), lens.data(), lens.size(), ws.get(), ws_bytes, nullptr, got.data());
  for (size_t i = 0; i < lens.size(); ++i) {
    INFO("input " << i << ", " << lens[i] << " bytes");
    CHECK(got[i] == k::tree_hash64(data.data() + offs[i], lens[i]));
  }
  SECTION("a workspace one byte short, or a null pointer with bytes, is refused") {
    CHECK_THROWS_AS(kc::tree_hash_cuda_many(ptrs.data(), lens.data(), lens.size(), ws.get(), ws_bytes - 1,
                                            nullptr, got.data()),
                    std::invalid_argument);
    ptrs[2] = nullptr;  // kLengths[1]: 1 byte
    CHECK_THROWS_AS(kc::tree_hash_cuda_many(ptrs.data(), lens.data(), lens.size(), ws.get(), ws_bytes,
                                            nullptr, got.data()),
                    std::invalid_argument);
  }
}
