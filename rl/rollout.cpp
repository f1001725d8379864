// Rollout collection (rl/rollout.h).
#include "rl/rollout.h"

#include <algorithm>
#include <stdexcept>

#include "kernels/splitmix64.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "rl/grader.h"

namespace pulse::rl {

uint64_t rollout_seed(uint64_t run_seed, uint64_t step_seed, int64_t problem_index, int64_t sample_index) {
  using kernels::splitmix64;
  uint64_t h = splitmix64(run_seed);
  h = splitmix64(h ^ step_seed);
  h = splitmix64(h ^ static_cast<uint64_t>(problem_index));
  return splitmix64(h ^ static_cast<uint64_t>(sample_index));
}

std::vector<int32_t> encode_prompt(const model::Tokenizer& tok, const model::PromptTemplate& tmpl,
                                   const std::string& question) {
  std::vector<int32_t> ids = tok.encode(tmpl.render(question), /*add_bos=*/false, /*parse_special=*/true);
  const int32_t bos = tok.bos_id();
  if (bos >= 0 && (ids.empty() || ids.front() != bos)) ids.insert(ids.begin(), bos);
  if (ids.empty()) throw std::invalid_argument("encode_prompt: the prompt encodes to no tokens");
  return ids;
}

std::vector<Rollout> collect_rollouts(model::TransformerImpl& policy, const model::Tokenizer& tok,
                                      const model::PromptTemplate& tmpl, const std::vector<Problem>& problems,
                                      const RolloutConfig& cfg, const std::vector<int64_t>& problem_indices,
                                      uint64_t step_seed) {
  if (cfg.group_size < 1) throw std::invalid_argument("collect_rollouts: group_size must be >= 1");
  const int64_t G = cfg.group_size;
  model::SamplingParams sampling = cfg.sampling;
  sampling.vocab_limit = tok.vocab_size();  // a padded vocabulary's extra rows are never sampled
  const int32_t eos = tok.eos_id();
  if (eos >= 0 && std::find(sampling.stop_token_ids.begin(), sampling.stop_token_ids.end(), eos) ==
                      sampling.stop_token_ids.end()) {
    sampling.stop_token_ids.push_back(eos);
  }

  std::vector<model::GenerationRequest> requests;
  requests.reserve(problem_indices.size() * static_cast<size_t>(G));
  for (int64_t idx : problem_indices) {
    if (idx < 0 || idx >= static_cast<int64_t>(problems.size())) {
      throw std::out_of_range("collect_rollouts: problem index " + std::to_string(idx) + " outside 0.." +
                              std::to_string(problems.size()));
    }
    const std::vector<int32_t> prompt = encode_prompt(tok, tmpl, problems[idx].question);
    for (int64_t g = 0; g < G; ++g) requests.push_back({prompt, rollout_seed(cfg.seed, step_seed, idx, g)});
  }
  std::vector<model::GenerationResult> results = model::generate(policy, requests, sampling, &tok);

  std::vector<Rollout> rollouts(requests.size());
  std::vector<const Problem*> graded;
  std::vector<std::string> texts;
  for (size_t i = 0; i < requests.size(); ++i) {
    Rollout& r = rollouts[i];
    const int64_t j = static_cast<int64_t>(i) / G;
    r.problem_index = problem_indices[static_cast<size_t>(j)];
    r.group = j;
    r.prompt_ids = std::move(requests[i].prompt_ids);
    r.response_ids = std::move(results[i].token_ids);
    r.sampler_logprobs = std::move(results[i].logprobs);
    r.truncated = results[i].finish == model::FinishReason::Length;
    r.policy_version = cfg.policy_version;
    graded.push_back(&problems[static_cast<size_t>(r.problem_index)]);
    texts.push_back(tok.decode(r.response_ids, /*skip_special=*/true));
  }
  const std::vector<RewardResult> rewards = grade_batch(graded, texts, cfg.grade_threads);
  for (size_t i = 0; i < rollouts.size(); ++i) {
    rollouts[i].reward = rewards[i].infrastructure_error ? 0.0 : rewards[i].score;
    rollouts[i].reward_reason = rewards[i].reason;
    rollouts[i].infrastructure_error = rewards[i].infrastructure_error;
  }
  return rollouts;
}

}  // namespace pulse::rl
