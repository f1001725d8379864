// SplitMix64 (Steele, Lea & Flood, "Fast Splittable Pseudorandom Number Generators", OOPSLA 2014; the
// 64-bit finalizer constants are Stafford's "Mix13", as in Vigna's reference splitmix64.c). pulse uses it
// for every seed derivation and platform-stable random stream (std::uniform_int_distribution and friends
// are not specified bit for bit), so the same seeds give the same problems, splits and samples everywhere.
// Header-only, no LibTorch.
#pragma once
#include <cstdint>

namespace pulse::kernels {

/// The golden-ratio increment ("gamma") added to the state before each output.
inline constexpr uint64_t kSplitMix64Gamma = 0x9e3779b97f4a7c15ull;

/// The output mixer alone (a bijection of 64-bit words): the value a SplitMix64 generator returns when
/// its state, already advanced, is `z`.
constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// One-shot hash of x: the first output of a generator seeded with x (splitmix64_mix(x + gamma)).
constexpr uint64_t splitmix64(uint64_t x) {
  return splitmix64_mix(x + kSplitMix64Gamma);
}

/// The top 53 bits of x as a double in [0, 1).
constexpr double splitmix64_unit(uint64_t x) {
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

/// The generator: each next() adds gamma to the state and returns its mix. The n-th output (n >= 1) of
/// a generator seeded with s is splitmix64_mix(s + n * gamma).
struct SplitMix64 {
  uint64_t state = 0;
  constexpr uint64_t next() { return splitmix64_mix(state += kSplitMix64Gamma); }
};

}  // namespace pulse::kernels
