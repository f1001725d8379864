// Rollout collection: G sampled responses per problem, graded (the "rollout" and "reward" phases of GRPO,
// DeepSeekMath arXiv:2402.03300 §4.1).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/generate.h"
#include "rl/problem.h"

namespace pulse::model {
class TransformerImpl;
class Tokenizer;
struct PromptTemplate;
}  // namespace pulse::model

namespace pulse::rl {

/// One sampled response and its reward.
struct Rollout {
  int64_t problem_index = 0;          ///< index into the problem list used
  int64_t group = 0;                  ///< rollouts of one prompt share a group id; G consecutive entries
  std::vector<int32_t> prompt_ids;    ///< tokens of the rendered prompt (BOS included when the model has one)
  std::vector<int32_t> response_ids;  ///< sampled tokens; ends with the EOS/stop token unless truncated
  std::vector<float> sampler_logprobs;  ///< per response token, log p under the sampler's distribution
  double reward = 0;
  std::string reward_reason;          ///< the grader's reason ("correct", "no_boxed_answer", ...)
  bool truncated = false;             ///< hit max_new_tokens without a stop token
  bool infrastructure_error = false;  ///< the grader could not grade (sandbox down); reward 0
  uint64_t policy_version = 0;        ///< weights version that sampled it
};

/// Rollout settings.
struct RolloutConfig {
  int64_t group_size = 8;          ///< G: samples per problem
  model::SamplingParams sampling;  ///< EOS of the tokenizer is added to stop_token_ids when missing, and
                                   ///< vocab_limit is the tokenizer's size (a padded vocabulary's extra
                                   ///< rows are never sampled)
  uint64_t seed = 0;               ///< run seed, mixed into every request seed
  uint64_t policy_version = 0;     ///< copied into each Rollout
  int grade_threads = 0;           ///< rl::grade_batch threads; 0 = all cores
};

/// Seed of one request: a splitmix64 hash of (run seed, step seed, problem index, sample index), so a
/// rollout is reproducible whatever the batch it is sampled in.
uint64_t rollout_seed(uint64_t run_seed, uint64_t step_seed, int64_t problem_index, int64_t sample_index);

/// Samples cfg.group_size responses for each problems[problem_indices[i]] with model::generate (all
/// problems * G requests in one batch), decodes them (special tokens skipped) and grades them with
/// rl::grade_batch. Returns problem_indices.size() * G rollouts; rollout j*G+g has group j, sample g.
/// Throws std::out_of_range for an index outside `problems`.
std::vector<Rollout> collect_rollouts(model::TransformerImpl& policy, const model::Tokenizer& tok,
                                      const model::PromptTemplate& tmpl, const std::vector<Problem>& problems,
                                      const RolloutConfig& cfg, const std::vector<int64_t>& problem_indices,
                                      uint64_t step_seed);

/// Prompt token ids of a question: tmpl.render(question), encoded with special tokens parsed and BOS
/// prepended when the tokenizer has one and the rendered text does not already start with it.
std::vector<int32_t> encode_prompt(const model::Tokenizer& tok, const model::PromptTemplate& tmpl,
                                   const std::string& question);

}  // namespace pulse::rl
