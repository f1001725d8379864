// The [multi] settings' range rules (rl/outer_config.h).
#include "rl/outer_config.h"

#include "rl/setting_rules.h"

namespace pulse::rl {

void OuterConfig::validate() const {
  using namespace rules;
  int_in("multi.inner_steps", inner_steps, 1, 1 << 20);
  real_in("multi.outer_lr", outer_lr, 0.0, 10.0, Ends::OpenLow);
  real_in("multi.outer_momentum", outer_momentum, 0.0, 1.0, Ends::OpenHigh);
  real_in("multi.timeout_s", timeout_s, 0.0, 86400.0, Ends::OpenLow);
  int_in("multi.zstd_level", zstd_level, 0, 19);
}

}  // namespace pulse::rl
