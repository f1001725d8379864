// GRPO advantages and clipped loss against hand-computed values; a toy GRPO run raises the reward.
#include "tests/torch_catch.h"

#include <cmath>

#include "model/generate.h"
#include "model/transformer.h"
#include "rl/grpo.h"
#include "rl/optimizer.h"
#include "tests/rl/toy_grpo_task.h"

using namespace pulse;

TEST_CASE("group advantages: (r - mean) / (std + eps), zero-variance groups give 0", "[grpo]") {
  rl::GrpoConfig cfg;
  cfg.adv_eps = 1e-6;
  // Group 1: {1, 0, 0, 1}: mean 0.5, population std 0.5. Group 2: all equal -> 0.
  auto a = rl::compute_advantages({1, 0, 0, 1, 0.7, 0.7, 0.7, 0.7}, 4, cfg);
  REQUIRE(a.size() == 8);
  CHECK(a[0] == Approx(0.5 / (0.5 + 1e-6)));
  CHECK(a[1] == Approx(-0.5 / (0.5 + 1e-6)));
  for (int i = 4; i < 8; ++i) CHECK(a[i] == 0.0);

  // {0, 0, 1}: mean 1/3, var = (1/9 + 1/9 + 4/9)/3 = 2/9.
  const double sd = std::sqrt(2.0 / 9.0);
  a = rl::compute_advantages({0, 0, 1}, 3, cfg);
  CHECK(a[0] == Approx((0 - 1.0 / 3) / (sd + 1e-6)));
  CHECK(a[2] == Approx((1 - 1.0 / 3) / (sd + 1e-6)));

  cfg.scale_by_std = false;  // Dr. GRPO
  a = rl::compute_advantages({0, 0, 1}, 3, cfg);
  CHECK(a[0] == Approx(-1.0 / 3));
  CHECK(a[2] == Approx(2.0 / 3));

  // All-zero rewards (e.g. every sample wrong), G = 1: no NaN.
  a = rl::compute_advantages({0, 0, 0, 0}, 1, rl::GrpoConfig{});
  for (double v : a) CHECK(v == 0.0);
  CHECK_THROWS_AS(rl::compute_advantages({1, 0, 1}, 2, cfg), std::invalid_argument);
  CHECK_THROWS_AS(rl::compute_advantages({1, NAN}, 2, cfg), std::invalid_argument);
}

namespace {
struct Tok {
  double lp_new, lp_old, mask;
};
// The clipped per-token term, written out from the formula (DAPO eq. 8 with eps_low/eps_high).
double clipped_term(double lp_new, double lp_old, double A, double lo, double hi) {
  const double r = std::exp(lp_new - lp_old);
  const double rc = std::min(std::max(r, 1 - lo), 1 + hi);
  return -std::min(r * A, rc * A);
}
}  // namespace

