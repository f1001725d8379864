// Seeded, order-independent train / held-out split.
#include "datasets/split.h"

#include <stdexcept>
#include <string>

#include "kernels/splitmix64.h"

namespace pulse::datasets {
namespace {

// FNV-1a over the id, then the SplitMix64 mixer of it xor (seed + gamma): stable across platforms.
uint64_t id_hash(const std::string& id, uint64_t seed) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : id) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return kernels::splitmix64_mix(h ^ (seed + kernels::kSplitMix64Gamma));
}

}  // namespace

Split split_problems(std::vector<Problem> problems, double held_out_fraction, uint64_t seed) {
  if (!(held_out_fraction >= 0.0 && held_out_fraction <= 1.0))
    throw std::invalid_argument("split_problems: held_out_fraction must be in [0, 1], got " +
                                std::to_string(held_out_fraction));
  Split s;
  for (auto& p : problems) {
    const double u = kernels::splitmix64_unit(id_hash(p.id, seed));
    (u < held_out_fraction ? s.held_out : s.train).push_back(std::move(p));
  }
  return s;
}

}  // namespace pulse::datasets
