// Fixed-shape decode with a static KV cache, device sampling and CUDA graphs; see static_decode.h.
// Design after transformers' StaticCache + torch.compile "reduce-overhead" path and vLLM's CUDA graph
// decode: shapes fixed per (batch, attention span), so one captured graph serves every step of a span.
#include "model/static_decode.h"

#include <torch/torch.h>

#include <chrono>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "model/cuda_graph_step.h"
#include "model/generate_batch.h"
#include "model/sampling.h"
#include "model/transformer.h"

namespace pulse::model {
namespace {

/// The device buffers one step reads and writes; fixed for the whole call, so that a captured graph's
/// addresses stay valid.
struct StepBuffers {
  torch::Tensor tokens_in;   ///< [B] int64: this step's input tokens (the previous step's samples)
  torch::Tensor positions;   ///< [B] int64
  torch::Tensor slot;        ///< [1] int64: the cache slot written this step
  torch::Tensor uniforms;    ///< [B] float64: request_uniform(seed, step) per row
  torch::Tensor tokens_out;  ///< [B] int64: sampled
  torch::Tensor logprobs;    ///< [B] float32
};

}  // namespace

std::vector<GenerationResult> generate_fixed_shape(TransformerImpl& model,
                                                   const std::vector<GenerationRequest>& requests,
                                                   const SamplingParams& params, const Tokenizer* tokenizer,
                                                   bool cuda_graphs, GenerateStats& stats) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const int64_t B = static_cast<int64_t>(requests.size());
  const auto dev = model.device();
  std::vector<GenerationResult> results(B);
  PromptBatch batch = left_pad_prompts(requests, model.config().vocab_size);
  const int64_t capacity = static_cache_slots(batch.max_prompt + params.max_new_tokens);
  KVCache cache = model.new_cache(B, capacity);
  auto logits = model.forward_cached(batch.ids, batch.mask, batch.positions, cache, /*last_only=*/true)
                    .squeeze(1);  // [B,V]

  const bool greedy = params.temperature == 0;
  // rows[i]: the request in batch row i. All B at first; compaction drops finished ones.
  std::vector<int64_t> rows(B);
  for (int64_t b = 0; b < B; ++b) rows[b] = b;
  int64_t Bc = B;  // rows in the batch now
  // Host staging for the per-step inputs (pinned on CUDA: the copies then do not stage through pageable
  // memory); reused every step, which is safe because each step ends by reading the tokens back.
  auto host_opts = torch::TensorOptions().pinned_memory(dev.is_cuda());
  auto host_u = torch::zeros({B}, host_opts.dtype(torch::kFloat64));
  auto host_pos = torch::empty({B + 1}, host_opts.dtype(torch::kInt64));  // positions, then the slot
  auto fill_uniforms = [&](int64_t step) {
    if (greedy) return;
    auto* u = host_u.data_ptr<double>();
    for (int64_t i = 0; i < Bc; ++i)
      u[i] = request_uniform(requests[rows[i]].seed, static_cast<uint64_t>(step));
  };
  const auto dev_i64 = torch::TensorOptions().dtype(torch::kInt64).device(dev);

  StepBuffers buf;
  buf.uniforms = torch::zeros({B}, torch::TensorOptions().dtype(torch::kFloat64).device(dev));
  fill_uniforms(0);
  buf.uniforms.copy_(host_u);
  std::tie(buf.tokens_out, buf.logprobs) = sample_tokens_with_uniforms(logits, params, buf.uniforms);
  buf.tokens_in = buf.tokens_out.clone();
  buf.positions = torch::zeros({B}, dev_i64);
  buf.slot = torch::zeros({1}, dev_i64);
  logits = torch::Tensor();

  std::vector<bool> done(B, false);
  int64_t live = B;
  auto take = [&](const torch::Tensor& tok_dev, const torch::Tensor& lp_dev) {
    const auto tok = tok_dev.to(torch::kCPU);  // synchronises with the step
    const auto lp = lp_dev.to(torch::kCPU);
    const auto* t = tok.data_ptr<int64_t>();
    const auto* l = lp.data_ptr<float>();
    for (int64_t i = 0; i < Bc; ++i) {
      const int64_t r = rows[i];
      if (done[r]) continue;
      if (append_token(results[r], static_cast<int32_t>(t[i]), l[i], params, tokenizer)) {
        done[r] = true;
        --live;
      }
    }
  };
  take(buf.tokens_out, buf.logprobs);
  const auto t_decode = clock::now();
  stats.prefill_ms = ms_since(t0);

