// The toy GRPO task shared by the CPU and CUDA GRPO tests: a one-layer Llama over 16 tokens, four one-token
// prompts, reward 1 when the first sampled token is kToyTarget. GRPO must raise the mean reward.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/generate.h"
#include "model/transformer.h"
#include "rl/grpo.h"
#include "rl/optimizer.h"
#include "rl/rollout.h"

namespace pulse::test {

/// A one-layer, 32-wide Llama over a 16-token vocabulary (bos 1, eos 2).
inline model::ModelConfig toy_config() {
  model::ModelConfig c;
  c.vocab_size = 16;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 64;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  return c;
}

/// The token the toy task rewards as the first response token.
constexpr int32_t kToyTarget = 7;

/// G samples (up to 3 tokens, temperature 1) for each of the prompts [1, 3..6]; group j = prompt j;
/// reward 1 when the first sampled token is kToyTarget. Seeded: the same (model, G, seed) gives the same
/// rollouts.
inline std::vector<rl::Rollout> toy_rollouts(model::TransformerImpl& m, int64_t G, uint64_t seed) {
  const std::vector<int32_t> prompt_tokens = {3, 4, 5, 6};
  std::vector<model::GenerationRequest> reqs;
  for (size_t p = 0; p < prompt_tokens.size(); ++p)
    for (int64_t g = 0; g < G; ++g) reqs.push_back({{1, prompt_tokens[p]}, seed * 1000003 + p * 101 + g});
  model::SamplingParams sp;
  sp.max_new_tokens = 3;
  sp.temperature = 1.0;
  sp.stop_token_ids = {2};
  auto res = model::generate(m, reqs, sp);
  std::vector<rl::Rollout> out(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    out[i].group = static_cast<int64_t>(i / G);
    out[i].problem_index = out[i].group;
    out[i].prompt_ids = reqs[i].prompt_ids;
    out[i].response_ids = res[i].token_ids;
    out[i].sampler_logprobs = res[i].logprobs;
    out[i].truncated = res[i].finish == model::FinishReason::Length;
    out[i].reward = res[i].token_ids.at(0) == kToyTarget ? 1.0 : 0.0;
  }
  return out;
}

/// Mean reward of a batch of rollouts.
inline double mean_reward(const std::vector<rl::Rollout>& r) {
  double s = 0;
  for (const auto& x : r) s += x.reward;
  return s / static_cast<double>(r.size());
}

/// 12 GRPO steps (4 prompts x 8 samples, micro-batch 16) of the toy task, each checked: a finite loss, a
/// sampler/trainer log-prob mismatch under 0.05 (the same weights sample and score: only kernel-level
/// differences) and some BF16 weights changed. Returns the mean reward over 64 samples a prompt before
/// and after.
inline std::pair<double, double> train_toy(model::TransformerImpl& m, rl::MasterAdam& opt) {
  rl::GrpoConfig gc;
  gc.micro_batch = 16;
  const double before = mean_reward(toy_rollouts(m, 64, 999));
  for (int step = 0; step < 12; ++step) {
    auto rollouts = toy_rollouts(m, 8, static_cast<uint64_t>(step));
    auto st = rl::grpo_step(m, opt, rollouts, gc);
    CHECK(std::isfinite(st.loss));
    CHECK(st.tis_mismatch < 0.05);
    CHECK(st.bf16_changed > 0);
  }
  return {before, mean_reward(toy_rollouts(m, 64, 999))};
}

}  // namespace pulse::test
