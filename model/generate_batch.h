// What the decode paths of model::generate() share: the left-padded prompt batch and the per-token
// bookkeeping (stop ids, stop strings). Internal to model/ (generate.cpp, static_decode.cpp).
#pragma once
#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "model/generate.h"

namespace pulse::model {

/// Prompts left-padded to the longest one, on the CPU.
struct PromptBatch {
  at::Tensor ids;                 ///< [B, Tp] int64, 0 in padding
  at::Tensor mask;                ///< [B, Tp] int64, 1 = token
  at::Tensor positions;           ///< [B, Tp] int64, positions count real tokens only (cumsum - 1)
  std::vector<int64_t> next_pos;  ///< per row: the position of its first new token (its prompt length)
  int64_t max_prompt = 0;         ///< Tp
};

/// Checks the requests (non-empty prompts, ids in [0, vocab_size)) and pads them. Throws
/// std::invalid_argument naming the bad id.
PromptBatch left_pad_prompts(const std::vector<GenerationRequest>& requests, int64_t vocab_size);

/// Appends token `t` with log-prob `lp` to `res`; true when the row stops here (a stop id, or its newest
/// tokens decode to text holding a stop string; res.finish is then Stop).
bool append_token(GenerationResult& res, int32_t t, float lp, const SamplingParams& params,
                  const Tokenizer* tokenizer);

/// Milliseconds of wall clock since `t0` (GenerateStats' timings).
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace pulse::model
