// The GRPO/DAPO clipped surrogate with TIS weights and the k3 KL penalty (rl/grpo.h).
#include <cmath>
#include <stdexcept>

#include "rl/grpo.h"

namespace pulse::rl {

PolicyLoss grpo_policy_loss(const at::Tensor& logp_new, const at::Tensor& logp_old,
                            const at::Tensor& logp_sampler, const at::Tensor& logp_ref,
                            const at::Tensor& advantages, const at::Tensor& mask, const GrpoConfig& cfg,
                            double batch_tokens, double batch_seqs) {
  if (logp_new.dim() != 2 || logp_old.sizes() != logp_new.sizes() || mask.sizes() != logp_new.sizes() ||
      advantages.dim() != 1 || advantages.size(0) != logp_new.size(0)) {
    throw std::invalid_argument("grpo_policy_loss: expected logp_new/logp_old/mask [B,T] and advantages [B]");
  }
  if (batch_tokens <= 0 || batch_seqs <= 0) throw std::invalid_argument("grpo_policy_loss: empty batch");
  const auto zero = torch::zeros({}, logp_new.options());
  const auto in_loss = mask > 0;
  // Out of support (rl/grpo.h): the recomputed distribution does not keep the taken token.
  const auto support = torch::isfinite(logp_new.detach()) & torch::isfinite(logp_old.detach());
  const auto on = in_loss & support;
  const auto on_f = on.to(mask.scalar_type());
  // Padding and out-of-support slots may hold garbage or -inf: zero them before any exp so that 0 * inf
  // never happens (the where also keeps their gradient exactly 0).
  const auto lp_new = torch::where(on, logp_new, zero);
  const auto lp_old = torch::where(on, logp_old.detach(), zero);
  const auto adv = advantages.to(logp_new.scalar_type()).unsqueeze(1);

  const auto ratio = torch::exp(lp_new - lp_old);
  const auto surr1 = ratio * adv;
  const auto surr2 = torch::clamp(ratio, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high) * adv;
  auto term = -torch::min(surr1, surr2);

  PolicyLoss out;
  out.tokens = mask.sum().item<double>();
  out.out_of_support_tokens = (in_loss & support.logical_not()).sum().item<double>();
  out.clipped_tokens = ((surr2 < surr1) & on).sum().item<double>();
  if (logp_sampler.defined()) {
    const auto lp_s_raw = logp_sampler.detach();
    const auto s_on = on & torch::isfinite(lp_s_raw);
    const auto lp_s = torch::where(s_on, lp_s_raw, zero);
    const auto lp_o = torch::where(s_on, lp_old, zero);
    out.mismatch_sum = ((lp_o - lp_s).abs() * mask).sum().item<double>();
    out.mismatch_tokens = (s_on.to(mask.scalar_type()) * mask).sum().item<double>();
    if (cfg.tis_cap > 0) {
      // TIS: the sampler (another engine, other kernels, BF16 weights) is not exactly pi_old; reweight by
      // the truncated ratio pi_old/pi_sampler so the gradient stays that of pi_old's expectation.
      const auto raw = torch::exp(lp_o - lp_s);
      out.tis_clipped_tokens = ((raw > cfg.tis_cap) & s_on).sum().item<double>();
      term = term * torch::clamp_max(raw, cfg.tis_cap);
    }
  }
  term = term * on_f;  // out-of-support and padding tokens: no surrogate term
  if (cfg.kl_coef > 0 && logp_ref.defined()) {
    // k3 = r - log r - 1 with r = pi_ref/pi: unbiased for KL(pi || pi_ref), always >= 0 (Schulman 2020).
    const auto lp_ref_raw = logp_ref.detach();
    const auto ref_on = on & torch::isfinite(lp_ref_raw);
    out.ref_out_of_support_tokens = (on & ref_on.logical_not()).sum().item<double>();
    const auto d = torch::where(ref_on, lp_ref_raw, zero) - torch::where(ref_on, lp_new, zero);
    const auto k3 = (torch::exp(d) - d - 1) * ref_on.to(mask.scalar_type());
    out.kl_sum = (k3.detach() * mask).sum().item<double>();
    term = term + cfg.kl_coef * k3;
  }
  const auto masked = term * mask;
  if (cfg.loss_agg == LossAgg::TokenMean) {
    out.loss = masked.sum() / batch_tokens;
  } else if (cfg.loss_agg == LossAgg::SeqMean) {
    out.loss = (masked.sum(1) / mask.sum(1).clamp_min(1)).sum() / batch_seqs;
  } else {
    out.loss = masked.sum() / (cfg.constant_normalizer * batch_seqs);
  }
  return out;
}

}  // namespace pulse::rl
