// GRPO hyper-parameters (the papers are cited in rl/grpo.h), apart from the policy update itself so that
// settings code (app/config.h) needs no LibTorch.
#pragma once
#include <cstdint>
#include <string>

#include "model/generate.h"

namespace pulse::rl {

/// GRPO hyper-parameters (TOML table [grpo]).
struct GrpoConfig {
  double eps_low = 0.2;      ///< ratio clipped below at 1 - eps_low
  double eps_high = 0.28;    ///< ratio clipped above at 1 + eps_high (DAPO clip-higher)
  bool scale_by_std = true;  ///< advantage /= (group std + adv_eps); false = Dr. GRPO
  double adv_eps = 1e-6;
  std::string loss_agg = "token_mean";  ///< "token_mean" (DAPO) | "seq_mean" (GRPO) | "constant" (Dr. GRPO)
  double constant_normalizer = 1024;    ///< "constant": per-sequence token sum divided by this (tokens)
  double kl_coef = 0.0;                 ///< beta of the k3 KL penalty to the reference model; 0 = off
  double tis_cap = 2.0;                 ///< cap C of the TIS weight min(pi_old/pi_sampler, C); 0 = off
  int64_t micro_batch = 32;             ///< rollouts per forward/backward
  bool mask_truncated = false;          ///< drop truncated responses from the loss (DAPO overlong filtering)
  /// The sampler's settings (temperature, top_p, top_k; the rest is unused here): pi_old, pi_new and
  /// pi_ref are all log-probs of model::sampling_log_probs(logits, sampling), the distribution the workers
  /// drew the rollouts from, so pi_old / pi_sampler is 1 up to kernel differences. Must be the settings
  /// the workers sample with (rl.temperature / rl.top_p / rl.top_k).
  model::SamplingParams sampling = [] {
    model::SamplingParams s;
    s.max_new_tokens = 40;  ///< the rollout length cap (rl.max_new_tokens); unused by the loss itself
    return s;
  }();
  bool recompute_old_logprobs = true;  ///< false: pi_old = detached current log-probs (same values when one
                                       ///< step per batch; saves one forward pass per rollout)

  /// Throws std::invalid_argument naming the field ("grpo.eps_low", ..., "grpo.sampling.top_p").
  void validate() const;
};

}  // namespace pulse::rl