TEST_CASE("clipped surrogate equals hand-computed values for each aggregation", "[grpo][loss]") {
  // Row 0: 3 tokens, A = +1. Row 1: 2 tokens (right-aligned, first slot padding), A = -0.5.
  // ratios: row 0: e^0.1 (inside), e^0.5 (above 1+eps_high, clipped since A > 0), e^-0.3 (below, A > 0:
  // min picks the unclipped r*A). row 1: e^-0.4 (below 1-eps_low, A < 0: clipped), e^0.2 (inside).
  const double lp_new[2][3] = {{-1.0, -0.5, -2.3}, {9.0, -1.4, -0.8}};
  const double lp_old[2][3] = {{-1.1, -1.0, -2.0}, {-50.0, -1.0, -1.0}};
  const double mask[2][3] = {{1, 1, 1}, {0, 1, 1}};
  const double A[2] = {1.0, -0.5};
  rl::GrpoConfig cfg;
  cfg.eps_low = 0.2;
  cfg.eps_high = 0.28;
  cfg.tis_cap = 0;

  auto t_new = torch::zeros({2, 3}), t_old = torch::zeros({2, 3}), t_mask = torch::zeros({2, 3});
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 3; ++t) {
      t_new[b][t] = lp_new[b][t];
      t_old[b][t] = lp_old[b][t];
      t_mask[b][t] = mask[b][t];
    }
  auto t_adv = torch::tensor({1.0f, -0.5f});

  double term[2][3] = {};
  double total = 0, row_sum[2] = {0, 0};
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 3; ++t)
      if (mask[b][t] > 0) {
        term[b][t] = clipped_term(lp_new[b][t], lp_old[b][t], A[b], 0.2, 0.28);
        total += term[b][t];
        row_sum[b] += term[b][t];
      }
  // The batch these two rows belong to has 10 tokens in 4 sequences (other micro-batches hold the rest).
  const double batch_tokens = 10, batch_seqs = 4;

  SECTION("token_mean") {
    auto x = t_new.clone().requires_grad_(true);
    auto pl = rl::grpo_policy_loss(x, t_old, {}, {}, t_adv, t_mask, cfg, batch_tokens, batch_seqs);
    CHECK(pl.loss.item<double>() == Approx(total / batch_tokens).epsilon(1e-5));
    CHECK(pl.tokens == 5);
    CHECK(pl.clipped_tokens == 2);  // row 0 token 1 and row 1 token 1
    pl.loss.backward();
    auto g = x.grad();
    // d/dlp of -r*A is -r*A for the unclipped terms; clipped terms are constant in lp.
    CHECK(g[0][0].item<double>() == Approx(-std::exp(0.1) * 1.0 / batch_tokens).epsilon(1e-5));
    CHECK(g[0][1].item<double>() == 0.0);
    CHECK(g[0][2].item<double>() == Approx(-std::exp(-0.3) * 1.0 / batch_tokens).epsilon(1e-5));
    CHECK(g[1][0].item<double>() == 0.0);  // padding
    CHECK(g[1][1].item<double>() == 0.0);
    CHECK(g[1][2].item<double>() == Approx(-std::exp(0.2) * -0.5 / batch_tokens).epsilon(1e-5));
  }
  SECTION("seq_mean") {
    cfg.loss_agg = rl::LossAgg::SeqMean;
    auto pl = rl::grpo_policy_loss(t_new, t_old, {}, {}, t_adv, t_mask, cfg, batch_tokens, batch_seqs);
    CHECK(pl.loss.item<double>() == Approx((row_sum[0] / 3 + row_sum[1] / 2) / batch_seqs).epsilon(1e-5));
  }
  SECTION("constant") {
    cfg.loss_agg = rl::LossAgg::Constant;
    cfg.constant_normalizer = 64;
    auto pl = rl::grpo_policy_loss(t_new, t_old, {}, {}, t_adv, t_mask, cfg, batch_tokens, batch_seqs);
    CHECK(pl.loss.item<double>() == Approx(total / (64 * batch_seqs)).epsilon(1e-5));
  }
  SECTION("TIS weights min(pi_old/pi_sampler, cap) and the k3 KL term") {
    cfg.tis_cap = 1.5;
    cfg.kl_coef = 0.1;
    const double lp_s[2][3] = {{-1.1, -1.9, -2.1},
                               {0.0, -1.2, -1.0}};  // pi_old/pi_s = 1, e^0.9 (capped), e^0.1, -, e^0.2, 1
    const double lp_ref[2][3] = {{-0.9, -0.6, -2.3}, {0.0, -1.0, -1.2}};
    auto t_s = torch::zeros({2, 3}), t_ref = torch::zeros({2, 3});
    double want = 0, kl = 0, mism = 0;
    for (int b = 0; b < 2; ++b)
      for (int t = 0; t < 3; ++t) {
        t_s[b][t] = lp_s[b][t];
        t_ref[b][t] = lp_ref[b][t];
        if (mask[b][t] == 0) continue;
        const double w = std::min(std::exp(lp_old[b][t] - lp_s[b][t]), 1.5);
        const double d = lp_ref[b][t] - lp_new[b][t];
        const double k3 = std::exp(d) - d - 1;
        want += term[b][t] * w + 0.1 * k3;
        kl += k3;
        mism += std::abs(lp_old[b][t] - lp_s[b][t]);
      }
    auto pl = rl::grpo_policy_loss(t_new, t_old, t_s, t_ref, t_adv, t_mask, cfg, batch_tokens, batch_seqs);
    CHECK(pl.loss.item<double>() == Approx(want / batch_tokens).epsilon(1e-5));
    CHECK(pl.kl_sum == Approx(kl).epsilon(1e-5));
    CHECK(pl.mismatch_sum == Approx(mism).epsilon(1e-5));
    CHECK(pl.tis_clipped_tokens == 1);
  }
}

using test::toy_config;

TEST_CASE("a short GRPO run on a toy task raises the mean reward", "[grpo][toy]") {
  torch::manual_seed(1234);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    model::Transformer m(toy_config(), dtype);
    rl::OptimizerConfig oc;
    oc.lr = 2e-2;
    oc.grad_clip = 1.0;
    rl::MasterAdam opt(*m, oc);
    const auto [before, after] = test::train_toy(*m, opt);
    INFO("dtype " << dtype << " reward before " << before << " after " << after);
    CHECK(before < 0.3);
    CHECK(after > before + 0.4);
  }
}

TEST_CASE("grpo_step rejects uneven groups and masks truncated responses on request", "[grpo]") {
  torch::manual_seed(5);
  model::Transformer m(toy_config(), torch::kFloat32);
  rl::MasterAdam opt(*m, rl::OptimizerConfig{});
  std::vector<rl::Rollout> r(4);
  for (int i = 0; i < 4; ++i) {
    r[i].group = i < 3 ? 0 : 1;
    r[i].prompt_ids = {1, 3};
    r[i].response_ids = {5, 2};
    r[i].reward = i % 2;
  }
  CHECK_THROWS_WITH(rl::grpo_step(*m, opt, r, rl::GrpoConfig{}), Catch::Contains("groups of 3"));
  r[2].group = 1;
  r[0].truncated = true;
  r[0].response_ids = {5, 5, 5};
  rl::GrpoConfig gc;
  auto st = rl::grpo_step(*m, opt, r, gc);
  CHECK(st.tokens == 9);
  CHECK(st.truncated == 1);
  gc.mask_truncated = true;
  st = rl::grpo_step(*m, opt, r, gc);
  CHECK(st.tokens == 6);
  CHECK(st.zero_variance_groups == 0);
}
