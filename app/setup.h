// Building a run's pieces from its Config: problems, tokenizer, model, prompt template, and the seeds
// every RNG is derived from. Shared by `pulse run`, `pulse trainer` and `pulse eval`.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "app/config.h"
#include "model/chat_template.h"
#include "model/config.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "rl/eval.h"
#include "rl/problem.h"
#include "sync/io/tensor_view.h"

namespace pulse::app {

/// Train problems and the held-out split (capped at eval.max_problems).
struct ProblemSets {
  std::vector<rl::Problem> train, held_out;
};

/// Synthetic problems (data.task synthetic_*) or a dataset file, split by data.held_out_fraction (or
/// data.eval_path as the held-out set). Throws std::runtime_error naming the file or key.
ProblemSets load_problems(const Config& config);

/// Throws std::runtime_error "data.path 'FILE': problem 'ID': its prompt (...) is N tokens, more than
/// data.max_prompt_tokens = M" for the first train or held-out problem whose templated prompt
/// (rl::encode_prompt) is longer than data.max_prompt_tokens. Encodes only questions that could be too
/// long (more bytes than the limit allows for); cost: one encode of each such question.
void check_prompt_tokens(const Config& config, const ProblemSets& sets, const model::Tokenizer& tok,
                         const model::PromptTemplate& tmpl);

/// The tokenizer: tokenizer.path, or a SentencePiece BPE trained on the train problems' questions and SFT
/// targets, written to `trained_path` (reused when that file already exists: resume). Returns the path used
/// in `path_used`.
std::unique_ptr<model::Tokenizer> prepare_tokenizer(const Config& config, const ProblemSets& problems,
                                                    const std::string& trained_path, std::string* path_used);

/// A fresh model (model.path = ""): the embedded tiny Llama sized to the tokenizer (model.config = ""), or
/// model.config with its vocab_size kept when the tokenizer's ids fit (a real model's padded embedding)
/// and grown to the tokenizer's otherwise; bos and eos from the tokenizer. With model.path, that
/// checkpoint's config.json.
/// Throws std::runtime_error naming model.path when its config.json cannot be read, and naming both
/// when the tokenizer has more pieces than the checkpoint's vocab_size (ids without an embedding).
model::ModelConfig model_config_for(const Config& config, const model::Tokenizer& tok);

/// kBFloat16 or kFloat32 from model.dtype.
torch::Dtype compute_dtype(const Config& config);

/// A fresh model initialised from derive_seed(run.seed, kSeedInit), or model.path's weights.
model::Transformer build_model(const Config& config, const model::ModelConfig& mc);

/// The train problem indices of GRPO step `step`: P consecutive entries of an endless stream of seeded
/// epoch permutations of [0, n_train), P = prompts_per_step. Depends only on (seed, step).
std::vector<int64_t> step_prompt_indices(int64_t n_train, int64_t prompts_per_step, uint64_t seed,
                                         int64_t step);

/// Copies BF16 bit patterns (HF names) into the model's parameters (converted to its compute dtype, which
/// is exact for FP32). Throws std::runtime_error on a missing/extra name or a shape or dtype mismatch.
void set_model_weights(model::TransformerImpl& model, const std::vector<sync::TensorView>& weights);

}  // namespace pulse::app
