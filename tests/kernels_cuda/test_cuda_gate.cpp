// The GPU PULSELoCo gate (kernels/loco_gate_cuda.h) against loco_gate_portable, bit for bit: fired
// indices and values, the new residual and the non-finite flag, with the gate closed and open, with an
// index base, on values at and around BF16 rounding midpoints, on every BF16 pattern as the global
// (subnormals, infinities, NaNs with payloads), and at lengths around the thread and tile sizes.
// Without a GPU each case WARNs and returns.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/loco_gate.h"
#include "kernels/loco_gate_cuda.h"
#include "tests/kernels_cuda/cuda_test_util.h"

using namespace pulse::kernels;
using pulse::test::DeviceBuffer;
using pulse::test::to_device;
using pulse::test::to_host;

namespace {

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), 4 * v.size());
  return b;
}

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

void compare(const std::vector<float>& g, const std::vector<float>& l, const std::vector<float>& r0,
             bool open, uint32_t base) {
  const size_t n = g.size();
  std::vector<float> r_cpu = r0, v_cpu(n);
  std::vector<uint32_t> i_cpu(n);
  const LocoGateResult want =
      loco_gate_portable(g.data(), l.data(), r_cpu.data(), n, open, i_cpu.data(), v_cpu.data(), base);
  DeviceBuffer dg(4 * n), dl(4 * n), dr(4 * n), di(4 * n), dv(4 * n);
  const size_t ws_bytes = cuda::loco_gate_cuda_workspace_bytes(n);
  DeviceBuffer ws(ws_bytes);
  to_device(dg.get(), g);
  to_device(dl.get(), l);
  to_device(dr.get(), r0);
  const LocoGateResult got =
      cuda::loco_gate_cuda(dg.get<float>(), dl.get<float>(), dr.get<float>(), n, open, di.get<uint32_t>(),
                           dv.get<float>(), base, ws.get(), ws_bytes, nullptr);
  INFO("n " << n << " open " << open << " base " << base);
  REQUIRE(got.fired == want.fired);
  REQUIRE(got.nonfinite == want.nonfinite);
  i_cpu.resize(want.fired);
  v_cpu.resize(want.fired);
  REQUIRE(to_host<uint32_t>(di.get(), got.fired) == i_cpu);
  REQUIRE(bits_of(to_host<float>(dv.get(), got.fired)) == bits_of(v_cpu));
  REQUIRE(bits_of(to_host<float>(dr.get(), n)) == bits_of(r_cpu));
}

}  // namespace

TEST_CASE("cuda loco gate: random rounds, midpoints and lengths equal the CPU reference bit for bit",
          "[cuda][gate]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  std::mt19937_64 rng(3);
  std::normal_distribution<float> weight(0.0f, 0.02f), step(0.0f, 2e-6f);
  for (size_t n : {1, 15, 16, 17, 4095, 4096, 4097, 100001, 2000000}) {
    std::vector<float> g(n), l(n), r(n);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t gb = static_cast<uint32_t>(rng());
      switch (rng() % 4) {
        case 0:
          g[i] = from_bits((gb & 0xffff0000u) | 0x8000u);
          break;  // a BF16 midpoint
        case 1:
          g[i] = from_bits((gb & 0xffff0000u) | 0x7fffu);
          break;  // just below one
        default:
          g[i] = weight(rng);
          break;
      }
      l[i] = g[i] + step(rng);
      r[i] = rng() % 3 ? 0.0f : step(rng);
    }
    compare(g, l, r, false, 0);
    compare(g, l, r, true, 0);
    compare(g, l, r, false, 1000);
  }
}

TEST_CASE("cuda loco gate: every BF16 pattern as the global (subnormals, infinities, NaNs)", "[cuda][gate]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  std::mt19937_64 rng(5);
  const size_t n = 65536 * 4;
  std::vector<float> g(n), l(n), r(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t pattern = static_cast<uint32_t>(i % 65536) << 16;
    g[i] = from_bits(pattern | static_cast<uint32_t>(i / 65536) * 0x3fffu);
    switch (i / 65536) {
      case 0:
        l[i] = g[i];
        break;
      case 1:
        l[i] = from_bits(static_cast<uint32_t>(rng()));
        break;  // anything, NaN/Inf included
      case 2:
        l[i] = -g[i];
        break;
      default:
        l[i] = g[i] * 0.5f;
        break;
    }
    r[i] = i % 7 == 0 ? from_bits(0x00000001u) : (i % 11 == 0 ? from_bits(0x7fc01234u) : 0.0f);
  }
  compare(g, l, r, false, 0);
  compare(g, l, r, true, 0);
}

TEST_CASE("cuda loco gate: index_base + n over 2^32 is refused before touching anything", "[cuda][gate]") {
  // Needs no GPU: the check comes first.
  REQUIRE_THROWS_AS(cuda::loco_gate_cuda(nullptr, nullptr, nullptr, 2, false, nullptr, nullptr, 0xffffffffu,
                                         nullptr, 0, nullptr),
                    std::invalid_argument);
  const LocoGateResult none =
      cuda::loco_gate_cuda(nullptr, nullptr, nullptr, 0, false, nullptr, nullptr, 0, nullptr, 0, nullptr);
  REQUIRE(none.fired == 0);
  REQUIRE(!none.nonfinite);
}
