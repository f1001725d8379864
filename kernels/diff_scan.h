// The encoder's inner loop: which elements of two equal-length arrays differ, 64 elements per mask word.
// AVX2 on x86-64 CPUs that have it (checked at run time; the build never assumes it), portable 64-bit
// word compares elsewhere. The result is the same bit for bit on every path.
#pragma once
#include <cstddef>
#include <cstdint>

namespace pulse::kernels {

/// Elements per mask word.
constexpr size_t kDiffGroup = 64;

/// For `n` elements of `width` bytes (1, 2, 4 or 8) at `a` and `b`: masks[g] bit i (LSB first) is set
/// when element 64 * g + i differs bit-wise; the last word's bits past `n` are 0. `masks` must hold
/// ceil(n / 64) words. Returns the number of differing elements. Throws std::invalid_argument for
/// another width.
uint64_t diff_masks(const uint8_t* a, const uint8_t* b, size_t n, size_t width, uint64_t* masks);

/// Whether diff_masks uses the AVX2 kernel on this CPU (benchmarks report it).
bool diff_masks_use_avx2();

/// The portable kernel alone (tests compare both paths).
uint64_t diff_masks_portable(const uint8_t* a, const uint8_t* b, size_t n, size_t width, uint64_t* masks);

}  // namespace pulse::kernels
