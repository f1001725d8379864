// Seeded, order-independent train / held-out split.
#include "rl/split.h"

#include <stdexcept>
#include <string>

namespace pulse::rl {
namespace {

// FNV-1a over the id, then SplitMix64 finalization mixed with the seed: stable across platforms.
uint64_t id_hash(const std::string& id, uint64_t seed) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : id) {
    h ^= c;
    h *= 1099511628211ull;
  }
  uint64_t z = h ^ (seed + 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

Split split_problems(std::vector<Problem> problems, double held_out_fraction, uint64_t seed) {
  if (!(held_out_fraction >= 0.0 && held_out_fraction <= 1.0))
    throw std::invalid_argument("split_problems: held_out_fraction must be in [0, 1], got " +
                                std::to_string(held_out_fraction));
  Split s;
  for (auto& p : problems) {
    // Top 53 bits as a double in [0, 1).
    double u = static_cast<double>(id_hash(p.id, seed) >> 11) * (1.0 / 9007199254740992.0);
    (u < held_out_fraction ? s.held_out : s.train).push_back(std::move(p));
  }
  return s;
}

}  // namespace pulse::rl
