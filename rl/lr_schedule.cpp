// Learning-rate schedules and optimizer config validation (rl/optimizer_config.h).
#include <cmath>
#include <stdexcept>

#include "rl/optimizer_config.h"

namespace pulse::rl {

namespace {
void require(bool ok, const char* field, const std::string& why) {
  if (!ok) throw std::invalid_argument(std::string("optimizer.") + field + ": " + why);
}
}  // namespace

void OptimizerConfig::validate() const {
  require(name == "adam" || name == "adamw", "name", "must be \"adam\" or \"adamw\", got \"" + name + "\"");
  require(std::isfinite(lr) && lr >= 0, "lr", "must be finite and >= 0");
  require(beta1 >= 0 && beta1 < 1, "beta1", "must be in [0, 1)");
  require(beta2 >= 0 && beta2 < 1, "beta2", "must be in [0, 1)");
  require(eps > 0, "eps", "must be > 0");
  require(weight_decay >= 0, "weight_decay", "must be >= 0");
  require(grad_clip >= 0, "grad_clip", "must be >= 0 (0 = off)");
  require(schedule == "constant" || schedule == "linear_warmup" || schedule == "cosine", "schedule",
          "must be constant, linear_warmup or cosine, got \"" + schedule + "\"");
  require(warmup_steps >= 0, "warmup_steps", "must be >= 0");
  require(schedule != "cosine" || total_steps > warmup_steps, "total_steps",
          "cosine needs total_steps > warmup_steps");
  require(min_lr_ratio >= 0 && min_lr_ratio <= 1, "min_lr_ratio", "must be in [0, 1]");
}

double lr_at_step(const OptimizerConfig& c, int64_t s) {
  if (s < 0) throw std::invalid_argument("lr_at_step: negative step");
  if (c.schedule == "constant") return c.lr;
  if (c.warmup_steps > 0 && s < c.warmup_steps) {
    return c.lr * static_cast<double>(s + 1) / static_cast<double>(c.warmup_steps);
  }
  if (c.schedule == "linear_warmup") return c.lr;
  // cosine decay from lr to lr * min_lr_ratio over [warmup_steps, total_steps], then flat.
  const double span = static_cast<double>(std::max<int64_t>(1, c.total_steps - c.warmup_steps));
  double p = static_cast<double>(s - c.warmup_steps) / span;
  p = std::min(1.0, std::max(0.0, p));
  const double r = c.min_lr_ratio;
  return c.lr * (r + (1.0 - r) * 0.5 * (1.0 + std::cos(M_PI * p)));
}

}  // namespace pulse::rl
