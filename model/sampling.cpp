// Temperature / top-k (Fan et al. 2018, arXiv:1805.04833) / top-p (Holtzman et al. 2019,
// arXiv:1904.09751) sampling; see sampling.h.
#include "model/sampling.h"

#include <torch/torch.h>

#include <limits>
#include <stdexcept>

#include "kernels/splitmix64.h"

namespace pulse::model {

double request_uniform(uint64_t seed, uint64_t step) {
  // Output step + 1 of a SplitMix64 generator seeded with `seed`, as 53 random bits.
  return kernels::splitmix64_unit(kernels::splitmix64_mix(seed + kernels::kSplitMix64Gamma * (step + 1)));
}

std::pair<torch::Tensor, torch::Tensor> sample_tokens(const torch::Tensor& logits,
                                                      const SamplingParams& params,
                                                      const std::vector<uint64_t>& seeds,
                                                      const std::vector<uint64_t>& steps) {
  TORCH_CHECK(logits.dim() == 2, "sample_tokens: logits must be [B,V]");
  const int64_t B = logits.size(0), V = logits.size(1);
  if (static_cast<int64_t>(seeds.size()) != B || static_cast<int64_t>(steps.size()) != B)
    throw std::invalid_argument("sample_tokens: one seed and one step per row needed");
  if (params.temperature < 0) throw std::invalid_argument("sample_tokens: temperature must be >= 0");
  if (params.top_p <= 0 || params.top_p > 1)
    throw std::invalid_argument("sample_tokens: top_p must be in (0, 1]");
  auto x = logits.to(torch::kFloat32);
  if (params.temperature == 0) {
    auto tok = x.argmax(-1);
    auto lp = torch::log_softmax(x, -1).gather(1, tok.unsqueeze(1)).squeeze(1);
    return {tok.to(torch::kCPU), lp.to(torch::kCPU)};
  }
  x = x / params.temperature;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (params.top_k > 0 && params.top_k < V) {
    auto kth = std::get<0>(x.topk(params.top_k, -1)).narrow(1, params.top_k - 1, 1);  // [B,1]
    x = x.masked_fill(x < kth, neg_inf);
  }
  if (params.top_p < 1.0) {
    auto [sorted, order] = x.sort(-1, /*descending=*/true);
    auto p = torch::softmax(sorted, -1);
    // Drop a token when the mass strictly before it already reaches top_p; the first always stays.
    auto drop = (p.cumsum(-1) - p) >= params.top_p;
    sorted = sorted.masked_fill(drop, neg_inf);
    x = torch::full_like(x, neg_inf).scatter(1, order, sorted);
  }
  auto logp = torch::log_softmax(x, -1);
  auto cdf = logp.exp().cumsum(-1);  // [B,V]
  std::vector<double> u(B);
  for (int64_t i = 0; i < B; ++i) u[i] = request_uniform(seeds[i], steps[i]);
  auto ut = torch::tensor(u, torch::kFloat64).to(x.device(), torch::kFloat32).unsqueeze(1);
  ut = ut * cdf.narrow(1, V - 1, 1);  // scale to the row's total mass (1 up to rounding)
  // right=true: first index with cdf > u, which always has non-zero probability.
  auto tok = torch::searchsorted(cdf, ut, /*out_int32=*/false, /*right=*/true).squeeze(1).clamp_max(V - 1);
  // FP32 rounding can push u to the very end of the CDF onto a dropped token: take the mode instead.
  auto dropped = logp.gather(1, tok.unsqueeze(1)).squeeze(1).isinf();
  tok = torch::where(dropped, logp.argmax(-1), tok);
  auto lp = logp.gather(1, tok.unsqueeze(1)).squeeze(1);
  return {tok.to(torch::kCPU), lp.to(torch::kCPU)};
}

}  // namespace pulse::model
