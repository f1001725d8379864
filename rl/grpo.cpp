// One GRPO optimizer step over a batch of rollouts (rl/grpo.h).
#include "rl/grpo.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "model/transformer.h"
#include "rl/optimizer.h"
#include "rl/sequence_batch.h"

namespace pulse::rl {

namespace {

/// Size of the groups: consecutive rollouts sharing `group`. All groups must have the same size.
int64_t group_size_of(const std::vector<Rollout>& rollouts) {
  const size_t n = rollouts.size();
  size_t g = 1;
  while (g < n && rollouts[g].group == rollouts[0].group) ++g;
  for (size_t i = 0; i < n; ++i) {
    const bool starts = i % g == 0;
    const bool ok = starts ? (i == 0 || rollouts[i].group != rollouts[i - 1].group) && i + g <= n
                           : rollouts[i].group == rollouts[i - 1].group;
    if (!ok) {
      throw std::invalid_argument("grpo_step: rollouts must come in groups of " + std::to_string(g) +
                                  " consecutive entries with one group id (broken at rollout " +
                                  std::to_string(i) + ", group " + std::to_string(rollouts[i].group) + ")");
    }
  }
  return static_cast<int64_t>(g);
}

/// Sampler log-probs of a micro-batch, right-aligned like SequenceBatch; undefined when any row lacks them.
at::Tensor sampler_logprobs(const std::vector<const Rollout*>& rows, int64_t R, const at::Device& device) {
  auto out = torch::zeros({static_cast<int64_t>(rows.size()), R}, torch::kFloat32);
  auto a = out.accessor<float, 2>();
  for (size_t b = 0; b < rows.size(); ++b) {
    const auto& lp = rows[b]->sampler_logprobs;
    const int64_t n = static_cast<int64_t>(rows[b]->response_ids.size());
    if (static_cast<int64_t>(lp.size()) != n) return at::Tensor();
    for (int64_t t = 0; t < n; ++t) a[static_cast<int64_t>(b)][R - n + t] = lp[t];
  }
  return out.to(device);
}

}  // namespace

GrpoStepStats grpo_step(model::TransformerImpl& policy, MasterAdam& opt, const std::vector<Rollout>& rollouts,
                        const GrpoConfig& cfg, model::TransformerImpl* reference) {
  cfg.validate();
  if (cfg.kl_coef > 0 && reference == nullptr) {
    throw std::invalid_argument("rl.kl_coef = " + std::to_string(cfg.kl_coef) +
                                " > 0 needs a frozen reference policy (rl::make_reference_policy), but "
                                "grpo_step got none");
  }
  if (rollouts.empty()) throw std::invalid_argument("grpo_step: no rollouts");
  GrpoStepStats stats;
  const int64_t G = group_size_of(rollouts);
  const size_t N = rollouts.size();

  std::vector<double> rewards(N);
  for (size_t i = 0; i < N; ++i) {
    if (rollouts[i].response_ids.empty() || rollouts[i].prompt_ids.empty()) {
      throw std::invalid_argument("grpo_step: rollout " + std::to_string(i) +
                                  " has an empty prompt or response");
    }
    rewards[i] = rollouts[i].reward;
    stats.truncated += rollouts[i].truncated ? 1 : 0;
  }
  const std::vector<double> adv = compute_advantages(rewards, G, cfg);
  stats.reward_mean = std::accumulate(rewards.begin(), rewards.end(), 0.0) / static_cast<double>(N);
  double var = 0;
  for (double r : rewards) var += (r - stats.reward_mean) * (r - stats.reward_mean);
  stats.reward_std = std::sqrt(var / static_cast<double>(N));
  for (size_t s = 0; s < N; s += static_cast<size_t>(G)) {
    bool same = true;
    for (size_t i = s; i < s + static_cast<size_t>(G); ++i) same = same && rewards[i] == rewards[s];
    stats.zero_variance_groups += same ? 1 : 0;
  }

  // Normalizers over the whole batch (every rollout in the loss, including those skipped below).
  double batch_tokens = 0, batch_seqs = 0;
  std::vector<size_t> active;
  for (size_t i = 0; i < N; ++i) {
    if (cfg.mask_truncated && rollouts[i].truncated) continue;
    batch_tokens += static_cast<double>(rollouts[i].response_ids.size());
    batch_seqs += 1;
    // A zero advantage gives an exactly-zero policy gradient; only the KL term would need the pass.
    if (adv[i] != 0.0 || cfg.kl_coef > 0) active.push_back(i);
  }
  // Sorting by length keeps padding small within a micro-batch; the sum over micro-batches is unchanged.
  std::stable_sort(active.begin(), active.end(), [&](size_t a, size_t b) {
    return rollouts[a].prompt_ids.size() + rollouts[a].response_ids.size() <
           rollouts[b].prompt_ids.size() + rollouts[b].response_ids.size();
  });
  const at::Device device = policy.device();
  std::vector<SequenceBatch> batches;
  std::vector<std::vector<const Rollout*>> batch_rows;
  std::vector<at::Tensor> batch_adv;
  for (size_t s = 0; s < active.size(); s += static_cast<size_t>(cfg.micro_batch)) {
    std::vector<const std::vector<int32_t>*> prompts, responses;
    std::vector<const Rollout*> rows;
    std::vector<float> a;
    for (size_t k = s; k < std::min(active.size(), s + static_cast<size_t>(cfg.micro_batch)); ++k) {
      const Rollout& r = rollouts[active[k]];
      prompts.push_back(&r.prompt_ids);
      responses.push_back(&r.response_ids);
      rows.push_back(&r);
      a.push_back(static_cast<float>(adv[active[k]]));
    }
    batches.push_back(make_sequence_batch(prompts, responses, device));
    batch_rows.push_back(std::move(rows));
    batch_adv.push_back(torch::tensor(a).to(device));
  }

  // pi_old (and pi_ref): no-grad passes with the weights before this step.
  std::vector<at::Tensor> old_lp(batches.size()), ref_lp(batches.size());
  double entropy_sum = 0;
  {
    torch::NoGradGuard no_grad;
    for (size_t b = 0; b < batches.size(); ++b) {
      if (cfg.recompute_old_logprobs) {
        at::Tensor ent;
        old_lp[b] = response_logprobs(policy, batches[b], cfg.sampling, &ent);
        entropy_sum += (ent * batches[b].response_mask).sum().item<double>();
      }
      if (cfg.kl_coef > 0) {
        ref_lp[b] = response_logprobs(*reference, batches[b], cfg.sampling);
      }
    }
  }

  double loss_sum = 0, clipped = 0, kl_sum = 0, tis_clipped = 0, mismatch = 0, mismatch_tokens = 0,
         out_of_support = 0, ref_out_of_support = 0, tokens = 0;
  opt.zero_grad();
  for (size_t b = 0; b < batches.size(); ++b) {
    at::Tensor ent;
    at::Tensor lp =
        response_logprobs(policy, batches[b], cfg.sampling, cfg.recompute_old_logprobs ? nullptr : &ent);
    if (!cfg.recompute_old_logprobs) {
      old_lp[b] = lp.detach();
      entropy_sum += (ent * batches[b].response_mask).sum().item<double>();
    }
    const at::Tensor s_lp = sampler_logprobs(batch_rows[b], batches[b].targets.size(1), device);
    PolicyLoss pl = grpo_policy_loss(lp, old_lp[b], s_lp, ref_lp[b], batch_adv[b], batches[b].response_mask,
                                     cfg, batch_tokens, batch_seqs);
    pl.loss.backward();
    opt.accumulate_grads();
    loss_sum += pl.loss.item<double>();
    clipped += pl.clipped_tokens;
    kl_sum += pl.kl_sum;
    tis_clipped += pl.tis_clipped_tokens;
    mismatch += pl.mismatch_sum;
    mismatch_tokens += pl.mismatch_tokens;
    out_of_support += pl.out_of_support_tokens;
    ref_out_of_support += pl.ref_out_of_support_tokens;
    tokens += pl.tokens;
  }
  const OptimizerStepStats os = opt.step();

  stats.loss = loss_sum;
  stats.tokens = static_cast<int64_t>(batch_tokens);
  if (tokens > 0) {
    stats.clip_fraction = clipped / tokens;
    stats.kl = kl_sum / tokens;
    stats.tis_clipped_fraction = tis_clipped / tokens;
    stats.out_of_support_fraction = out_of_support / tokens;
    stats.ref_out_of_support_fraction = ref_out_of_support / tokens;
    stats.entropy = entropy_sum / tokens;
  }
  if (mismatch_tokens > 0) stats.tis_mismatch = mismatch / mismatch_tokens;
  stats.grad_norm = os.grad_norm;
  stats.lr = os.lr;
  stats.bf16_changed = os.bf16_changed;
  stats.elements = os.elements;
  stats.skipped = os.skipped;
  stats.skip_reason = os.skip_reason;
  stats.skip_detail = os.skip_detail;
  return stats;
}

model::Transformer make_reference_policy(const model::TransformerImpl& policy, torch::Dtype dtype) {
  model::Transformer ref(policy.config(), dtype);
  torch::NoGradGuard no_grad;
  ref->to(policy.device());
  const auto src = policy.named_parameters(/*recurse=*/true);
  auto dst = ref->named_parameters(/*recurse=*/true);
  if (src.size() != dst.size()) {
    throw std::logic_error("make_reference_policy: " + std::to_string(dst.size()) +
                           " parameters, policy has " + std::to_string(src.size()));
  }
  for (const auto& p : src) {
    at::Tensor* d = dst.find(p.key());
    if (d == nullptr || d->sizes() != p.value().sizes()) {
      throw std::logic_error("make_reference_policy: no parameter of the same shape for " + p.key());
    }
    d->copy_(p.value());  // casts to dtype
  }
  for (auto& p : ref->parameters()) p.set_requires_grad(false);
  ref->eval();
  return ref;
}

}  // namespace pulse::rl
