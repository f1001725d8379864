// Batched next-token sampling with a counter-based RNG per request, shared by generate() and tests.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "model/generate.h"

namespace pulse::model {

/// Uniform double in [0, 1) that depends only on (seed, step): SplitMix64 (Steele et al. 2014) of the
/// seed mixed with the step. A counter-based stream, so a request's draws do not depend on which other
/// requests share its batch.
double request_uniform(uint64_t seed, uint64_t step);

/// Throws std::invalid_argument, prefixed with `who`, unless temperature >= 0 (0 = greedy), top_p in
/// (0, 1], top_k >= 0 (0 = off) and vocab_limit >= 0.
void check_sampling_params(const SamplingParams& params, const char* who);

/// Log-probabilities over the vocabulary of the distribution sample_tokens() draws from, the one
/// definition of it that the sampler and the trainer's recomputation (rl/sequence_batch.h) share:
///   0. when 0 < vocab_limit < V, the logits of ids >= vocab_limit (a padded vocabulary's rows without a
///      token; SamplingParams::vocab_limit) are -inf: they get log-prob -inf at every temperature, greedy
///      included;
///   1. x = logits / temperature (float32; float64 input stays float64, e.g. for finite differences);
///   2. top-k (Fan et al. 2018, arXiv:1805.04833), when 0 < top_k < V: keep the tokens with x >= the k-th
///      largest x; ties at the k-th value are all kept (so more than k may stay);
///   3. top-p (Holtzman et al. 2019, arXiv:1904.09751), when top_p < 1, on the top-k survivors
///      renormalised: in descending order a token is dropped once the mass strictly before it reaches
///      top_p (the most likely token always stays); every token whose x equals the smallest kept x is kept
///      too, so the kept set depends on the values only, never on how a sort orders ties;
///   4. log_softmax over the kept tokens (renormalised); dropped tokens get -inf.
/// Truncated support: the kept set is a function of the detached logits (a piecewise-constant mask, no
/// gradient through it); the gradient flows through the renormalised log_softmax of the kept tokens only.
/// temperature 0 (greedy) returns log_softmax(logits) (after step 0) of the unscaled, untruncated model
/// distribution, as sample_tokens() reports for greedy picks (the point mass would give 0 everywhere).
/// temperature 1 with no top-k/top-p is exactly log_softmax(logits). logits [..., V] (any leading shape, e.g.
/// [B,V] or [B,T,V]); returns the same shape, float32 (float64 when the input is), on the logits' device.
/// Throws std::invalid_argument on bad params or a 0-dim input.
torch::Tensor sampling_log_probs(const torch::Tensor& logits, const SamplingParams& params);

/// Samples one token per row. logits [B,V] float32; seeds/steps one per row. Returns {tokens [B] int64,
/// logprobs [B] float32}, both on the CPU. The log-prob is of the sampled token under
/// sampling_log_probs(logits, params) (temperature, top-k, top-p, renormalised), and the token is always
/// in that distribution's kept set (so < vocab_limit when that is set). temperature 0 = greedy: the token
/// is the argmax of the logits of ids < vocab_limit (first index on ties) and its log-prob is taken under the
/// unscaled model distribution. Sampling is by inverse CDF with one request_uniform() per row.
std::pair<torch::Tensor, torch::Tensor> sample_tokens(const torch::Tensor& logits,
                                                      const SamplingParams& params,
                                                      const std::vector<uint64_t>& seeds,
                                                      const std::vector<uint64_t>& steps);

/// request_uniform(seeds[i], steps[i]) for every row: [B] float64 on the CPU. Throws
/// std::invalid_argument when the lists differ in length.
torch::Tensor request_uniforms(const std::vector<uint64_t>& seeds, const std::vector<uint64_t>& steps);

/// sample_tokens() on the logits' device with the uniforms given: logits [B,V] float32, uniforms [B]
/// (request_uniforms(); any float dtype, on the logits' device; unused when greedy). Returns {tokens [B]
/// int64, logprobs [B] float32} on the logits' device, without a host synchronisation, so that a CUDA
/// graph can capture it (model/static_decode.h). The same ops as sample_tokens(), which calls it: the same
/// tokens and log-probs for the same inputs. Does not check params (the caller does, once).
std::pair<torch::Tensor, torch::Tensor> sample_tokens_with_uniforms(const torch::Tensor& logits,
                                                                    const SamplingParams& params,
                                                                    const torch::Tensor& uniforms);

}  // namespace pulse::model
