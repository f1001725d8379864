// Evaluation: Pass@1 (greedy) and sampled pass@k with the unbiased estimator of Chen et al. 2021
// (Codex, arXiv:2107.03374 §2.1), with per-subject and per-level tables for MATH.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "model/generate.h"
#include "rl/problem.h"

namespace pulse::model {
class TransformerImpl;
class Tokenizer;
struct PromptTemplate;
}  // namespace pulse::model

namespace pulse::rl {

/// Evaluation settings (TOML table [eval]).
struct EvalConfig {
  int64_t n_samples = 1;  ///< n: samples per problem (forced to 1 when greedy)
  int64_t k = 1;          ///< k of pass@k (k <= n)
  bool greedy = true;     ///< temperature 0
  /// max_new_tokens (40) etc.; temperature ignored when greedy; vocab_limit set from the tokenizer.
  model::SamplingParams sampling = [] {
    model::SamplingParams s;
    s.max_new_tokens = 40;
    return s;
  }();
  int64_t batch_size = 64;  ///< requests per model::generate call
  uint64_t seed = 0;
  int grade_threads = 0;  ///< 0 = all cores

  /// The one range rule of each [eval] key held here: batch_size, max_new_tokens, n_samples 1..2^20;
  /// k in 1..n_samples; temperature (0, 100] and top_p (0, 1] (used when not greedy). Throws
  /// std::invalid_argument "eval.KEY: must be ..." (the TOML key first, then the rule and the value).
  void validate() const;
};

/// Results. by_subject / by_level map to (correct samples, total samples); the level key is "Level N"
/// ("?" when unknown), the subject key "" becomes "(none)".
struct EvalReport {
  double pass_at_1 = 0;  ///< mean over problems of c/n
  double pass_at_k = 0;  ///< mean over problems of pass_at_k(n, c, k)
  int64_t problems = 0;
  int64_t n_samples = 1, k = 1;
  int64_t infrastructure_errors = 0;  ///< samples the grader could not grade (counted incorrect)
  std::map<std::string, std::pair<int64_t, int64_t>> by_subject, by_level;  ///< correct, total

  /// {"pass_at_1":..,"pass_at_k":..,"k":..,"n":..,"problems":..,"by_subject":{name:{"correct","total"}},...}
  nlohmann::json to_json() const;
  /// A plain-text table: one row per subject and per level with correct/total and accuracy.
  std::string table() const;
};

/// Unbiased pass@k: 1 - C(n-c, k) / C(n, k), computed as 1 - prod_{i=n-c+1..n} (1 - k/i) (numerically
/// stable, Chen et al. 2021 fig. 3). Returns 1 when n - c < k. Throws std::invalid_argument unless
/// 0 <= c <= n and 1 <= k <= n.
double pass_at_k(int64_t n, int64_t c, int64_t k);

/// Generates n responses per problem (batched), grades them with rl::grade_batch and aggregates.
/// Throws std::invalid_argument on a bad config (k > n, batch_size < 1).
EvalReport evaluate(model::TransformerImpl& model, const model::Tokenizer& tok,
                    const model::PromptTemplate& tmpl, const std::vector<Problem>& problems,
                    const EvalConfig& cfg);

}  // namespace pulse::rl
