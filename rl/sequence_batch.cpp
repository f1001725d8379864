// Prompt+response batches and their response log-probs (rl/sequence_batch.h).
#include "rl/sequence_batch.h"

#include <algorithm>
#include <stdexcept>

#include "model/sampling.h"
#include "model/transformer.h"

namespace pulse::rl {

SequenceBatch make_sequence_batch(const std::vector<const std::vector<int32_t>*>& prompts,
                                  const std::vector<const std::vector<int32_t>*>& responses,
                                  const at::Device& device) {
  if (prompts.size() != responses.size() || prompts.empty()) {
    throw std::invalid_argument("make_sequence_batch: need as many prompts as responses, at least one");
  }
  const int64_t B = static_cast<int64_t>(prompts.size());
  int64_t L = 0, R = 0;
  for (int64_t b = 0; b < B; ++b) {
    if (prompts[b]->empty() || responses[b]->empty()) {
      throw std::invalid_argument("make_sequence_batch: row " + std::to_string(b) + " has an empty " +
                                  (prompts[b]->empty() ? "prompt" : "response"));
    }
    const int64_t P = static_cast<int64_t>(prompts[b]->size()),
                  n = static_cast<int64_t>(responses[b]->size());
    L = std::max(L, P + n - 1);
    R = std::max(R, n);
  }
  auto ids = torch::zeros({B, L}, torch::kInt64);
  auto attn = torch::zeros({B, L}, torch::kInt64);
  auto tgt = torch::zeros({B, R}, torch::kInt64);
  auto rmask = torch::zeros({B, R}, torch::kFloat32);
  auto ia = ids.accessor<int64_t, 2>();
  auto aa = attn.accessor<int64_t, 2>();
  auto ta = tgt.accessor<int64_t, 2>();
  auto ma = rmask.accessor<float, 2>();
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = *prompts[b];
    const auto& r = *responses[b];
    const int64_t P = static_cast<int64_t>(p.size()), n = static_cast<int64_t>(r.size());
    const int64_t off = L - (P + n - 1);
    for (int64_t t = 0; t < P; ++t) ia[b][off + t] = p[t];
    for (int64_t t = 0; t + 1 < n; ++t) ia[b][off + P + t] = r[t];
    for (int64_t t = off; t < L; ++t) aa[b][t] = 1;
    for (int64_t t = 0; t < n; ++t) {
      ta[b][R - n + t] = r[t];
      ma[b][R - n + t] = 1.0f;
    }
  }
  return SequenceBatch{ids.to(device), attn.to(device), tgt.to(device), rmask.to(device)};
}

at::Tensor response_logprobs(model::TransformerImpl& model, const SequenceBatch& batch,
                             const model::SamplingParams& sampling, at::Tensor* entropy) {
  const int64_t L = batch.input_ids.size(1), R = batch.targets.size(1);
  auto hidden = model.hidden_states(batch.input_ids, batch.attention_mask);  // [B, L, C]
  auto logits = model.logits_from_hidden(hidden.narrow(1, L - R, R));        // [B, R, V] float32
  auto logp = model::sampling_log_probs(logits, sampling);                   // [B, R, V], -inf = dropped
  if (entropy != nullptr) {
    torch::NoGradGuard no_grad;
    // p log p -> 0 for dropped tokens (0 * -inf would be NaN).
    const auto plogp = torch::where(torch::isinf(logp), torch::zeros({}, logp.options()), logp.exp() * logp);
    *entropy = -plogp.sum(-1);
  }
  return logp.gather(2, batch.targets.unsqueeze(2)).squeeze(2);  // [B, R]
}

}  // namespace pulse::rl
