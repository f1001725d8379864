// Learning-rate schedules (rl/optimizer_config.h lr_at_step).
#include <cmath>
#include <stdexcept>

#include "rl/optimizer_config.h"

namespace pulse::rl {

double lr_at_step(const OptimizerConfig& c, int64_t s) {
  if (s < 0) throw std::invalid_argument("lr_at_step: negative step");
  if (c.schedule == LrSchedule::Constant) return c.lr;
  if (c.warmup_steps > 0 && s < c.warmup_steps) {
    return c.lr * static_cast<double>(s + 1) / static_cast<double>(c.warmup_steps);
  }
  if (c.schedule == LrSchedule::LinearWarmup) return c.lr;
  // cosine decay from lr to lr * min_lr_ratio over [warmup_steps, total_steps], then flat.
  const double span = static_cast<double>(std::max<int64_t>(1, c.total_steps - c.warmup_steps));
  double p = static_cast<double>(s - c.warmup_steps) / span;
  p = std::min(1.0, std::max(0.0, p));
  const double r = c.min_lr_ratio;
  return c.lr * (r + (1.0 - r) * 0.5 * (1.0 + std::cos(M_PI * p)));
}

}  // namespace pulse::rl
