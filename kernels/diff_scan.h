// The encoder's inner loop: which elements of two equal-length arrays differ, 64 elements per mask word.
// Variants, picked at run time through one dispatch (the build never assumes them; diff_masks_force
// overrides, as for kernels/loco_gate.h): "avx2" (AVX2 + POPCNT, x86-64) and "portable" (64-bit word
// compares). The result is the same bit for bit on every variant. (2-byte elements, the RL case, go
// through kernels/diff_emit16.h instead, which also has an AVX-512 variant.)
#pragma once
#include <cstddef>
#include <cstdint>

namespace pulse::kernels {

/// Elements per mask word.
constexpr size_t kDiffGroup = 64;

/// For `n` elements of `width` bytes (1, 2, 4 or 8) at `a` and `b`: masks[g] bit i (LSB first) is set
/// when element 64 * g + i differs bit-wise; the last word's bits past `n` are 0. `masks` must hold
/// ceil(n / 64) words. Returns the number of differing elements. Throws std::invalid_argument for
/// another width. Alignment: none required. Runs the variant diff_masks_isa() names; reentrant.
uint64_t diff_masks(const uint8_t* a, const uint8_t* b, size_t n, size_t width, uint64_t* masks);

/// Which variant diff_masks runs now: "avx2" or "portable". Thread safe.
const char* diff_masks_isa();

/// Whether this CPU (and this build) can run the variant `isa` ("avx2", "portable").
bool diff_masks_supported(const char* isa);

/// Makes the whole process run variant `isa` ("avx2", "portable"; nullptr = the CPU's fastest again).
/// Returns false and changes nothing when the CPU cannot run it or the name is unknown (there is no
/// "avx512" variant). Tests and benchmarks; thread safe (an atomic).
bool diff_masks_force(const char* isa);

/// The portable kernel alone (tests compare both paths).
uint64_t diff_masks_portable(const uint8_t* a, const uint8_t* b, size_t n, size_t width, uint64_t* masks);

}  // namespace pulse::kernels
