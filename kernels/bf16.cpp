#include "kernels/bf16.h"

namespace pulse::kernels {

void fp32_to_bf16_rne(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = fp32_to_bf16_rne(src[i]);
}

size_t fp32_to_bf16_rne_count_changed(const float* src, const uint16_t* previous, uint16_t* dst, size_t n) {
  size_t changed = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t b = fp32_to_bf16_rne(src[i]);
    changed += (b != previous[i]);
    dst[i] = b;
  }
  return changed;
}

}  // namespace pulse::kernels
