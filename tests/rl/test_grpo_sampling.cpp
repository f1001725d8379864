// GRPO scores rollouts under exactly the sampler's distribution (temperature, top-k, top-p), and the k3 KL
// penalty against a frozen reference policy (value 0 at step 0, gradient = finite differences).
#include "tests/torch_catch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>
#include <vector>

#include "model/generate.h"
#include "model/sampling.h"
#include "model/transformer.h"
#include "rl/grpo.h"
#include "rl/optimizer.h"
#include "rl/sequence_batch.h"
#include "rl_test_util.h"

using namespace pulse;

namespace {

/// Kept set of one row, written out from the rules in model/sampling.h, in double: temperature, top-k
/// with ties at the k-th value kept, top-p over the renormalised survivors in descending order with ties
/// at the smallest kept value kept.
std::vector<bool> kept_reference(const std::vector<double>& logits, const model::SamplingParams& sp) {
  const size_t V = logits.size();
  std::vector<double> x(V);
  for (size_t i = 0; i < V; ++i) x[i] = logits[i] / sp.temperature;
  std::vector<bool> keep(V, true);
  if (sp.top_k > 0 && static_cast<size_t>(sp.top_k) < V) {
    auto s = x;
    std::sort(s.begin(), s.end(), std::greater<double>());
    const double kth = s[static_cast<size_t>(sp.top_k) - 1];
    for (size_t i = 0; i < V; ++i) keep[i] = x[i] >= kth;
  }
  if (sp.top_p < 1) {
    std::vector<size_t> order;
    for (size_t i = 0; i < V; ++i)
      if (keep[i]) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] > x[b]; });
    double z = 0;
    for (size_t i : order) z += std::exp(x[i] - x[order[0]]);
    double before = 0, smallest = x[order[0]];
    for (size_t i : order) {
      if (before >= sp.top_p) break;
      smallest = x[i];
      before += std::exp(x[i] - x[order[0]]) / z;
    }
    for (size_t i = 0; i < V; ++i) keep[i] = keep[i] && x[i] >= smallest;
  }
  return keep;
}

/// The tiny test Llama, untied, with an LM head 15x its N(0, 0.02) init: logits of std ~2.4 instead of
/// ~0.16, so that top-k/top-p cut a real tail (an untrained model is nearly uniform, which would put every
/// token near the top-p boundary).
model::Transformer sharp_model(torch::Dtype dtype, uint64_t seed) {
  torch::manual_seed(seed);
  auto cfg = test::tiny_llama(99);
  cfg.tie_word_embeddings = false;
  model::Transformer m(cfg, dtype);
  torch::NoGradGuard no_grad;
  m->lm_head->weight.mul_(15.0);
  return m;
}

/// 4 prompts x G samples from `m` with `sp`, as GRPO rollouts (reward: sample index parity, so every
/// group has non-zero advantages and every rollout enters the loss).
std::vector<rl::Rollout> sample_rollouts(model::TransformerImpl& m, model::SamplingParams sp, int64_t G) {
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 40, 41, 42}, {1, 50, 60}, {1, 70, 71, 72, 73, 74}, {1, 80}};
  std::vector<model::GenerationRequest> reqs;
  for (size_t p = 0; p < prompts.size(); ++p)
    for (int64_t g = 0; g < G; ++g) reqs.push_back({prompts[p], 1000 * p + static_cast<uint64_t>(g)});
  sp.max_new_tokens = 12;
  sp.stop_token_ids = {2};
  const auto res = model::generate(m, reqs, sp);
  std::vector<rl::Rollout> out(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    out[i].group = static_cast<int64_t>(i) / G;
    out[i].prompt_ids = reqs[i].prompt_ids;
    out[i].response_ids = res[i].token_ids;
    out[i].sampler_logprobs = res[i].logprobs;
    out[i].truncated = res[i].finish == model::FinishReason::Length;
    out[i].reward = static_cast<double>(i % 2);
  }
  return out;
}

