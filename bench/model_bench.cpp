// Model benchmark; see model_bench.h.
//
// FLOPs of a training step follow Kaplan et al. 2020 (arXiv:2001.08361, section 2.1): 6 N per token for
// the matmul parameters N (all Linear weights plus the LM head, embedding lookup excluded) plus
// 6 * 2 * L * T * (H*D) for attention scores and the weighted sum (forward 2x, backward 4x).
#include "bench/model_bench.h"

#include <torch/torch.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/default_config.h"
#include "model/generate.h"
#include "model/transformer.h"

namespace pulse::bench {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

torch::Dtype parse_dtype(const std::string& s) {
  if (s == "bf16" || s == "bfloat16") return torch::kBFloat16;
  if (s == "fp32" || s == "float32") return torch::kFloat32;
  throw std::invalid_argument("bench model: dtype must be bf16 or fp32, got \"" + s + "\"");
}

double matmul_gflops(int64_t n, torch::Dtype dtype) {
  auto a = torch::randn({n, n}).to(dtype), b = torch::randn({n, n}).to(dtype);
  torch::matmul(a, b);  // warm-up
  int reps = 0;
  const auto t0 = Clock::now();
  do {
    torch::matmul(a, b);
    ++reps;
  } while (seconds_since(t0) < 1.0);
  return 2.0 * n * n * n * reps / seconds_since(t0) / 1e9;
}

/// Matmul parameters: every 2-D weight except the input embedding, plus the tied head if any.
double matmul_params(const model::TransformerImpl& m) {
  double n = 0;
  for (const auto& p : m.named_parameters())
    if (p.value().dim() == 2 && p.key() != "model.embed_tokens.weight")
      n += static_cast<double>(p.value().numel());
  const auto& c = m.config();
  if (c.tie_word_embeddings) n += static_cast<double>(c.vocab_size * c.hidden_size);
  return n;
}

std::pair<double, double> train_speed(const model::ModelConfig& cfg, torch::Dtype dtype,
                                      const ModelBenchOptions& o) {
  torch::manual_seed(0);
  model::Transformer m(cfg, dtype);
  m->train();
  auto ids = torch::randint(4, cfg.vocab_size, {o.train_batch, o.train_tokens + 1}, torch::kInt64);
  auto in = ids.narrow(1, 0, o.train_tokens), target = ids.narrow(1, 1, o.train_tokens);
  auto mask = torch::ones_like(in);
  auto step = [&] {
    m->zero_grad();
    auto logits = m->forward(in, mask);
    auto loss =
        torch::nn::functional::cross_entropy(logits.reshape({-1, cfg.vocab_size}), target.reshape({-1}));
    loss.backward();
  };
  step();  // warm-up
  const auto t0 = Clock::now();
  for (int64_t s = 0; s < o.train_steps; ++s) step();
  const double dt = seconds_since(t0);
  const double tokens = static_cast<double>(o.train_steps * o.train_batch * o.train_tokens);
  const double flops_per_token = 6.0 * matmul_params(*m) + 12.0 * cfg.num_hidden_layers * o.train_tokens *
                                                               cfg.num_attention_heads * cfg.head_dim;
  return {tokens / dt, tokens * flops_per_token / dt / 1e9};
}

}  // namespace

