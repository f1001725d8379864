// Batched sampling with a KV cache; returns per-token log-probabilities for RL.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/decode_mode.h"

namespace pulse::model {

class TransformerImpl;
class Tokenizer;

/// Sampling settings shared by a batch. temperature 0 = greedy.
struct SamplingParams {
  int64_t max_new_tokens = 128;
  double temperature = 1.0;
  double top_p = 1.0;  ///< nucleus (Holtzman et al. 2019, arXiv:1904.09751)
  int64_t top_k = 0;   ///< 0 = off
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop_strings;  ///< needs a tokenizer passed to generate()
  /// Padded vocabularies. A model may have more embedding rows than its tokenizer has ids (Qwen2.5:
  /// 151,936 rows for 151,665 ids); the rule: ids >= vocab_limit have no token, so their logits are set
  /// to -inf before every other step of model::sampling_log_probs. They are then never sampled (greedy,
  /// temperature, top-k/top-p alike, on any device), never decoded, and carry no probability in the
  /// trainer's log-probs, which go through the same function. 0 = every row is a token. Not a TOML
  /// setting: taken from the tokenizer (rl::collect_rollouts, rl::evaluate, the trainer's GRPO config,
  /// `pulse generate`).
  int64_t vocab_limit = 0;
  /// How the decode steps run (rl.decode; model/decode_mode.h). Not part of the distribution: the
  /// trainer's log-probs ignore it.
  DecodeMode decode = DecodeMode::Auto;
};

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;
  uint64_t seed = 0;  ///< same seed -> same output, whatever the batch
};

enum class FinishReason { Stop, Length };

struct GenerationResult {
  std::vector<int32_t> token_ids;  ///< sampled tokens, stop token included when one fired
  std::vector<float> logprobs;     ///< log p(token) under the sampling distribution, one per token
  FinishReason finish = FinishReason::Length;
};

/// What one generate() call spent, for benchmarks (pulse bench generate). Times in ms of wall clock,
/// the device synchronised at each boundary.
struct GenerateStats {
  DecodeMode mode = DecodeMode::Eager;  ///< the path taken (Auto resolved)
  double prefill_ms = 0;                ///< prompt forward + first token
  double decode_ms = 0;                 ///< every later step, graph capture included
  double capture_ms = 0;                ///< CudaGraph: warm-up + capture of the graphs (part of decode_ms)
  int64_t graphs = 0;                   ///< CudaGraph: graphs captured
  int64_t compactions = 0;              ///< Static/CudaGraph: times the batch shrank to its live rows
  int64_t steps = 0;                    ///< decode steps run after the prefill
  int64_t new_tokens = 0;               ///< tokens returned over all rows
};

/// Generates for all requests in one batch (left-padded prompts, KV cache). No gradients.
/// Prompts must be non-empty with ids < vocab_size (std::invalid_argument otherwise). Each request draws
/// from its own counter-based stream (model/sampling.h), so its tokens do not depend on the batch around
/// it (up to floating-point differences in the logits). A row ends at a stop id or once its newest tokens
/// decode to text containing a stop string (the token that completed it is kept) and then leaves the
/// batch. With temperature 0 the log-probs are those of the unscaled model distribution.
/// params.decode picks the path (model/decode_mode.h); CudaGraph on a CPU model, or in a build whose
/// LibTorch has no CUDA, throws std::invalid_argument. `stats`, when given, receives the timings.
std::vector<GenerationResult> generate(TransformerImpl& model, const std::vector<GenerationRequest>& requests,
                                       const SamplingParams& params, const Tokenizer* tokenizer = nullptr,
                                       GenerateStats* stats = nullptr);

}  // namespace pulse::model