rl::SequenceBatch batch_of(const std::vector<rl::Rollout>& r, const at::Device& device) {
  std::vector<const std::vector<int32_t>*> p, s;
  for (const auto& x : r) {
    p.push_back(&x.prompt_ids);
    s.push_back(&x.response_ids);
  }
  return rl::make_sequence_batch(p, s, device);
}

struct Agreement {
  double mean_ratio = 0, mean_abs_diff = 0, max_abs_diff = 0, tokens = 0, out_of_support = 0;
};

/// exp(logp_recomputed - logp_sampler) over the response tokens, logp recomputed with `score`.
Agreement agreement(model::TransformerImpl& m, const std::vector<rl::Rollout>& r,
                    const model::SamplingParams& score) {
  const auto batch = batch_of(r, m.device());
  torch::NoGradGuard no_grad;
  const auto lp = rl::response_logprobs(m, batch, score).to(torch::kFloat64);
  const int64_t R = batch.targets.size(1);
  Agreement a;
  double ratio_sum = 0;
  for (size_t b = 0; b < r.size(); ++b) {
    const int64_t n = static_cast<int64_t>(r[b].response_ids.size());
    for (int64_t t = 0; t < n; ++t) {
      const double old = lp[static_cast<int64_t>(b)][R - n + t].item<double>();
      const double s = r[b].sampler_logprobs[static_cast<size_t>(t)];
      a.tokens += 1;
      if (!std::isfinite(old)) {
        a.out_of_support += 1;
        continue;
      }
      ratio_sum += std::exp(old - s);
      a.mean_abs_diff += std::abs(old - s);
      a.max_abs_diff = std::max(a.max_abs_diff, std::abs(old - s));
    }
  }
  const double in = a.tokens - a.out_of_support;
  a.mean_ratio = ratio_sum / in;
  a.mean_abs_diff /= in;
  return a;
}

}  // namespace

TEST_CASE("sampling_log_probs: the kept set follows the written tie rules, renormalised",
          "[grpo][sampling]") {
  // Row 0 ties at the 2nd largest value: top_k = 2 keeps 3 tokens, renormalised.
  auto logits = torch::tensor({{1.0f, 3.0f, 2.0f, 2.0f, -1.0f}, {2.0f, 2.0f, 1.0f, 1.0f, 0.0f}});
  model::SamplingParams sp;
  sp.top_k = 2;
  auto lp = model::sampling_log_probs(logits, sp);
  CHECK(lp.sizes() == logits.sizes());
  CHECK(std::isinf(lp[0][0].item<float>()));
  CHECK(std::isinf(lp[0][4].item<float>()));
  const double z = std::exp(3.0) + 2 * std::exp(2.0);
  CHECK(lp[0][1].item<double>() == Approx(3.0 - std::log(z)).margin(1e-6));
  CHECK(lp[0][2].item<double>() == Approx(2.0 - std::log(z)).margin(1e-6));
  CHECK(lp[0][3].item<double>() == lp[0][2].item<double>());

  // Row 1, top_p = 0.3: p = (e^2, e^2, e, e, 1) / Z = (0.348, 0.348, ...). The prefix rule keeps one of the
  // two leaders (the mass before the second is 0.348 >= 0.3); the tie rule keeps both, whatever the order.
  sp.top_k = 0;
  sp.top_p = 0.3;
  lp = model::sampling_log_probs(logits, sp);
  CHECK(lp[1][0].item<double>() == Approx(std::log(0.5)).margin(1e-6));
  CHECK(lp[1][1].item<double>() == Approx(std::log(0.5)).margin(1e-6));
  for (int i = 2; i < 5; ++i) CHECK(std::isinf(lp[1][i].item<float>()));
  // Row 0: p(3) = 0.53 > 0.3: only token 1 stays (log-prob 0).
  CHECK(lp[0][1].item<double>() == Approx(0.0).margin(1e-6));
  CHECK((lp[0].isfinite().sum().item<int64_t>() == 1));
  // top_p = 0.5 on row 1: the mass before the 3rd token is 0.697 >= 0.5: the same two stay.
  sp.top_p = 0.5;
  CHECK((model::sampling_log_probs(logits, sp)[1].isfinite().sum().item<int64_t>() == 2));

  // Greedy: the unscaled, untruncated distribution whatever top_k/top_p say.
  sp.temperature = 0;
  sp.top_k = 1;
  CHECK(torch::allclose(model::sampling_log_probs(logits, sp), torch::log_softmax(logits, -1)));
  // Temperature 1, no truncation: exactly log_softmax.
  CHECK(torch::equal(model::sampling_log_probs(logits, model::SamplingParams{}),
                     torch::log_softmax(logits, -1)));

  sp.temperature = -1;
  CHECK_THROWS_AS(model::sampling_log_probs(logits, sp), std::invalid_argument);
  sp.temperature = 1;
  sp.top_p = 0;
  CHECK_THROWS_AS(model::sampling_log_probs(logits, sp), std::invalid_argument);
  sp.top_p = 1;
  sp.top_k = -3;
  CHECK_THROWS_AS(model::sampling_log_probs(logits, sp), std::invalid_argument);
}

