// The GPU scatter (kernels/patch_apply_cuda.h) against the CPU: a varint-gap stream made by the CPU
// encoder (diff_emit16_portable) applied on the device turns the base into the target exactly and saves
// the old values as undo, in absolute and delta mode; malformed streams (a position past the end, a
// truncated, overlong or 64-bit-overflowing tail chain, trailing tail bytes, a missing chain, bad sizes)
// are refused with the offending offset and leave the weights and undo untouched, as
// sync/index_coding.cpp validate_index_stream refuses them. Without a GPU each case WARNs and returns.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "kernels/diff_emit16.h"
#include "kernels/patch_apply_cuda.h"
#include "tests/kernels_cuda/cuda_test_util.h"

using namespace pulse::kernels;
using pulse::test::DeviceBuffer;
using pulse::test::to_device;
using pulse::test::to_host;

namespace {

/// index stream (heads then tails) and value stream (lo then hi) of prev -> target.
void cpu_encode(const std::vector<uint16_t>& prev, const std::vector<uint16_t>& target, bool delta,
                std::vector<uint8_t>& index, std::vector<uint8_t>& values, uint64_t& changed) {
  const uint64_t n = prev.size();
  std::vector<uint8_t> head(emit16_room(n)), tail(emit16_tail_room(n) + 16), lo(emit16_room(n)),
      hi(emit16_room(n));
  Emit16Cursor c{head.data(), tail.data(), lo.data(), hi.data(), 0};
  changed = diff_emit16_portable(reinterpret_cast<const uint8_t*>(prev.data()),
                                 reinterpret_cast<const uint8_t*>(target.data()), 0, n, delta, c);
  index.assign(head.begin(), head.begin() + static_cast<long>(changed));
  index.insert(index.end(), tail.data(), c.tail);
  values.assign(lo.begin(), lo.begin() + static_cast<long>(changed));
  values.insert(values.end(), hi.begin(), hi.begin() + static_cast<long>(changed));
}

struct ApplyRun {
  cuda::ApplyStatus status;
  std::vector<uint16_t> weights, undo;
};

ApplyRun gpu_apply(const std::vector<uint16_t>& weights, const std::vector<uint8_t>& index, uint64_t changed,
                   const std::vector<uint8_t>& values, bool delta) {
  const uint64_t n = weights.size();
  DeviceBuffer w(2 * n), idx(index.size()), val(values.size()), undo(2 * changed + 2);
  const size_t ws_bytes = cuda::apply_u16_cuda_workspace_bytes(changed, index.size());
  DeviceBuffer ws(ws_bytes);
  // The workspace holds stale bytes in real use (one buffer for a model's tensors): the verdict must not
  // depend on them.
  pulse::test::cuda_ok(cudaMemset(ws.get(), 0xA5, ws_bytes), "cudaMemset");
  to_device(w.get(), weights);
  to_device(idx.get(), index);
  to_device(val.get(), values);
  const std::vector<uint16_t> sentinel(changed + 1, 0xabcd);
  to_device(undo.get(), sentinel);
  ApplyRun r;
  cuda::apply_varint_u16_cuda(w.get<uint16_t>(), n, idx.get<uint8_t>(), index.size(), changed,
                              val.get<uint8_t>(), delta, undo.get<uint16_t>(), ws.get(), ws_bytes, &r.status,
                              nullptr);
  r.weights = to_host<uint16_t>(w.get(), n);
  r.undo = to_host<uint16_t>(undo.get(), changed + 1);
  return r;
}

}  // namespace

