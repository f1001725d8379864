// Optimizer hyper-parameters and the learning-rate schedule (rl/lr_schedule.cpp), apart from the
// optimizer itself (rl/optimizer.h) so that settings code (app/config.h, rl/sft.h) needs no LibTorch.
#pragma once
#include <cstdint>
#include <string>

namespace pulse::rl {

/// Optimizer hyper-parameters (TOML table [optimizer]).
struct OptimizerConfig {
  std::string name = "adamw";  ///< "adam" (L2 added to the gradient) | "adamw" (decoupled decay)
  double lr = 3e-5;            ///< peak learning rate
  double beta1 = 0.9, beta2 = 0.99, eps = 1e-8;
  double weight_decay = 0.0;
  double grad_clip = 1.0;             ///< max global L2 norm of the gradient; 0 = off
  std::string schedule = "constant";  ///< "constant" | "linear_warmup" | "cosine"
  int64_t warmup_steps = 0;           ///< linear warmup length (steps), for linear_warmup and cosine
  int64_t total_steps = 0;            ///< cosine: steps until the floor is reached (required > 0)
  double min_lr_ratio = 0.1;          ///< cosine floor as a fraction of lr

  /// Throws std::invalid_argument naming the field ("optimizer.lr", ...) on a bad value.
  void validate() const;
};

/// Learning rate used by the optimizer step that follows `completed_steps` steps (0-based).
/// constant: lr. linear_warmup: lr * min(1, (s+1)/warmup_steps). cosine: the same warmup, then
/// lr * (r + (1-r) * 0.5 * (1 + cos(pi * p))) with p = (s - warmup) / (total - warmup) clamped to [0,1],
/// r = min_lr_ratio (Loshchilov & Hutter 2017, SGDR, arXiv:1608.03983, without restarts).
double lr_at_step(const OptimizerConfig& config, int64_t completed_steps);

}  // namespace pulse::rl
