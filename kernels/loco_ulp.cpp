#include "kernels/loco_ulp.h"

#include <cmath>

namespace pulse::kernels {

namespace {

inline uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

}  // namespace

// The sparse pass runs scalar: it touches only the fired entries (a gather of g and a scatter of r, ~15% of
// the elements at RL learning rates), after the gate's SIMD pass over all of them.
uint64_t loco_ulp_quantize(const float* global, float* residual, const uint32_t* fired_index,
                           float* fired_value, int32_t* fired_count, uint64_t n_fired, uint32_t index_base) {
  uint64_t deferred = 0;
  for (uint64_t k = 0; k < n_fired; ++k) {
    const size_t i = fired_index[k] - index_base;
    const float s = fired_value[k];
    const float step = loco_ulp_step(global[i]);
    const float q = s / step;  // step 0 (non-finite g): q is +-Inf or NaN, an escape below
    int32_t c = kLocoUlpEscape;
    float sent = s, rest = 0.0f;
    if (std::fabs(q) <= static_cast<float>(kLocoUlpMaxCount)) {
      const float cf = std::rint(q);
      const float p = cf * step;
      if (cf == 0.0f) {
        c = 0, sent = 0.0f, rest = s;
        ++deferred;
      } else if ((bits_of(p) & 0x7f800000u) != 0x7f800000u) {
        c = static_cast<int32_t>(cf), sent = p, rest = s - p;
      }
    }
    fired_count[k] = c;
    fired_value[k] = sent;
    residual[i] = rest;
  }
  return deferred;
}

uint64_t loco_ulp_compact(uint32_t* fired_index, float* fired_value, int32_t* fired_count, uint64_t n_fired) {
  uint64_t out = 0;
  for (uint64_t k = 0; k < n_fired; ++k) {
    if (fired_count[k] == 0) continue;
    fired_index[out] = fired_index[k];
    fired_value[out] = fired_value[k];
    fired_count[out] = fired_count[k];
    ++out;
  }
  return out;
}

}  // namespace pulse::kernels