TEST_CASE("cuda apply: CPU-encoded patches turn the base into the target, undo holds the old values",
          "[cuda][apply]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  std::mt19937_64 rng(11);
  for (uint64_t n : {1ull, 17ull, 4097ull, 70000ull, 3'000'000ull}) {
    for (double p : {0.0005, 0.01, 0.07, 0.6, 1.0}) {
      for (bool delta : {false, true}) {
        INFO("n " << n << " p " << p << " delta " << delta);
        std::bernoulli_distribution flip(p);
        std::vector<uint16_t> base(n), target(n);
        for (uint64_t i = 0; i < n; ++i) {
          base[i] = static_cast<uint16_t>(rng());
          target[i] = flip(rng) ? static_cast<uint16_t>(rng()) : base[i];
        }
        std::vector<uint8_t> index, values;
        uint64_t changed = 0;
        cpu_encode(base, target, delta, index, values, changed);
        const ApplyRun r = gpu_apply(base, index, changed, values, delta);
        REQUIRE(r.status.error == cuda::kApplyOk);
        REQUIRE(r.weights == target);
        // undo[j] = the old value at the j-th changed position.
        uint64_t j = 0;
        for (uint64_t i = 0; i < n; ++i)
          if (base[i] != target[i]) REQUIRE(r.undo[j++] == base[i]);
        REQUIRE(j == changed);
      }
    }
  }
}

TEST_CASE("cuda apply: malformed index streams are refused and nothing is written", "[cuda][apply]") {
  PULSE_REQUIRE_GPU_OR_SKIP();
  const uint64_t n = 1000;
  const std::vector<uint16_t> weights(n, 0x1234);
  const std::vector<uint8_t> values2{1, 2, 3, 4};  // two changes: lo 1 2, hi 3 4
  struct Case {
    const char* what;
    std::vector<uint8_t> index;
    uint64_t changed;
    uint32_t error;
    uint64_t at;
  };
  const std::vector<Case> cases = {
      // gaps 5 and 1000 - 6 = 994 (position 1000 = n): out of bounds at change 1.
      {"past the end", {5, 0x80 | (994 & 127), 994 >> 7}, 2, cuda::kApplyOutOfBounds, 1},
      // gaps 999, 0: positions 999 (the last element) and 1000.
      {"one past", {0x80 | (999 & 127), 0, 999 >> 7}, 2, cuda::kApplyOutOfBounds, 1},
      {"truncated chain", {0x80, 0, 0x81}, 2, cuda::kApplyTailTruncated, 3},
      {"overlong chain",
       {0x80, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00},
       2,
       cuda::kApplyGapOverflow,
       11},
      {"64-bit overflow",
       {0x80, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
       2,
       cuda::kApplyGapOverflow,
       10},
      {"trailing tail byte", {1, 2, 7}, 2, cuda::kApplyChainCount, 3},
      {"missing chain", {0x81, 0x82, 3}, 2, cuda::kApplyChainCount, 3},
      {"index shorter than the heads", {1}, 2, cuda::kApplyBadSizes, 0},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const ApplyRun r = gpu_apply(weights, c.index, c.changed, values2, false);
    REQUIRE(r.status.error == c.error);
    REQUIRE(r.status.at == c.at);
    REQUIRE(r.weights == weights);
    for (uint64_t j = 0; j < c.changed; ++j) REQUIRE(r.undo[j] == 0xabcd);
  }
  // The last element is reachable: gaps 998, 0 -> positions 998, 999.
  const ApplyRun ok = gpu_apply(weights, {0x80 | (998 & 127), 0, 998 >> 7}, 2, values2, false);
  REQUIRE(ok.status.error == cuda::kApplyOk);
  REQUIRE(ok.weights[998] == 0x0301);
  REQUIRE(ok.weights[999] == 0x0402);
}

TEST_CASE("cuda apply: size errors are found on the host before any launch", "[cuda][apply]") {
  // Needs no GPU.
  cuda::ApplyStatus st;
  uint8_t dummy[8] = {};
  cuda::apply_varint_u16_cuda(reinterpret_cast<uint16_t*>(dummy), 2, dummy, 3, 3, dummy, false, nullptr,
                              dummy, 8, &st, nullptr);
  REQUIRE(st.error == cuda::kApplyBadSizes);
  cuda::apply_varint_u16_cuda(reinterpret_cast<uint16_t*>(dummy), 2, dummy, 0, 0, dummy, false, nullptr,
                              dummy, 8, &st, nullptr);
  REQUIRE(st.error == cuda::kApplyOk);
  REQUIRE(std::string(cuda::apply_error_name(cuda::kApplyOutOfBounds)) == "position out of bounds");
}
