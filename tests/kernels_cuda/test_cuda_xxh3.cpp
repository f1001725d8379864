// XXH3-64 of device memory (kernels/xxh3_cuda.h) equals libxxhash's XXH3_64bits on the same bytes, for
// short inputs (host path), lengths around the 64-byte stripe and 1024-byte block edges, a multi-MB
// input and misaligned device pointers. Without a GPU each case WARNs and returns.
#include <xxhash.h>
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "kernels/xxh3_cuda.h"
#include "tests/kernels_cuda/cuda_test_util.h"

using pulse::test::DeviceBuffer;
using pulse::test::to_device;

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
