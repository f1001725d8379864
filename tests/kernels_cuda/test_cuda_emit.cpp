// The GPU encoder scan (kernels/diff_emit16_cuda.h) against its CPU references: the BF16 cast of FP32
// masters equals kernels/bf16.h fp32_to_bf16_rne and the streams equal diff_emit16_portable over the
// whole tensor, byte for byte, in absolute and delta mode, with and without the fused cast, on random
// data and on NaN (payloads, both signs), +-Inf, -0/+0, subnormals and exact rounding ties, at lengths
// around the 16-element thread and 4096-element tile sizes, and with gaps needing 1..4 tail bytes that
// cross tiles. Without a GPU each case WARNs and returns.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/diff_emit16.h"
#include "kernels/diff_emit16_cuda.h"
#include "tests/kernels_cuda/cuda_test_util.h"

using namespace pulse::kernels;
using pulse::test::DeviceBuffer;
using pulse::test::to_device;
using pulse::test::to_host;

namespace {

struct Streams {
  std::vector<uint8_t> head, tail, lo, hi;
};

Streams cpu_streams(const std::vector<uint16_t>& prev, const std::vector<uint16_t>& target, bool delta) {
  const uint64_t n = prev.size();
  Streams s;
  s.head.resize(emit16_room(n));
  s.tail.resize(emit16_tail_room(n) + 16);
  s.lo.resize(emit16_room(n));
  s.hi.resize(emit16_room(n));
  Emit16Cursor c{s.head.data(), s.tail.data(), s.lo.data(), s.hi.data(), 0};
  const auto* a = reinterpret_cast<const uint8_t*>(prev.data());
  const auto* b = reinterpret_cast<const uint8_t*>(target.data());
  const uint64_t k = diff_emit16_portable(a, b, 0, n, delta, c);
  s.head.resize(k);
  s.lo.resize(k);
  s.hi.resize(k);
  s.tail.resize(static_cast<size_t>(c.tail - s.tail.data()));
  return s;
}

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

/// Runs the GPU scan; returns its streams and (with masters) the target it wrote.
Streams gpu_streams(const std::vector<float>* master, const std::vector<uint16_t>& prev,
                    std::vector<uint16_t>& target, bool delta, size_t offset_elems) {
  const uint64_t n = prev.size();
  // offset_elems shifts the device pointers off 16-byte alignment (the scalar path).
  DeviceBuffer d_master(4 * (n + offset_elems)), d_prev(2 * (n + offset_elems)),
      d_target(2 * (n + offset_elems));
  DeviceBuffer head(n), tail(cuda::emit16_cuda_tail_room(n)), lo(n), hi(n);
  const size_t ws_bytes = cuda::emit16_cuda_workspace_bytes(n);
  DeviceBuffer ws(ws_bytes);
  float* m = d_master.get<float>() + offset_elems;
  uint16_t* p = d_prev.get<uint16_t>() + offset_elems;
  uint16_t* t = d_target.get<uint16_t>() + offset_elems;
  if (master) to_device(m, *master);
  to_device(p, prev);
  if (!master) to_device(t, target);
  cuda::Emit16Totals totals;
  cuda::cast_diff_emit16_cuda(
      master ? m : nullptr, p, t, n, delta,
      cuda::Emit16Streams{head.get<uint8_t>(), tail.get<uint8_t>(), lo.get<uint8_t>(), hi.get<uint8_t>()},
      ws.get(), ws_bytes, &totals, nullptr);
  pulse::test::cuda_ok(cudaDeviceSynchronize(), "cast_diff_emit16_cuda");
  if (master) target = to_host<uint16_t>(t, n);
  Streams s;
  s.head = to_host<uint8_t>(head.get(), totals.changed);
  s.tail = to_host<uint8_t>(tail.get(), totals.tail_bytes);
  s.lo = to_host<uint8_t>(lo.get(), totals.changed);
  s.hi = to_host<uint8_t>(hi.get(), totals.changed);
  return s;
}

/// FP32 masters around prev's BF16 values: unchanged, +-1 ULP, ties, specials, with probability p of change.
std::vector<float> masters_for(const std::vector<uint16_t>& prev, double p, std::mt19937_64& rng) {
  std::bernoulli_distribution change(p);
  static const uint32_t kSpecial[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u, 0x7fbfffffu,
                                      0x7f800000u, 0xff800000u, 0x80000000u, 0x00000000u, 0x00000001u,
                                      0x807fffffu, 0x00008000u, 0x00018000u, 0x3f808000u, 0x3f818000u,
                                      0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u};
  std::vector<float> m(prev.size());
  for (size_t i = 0; i < prev.size(); ++i) {
    const uint32_t base = static_cast<uint32_t>(prev[i]) << 16;
    uint32_t bits = base | static_cast<uint32_t>(rng() & 0x7fffu);  // rounds back to prev (mostly)
    if (change(rng)) {
      switch (rng() % 4) {
        case 0:
          bits = kSpecial[rng() % (sizeof kSpecial / 4)];
          break;
        case 1:
          bits = base + 0x10000u + static_cast<uint32_t>(rng() & 0xffffu);
          break;
        case 2:
          bits = base | 0x8000u;
          break;  // a tie: rounds to even
        default:
          bits = static_cast<uint32_t>(rng());
          break;
      }
    }
    m[i] = from_bits(bits);
  }
  return m;
}

}  // namespace