TEST_CASE("sample_tokens draws only kept tokens and reports sampling_log_probs' values", "[grpo][sampling]") {
  torch::manual_seed(3);
  const int64_t B = 6, V = 40;
  // Random logits with repeated values (rounded to 0.5) so that ties sit at the top-k/top-p boundaries.
  auto logits = (torch::randn({B, V}) * 3).mul(2).round().div(2);
  for (const auto& [T, p, k] : std::vector<std::tuple<double, double, int64_t>>{
           {0.7, 0.9, 20}, {1.0, 1.0, 5}, {1.3, 0.5, 0}, {0.7, 1.0, 0}, {1.0, 0.3, 7}}) {
    model::SamplingParams sp;
    sp.temperature = T;
    sp.top_p = p;
    sp.top_k = k;
    INFO("T " << T << " top_p " << p << " top_k " << k);
    const auto lp = model::sampling_log_probs(logits, sp);
    // The kept set is the one the written rules give, and the kept mass is 1.
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> row(V);
      for (int64_t v = 0; v < V; ++v) row[v] = logits[b][v].item<double>();
      const auto want = kept_reference(row, sp);
      for (int64_t v = 0; v < V; ++v) CHECK(std::isfinite(lp[b][v].item<float>()) == want[v]);
      CHECK(lp[b].exp().sum().item<double>() == Approx(1.0).margin(1e-5));
    }
    // The same rows inside a [B/2, 2, V] tensor (the trainer's [B,R,V] layout) give the same values.
    CHECK(torch::equal(model::sampling_log_probs(logits.view({B / 2, 2, V}), sp).view({B, V}), lp));
    // Every draw is a kept token, with sampling_log_probs' log-prob; the kept tokens are all reachable.
    std::vector<std::vector<int>> seen(B, std::vector<int>(V, 0));
    for (uint64_t seed = 0; seed < 300; ++seed) {
      auto [tok, slp] =
          model::sample_tokens(logits, sp, std::vector<uint64_t>(B, seed), std::vector<uint64_t>(B, 0));
      for (int64_t b = 0; b < B; ++b) {
        const int64_t t = tok[b].item<int64_t>();
        REQUIRE(std::isfinite(lp[b][t].item<float>()));
        CHECK(slp[b].item<float>() == lp[b][t].item<float>());
        ++seen[b][t];
      }
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t v = 0; v < V; ++v)
        if (lp[b][v].item<double>() > std::log(0.05)) CHECK(seen[b][v] > 0);
  }
}

