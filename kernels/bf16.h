// FP32 <-> BF16 conversion, CPU reference. The BF16 cast of the FP32 master weights is the single
// source of the weights PULSESync ships, so it must be round-to-nearest-even (IEEE 754 default, and
// what torch's .to(kBFloat16) and CUDA's __float2bfloat16_rn do) with NaN kept a quiet NaN.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pulse::kernels {

/// One FP32 value to its BF16 bit pattern, round-to-nearest-even. NaN -> quiet NaN with the sign kept.
inline uint16_t fp32_to_bf16_rne(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

/// A BF16 bit pattern widened to FP32 (exact).
inline float bf16_to_fp32(uint16_t bf16) {
  uint32_t bits = static_cast<uint32_t>(bf16) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

/// Casts n FP32 values to BF16 bit patterns (RNE). `dst` and `src` must not overlap.
void fp32_to_bf16_rne(const float* src, uint16_t* dst, size_t n);

/// Casts n FP32 values to BF16 and counts the elements whose BF16 pattern differs from `previous`
/// (the "compute-visible" changes); writes the new patterns to dst. Returns the count.
size_t fp32_to_bf16_rne_count_changed(const float* src, const uint16_t* previous, uint16_t* dst, size_t n);

}  // namespace pulse::kernels
