// Group-relative advantages (rl/grpo.h): GRPO outcome supervision, DeepSeekMath arXiv:2402.03300 §4.1.2;
// Dr. GRPO (arXiv:2503.20783 §3.1) drops the std division.
#include <cmath>
#include <stdexcept>
#include <string>

#include "rl/grpo.h"

namespace pulse::rl {

std::vector<double> compute_advantages(const std::vector<double>& rewards, int64_t group_size,
                                       const GrpoConfig& cfg) {
  if (group_size < 1) throw std::invalid_argument("compute_advantages: group_size must be >= 1");
  const size_t G = static_cast<size_t>(group_size);
  if (rewards.size() % G != 0) {
    throw std::invalid_argument("compute_advantages: " + std::to_string(rewards.size()) +
                                " rewards are not a multiple of group_size " + std::to_string(G));
  }
  std::vector<double> adv(rewards.size(), 0.0);
  for (size_t start = 0; start < rewards.size(); start += G) {
    bool all_equal = true;
    double mean = 0;
    for (size_t i = start; i < start + G; ++i) {
      if (!std::isfinite(rewards[i])) {
        throw std::invalid_argument("compute_advantages: reward " + std::to_string(i) + " is not finite");
      }
      all_equal = all_equal && rewards[i] == rewards[start];
      mean += rewards[i];
    }
    if (all_equal) continue;  // no learning signal: exactly 0, never 0/0
    mean /= static_cast<double>(G);
    double var = 0;
    for (size_t i = start; i < start + G; ++i) var += (rewards[i] - mean) * (rewards[i] - mean);
    const double std_dev = std::sqrt(var / static_cast<double>(G));  // population std
    for (size_t i = start; i < start + G; ++i) {
      adv[i] = cfg.scale_by_std ? (rewards[i] - mean) / (std_dev + cfg.adv_eps) : rewards[i] - mean;
    }
  }
  return adv;
}

}  // namespace pulse::rl