TEST_CASE("GRPO recomputes pi_old under the sampler's distribution: ratio 1, no mismatch",
          "[grpo][sampling]") {
  struct Case {
    double T, top_p;
    int64_t top_k;
  };
  for (const Case c : {Case{0.7, 0.9, 20}, Case{1.0, 1.0, 0}}) {
    auto m = sharp_model(torch::kFloat32, 11);
    // MasterAdam sets the model to the BF16 cast of its masters: build it before sampling, so that the
    // rollouts are sampled and scored with the same weights.
    rl::MasterAdam opt(*m, rl::OptimizerConfig{});
    model::SamplingParams sp;
    sp.temperature = c.T;
    sp.top_p = c.top_p;
    sp.top_k = c.top_k;
    INFO("T " << c.T << " top_p " << c.top_p << " top_k " << c.top_k);
    const auto rollouts = sample_rollouts(*m, sp, 8);

    const Agreement now = agreement(*m, rollouts, sp);
    const Agreement before = agreement(*m, rollouts, model::SamplingParams{});  // the old T=1 recompute
    INFO("tokens " << now.tokens << ": mean |logp_old - logp_sampler| " << before.mean_abs_diff
                   << " with the old T=1 recompute -> " << now.mean_abs_diff << " (max " << now.max_abs_diff
                   << "), mean ratio - 1 = " << now.mean_ratio - 1);
    CHECK(now.tokens > 200);
    CHECK(now.out_of_support == 0);
    CHECK(std::abs(now.mean_ratio - 1) < 1e-5);
    CHECK(now.max_abs_diff < 1e-4);
    if (c.T != 1.0) CHECK(before.mean_abs_diff > 0.1);  // the recompute this replaces was far off

    // The entropy of the sampling distribution under the weights before the step.
    const auto batch = batch_of(rollouts, m->device());
    double entropy = 0;
    {
      torch::NoGradGuard no_grad;
      at::Tensor ent;
      rl::response_logprobs(*m, batch, sp, &ent);
      entropy = (ent * batch.response_mask).sum().item<double>() / batch.response_mask.sum().item<double>();
    }
    // grpo_step's own stats on the same rollouts.
    rl::GrpoConfig gc;
    gc.sampling = sp;
    gc.micro_batch = 16;
    const auto st = rl::grpo_step(*m, opt, rollouts, gc);
    INFO("grpo_step tis_mismatch " << st.tis_mismatch << ", entropy " << st.entropy);
    CHECK(st.tis_mismatch < 1e-5);
    CHECK(st.tis_clipped_fraction == 0);
    CHECK(st.out_of_support_fraction == 0);
    CHECK(std::isfinite(st.loss));
    CHECK(st.entropy == Approx(entropy).epsilon(1e-5));
    CHECK(entropy > 0.1);  // a real spread: the cases are not near-greedy
  }
}

TEST_CASE("tokens outside the recomputed kept set are dropped from the loss and counted",
          "[grpo][sampling]") {
  const float inf = std::numeric_limits<float>::infinity();
  auto lp_new = torch::tensor({{-1.0f, -inf, -0.5f}, {-0.2f, -0.3f, -0.4f}}).requires_grad_(true);
  auto lp_old = torch::tensor({{-1.0f, -inf, -0.5f}, {-0.2f, -inf, -0.4f}});
  auto lp_s = torch::tensor({{-1.0f, -0.7f, -0.5f}, {-0.2f, -0.3f, -0.4f}});
  auto lp_ref = torch::tensor({{-1.0f, -0.7f, -inf}, {-0.1f, -0.3f, -0.4f}});
  auto mask = torch::ones({2, 3});
  auto adv = torch::tensor({1.0f, -1.0f});
  rl::GrpoConfig cfg;
  cfg.kl_coef = 0.1;
  auto pl = rl::grpo_policy_loss(lp_new, lp_old, lp_s, lp_ref, adv, mask, cfg, 6, 2);
  CHECK(pl.out_of_support_tokens == 2);
  CHECK(pl.ref_out_of_support_tokens == 1);  // row 0 token 2
  CHECK(pl.mismatch_tokens == 4);
  CHECK(pl.mismatch_sum == Approx(0.0).margin(1e-7));
  // Surrogate: ratio 1 on the 4 in-support tokens: -(1 + 1 - 1 - 1) = 0; k3 only on row 1 token 0.
  const double d = -0.1 - -0.2;
  CHECK(pl.loss.item<double>() == Approx(0.1 * (std::exp(d) - d - 1) / 6).margin(1e-8));
  pl.loss.backward();
  CHECK(torch::isfinite(lp_new.grad()).all().item<bool>());
  CHECK(lp_new.grad()[0][1].item<float>() == 0.0f);
  CHECK(lp_new.grad()[1][1].item<float>() == 0.0f);
}

