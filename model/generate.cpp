// Batched generation with a KV cache; see generate.h. This file: the eager path and the dispatch.
//
// Eager: the batch is left-padded to the longest prompt and prefilled in one forward pass; then each step
// feeds one token per live row. Rows that finish (stop id, stop string, or length) leave the batch: their
// cache rows are dropped so that later steps cost only what the live rows need. The static and CUDA-graph
// paths are in static_decode.cpp.
#include "model/generate.h"

#include <torch/torch.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>

#include "model/cuda_graph_step.h"
#include "model/generate_batch.h"
#include "model/sampling.h"
#include "model/static_decode.h"
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

/// Set once a CUDA graph capture failed under decode = auto: later calls decode static without retrying.
std::atomic<bool> auto_graphs_failed{false};

std::vector<GenerationResult> generate_eager(TransformerImpl& model,
                                             const std::vector<GenerationRequest>& requests,
                                             const SamplingParams& params, const Tokenizer* tokenizer,
                                             GenerateStats& stats) {
  const int64_t B = static_cast<int64_t>(requests.size());
  std::vector<GenerationResult> results(B);
  const auto t0 = std::chrono::steady_clock::now();
  PromptBatch batch = left_pad_prompts(requests, model.config().vocab_size);
  auto cache = model.new_cache(B, batch.max_prompt + params.max_new_tokens);
  auto logits = model.forward_cached(batch.ids, batch.mask, batch.positions, cache, /*last_only=*/true)
                    .squeeze(1);  // [B,V]
  auto t_step = std::chrono::steady_clock::now();

  std::vector<int64_t> live(B);  // live row -> request index
  for (int64_t b = 0; b < B; ++b) live[b] = b;
  for (int64_t step = 0; step < params.max_new_tokens && !live.empty(); ++step) {
    std::vector<uint64_t> seeds, steps(live.size(), static_cast<uint64_t>(step));
    for (int64_t r : live) seeds.push_back(requests[r].seed);
    auto [tok, lp] = sample_tokens(logits, params, seeds, steps);
    if (step == 0) {
      stats.prefill_ms = ms_since(t0);
      t_step = std::chrono::steady_clock::now();
    }
    auto tok_a = tok.accessor<int64_t, 1>();
    auto lp_a = lp.accessor<float, 1>();
    std::vector<int64_t> keep_rows, still_live;
    for (size_t i = 0; i < live.size(); ++i) {
      if (!append_token(results[live[i]], static_cast<int32_t>(tok_a[i]), lp_a[i], params, tokenizer)) {
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
    for (int64_t i = 0; i < Bl; ++i) pos[i][0] = batch.next_pos[live[i]]++;
    logits =
        model.forward_cached(next.view({Bl, 1}), torch::ones({Bl, 1}, torch::kInt64), pos, cache).squeeze(1);
    ++stats.steps;
  }
  stats.decode_ms = ms_since(t_step);
  return results;
}

}  // namespace

PromptBatch left_pad_prompts(const std::vector<GenerationRequest>& requests, int64_t vocab_size) {
  const int64_t B = static_cast<int64_t>(requests.size());
  PromptBatch out;
  for (const auto& r : requests) {
    if (r.prompt_ids.empty()) throw std::invalid_argument("generate: empty prompt (add a BOS token)");
    for (int32_t id : r.prompt_ids)
      if (id < 0 || id >= vocab_size)
        throw std::invalid_argument("generate: prompt token id " + std::to_string(id) + " outside vocab of " +
                                    std::to_string(vocab_size));
    out.max_prompt = std::max<int64_t>(out.max_prompt, static_cast<int64_t>(r.prompt_ids.size()));
  }
  const int64_t Tp = out.max_prompt;
  out.ids = torch::zeros({B, Tp}, torch::kInt64);
  out.mask = torch::zeros({B, Tp}, torch::kInt64);
  out.next_pos.resize(B);
  auto ia = out.ids.accessor<int64_t, 2>();
  auto ma = out.mask.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = requests[b].prompt_ids;
    const int64_t n = static_cast<int64_t>(p.size()), off = Tp - n;
    for (int64_t t = 0; t < n; ++t) {
      ia[b][off + t] = p[t];
      ma[b][off + t] = 1;
    }
    out.next_pos[b] = n;
  }
  out.positions = (out.mask.cumsum(-1) - 1).clamp_min(0);
  return out;
}

