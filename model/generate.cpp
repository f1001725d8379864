// Batched generation with a KV cache; see generate.h.
//
// The batch is left-padded to the longest prompt and prefilled in one forward pass; then each step feeds
// one token per live row. Rows that finish (stop id, stop string, or length) leave the batch: their cache
// rows are dropped so that later steps cost only what the live rows need.
#include "model/generate.h"

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

#include "model/sampling.h"
#include "model/tokenizer.h"
#include "model/transformer.h"

namespace pulse::model {
namespace {

/// True when the newest tokens decode to text containing a stop string. A stop string of L bytes spans at
/// most L tokens (every token decodes to >= 1 byte) and any older match would have fired at an earlier
/// step, so decoding the last L+2 tokens suffices (two spare tokens: a SentencePiece decode drops the
/// leading space of its first piece, and a window may start inside a UTF-8 sequence).
bool hits_stop_string(const std::vector<int32_t>& ids, const SamplingParams& params, const Tokenizer& tok) {
  for (const auto& stop : params.stop_strings) {
    if (stop.empty()) continue;
    const size_t n = std::min(ids.size(), stop.size() + 2);
    const std::vector<int32_t> tail(ids.end() - static_cast<std::ptrdiff_t>(n), ids.end());
    if (tok.decode(tail).find(stop) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

std::vector<GenerationResult> generate(TransformerImpl& model, const std::vector<GenerationRequest>& requests,
                                       const SamplingParams& params, const Tokenizer* tokenizer) {
  if (!params.stop_strings.empty() && tokenizer == nullptr)
    throw std::invalid_argument("generate: stop_strings need a tokenizer");
  if (params.max_new_tokens < 0) throw std::invalid_argument("generate: max_new_tokens must be >= 0");
  const int64_t B = static_cast<int64_t>(requests.size());
  std::vector<GenerationResult> results(B);
  if (B == 0 || params.max_new_tokens == 0) return results;
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();

  const int64_t V = model.config().vocab_size;
  int64_t Tp = 0;
  for (const auto& r : requests) {
    if (r.prompt_ids.empty()) throw std::invalid_argument("generate: empty prompt (add a BOS token)");
    for (int32_t id : r.prompt_ids)
      if (id < 0 || id >= V)
        throw std::invalid_argument("generate: prompt token id " + std::to_string(id) + " outside vocab of " +
                                    std::to_string(V));
    Tp = std::max<int64_t>(Tp, static_cast<int64_t>(r.prompt_ids.size()));
  }
  // Left-pad every prompt to Tp; positions count real tokens only.
  auto ids = torch::zeros({B, Tp}, torch::kInt64);
  auto mask = torch::zeros({B, Tp}, torch::kInt64);
  std::vector<int64_t> next_pos(B);
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = requests[b].prompt_ids;
    const int64_t n = static_cast<int64_t>(p.size()), off = Tp - n;
    auto ia = ids.accessor<int64_t, 2>();
    auto ma = mask.accessor<int64_t, 2>();
    for (int64_t t = 0; t < n; ++t) {
      ia[b][off + t] = p[t];
      ma[b][off + t] = 1;
    }
    next_pos[b] = n;
  }
  auto positions = (mask.cumsum(-1) - 1).clamp_min(0);
  auto cache = model.new_cache(B, Tp + params.max_new_tokens);
  auto logits = model.forward_cached(ids, mask, positions, cache, /*last_only=*/true).squeeze(1);  // [B,V]

  std::vector<int64_t> live(B);  // live row -> request index
  for (int64_t b = 0; b < B; ++b) live[b] = b;
  for (int64_t step = 0; step < params.max_new_tokens && !live.empty(); ++step) {
    std::vector<uint64_t> seeds, steps(live.size(), static_cast<uint64_t>(step));
    for (int64_t r : live) seeds.push_back(requests[r].seed);
    auto [tok, lp] = sample_tokens(logits, params, seeds, steps);
    auto tok_a = tok.accessor<int64_t, 1>();
    auto lp_a = lp.accessor<float, 1>();
    std::vector<int64_t> keep_rows, still_live;
    for (size_t i = 0; i < live.size(); ++i) {
      auto& res = results[live[i]];
      const auto t = static_cast<int32_t>(tok_a[i]);
      res.token_ids.push_back(t);
      res.logprobs.push_back(lp_a[i]);
      bool stop = std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), t) !=
                  params.stop_token_ids.end();
      if (!stop && tokenizer != nullptr && !params.stop_strings.empty())
        stop = hits_stop_string(res.token_ids, params, *tokenizer);
      if (stop) {
        res.finish = FinishReason::Stop;
      } else {
        keep_rows.push_back(static_cast<int64_t>(i));
        still_live.push_back(live[i]);
      }
    }
    if (still_live.empty() || step + 1 == params.max_new_tokens) break;
    auto next = tok;
    if (still_live.size() != live.size()) {
      auto rows = torch::tensor(keep_rows, torch::kInt64);
      cache.select_rows(rows.to(model.device()));
      next = tok.index_select(0, rows);
    }
    live = std::move(still_live);
    const int64_t Bl = static_cast<int64_t>(live.size());
    auto pos = torch::empty({Bl, 1}, torch::kInt64);
    for (int64_t i = 0; i < Bl; ++i) pos[i][0] = next_pos[live[i]]++;
    logits =
        model.forward_cached(next.view({Bl, 1}), torch::ones({Bl, 1}, torch::kInt64), pos, cache).squeeze(1);
  }
  if (was_training) model.train();
  return results;
}

}  // namespace pulse::model