TEST_CASE("cuda cast+diff+emit: streams and cast equal the CPU reference byte for byte", "[cuda][emit]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  std::mt19937_64 rng(7);
  for (uint64_t n :
       {1ull, 15ull, 16ull, 17ull, 255ull, 4095ull, 4096ull, 4097ull, 8191ull, 100003ull, 1000000ull}) {
    for (double p : {0.0, 0.01, 0.07, 0.5, 1.0}) {
      for (bool delta : {false, true}) {
        std::vector<uint16_t> prev(n);
        for (auto& v : prev) v = static_cast<uint16_t>(rng());
        const std::vector<float> master = masters_for(prev, p, rng);
        std::vector<uint16_t> cpu_target(n);
        fp32_to_bf16_rne(master.data(), cpu_target.data(), n);
        const Streams want = cpu_streams(prev, cpu_target, delta);
        for (size_t offset : {size_t{0}, size_t{1}}) {
          INFO("n " << n << " p " << p << " delta " << delta << " offset " << offset);
          std::vector<uint16_t> gpu_target;
          const Streams got = gpu_streams(&master, prev, gpu_target, delta, offset);
          REQUIRE(gpu_target == cpu_target);
          REQUIRE(got.head == want.head);
          REQUIRE(got.tail == want.tail);
          REQUIRE(got.lo == want.lo);
          REQUIRE(got.hi == want.hi);
          // The BF16 vs BF16 diff (no cast) gives the same streams.
          std::vector<uint16_t> target = cpu_target;
          const Streams plain = gpu_streams(nullptr, prev, target, delta, offset);
          REQUIRE(plain.head == want.head);
          REQUIRE(plain.tail == want.tail);
          REQUIRE(plain.lo == want.lo);
          REQUIRE(plain.hi == want.hi);
        }
      }
    }
  }
}

TEST_CASE("cuda cast+diff+emit: long gaps across tiles (1..4 tail bytes) and an empty diff", "[cuda][emit]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  const uint64_t n = 5'000'000;
  std::vector<uint16_t> prev(n, 0x3f80), target(n, 0x3f80);
  for (uint64_t pos : {0ull, 1ull, 129ull, 4095ull, 4096ull, 20000ull, 20001ull, 2'100'000ull, 4'999'999ull})
    target[pos] = 0x3f81;
  for (bool delta : {false, true}) {
    const Streams want = cpu_streams(prev, target, delta);
    std::vector<uint16_t> t = target;
    const Streams got = gpu_streams(nullptr, prev, t, delta, 0);
    REQUIRE(want.tail.size() >= 4);
    REQUIRE(got.head == want.head);
    REQUIRE(got.tail == want.tail);
    REQUIRE(got.lo == want.lo);
    REQUIRE(got.hi == want.hi);
  }
  std::vector<uint16_t> same = prev;
  const Streams none = gpu_streams(nullptr, prev, same, false, 0);
  REQUIRE(none.head.empty());
  REQUIRE(none.tail.empty());
}

TEST_CASE("cuda cast+diff+emit: a workspace that is too small is refused before any launch", "[cuda][emit]") {
  // Needs no GPU: the size check comes first.
  cuda::Emit16Totals totals;
  uint8_t dummy[16];
  const uint16_t* p = reinterpret_cast<const uint16_t*>(dummy);
  REQUIRE(cuda::emit16_cuda_workspace_bytes(4096) >= 4 * 4096);
  REQUIRE_THROWS_AS(cuda::cast_diff_emit16_cuda(nullptr, p, reinterpret_cast<uint16_t*>(dummy), 4096, false,
                                                cuda::Emit16Streams{dummy, dummy, dummy, dummy}, dummy, 16,
                                                &totals, nullptr),
                    std::invalid_argument);
  cuda::cast_diff_emit16_cuda(nullptr, nullptr, nullptr, 0, false, cuda::Emit16Streams{}, nullptr, 0, &totals,
                              nullptr);
  REQUIRE(totals.changed == 0);
  REQUIRE(totals.tail_bytes == 0);
}