TEST_CASE("kl_coef > 0 needs a reference policy, make_reference_policy is a frozen BF16 copy", "[grpo][kl]") {
  auto m = sharp_model(torch::kBFloat16, 21);
  model::SamplingParams sp;
  sp.temperature = 0.7;
  sp.top_p = 0.9;
  sp.top_k = 20;
  const auto rollouts = sample_rollouts(*m, sp, 4);
  rl::MasterAdam opt(*m, [] {
    rl::OptimizerConfig oc;
    oc.lr = 1e-2;
    return oc;
  }());
  rl::GrpoConfig gc;
  gc.sampling = sp;
  gc.kl_coef = 0.05;
  CHECK_THROWS_WITH(rl::grpo_step(*m, opt, rollouts, gc), Catch::Contains("rl.kl_coef"));
  CHECK_THROWS_AS(rl::grpo_step(*m, opt, rollouts, gc), std::invalid_argument);

  auto ref = rl::make_reference_policy(*m);
  CHECK_FALSE(ref->is_training());
  CHECK(ref->compute_dtype() == torch::kBFloat16);
  auto ref_params = ref->named_parameters();
  for (const auto& p : m->named_parameters()) {
    const auto& r = ref_params[p.key()];
    CHECK(r.scalar_type() == torch::kBFloat16);
    CHECK_FALSE(r.requires_grad());
    CHECK(torch::equal(r, p.value()));
    CHECK(r.data_ptr() != p.value().data_ptr());
  }
  // Step 0: reference == policy, so every k3 term and the logged KL are exactly 0.
  auto st = rl::grpo_step(*m, opt, rollouts, gc, ref.get());
  CHECK(st.kl == 0.0);
  CHECK(st.ref_out_of_support_fraction == 0);
  // The policy moves, the reference does not: KL becomes positive.
  for (int i = 0; i < 3; ++i) st = rl::grpo_step(*m, opt, rollouts, gc, ref.get());
  INFO("KL after 4 steps " << st.kl);
  CHECK(st.kl > 0);
  CHECK(std::isfinite(st.kl));
  for (const auto& p : ref->named_parameters()) CHECK_FALSE(p.value().requires_grad());
  bool moved = false;
  ref_params = ref->named_parameters();
  for (const auto& p : m->named_parameters()) moved = moved || !torch::equal(ref_params[p.key()], p.value());
  CHECK(moved);
}