ModelBenchResult run_model_bench(const ModelBenchOptions& o) {
  ModelBenchResult r;
  r.config = model::tiny_llama_config();
  r.threads = torch::get_num_threads();
  r.gen_dtype = o.gen_dtype;
  const auto& cfg = r.config;
  torch::NoGradGuard no_grad_outer;
  {
    torch::manual_seed(0);
    model::Transformer m(cfg, parse_dtype(o.gen_dtype));
    m->eval();
    r.n_params = m->num_parameters();
    auto prompts = torch::randint(4, cfg.vocab_size, {o.gen_batch, o.prompt_tokens}, torch::kInt64);
    std::vector<model::GenerationRequest> reqs(o.gen_batch);
    for (int64_t b = 0; b < o.gen_batch; ++b) {
      auto row = prompts[b];
      for (int64_t t = 0; t < o.prompt_tokens; ++t) reqs[b].prompt_ids.push_back(row[t].item<int32_t>());
      reqs[b].seed = static_cast<uint64_t>(b);
    }
    model::SamplingParams sp;
    sp.temperature = 0;
    sp.max_new_tokens = o.new_tokens;
    model::generate(*m, {reqs[0]}, sp);  // warm-up
    auto t0 = Clock::now();
    auto cached = model::generate(*m, reqs, sp);
    const double dt_cached = seconds_since(t0);
    // Baseline: recompute the whole sequence for every new token (no cache).
    t0 = Clock::now();
    auto seq = prompts.clone();
    for (int64_t s = 0; s < o.new_tokens; ++s) {
      auto logits = m->forward(seq, torch::ones_like(seq));
      auto next = logits.select(1, seq.size(1) - 1).argmax(-1, true);
      seq = torch::cat({seq, next}, 1);
    }
    const double dt_full = seconds_since(t0);
    const double total = static_cast<double>(o.gen_batch * o.new_tokens);
    r.gen_cached_tokens_per_s = total / dt_cached;
    r.gen_recompute_tokens_per_s = total / dt_full;
    r.gen_speedup = dt_full / dt_cached;
    r.gen_outputs_match = true;
    for (int64_t b = 0; b < o.gen_batch; ++b)
      for (int64_t t = 0; t < o.new_tokens; ++t)
        if (cached[b].token_ids.at(t) != seq[b][o.prompt_tokens + t].item<int64_t>())
          r.gen_outputs_match = false;
  }
  {
    torch::GradMode::set_enabled(true);
    std::tie(r.train_fp32_tokens_per_s, r.train_fp32_gflops) = train_speed(cfg, torch::kFloat32, o);
    std::tie(r.train_bf16_tokens_per_s, r.train_bf16_gflops) = train_speed(cfg, torch::kBFloat16, o);
    torch::GradMode::set_enabled(false);
  }
  r.matmul_fp32_gflops = matmul_gflops(o.matmul_n, torch::kFloat32);
  r.matmul_bf16_gflops = matmul_gflops(o.matmul_n, torch::kBFloat16);
  return r;
}

std::string to_json(const ModelBenchResult& r) {
  nlohmann::json j;
  j["model"] = {{"architecture", r.config.architecture},
                {"hidden_size", r.config.hidden_size},
                {"num_hidden_layers", r.config.num_hidden_layers},
                {"vocab_size", r.config.vocab_size},
                {"n_params", r.n_params}};
  j["threads"] = r.threads;
  j["generation"] = {{"dtype", r.gen_dtype},
                     {"cached_tokens_per_s", r.gen_cached_tokens_per_s},
                     {"recompute_tokens_per_s", r.gen_recompute_tokens_per_s},
                     {"speedup", r.gen_speedup},
                     {"outputs_match", r.gen_outputs_match}};
  j["training"] = {{"fp32_tokens_per_s", r.train_fp32_tokens_per_s},
                   {"bf16_tokens_per_s", r.train_bf16_tokens_per_s},
                   {"fp32_gflops", r.train_fp32_gflops},
                   {"bf16_gflops", r.train_bf16_gflops}};
  j["matmul"] = {{"fp32_gflops", r.matmul_fp32_gflops}, {"bf16_gflops", r.matmul_bf16_gflops}};
  return j.dump(2);
}

std::string to_text(const ModelBenchResult& r) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << "model: " << r.config.architecture << " L=" << r.config.num_hidden_layers
     << " C=" << r.config.hidden_size << " V=" << r.config.vocab_size << ", " << r.n_params / 1e6
     << " M params, " << r.threads << " threads\n";
  os << "generation (" << r.gen_dtype << ", greedy):\n";
  os << "  KV cache        " << r.gen_cached_tokens_per_s << " tokens/s\n";
  os << "  full recompute  " << r.gen_recompute_tokens_per_s << " tokens/s  (cache is " << r.gen_speedup
     << "x faster; outputs " << (r.gen_outputs_match ? "match" : "DIFFER") << ")\n";
  os << "training (forward+backward):\n";
  os << "  fp32  " << r.train_fp32_tokens_per_s << " tokens/s, " << r.train_fp32_gflops << " GFLOP/s ("
     << 100.0 * r.train_fp32_gflops / r.matmul_fp32_gflops << "% of fp32 matmul)\n";
  os << "  bf16  " << r.train_bf16_tokens_per_s << " tokens/s, " << r.train_bf16_gflops << " GFLOP/s ("
     << 100.0 * r.train_bf16_gflops / r.matmul_bf16_gflops << "% of bf16 matmul)\n";
  os << "matmul: fp32 " << r.matmul_fp32_gflops << " GFLOP/s, bf16 " << r.matmul_bf16_gflops << " GFLOP/s\n";
  return os.str();
}

}  // namespace pulse::bench
