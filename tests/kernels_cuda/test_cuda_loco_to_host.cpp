// sync::loco_gate_cuda_to_host (sync/gpu_loco.h), what an outer round on a GPU calls per tensor, against
// the CPU gate (kernels::loco_gate): the fired entries it copies to the host, the residual it leaves on
// the device and the non-finite flag, bit for bit, with the gate closed and open, nothing fired, and
// every entry fired. Torch-free, so it runs in bench/gpu_check.sh's prebuilt step. Without a GPU each
// case WARNs and returns; the refusals that need no device are checked everywhere.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/loco_gate.h"
#include "sync/gpu_loco.h"
#include "tests/kernels_cuda/cuda_test_util.h"

using pulse::test::DeviceBuffer;
using pulse::test::to_device;
using pulse::test::to_host;

namespace {

struct GateCase {
  std::vector<float> global, local, residual;
};

/// n elements of RL scale: g ~ N(0, 0.02), l = g + N(0, scale), r ~ N(0, scale / 4).
GateCase rl_case(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> w(0.f, 0.02f), d(0.f, scale), e(0.f, scale / 4);
  GateCase c;
  for (size_t i = 0; i < n; ++i) {
    c.global.push_back(w(rng));
    c.local.push_back(c.global.back() + d(rng));
    c.residual.push_back(e(rng));
  }
  return c;
}

void same_as_cpu(const GateCase& c, bool open) {
  const size_t n = c.global.size();
  std::vector<float> r_cpu = c.residual, v_cpu(n);
  std::vector<uint32_t> i_cpu(n);
  const pulse::kernels::LocoGateResult want = pulse::kernels::loco_gate(
      c.global.data(), c.local.data(), r_cpu.data(), n, open, i_cpu.data(), v_cpu.data());
  i_cpu.resize(want.fired);
  v_cpu.resize(want.fired);
  DeviceBuffer dg(4 * n), dl(4 * n), dr(4 * n);
  to_device(dg.get(), c.global);
  to_device(dl.get(), c.local);
  to_device(dr.get(), c.residual);
  std::vector<uint32_t> i_gpu{7, 7};  // stale contents are replaced
  std::vector<float> v_gpu{1.f};
  const pulse::kernels::LocoGateResult got = pulse::sync::loco_gate_cuda_to_host(
      dg.get<float>(), dl.get<float>(), dr.get<float>(), n, open, i_gpu, v_gpu);
  REQUIRE(got.fired == want.fired);
  REQUIRE(got.nonfinite == want.nonfinite);
  REQUIRE(i_gpu == i_cpu);
  REQUIRE(v_gpu.size() == v_cpu.size());
  REQUIRE(std::memcmp(v_gpu.data(), v_cpu.data(), 4 * v_cpu.size()) == 0);
  const std::vector<float> r_gpu = to_host<float>(dr.get(), n);
  REQUIRE(std::memcmp(r_gpu.data(), r_cpu.data(), 4 * n) == 0);
}

}  // namespace

TEST_CASE("PULSELoCo gate to host on a GPU: fired entries and residual equal the CPU gate", "[gpu][loco]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  for (size_t n : {size_t{1}, size_t{4095}, size_t{4097}, size_t{300001}}) {
    INFO("n = " << n);
    const GateCase c = rl_case(n, 3e-4f, static_cast<uint32_t>(n));
    same_as_cpu(c, false);  // RL scale: most entries wait in the residual
    same_as_cpu(c, true);   // gate open: every entry is sent
  }
  GateCase still = rl_case(10000, 3e-4f, 5);  // locals equal to the global, no residual: nothing fires
  still.local = still.global;
  std::fill(still.residual.begin(), still.residual.end(), 0.f);
  same_as_cpu(still, false);
  GateCase bad = rl_case(5000, 3e-4f, 6);  // a non-finite pseudo-gradient is flagged as on the CPU
  bad.local[1234] = std::nanf("");
  same_as_cpu(bad, false);
}

TEST_CASE("PULSELoCo gate to host refuses 2^32 elements and null pointers before touching anything",
          "[gpu][loco]") {
  std::vector<uint32_t> idx;
  std::vector<float> val;
  REQUIRE_THROWS_AS(
      pulse::sync::loco_gate_cuda_to_host(nullptr, nullptr, nullptr, uint64_t{1} << 32, false, idx, val),
      std::invalid_argument);
  REQUIRE_THROWS_AS(pulse::sync::loco_gate_cuda_to_host(nullptr, nullptr, nullptr, 16, false, idx, val),
                    std::invalid_argument);
}
