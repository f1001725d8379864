// Optimizer hyper-parameters and the learning-rate schedule (rl/lr_schedule.cpp), apart from the
// optimizer itself (rl/optimizer.h) so that settings code (app/config.h, rl/sft.h) needs no LibTorch.
// The range rules are in rl/optimizer_config.cpp.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace pulse::rl {

/// optimizer.schedule: the learning rate over the steps (lr_at_step).
enum class LrSchedule {
  Constant,      ///< lr every step
  LinearWarmup,  ///< lr * (s+1) / warmup_steps, then lr
  Cosine,        ///< the same warmup, then cosine to lr * min_lr_ratio at total_steps
};

/// The TOML names of LrSchedule, in enum order.
inline constexpr std::array<const char*, 3> kLrScheduleNames = {"constant", "linear_warmup", "cosine"};

/// The TOML name of `s` ("constant" | "linear_warmup" | "cosine").
inline const char* name_of(LrSchedule s) {
  return kLrScheduleNames[static_cast<size_t>(s)];
}

/// Optimizer hyper-parameters (TOML table [optimizer]; the SFT warm start's lr, warmup_steps,
/// min_lr_ratio and grad_clip are keys of [sft]).
struct OptimizerConfig {
  std::string name = "adamw";  ///< "adam" (L2 added to the gradient) | "adamw" (decoupled decay)
  double lr = 3e-5;            ///< peak learning rate
  double beta1 = 0.9, beta2 = 0.99, eps = 1e-8;
  double weight_decay = 0.0;
  double grad_clip = 1.0;  ///< max global L2 norm of the gradient; 0 = off
  LrSchedule schedule = LrSchedule::Constant;
  int64_t warmup_steps = 0;   ///< linear warmup length (steps), for linear_warmup and cosine
  int64_t total_steps = 0;    ///< cosine: steps until the floor is reached (required > warmup_steps)
  double min_lr_ratio = 0.1;  ///< cosine floor as a fraction of lr

  /// The one range rule of each setting a user writes, Adam's own domain (torch.optim.Adam's checks):
  /// name adam | adamw; lr, weight_decay and grad_clip finite and >= 0; beta1, beta2 in [0, 1); eps
  /// finite and > 0; warmup_steps >= 0; min_lr_ratio in [0, 1]. `section` is the TOML table the keys are in
  /// ("optimizer", or "sft" for the SFT optimizer). Not total_steps, which the caller derives (app/config.cpp
  /// finalize). Throws std::invalid_argument "SECTION.KEY: must be ..." (the TOML key first, then the rule
  /// and the value).
  void validate_settings(const std::string& section) const;

  /// validate_settings("optimizer"), and the derived total_steps: cosine needs total_steps > warmup_steps
  /// (std::invalid_argument naming "optimizer.total_steps"). What the optimizer checks when built.
  void validate() const;
};

/// Learning rate used by the optimizer step that follows `completed_steps` steps (0-based).
/// constant: lr. linear_warmup: lr * min(1, (s+1)/warmup_steps). cosine: the same warmup, then
/// lr * (r + (1-r) * 0.5 * (1 + cos(pi * p))) with p = (s - warmup) / (total - warmup) clamped to [0,1],
/// r = min_lr_ratio (Loshchilov & Hutter 2017, SGDR, arXiv:1608.03983, without restarts).
double lr_at_step(const OptimizerConfig& config, int64_t completed_steps);

}  // namespace pulse::rl
