// The optimizer settings' range rules (rl/optimizer_config.h).
#include "rl/optimizer_config.h"

#include "rl/setting_rules.h"

namespace pulse::rl {

void OptimizerConfig::validate_settings(const std::string& section) const {
  using namespace rules;
  const std::string s = section + ".";
  if (name != "adam" && name != "adamw") fail(s + "name", "must be one of adam, adamw (got '" + name + "')");
  // Adam's own domain, as torch.optim.Adam states it (no upper bounds: a huge lr or decay is a
  // legitimate stress test, rl/test_nonfinite.cpp).
  real_in(s + "lr", lr, 0.0, kHuge);
  real_in(s + "beta1", beta1, 0.0, 1.0, Ends::OpenHigh);
  real_in(s + "beta2", beta2, 0.0, 1.0, Ends::OpenHigh);
  real_in(s + "eps", eps, 0.0, kHuge, Ends::OpenLow);
  real_in(s + "weight_decay", weight_decay, 0.0, kHuge);
  real_in(s + "grad_clip", grad_clip, 0.0, kHuge);
  int_in(s + "warmup_steps", warmup_steps, 0, kMaxInt);
  real_in(s + "min_lr_ratio", min_lr_ratio, 0.0, 1.0);
}

void OptimizerConfig::validate() const {
  validate_settings("optimizer");
  if (schedule == LrSchedule::Cosine && total_steps <= warmup_steps)
    rules::fail("optimizer.total_steps", "must be > warmup_steps (" + std::to_string(warmup_steps) +
                                             ") for the cosine schedule (got " + std::to_string(total_steps) +
                                             ")");
}

}  // namespace pulse::rl
