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

#include "model/generate.h"
#include "model/transformer.h"
#include "rl/grpo_config.h"
#include "rl/optimizer.h"
#include "rl/rollout.h"

namespace pulse::rl {

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
  double clipped_tokens = 0;             ///< tokens whose clipped term was the active one
  double kl_sum = 0;                     ///< sum over tokens of the k3 estimate (0 without a reference)
  double tis_clipped_tokens = 0;         ///< tokens whose TIS weight hit the cap
  double mismatch_sum = 0;               ///< sum over in-support tokens of |logp_old - logp_sampler|
  double mismatch_tokens = 0;            ///< tokens in mismatch_sum (in support, with a sampler log-prob)
  double out_of_support_tokens = 0;      ///< tokens with logp_new or logp_old = -inf (dropped from the loss)
  double ref_out_of_support_tokens = 0;  ///< tokens in support whose logp_ref = -inf (no k3 term)
  double tokens = 0;                     ///< masked tokens in this micro-batch
};

/// The GRPO/DAPO clipped surrogate on one micro-batch. Inputs are [B, T] float32 (logp_* are log-probs of
/// the taken tokens), mask [B, T] float32 (1 = response token in the loss), advantages [B] float32.
/// Per token: ratio = exp(logp_new - logp_old);
///   term = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)
///   * w with w = min(exp(logp_old - logp_sampler), tis_cap) (detached; w = 1 when tis_cap == 0 or
///     logp_sampler is undefined)
///   + kl_coef * k3, k3 = exp(logp_ref - logp_new) - (logp_ref - logp_new) - 1 (when kl_coef > 0 and
///     logp_ref is defined; k3 estimates KL(pi || pi_ref) from samples of pi, Schulman 2020).
/// Truncated support (top-k/top-p; see model::sampling_log_probs): a taken token that the recomputed
/// distribution does not keep has logp_new or logp_old = -inf. Such a token is out of support: it is
/// dropped from the surrogate, the TIS weight, the k3 term and the mismatch sum (no loss, no gradient; its
/// ratio is treated as 0 with a constant, zero term), still counts in the normalizers, and is counted in
/// out_of_support_tokens. It arises only when the kept set moved between sampling and recomputation (a
/// token at the top-k/top-p boundary and a logit difference between sampler and trainer, or a policy
/// that changed since). A token in support whose logp_ref = -inf (the reference policy would not keep it:
/// KL(pi || pi_ref) is infinite there) keeps its surrogate term but gets no k3 term and is counted in
/// ref_out_of_support_tokens. NaN never reaches the loss or its gradient.
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
  double tis_mismatch = 0;  ///< mean |log pi_old - log pi_sampler| per in-support token (sampler vs trainer)
  double tis_clipped_fraction = 0;     ///< fraction of tokens whose TIS weight hit tis_cap
  double out_of_support_fraction = 0;  ///< fraction of loss tokens outside the recomputed kept set (dropped)
  double ref_out_of_support_fraction = 0;  ///< fraction of loss tokens the reference does not keep (no k3)
  double entropy = 0;  ///< mean entropy per response token of the sampling distribution (nats)
  int64_t tokens = 0;  ///< response tokens in the loss
  double reward_mean = 0, reward_std = 0;
  int64_t zero_variance_groups = 0;  ///< groups with identical rewards (advantage 0)
  int64_t truncated = 0;             ///< rollouts that hit max_new_tokens
  uint64_t bf16_changed = 0, elements = 0;
  /// The optimizer refused the step (OptimizerStepStats::skipped): a non-finite gradient norm or an update
  /// that would make a master or moment NaN/Inf. The weights are what they were before the step.
  bool skipped = false;
  StepSkip skip_reason = StepSkip::None;
  std::string skip_detail;  ///< OptimizerStepStats::skip_detail
};

/// One GRPO optimizer step over all rollouts: advantages from rewards (groups of consecutive rollouts with
/// equal `group`), a no-grad pass for pi_old (and the reference), then micro-batches of cfg.micro_batch
/// rollouts (sorted by length to limit padding) each doing forward + backward + opt.accumulate_grads(), then
/// opt.step(). Rollouts with advantage 0 are skipped when kl_coef == 0 (their gradient is exactly 0) but
/// still count in the normalizers. A batch whose groups all have zero variance still takes the optimizer
/// step (zero gradient; Adam's moments keep moving the weights), so the step count tracks the batch count.
/// All log-probs (pi_old, pi_new, pi_ref) and the logged entropy are of the sampling distribution
/// cfg.sampling (model::sampling_log_probs). With cfg.kl_coef > 0, `reference` is the frozen reference
/// policy (make_reference_policy(), built once before the first step) and the k3 term is applied to every
/// rollout; GrpoStepStats::kl is its mean per token. With kl_coef == 0 the reference is not used.
/// Throws std::invalid_argument on uneven groups or empty responses, and, naming 'rl.kl_coef', when
/// kl_coef > 0 and no reference is given.
GrpoStepStats grpo_step(model::TransformerImpl& policy, MasterAdam& opt, const std::vector<Rollout>& rollouts,
                        const GrpoConfig& cfg, model::TransformerImpl* reference = nullptr);

/// The frozen reference policy for the KL penalty: a new Transformer with policy's config holding a copy
/// of policy's current weights cast to `dtype` (BF16 by default; the policy's compute weights, not the
/// optimizer's FP32 masters), on policy's device, requires_grad false on every parameter, in eval mode.
/// Shares no storage with the policy, so later optimizer steps do not move it. Call it once, before the
/// first GRPO step (InstructGPT's pi_SFT: Ouyang et al. 2022, arXiv:2203.02155 eq. 2).
model::Transformer make_reference_policy(const model::TransformerImpl& policy,
                                         torch::Dtype dtype = torch::kBFloat16);

}  // namespace pulse::rl
