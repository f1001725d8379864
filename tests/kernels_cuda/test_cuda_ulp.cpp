// The ulp value coding on the GPU (kernels::cuda::loco_ulp_quantize_cuda, and
// sync::loco_gate_ulp_cuda_to_host, what an outer round on a GPU calls) against the CPU reference
// (kernels/loco_ulp.h) bit for bit: counts, values sent, remainders, on every BF16 pattern as the global
// (zero, subnormals, the largest binade, infinities, NaNs), at ties and at the count limit, with an
// index base; and the gate + coding + compaction end to end. Without a GPU each case WARNs and returns.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/loco_gate.h"
#include "kernels/loco_gate_cuda.h"
#include "kernels/loco_ulp.h"
#include "sync/gpu_loco.h"
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

/// Quantizes fired entries (idx, s) over global g / residual r0 on the CPU and on the device; compares.
void compare(const std::vector<float>& g, const std::vector<float>& r0, const std::vector<uint32_t>& idx,
             const std::vector<float>& s, uint32_t base) {
  const size_t n = g.size(), m = idx.size();
  std::vector<float> r_cpu = r0, v_cpu = s;
  std::vector<int32_t> c_cpu(m);
  loco_ulp_quantize(g.data(), r_cpu.data(), idx.data(), v_cpu.data(), c_cpu.data(), m, base);
  DeviceBuffer dg(4 * n), dr(4 * n), di(4 * m), dv(4 * m), dc(4 * m);
  to_device(dg.get(), g);
  to_device(dr.get(), r0);
  to_device(di.get(), idx);
  to_device(dv.get(), s);
  cuda::loco_ulp_quantize_cuda(dg.get<float>(), dr.get<float>(), di.get<uint32_t>(), dv.get<float>(),
                               dc.get<int32_t>(), m, base, nullptr);
  INFO("n " << n << " fired " << m << " base " << base);
  REQUIRE(to_host<int32_t>(dc.get(), m) == c_cpu);
  REQUIRE(bits_of(to_host<float>(dv.get(), m)) == bits_of(v_cpu));
  REQUIRE(bits_of(to_host<float>(dr.get(), n)) == bits_of(r_cpu));
}

}  // namespace

TEST_CASE("cuda loco ulp: every BF16 pattern as the global, steps from a fraction to beyond 2^24",
          "[cuda][ulp]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  std::mt19937_64 rng(23);
  const size_t n = 65536 * 2;
  std::vector<float> g(n), r(n, 0.0f), s;
  std::vector<uint32_t> idx;
  const double scales[] = {0.3, 0.5, 1.5, 2.5, 7.0, 1e3, 16777216.0, 16777218.0, 1e9};
  for (size_t i = 0; i < n; ++i) {
    g[i] = from_bits((static_cast<uint32_t>(i % 65536) << 16) | static_cast<uint32_t>(i / 65536) * 0x7fffu);
    if (i % 3 == 2) continue;  // not fired
    const double step = loco_ulp_step(g[i]);
    const double k = scales[rng() % 9] * (rng() % 2 ? 1 : -1);
    double v = step > 0 ? k * step : static_cast<double>(std::normal_distribution<float>(0.f, 1e-3f)(rng));
    if (!(std::fabs(v) <= FLT_MAX)) v = FLT_MAX;
    idx.push_back(static_cast<uint32_t>(1000 + i));
    s.push_back(static_cast<float>(v));
  }
  compare(g, r, idx, s, 1000);
  for (auto& i : idx) i -= 1000;
  compare(g, r, idx, s, 0);
}

TEST_CASE("cuda loco ulp: gate + coding + compaction to the host equal the CPU round bit for bit",
          "[cuda][ulp]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  std::mt19937 rng(29);
  std::normal_distribution<float> w(0.f, 0.02f), d(0.f, 3e-5f);
  for (size_t n : {1, 4095, 4097, 60000}) {
    for (bool open : {false, true}) {
      std::vector<float> g(n), l(n), r(n);
      for (size_t i = 0; i < n; ++i) {
        g[i] = w(rng);
        l[i] = g[i] + d(rng);
        r[i] = d(rng) / 4;
      }
      // CPU: gate, coding, compaction (what rl/diloco.cpp does on a CPU).
      std::vector<float> r_cpu = r, v_cpu(n);
      std::vector<uint32_t> i_cpu(n);
      std::vector<int32_t> c_cpu(n);
      const LocoGateResult want =
          loco_gate(g.data(), l.data(), r_cpu.data(), n, open, i_cpu.data(), v_cpu.data());
      loco_ulp_quantize(g.data(), r_cpu.data(), i_cpu.data(), v_cpu.data(), c_cpu.data(), want.fired);
      const uint64_t sent = loco_ulp_compact(i_cpu.data(), v_cpu.data(), c_cpu.data(), want.fired);
      i_cpu.resize(sent);
      v_cpu.resize(sent);
      c_cpu.resize(sent);
      DeviceBuffer dg(4 * n), dl(4 * n), dr(4 * n);
      to_device(dg.get(), g);
      to_device(dl.get(), l);
      to_device(dr.get(), r);
      std::vector<uint32_t> i_gpu;
      std::vector<float> v_gpu;
      std::vector<int32_t> c_gpu{5};  // stale contents are replaced
      const LocoGateResult got = pulse::sync::loco_gate_ulp_cuda_to_host(
          dg.get<float>(), dl.get<float>(), dr.get<float>(), n, open, i_gpu, v_gpu, c_gpu);
      INFO("n " << n << " open " << open);
      REQUIRE(got.fired == sent);
      REQUIRE(i_gpu == i_cpu);
      REQUIRE(c_gpu == c_cpu);
      REQUIRE(bits_of(v_gpu) == bits_of(v_cpu));
      REQUIRE(bits_of(to_host<float>(dr.get(), n)) == bits_of(r_cpu));
    }
  }
}
