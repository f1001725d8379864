// GRPO hyper-parameters (the papers are cited in rl/grpo.h), apart from the policy update itself so that
// settings code (app/config.h) needs no LibTorch. validate() is in rl/grpo_config.cpp.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/generate.h"

namespace pulse::rl {

/// rl.loss_agg: how the per-token loss terms of a batch become one loss.
enum class LossAgg {
  TokenMean,  ///< sum over all response tokens / tokens in the batch (DAPO)
  SeqMean,    ///< mean over each sequence's tokens, then over sequences (GRPO)
  Constant,   ///< sum / (rl.constant_normalizer * sequences) (Dr. GRPO)
};

/// The TOML names of LossAgg, in enum order.
inline constexpr std::array<const char*, 3> kLossAggNames = {"token_mean", "seq_mean", "constant"};

/// The TOML name of `a` ("token_mean" | "seq_mean" | "constant").
inline const char* name_of(LossAgg a) {
  return kLossAggNames[static_cast<size_t>(a)];
}

/// GRPO hyper-parameters (TOML table [rl], with the rollout sampler's settings).
struct GrpoConfig {
  double eps_low = 0.2;      ///< ratio clipped below at 1 - eps_low
  double eps_high = 0.28;    ///< ratio clipped above at 1 + eps_high (DAPO clip-higher)
  bool scale_by_std = true;  ///< advantage /= (group std + adv_eps); false = Dr. GRPO
  double adv_eps = 1e-6;
  LossAgg loss_agg = LossAgg::TokenMean;
  double constant_normalizer = 1024;  ///< LossAgg::Constant: per-sequence token sum divided by this (tokens)
  double kl_coef = 0.0;               ///< beta of the k3 KL penalty to the reference model; 0 = off
  double tis_cap = 2.0;               ///< cap C of the TIS weight min(pi_old/pi_sampler, C); 0 = off
  int64_t micro_batch = 32;           ///< rollouts per forward/backward
  bool mask_truncated = false;        ///< drop truncated responses from the loss (DAPO overlong filtering)
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

  /// The one range rule of each [rl] key held here: eps_low in [0, 1), eps_high [0, 10], adv_eps [0, 1],
  /// constant_normalizer (0, 1e9], kl_coef [0, 100], tis_cap [0, 1e6], micro_batch 1..2^20, and the
  /// sampler's max_new_tokens 1..2^20, temperature (0, 100], top_p (0, 1], top_k 0..2^24. Throws
  /// std::invalid_argument "rl.KEY: must be ..." (the TOML key first, then the rule and the value).
  void validate() const;
};

}  // namespace pulse::rl
