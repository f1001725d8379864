// Temperature / top-k (Fan et al. 2018, arXiv:1805.04833) / top-p (Holtzman et al. 2019,
// arXiv:1904.09751) sampling; see sampling.h.
#include "model/sampling.h"

#include <torch/torch.h>

#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/splitmix64.h"

namespace pulse::model {

double request_uniform(uint64_t seed, uint64_t step) {
  // Output step + 1 of a SplitMix64 generator seeded with `seed`, as 53 random bits.
  return kernels::splitmix64_unit(kernels::splitmix64_mix(seed + kernels::kSplitMix64Gamma * (step + 1)));
}

void check_sampling_params(const SamplingParams& params, const char* who) {
  if (!(params.temperature >= 0))
    throw std::invalid_argument(std::string(who) + ": temperature must be >= 0 (0 = greedy)");
  if (!(params.top_p > 0 && params.top_p <= 1))
    throw std::invalid_argument(std::string(who) + ": top_p must be in (0, 1]");
  if (params.top_k < 0) throw std::invalid_argument(std::string(who) + ": top_k must be >= 0 (0 = off)");
  if (params.vocab_limit < 0)
    throw std::invalid_argument(std::string(who) + ": vocab_limit must be >= 0 (0 = every row)");
}

namespace {

/// Step 0 of sampling_log_probs: -inf for the ids >= vocab_limit of a padded vocabulary (differentiable:
/// the masked entries get no gradient). x unchanged when the limit is 0 or covers every row.
torch::Tensor mask_padded_vocab(const torch::Tensor& x, int64_t vocab_limit) {
  const int64_t V = x.size(-1);
  if (vocab_limit <= 0 || vocab_limit >= V) return x;
  const auto padded =
      torch::arange(V, torch::TensorOptions().dtype(torch::kInt64).device(x.device())) >= vocab_limit;
  return x.masked_fill(padded, -std::numeric_limits<double>::infinity());
}

/// Kept-set mask of steps 2-3 of sampling_log_probs on temperature-scaled logits x [..., V] (no grad).
/// Undefined when every token is kept.
torch::Tensor kept_tokens(const torch::Tensor& x, const SamplingParams& params) {
  const int64_t V = x.size(-1);
  torch::Tensor keep;
  auto xm = x;
  if (params.top_k > 0 && params.top_k < V) {
    auto kth = std::get<0>(x.topk(params.top_k, -1)).narrow(-1, params.top_k - 1, 1);  // [..., 1]
    keep = x >= kth;
    xm = x.masked_fill(keep.logical_not(), -std::numeric_limits<double>::infinity());
  }
  if (params.top_p < 1.0) {
    auto sorted = std::get<0>(xm.sort(-1, /*descending=*/true));
    auto p = torch::softmax(sorted, -1);
    // Drop a token when the mass strictly before it already reaches top_p; the first always stays, and
    // the kept tokens are a prefix of the sorted row.
    auto n_keep = ((p.cumsum(-1) - p) < params.top_p).sum(-1, /*keepdim=*/true).clamp_min(1);
    auto threshold = sorted.gather(-1, n_keep - 1);  // smallest kept value [..., 1]
    auto keep_p = xm >= threshold;
    keep = keep.defined() ? keep & keep_p : keep_p;
  }
  return keep;
}

}  // namespace

torch::Tensor sampling_log_probs(const torch::Tensor& logits, const SamplingParams& params) {
  check_sampling_params(params, "sampling_log_probs");
  if (logits.dim() < 1) throw std::invalid_argument("sampling_log_probs: logits must be [..., V]");
  auto x = logits.scalar_type() == torch::kFloat64 ? logits : logits.to(torch::kFloat32);
  x = mask_padded_vocab(x, params.vocab_limit);
  if (params.temperature == 0) return torch::log_softmax(x, -1);
  if (params.temperature != 1.0) x = x / params.temperature;
  torch::Tensor keep;
  {
    torch::NoGradGuard no_grad;
    keep = kept_tokens(x.detach(), params);
  }
  if (keep.defined()) x = x.masked_fill(keep.logical_not(), -std::numeric_limits<double>::infinity());
  return torch::log_softmax(x, -1);
}

std::pair<torch::Tensor, torch::Tensor> sample_tokens_with_uniforms(const torch::Tensor& logits,
                                                                    const SamplingParams& params,
                                                                    const torch::Tensor& uniforms) {
  TORCH_CHECK(logits.dim() == 2, "sample_tokens: logits must be [B,V]");
  const int64_t V = logits.size(1);
  auto logp = sampling_log_probs(logits, params);  // [B,V]
  if (params.temperature == 0) {
    auto tok = mask_padded_vocab(logits.to(torch::kFloat32), params.vocab_limit).argmax(-1);
    auto lp = logp.gather(1, tok.unsqueeze(1)).squeeze(1);
    return {tok, lp};
  }
  auto cdf = logp.exp().cumsum(-1);  // [B,V]
  auto ut = uniforms.to(logp.scalar_type()).unsqueeze(1);
  ut = ut * cdf.narrow(1, V - 1, 1);  // scale to the row's total mass (1 up to rounding)
  // right=true: first index with cdf > u, which always has non-zero probability.
  auto tok = torch::searchsorted(cdf, ut, /*out_int32=*/false, /*right=*/true).squeeze(1).clamp_max(V - 1);
  // FP32 rounding can push u to the very end of the CDF onto a dropped token: take the mode instead.
  auto dropped = logp.gather(1, tok.unsqueeze(1)).squeeze(1).isinf();
  tok = torch::where(dropped, logp.argmax(-1), tok);
  auto lp = logp.gather(1, tok.unsqueeze(1)).squeeze(1).to(torch::kFloat32);
  return {tok, lp};
}

torch::Tensor request_uniforms(const std::vector<uint64_t>& seeds, const std::vector<uint64_t>& steps) {
  if (seeds.size() != steps.size())
    throw std::invalid_argument("request_uniforms: one seed and one step per row needed");
  auto u = torch::empty({static_cast<int64_t>(seeds.size())}, torch::kFloat64);
  auto* p = u.data_ptr<double>();
  for (size_t i = 0; i < seeds.size(); ++i) p[i] = request_uniform(seeds[i], steps[i]);
  return u;
}

std::pair<torch::Tensor, torch::Tensor> sample_tokens(const torch::Tensor& logits,
                                                      const SamplingParams& params,
                                                      const std::vector<uint64_t>& seeds,
                                                      const std::vector<uint64_t>& steps) {
  TORCH_CHECK(logits.dim() == 2, "sample_tokens: logits must be [B,V]");
  const int64_t B = logits.size(0);
  if (static_cast<int64_t>(seeds.size()) != B || static_cast<int64_t>(steps.size()) != B)
    throw std::invalid_argument("sample_tokens: one seed and one step per row needed");
  check_sampling_params(params, "sample_tokens");
  torch::NoGradGuard no_grad;
  const auto u =
      params.temperature == 0 ? torch::zeros({B}, torch::kFloat64) : request_uniforms(seeds, steps);
  auto [tok, lp] = sample_tokens_with_uniforms(logits, params, u.to(logits.device()));
  return {tok.to(torch::kCPU), lp.to(torch::kCPU)};
}

}  // namespace pulse::model
