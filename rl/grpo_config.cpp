// The GRPO settings' range rules (rl/grpo_config.h).
#include "rl/grpo_config.h"

#include "rl/setting_rules.h"

namespace pulse::rl {

void GrpoConfig::validate() const {
  using namespace rules;
  real_in("rl.eps_low", eps_low, 0.0, 1.0, Ends::OpenHigh);
  real_in("rl.eps_high", eps_high, 0.0, 10.0);
  real_in("rl.adv_eps", adv_eps, 0.0, 1.0);
  real_in("rl.constant_normalizer", constant_normalizer, 0.0, 1e9, Ends::OpenLow);
  real_in("rl.kl_coef", kl_coef, 0.0, 100.0);
  real_in("rl.tis_cap", tis_cap, 0.0, 1e6);
  int_in("rl.micro_batch", micro_batch, 1, 1 << 20);
  // GRPO recomputes log-probs under the sampler's distribution: temperature 0 (greedy) has none.
  int_in("rl.max_new_tokens", sampling.max_new_tokens, 1, 1 << 20);
  real_in("rl.temperature", sampling.temperature, 0.0, 100.0, Ends::OpenLow);
  real_in("rl.top_p", sampling.top_p, 0.0, 1.0, Ends::OpenLow);
  int_in("rl.top_k", sampling.top_k, 0, 1 << 24);
}

}  // namespace pulse::rl