  // One step: the forward on fixed shapes, then sampling into the output buffers. Every tensor it
  // touches outside its temporaries is in `buf` or `cache`.
  auto run_step = [&](int64_t span) {
    auto step_logits = model.decode_step_fixed(buf.tokens_in, buf.positions, buf.slot, cache, span);
    auto [tok, lp] = sample_tokens_with_uniforms(step_logits, params, buf.uniforms);
    buf.tokens_out.copy_(tok);
    buf.logprobs.copy_(lp);
  };
  std::map<int64_t, std::unique_ptr<CudaGraphStep>> graphs;  // span -> captured step (for Bc rows)
  // Once half the rows or more have stopped, keep only the live ones (the eager path drops each at once):
  // the steps then cost what the live rows need; the graphs of the old batch size go and new ones are
  // captured, at most log2(B / kStaticCompactMinRows) + 1 times per call.
  auto compact = [&] {
    std::vector<int64_t> keep, kept_rows;
    for (int64_t i = 0; i < Bc; ++i)
      if (!done[rows[i]]) {
        keep.push_back(i);
        kept_rows.push_back(rows[i]);
      }
    graphs.clear();  // they point into the buffers replaced below
    const auto idx = torch::tensor(keep, torch::kInt64).to(dev);
    cache.select_rows(idx);
    buf.tokens_out = buf.tokens_out.index_select(0, idx);
    buf.logprobs = buf.logprobs.index_select(0, idx);
    Bc = static_cast<int64_t>(keep.size());
    buf.tokens_in = buf.tokens_out.clone();
    buf.positions = torch::zeros({Bc}, dev_i64);
    buf.uniforms = torch::zeros({Bc}, torch::TensorOptions().dtype(torch::kFloat64).device(dev));
    rows = std::move(kept_rows);
    ++stats.compactions;
  };
  for (int64_t step = 1; step < params.max_new_tokens && live > 0; ++step) {
    if (Bc >= kStaticCompactMinRows && live * 2 <= Bc) compact();
    const int64_t slot = batch.max_prompt + step - 1;
    const int64_t span = std::min(capacity, static_cache_slots(slot + 1));
    const int64_t window = model.config().sliding_window;
    if (window > 0 && slot + 1 > window)  // forward_cached's rule on the eager path
      throw std::out_of_range("Transformer: sequence of " + std::to_string(slot + 1) +
                              " slots exceeds sliding_window " + std::to_string(window));
    auto* p = host_pos.data_ptr<int64_t>();
    for (int64_t i = 0; i < Bc; ++i) p[i] = batch.next_pos[rows[i]] + step - 1;
    p[Bc] = slot;
    fill_uniforms(step);
    buf.positions.copy_(host_pos.narrow(0, 0, Bc), /*non_blocking=*/true);
    buf.slot.copy_(host_pos.narrow(0, Bc, 1), /*non_blocking=*/true);
    if (!greedy) buf.uniforms.copy_(host_u.narrow(0, 0, Bc), /*non_blocking=*/true);
    buf.tokens_in.copy_(buf.tokens_out);
    if (!cuda_graphs) {
      run_step(span);
    } else if (auto it = graphs.find(span); it != graphs.end()) {
      it->second->replay();
    } else {
      // The capture's warm-up call is this step's real execution.
      const auto tc = clock::now();
      graphs.emplace(span, std::make_unique<CudaGraphStep>([&run_step, span] { run_step(span); }, dev));
      stats.capture_ms += ms_since(tc);
      ++stats.graphs;
    }
    take(buf.tokens_out, buf.logprobs);
    ++stats.steps;
  }
  graphs.clear();  // before the buffers and the cache they point into
  stats.decode_ms = ms_since(t_decode);
  return results;
}

}  // namespace pulse::model
