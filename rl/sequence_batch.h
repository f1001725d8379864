// Prompt+response batches for teacher-forced passes (GRPO log-probs, SFT cross-entropy).
//
// Legend: B rows, L input tokens, R response tokens (longest in the batch), V vocabulary.
// Rows are left-padded, so every row ends at column L-1; the input is prompt + response[:-1], so the logits
// of the last R_b columns of row b predict its R_b response tokens. Response tensors are right-aligned the
// same way: row b's tokens fill columns R-R_b .. R-1.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "model/generate.h"

namespace pulse::model {
class TransformerImpl;
}

namespace pulse::rl {

struct SequenceBatch {
  at::Tensor input_ids;       ///< [B, L] int64, 0 in padding
  at::Tensor attention_mask;  ///< [B, L] int64, 1 = token, 0 = left padding
  at::Tensor targets;         ///< [B, R] int64 response tokens, right-aligned, 0 in padding
  at::Tensor response_mask;   ///< [B, R] float32, 1 = response token
};

/// Builds a batch on `device` from row pointers (prompt non-empty, response non-empty). Throws
/// std::invalid_argument on an empty prompt or response.
SequenceBatch make_sequence_batch(const std::vector<const std::vector<int32_t>*>& prompts,
                                  const std::vector<const std::vector<int32_t>*>& responses,
                                  const at::Device& device);

/// Log-probabilities of the response tokens under `model`'s sampling distribution:
/// model::sampling_log_probs(logits, sampling) (model/sampling.h: temperature, top-k, top-p, renormalised
/// over the kept tokens, the same function the sampler draws from), gathered at the targets: [B, R]
/// float32, differentiable (the kept set is chosen from the detached logits). A target outside the kept
/// set gets -inf; garbage in padding slots (mask them). entropy ([B, R] float32, nats, no grad) is filled
/// when asked: the entropy of that same distribution (dropped tokens contribute 0). Only the last R hidden
/// positions go through the LM head. SFT passes a default SamplingParams (plain log_softmax).
at::Tensor response_logprobs(model::TransformerImpl& model, const SequenceBatch& batch,
                             const model::SamplingParams& sampling, at::Tensor* entropy = nullptr);

}  // namespace pulse::rl