bool append_token(GenerationResult& res, int32_t t, float lp, const SamplingParams& params,
                  const Tokenizer* tokenizer) {
  res.token_ids.push_back(t);
  res.logprobs.push_back(lp);
  bool stop =
      std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), t) != params.stop_token_ids.end();
  if (!stop && tokenizer != nullptr && !params.stop_strings.empty())
    stop = hits_stop_string(res.token_ids, params, *tokenizer);
  if (stop) res.finish = FinishReason::Stop;
  return stop;
}

DecodeMode resolve_decode_mode(DecodeMode mode, const c10::Device& device) {
  if (mode == DecodeMode::Auto) {
    if (!device.is_cuda()) return DecodeMode::Eager;
    return cuda_graphs_available() && !auto_graphs_failed.load() ? DecodeMode::CudaGraph : DecodeMode::Static;
  }
  if (mode == DecodeMode::CudaGraph && !device.is_cuda())
    throw std::invalid_argument("generate: decode = cuda_graph needs the model on a CUDA device (it is on " +
                                device.str() + "); use static or eager, or run.device = cuda");
  if (mode == DecodeMode::CudaGraph && !cuda_graphs_available())
    throw std::invalid_argument(
        "generate: decode = cuda_graph, but this pulse was built against a LibTorch without CUDA graphs");
  return mode;
}

std::vector<GenerationResult> generate(TransformerImpl& model, const std::vector<GenerationRequest>& requests,
                                       const SamplingParams& params, const Tokenizer* tokenizer,
                                       GenerateStats* stats) {
  if (!params.stop_strings.empty() && tokenizer == nullptr)
    throw std::invalid_argument("generate: stop_strings need a tokenizer");
  if (params.max_new_tokens < 0) throw std::invalid_argument("generate: max_new_tokens must be >= 0");
  check_sampling_params(params, "generate");
  GenerateStats local;
  GenerateStats& st = stats != nullptr ? *stats : local;
  st = GenerateStats{};
  st.mode = resolve_decode_mode(params.decode, model.device());
  const int64_t B = static_cast<int64_t>(requests.size());
  if (B == 0 || params.max_new_tokens == 0) return std::vector<GenerationResult>(B);
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::vector<GenerationResult> results;
  try {
    if (st.mode == DecodeMode::Eager) {
      results = generate_eager(model, requests, params, tokenizer, st);
    } else if (st.mode == DecodeMode::Static) {
      results = generate_fixed_shape(model, requests, params, tokenizer, /*cuda_graphs=*/false, st);
    } else {
      try {
        results = generate_fixed_shape(model, requests, params, tokenizer, /*cuda_graphs=*/true, st);
      } catch (const CudaGraphCaptureError& e) {
        // decode = auto chose the graphs; a capture this LibTorch or driver refuses should cost speed,
        // not the run: say why once and decode static from here on. An explicit cuda_graph fails.
        if (params.decode != DecodeMode::Auto) throw;
        auto_graphs_failed = true;
        spdlog::warn("generate: CUDA graph capture failed, decoding static from now on: {}", e.what());
        st = GenerateStats{};
        st.mode = DecodeMode::Static;
        results = generate_fixed_shape(model, requests, params, tokenizer, /*cuda_graphs=*/false, st);
      }
    }
  } catch (...) {
    if (was_training) model.train();
    throw;
  }
  if (was_training) model.train();
  for (const auto& r : results) st.new_tokens += static_cast<int64_t>(r.token_ids.size());
  return results;
}

}  // namespace pulse::model
