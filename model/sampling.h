// Batched next-token sampling with a counter-based RNG per request, shared by generate() and tests.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "model/generate.h"

namespace pulse::model {

/// Uniform double in [0, 1) that depends only on (seed, step): SplitMix64 (Steele et al. 2014) of the
/// seed mixed with the step. A counter-based stream, so a request's draws do not depend on which other
/// requests share its batch.
double request_uniform(uint64_t seed, uint64_t step);

/// Samples one token per row. logits [B,V] float32; seeds/steps one per row. Returns {tokens [B] int64,
/// logprobs [B] float32}, both on the CPU. The log-prob is of the sampled token under the sampling
/// distribution (after temperature, top-k, top-p). temperature 0 = greedy: the token is the argmax and
/// its log-prob is taken under the unscaled model distribution (the point mass would give 0).
/// Sampling is by inverse CDF with one request_uniform() per row.
std::pair<torch::Tensor, torch::Tensor> sample_tokens(const torch::Tensor& logits,
                                                      const SamplingParams& params,
                                                      const std::vector<uint64_t>& seeds,
                                                      const std::vector<uint64_t>& steps);

}  // namespace pulse::model
