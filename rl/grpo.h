// GRPO policy update.
//   GRPO: Shao et al. 2024, DeepSeekMath, arXiv:2402.03300 §4.1 (group-relative advantages, no critic).
//   DAPO: Yu et al. 2025, arXiv:2503.14476 §3.1 clip-higher (eps_low != eps_high), §3.3 token-level loss.
//   Dr. GRPO: Liu et al. 2025, arXiv:2503.20783 §3.1 (no std scaling, constant length normalizer).
//   TIS: Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"
//        (truncated importance sampling against the sampler's log-probabilities).
//   KL k3 estimator: Schulman 2020, "Approximating KL Divergence" (http://joschu.net/blog/kl-approx.html).
//
// Legend: N rollouts, G group size, T response tokens (padded), V vocabulary.
//
// One optimizer step is taken per batch of rollouts, so pi_old is the policy before the step: its
// log-probabilities come from a no-grad forward first and the importance ratio is 1 in value (its gradient
// is the policy gradient); the clip matters when callers reuse rollouts over several steps.
//
// EOS and truncation: the stop token that ended a response is part of response_ids and of the loss mask
// (the policy must learn to stop). A truncated response (no stop token within max_new_tokens) is kept in
// the loss with its grader reward, flagged in Rollout::truncated and counted in GrpoStepStats; with
// mask_truncated it is dropped from the loss instead (DAPO §3.4 overlong filtering).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "rl/rollout.h"

namespace pulse::model {
class TransformerImpl;
}

namespace pulse::rl {

class MasterAdam;

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
  int64_t micro_batch = 8;              ///< rollouts per forward/backward
  bool mask_truncated = false;          ///< drop truncated responses from the loss (DAPO overlong filtering)
  double temperature = 1.0;             ///< logits are divided by this before log-probs, as the sampler did
                                        ///< (set it to the rollout temperature so pi_old matches pi_sampler)
  bool recompute_old_logprobs = true;   ///< false: pi_old = detached current log-probs (same values when one
                                        ///< step per batch; saves one forward pass per rollout)

  /// Throws std::invalid_argument naming the field ("grpo.eps_low", ...).
  void validate() const;
};

/// Group-relative advantages (GRPO eq. in §4.1.2, outcome supervision): for each group of `group_size`
/// consecutive rewards, A_i = (r_i - mean) / (std + adv_eps) with the population std (divide by G), or
/// A_i = r_i - mean when !scale_by_std. A group whose rewards are all equal gets exactly 0 (never NaN).
/// Throws std::invalid_argument when rewards.size() is not a multiple of group_size or a reward is not
/// finite.
std::vector<double> compute_advantages(const std::vector<double>& rewards, int64_t group_size,
                                       const GrpoConfig& cfg);

/// Per-batch policy loss terms, differentiable through logp_new.
struct PolicyLoss {
  at::Tensor loss;  ///< scalar: this micro-batch's share of the batch loss (sum of terms / normalizers)
  double clipped_tokens = 0;      ///< tokens whose clipped term was the active one
  double kl_sum = 0;              ///< sum over tokens of the k3 estimate (0 without a reference)
  double tis_clipped_tokens = 0;  ///< tokens whose TIS weight hit the cap
  double mismatch_sum = 0;        ///< sum over tokens of |logp_old - logp_sampler|
  double tokens = 0;              ///< masked tokens in this micro-batch
};

/// The GRPO/DAPO clipped surrogate on one micro-batch. Inputs are [B, T] float32 (logp_* are log-probs of
/// the taken tokens), mask [B, T] float32 (1 = response token in the loss), advantages [B] float32.
/// Per token: ratio = exp(logp_new - logp_old);
///   term = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)
///   * w with w = min(exp(logp_old - logp_sampler), tis_cap) (detached; w = 1 when tis_cap == 0 or
///     logp_sampler is undefined)
///   + kl_coef * k3, k3 = exp(logp_ref - logp_new) - (logp_ref - logp_new) - 1 (when logp_ref is defined).
/// Aggregation: token_mean: sum(term * mask) / batch_tokens; seq_mean: sum_i (sum_t term*mask)/len_i /
/// batch_seqs; constant: sum(term * mask) / (constant_normalizer * batch_seqs). batch_tokens and batch_seqs
/// are totals over the whole batch, so summing the micro-batch losses gives the full-batch loss.
PolicyLoss grpo_policy_loss(const at::Tensor& logp_new, const at::Tensor& logp_old,
                            const at::Tensor& logp_sampler, const at::Tensor& logp_ref,
                            const at::Tensor& advantages, const at::Tensor& mask, const GrpoConfig& cfg,
                            double batch_tokens, double batch_seqs);

/// What one GRPO step did (logged each step).
struct GrpoStepStats {
  double loss = 0;           ///< full-batch loss value
  double clip_fraction = 0;  ///< fraction of loss tokens where the clip was active
  double kl = 0;             ///< mean k3 KL to the reference per token (0 without one)
  double grad_norm = 0, lr = 0;
  double tis_mismatch = 0;  ///< mean |log pi_old - log pi_sampler| per token (sampler/trainer mismatch)
  double tis_clipped_fraction = 0;  ///< fraction of tokens whose TIS weight hit tis_cap
  double entropy = 0;               ///< mean policy entropy per response token (nats)
  int64_t tokens = 0;               ///< response tokens in the loss
  double reward_mean = 0, reward_std = 0;
  int64_t zero_variance_groups = 0;  ///< groups with identical rewards (advantage 0)
  int64_t truncated = 0;             ///< rollouts that hit max_new_tokens
  uint64_t bf16_changed = 0, elements = 0;
  bool skipped = false;  ///< optimizer skipped the step (non-finite gradient)
};

/// One GRPO optimizer step over all rollouts: advantages from rewards (groups of consecutive rollouts with
/// equal `group`), a no-grad pass for pi_old (and the reference), then micro-batches of cfg.micro_batch
/// rollouts (sorted by length to limit padding) each doing forward + backward + opt.accumulate_grads(), then
/// opt.step(). Rollouts with advantage 0 are skipped when kl_coef == 0 (their gradient is exactly 0) but
/// still count in the normalizers. A batch whose groups all have zero variance still takes the optimizer
/// step (zero gradient; Adam's moments keep moving the weights), so the step count tracks the batch count.
/// Throws std::invalid_argument on uneven groups or empty responses.
GrpoStepStats grpo_step(model::TransformerImpl& policy, MasterAdam& opt, const std::vector<Rollout>& rollouts,
                        const GrpoConfig& cfg, model::TransformerImpl* reference = nullptr);

}  // namespace pulse::rl