TEST_CASE("the k3 KL term's gradient matches finite differences", "[grpo][kl]") {
  rl::GrpoConfig cfg;
  cfg.kl_coef = 1.0;
  cfg.tis_cap = 0;
  model::SamplingParams sp;
  sp.temperature = 0.7;
  sp.top_k = 5;
  sp.top_p = 0.95;
  cfg.sampling = sp;

  SECTION("w.r.t. the logits (float64)") {
    torch::manual_seed(8);
    const int64_t B = 2, R = 3, V = 11;
    auto logits = (torch::randn({B, R, V}, torch::kFloat64) * 2).requires_grad_(true);
    const auto targets = logits.detach().argmax(-1);  // always kept by both
    const auto ref_logits = logits.detach() + 0.3 * torch::randn({B, R, V}, torch::kFloat64);
    const auto lp_ref = model::sampling_log_probs(ref_logits, sp).gather(2, targets.unsqueeze(2)).squeeze(2);
    const auto mask = torch::ones({B, R});
    const auto adv = torch::zeros({B});
    auto loss_of = [&](const at::Tensor& x) {
      const auto lp = model::sampling_log_probs(x, sp).gather(2, targets.unsqueeze(2)).squeeze(2);
      return rl::grpo_policy_loss(lp, lp.detach(), {}, lp_ref, adv, mask, cfg, B * R, B);
    };
    auto pl = loss_of(logits);
    REQUIRE(pl.ref_out_of_support_tokens == 0);
    REQUIRE(pl.kl_sum > 1e-4);
    pl.loss.backward();
    const auto g = logits.grad();
    const double eps = 1e-6;
    double max_err = 0, max_g = 0;
    torch::NoGradGuard no_grad;
    auto x = logits.detach().clone();
    auto flat = x.view({-1});
    for (int64_t i = 0; i < flat.numel(); ++i) {
      const double v = flat[i].item<double>();
      flat[i] = v + eps;
      const double up = loss_of(x).loss.item<double>();
      flat[i] = v - eps;
      const double down = loss_of(x).loss.item<double>();
      flat[i] = v;
      const double fd = (up - down) / (2 * eps);
      max_err = std::max(max_err, std::abs(fd - g.view({-1})[i].item<double>()));
      max_g = std::max(max_g, std::abs(fd));
    }
    INFO("max |grad - fd| " << max_err << ", max |fd| " << max_g);
    CHECK(max_g > 1e-3);
    CHECK(max_err < 1e-7);
  }

  SECTION("w.r.t. the parameters of a model (float32), zero at step 0") {
    const bool truncated = GENERATE(true, false);
    INFO((truncated ? "T 0.7, top_k 5, top_p 0.95" : "T 1, untruncated"));
    if (!truncated) sp = model::SamplingParams{};
    cfg.sampling = sp;
    auto m = sharp_model(torch::kFloat32, 31);
    const auto rollouts = sample_rollouts(*m, sp, 2);
    const auto batch = batch_of(rollouts, m->device());
    auto ref = rl::make_reference_policy(*m, torch::kFloat32);
    const auto adv = torch::zeros({batch.targets.size(0)});
    const double tokens = batch.response_mask.sum().item<double>();
    auto kl_loss = [&]() {
      const auto lp = rl::response_logprobs(*m, batch, sp);
      at::Tensor lp_ref;
      {
        torch::NoGradGuard no_grad;
        lp_ref = rl::response_logprobs(*ref, batch, sp);
      }
      return rl::grpo_policy_loss(lp, lp.detach(), {}, lp_ref, adv, batch.response_mask, cfg, tokens,
                                  static_cast<double>(rollouts.size()));
    };
    auto params = m->parameters();
    // Step 0 (policy == reference): the KL and its gradient are 0.
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    auto pl = kl_loss();
    CHECK(pl.kl_sum == 0.0);
    pl.loss.backward();
    for (auto& p : params)
      if (p.grad().defined()) CHECK(p.grad().abs().max().item<double>() == 0.0);

    // Move the policy away from the reference, then compare the directional derivative along a random
    // unit direction (over all parameters) with a central difference.
    torch::manual_seed(9);
    std::vector<at::Tensor> dir;
    {
      torch::NoGradGuard no_grad;
      double norm2 = 0;
      for (auto& p : params) {
        p.add_(torch::randn_like(p) * 0.002);
        dir.push_back(torch::randn_like(p));
        norm2 += dir.back().pow(2).sum().item<double>();
      }
      for (auto& d : dir) d.div_(std::sqrt(norm2));
    }
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    pl = kl_loss();
    INFO("KL per token " << pl.kl_sum / tokens);
    // The sampled tokens are all in the reference's kept set; the moved policy may drop a few (they
    // leave the loss: piecewise constant, no effect on the derivative).
    INFO("out of the policy's support: " << pl.out_of_support_tokens << " of " << tokens);
    REQUIRE(pl.ref_out_of_support_tokens == 0);
    REQUIRE(pl.kl_sum / tokens > 1e-3);
    pl.loss.backward();
    double analytic = 0;
    for (size_t i = 0; i < params.size(); ++i) analytic += (params[i].grad() * dir[i]).sum().item<double>();
    // 1e-3: small enough for the O(eps^2) error and no kept-set change, large for FP32 rounding.
    const double eps = 1e-3;
    auto shifted = [&](double s) {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) params[i].add_(dir[i] * s);
      const double v = kl_loss().loss.item<double>();
      for (size_t i = 0; i < params.size(); ++i) params[i].sub_(dir[i] * s);
      return v;
    };
    const double fd = (shifted(eps) - shifted(-eps)) / (2 * eps);
    INFO("directional derivative: autograd " << analytic << ", finite difference " << fd);
    CHECK(std::abs(analytic) > 1e-3);
    CHECK(fd == Approx(analytic).epsilon(1e-2));
  }
}
