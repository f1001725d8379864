// Supervised warm start: next-token cross-entropy on reference solutions, loss on the response tokens only
// (the prompt is context), so that a small model from scratch produces gradeable answers before RL
// (the SFT stage before RL in DeepSeekMath arXiv:2402.03300 §4 / InstructGPT arXiv:2203.02155 §3.5).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rl/optimizer_config.h"
#include "rl/problem.h"

namespace pulse::model {
class TransformerImpl;
class Tokenizer;
struct PromptTemplate;
}  // namespace pulse::model

namespace pulse::rl {

class MasterAdam;

/// SFT settings (TOML table [sft]).
struct SftConfig {
  int64_t steps = 200;      ///< optimizer steps
  int64_t batch_size = 32;  ///< sequences per step
  int64_t max_len = 96;     ///< tokens per sequence (prompt + response); longer ones are cut at the end
  uint64_t seed = 0;        ///< order of the examples (epochs of seeded shuffles)
  int64_t micro_batch = 0;  ///< sequences per forward/backward; 0 = batch_size

  /// The one range rule of each [sft] key held here: steps >= 0, batch_size 1..2^20, micro_batch
  /// 0..2^20, max_len 8..2^20 (the optimizer's keys: OptimizerConfig::validate_settings("sft")). Throws
  /// std::invalid_argument "sft.KEY: must be ..." (the TOML key first, then the rule and the value).
  void validate() const;
};

/// The SFT warm start's optimizer defaults: AdamW at lr 2e-3, 20 warmup steps, then cosine to 10%, global
/// norm clip 1 (total_steps is set to the SFT step count by the caller).
OptimizerConfig sft_optimizer_defaults();

struct SftStats {
  double first_loss = 0, last_loss = 0;  ///< mean cross-entropy per response token (nats)
  int64_t steps = 0;
};

/// Trains `model` through `opt` for cfg.steps steps on (prompt, sft_target(p) + EOS) pairs: cross-entropy
/// averaged over the response tokens of the batch. on_step(step, loss) is called after each step (1-based).
/// Throws std::invalid_argument when `problems` is empty.
SftStats sft_train(model::TransformerImpl& model, MasterAdam& opt, const model::Tokenizer& tok,
                   const model::PromptTemplate& tmpl, const std::vector<Problem>& problems,
                   const SftConfig& cfg, const std::function<void(int64_t step, double loss)>& on_step = {});

/// The SFT target text of a problem, which the grader accepts:
///   Math: p.solution if non-empty (with " The answer is \boxed{answer}." appended when it has no \boxed and
///         p.answer is known), else "\boxed{" + p.answer + "}".
///   Code: the reference program in a ```python fence.
std::string sft_target(const Problem& p);

}  // namespace pulse::rl
