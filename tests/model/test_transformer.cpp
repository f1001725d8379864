// Transformer: HF parameter names, KV-cache decoding == full forward, left padding, batched generation.
#include <torch/torch.h>
#include "tests/torch_catch.h"

#include "model/generate.h"
#include "model/sampling.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "tests/model/model_fixtures.h"
#include "tests/test_paths.h"

using namespace pulse::model;
using pulse::test::tiny_config;

namespace {

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

std::vector<GenerationRequest> some_requests() {
  return {{{1, 5, 9, 13, 17, 21, 25}, 11},
          {{1, 40}, 22},
          {{1, 7, 7, 7, 3}, 33},
          {{1, 60, 61, 62, 63, 64, 65, 66, 67, 68}, 44}};
}

}  // namespace

TEST_CASE("named_parameters are the HF tensor names with HF shapes", "[model][transformer]") {
  auto cfg = tiny_config("qwen2", /*tied=*/false);
  Transformer m(cfg, torch::kFloat32);
  std::map<std::string, std::vector<int64_t>> got;
  for (const auto& p : m->named_parameters()) got[p.key()] = p.value().sizes().vec();
  CHECK(got.at("model.embed_tokens.weight") == std::vector<int64_t>{97, 64});
  CHECK(got.at("model.layers.0.self_attn.q_proj.weight") == std::vector<int64_t>{64, 64});
  CHECK(got.at("model.layers.0.self_attn.q_proj.bias") == std::vector<int64_t>{64});
  CHECK(got.at("model.layers.1.self_attn.k_proj.weight") == std::vector<int64_t>{32, 64});
  CHECK(got.at("model.layers.1.self_attn.v_proj.bias") == std::vector<int64_t>{32});
  CHECK(got.at("model.layers.1.self_attn.o_proj.weight") == std::vector<int64_t>{64, 64});
  CHECK(got.at("model.layers.0.mlp.gate_proj.weight") == std::vector<int64_t>{96, 64});
  CHECK(got.at("model.layers.0.mlp.down_proj.weight") == std::vector<int64_t>{64, 96});
  CHECK(got.at("model.layers.0.input_layernorm.weight") == std::vector<int64_t>{64});
  CHECK(got.at("model.layers.0.post_attention_layernorm.weight") == std::vector<int64_t>{64});
  CHECK(got.at("model.norm.weight") == std::vector<int64_t>{64});
  CHECK(got.at("lm_head.weight") == std::vector<int64_t>{97, 64});
  CHECK(got.count("model.layers.0.self_attn.o_proj.bias") == 0);
  CHECK(got.size() == 1 + 2 * 12 + 1 + 1);
  Transformer tied(tiny_config("llama", true), torch::kBFloat16);
  for (const auto& p : tied->named_parameters()) {
    CHECK(p.key() != "lm_head.weight");
    CHECK(p.value().scalar_type() == torch::kBFloat16);
    CHECK(p.key().find(".bias") == std::string::npos);
  }
}

TEST_CASE("KV-cache incremental decoding matches the full forward", "[model][transformer]") {
  // Tolerances: FP32 differs only by summation order (1e-4 abs on logits of scale ~1); BF16 rounds every
  // activation to 8 mantissa bits, and the cached path rounds at different points: 0.1 abs.
  for (auto [dtype, tol] : {std::pair{torch::kFloat32, 1e-4}, std::pair{torch::kBFloat16, 0.1}}) {
    INFO("dtype " << dtype);
    torch::manual_seed(1);
    Transformer m(tiny_config("qwen2"), dtype);
    m->eval();
    torch::NoGradGuard ng;
    const int64_t B = 3, T = 12;
    auto ids = torch::randint(0, 97, {B, T}, torch::kInt64);
    auto mask = torch::ones({B, T}, torch::kInt64);
    mask[1].narrow(0, 0, 4).zero_();  // row 1: 4 left-padding slots
    auto full = m->forward(ids, mask);
    auto cache = m->new_cache(B, T);
    auto pos = (mask.cumsum(-1) - 1).clamp_min(0);
    // Prefill 5 tokens, then one at a time.
    std::vector<torch::Tensor> parts{
        m->forward_cached(ids.narrow(1, 0, 5), mask.narrow(1, 0, 5), pos.narrow(1, 0, 5), cache)};
    for (int64_t t = 5; t < T; ++t)
      parts.push_back(
          m->forward_cached(ids.narrow(1, t, 1), mask.narrow(1, t, 1), pos.narrow(1, t, 1), cache));
    auto inc = torch::cat(parts, 1);
    REQUIRE(inc.sizes() == full.sizes());
    // Compare real-token positions only (padding positions hold garbage by contract).
    auto real = mask.to(torch::kBool).unsqueeze(-1).expand_as(full);
    const double d = max_abs_diff(full.masked_select(real), inc.masked_select(real));
    INFO("max |full - cached| = " << d);
    CHECK(d < tol);
    CHECK(full.scalar_type() == torch::kFloat32);
  }
}

TEST_CASE("a left-padded row gets the same logits as the row alone", "[model][transformer]") {
  torch::manual_seed(2);
  Transformer m(tiny_config("llama"), torch::kFloat32);
  m->eval();
  torch::NoGradGuard ng;
  auto alone = torch::tensor({{1, 8, 9, 10}}, torch::kInt64);
  auto solo = m->forward(alone, torch::ones_like(alone));
  auto padded = torch::tensor({{0, 0, 0, 1, 8, 9, 10}, {1, 2, 3, 4, 5, 6, 7}}, torch::kInt64);
  auto mask = torch::tensor({{0, 0, 0, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1}}, torch::kInt64);
  auto batch = m->forward(padded, mask);
  CHECK(max_abs_diff(batch[0].narrow(0, 3, 4), solo[0]) < 1e-5);
}

TEST_CASE("batched greedy generation equals one-at-a-time greedy generation", "[model][generate]") {
  torch::manual_seed(3);
  Transformer m(tiny_config("qwen2"), torch::kFloat32);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_new_tokens = 12;
  const auto reqs = some_requests();
  const auto batched = generate(*m, reqs, sp);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto single = generate(*m, {reqs[i]}, sp);
    CHECK(batched[i].token_ids == single[0].token_ids);
    REQUIRE(batched[i].logprobs.size() == single[0].logprobs.size());
    for (size_t t = 0; t < single[0].logprobs.size(); ++t)
      CHECK(batched[i].logprobs[t] == Approx(single[0].logprobs[t]).margin(1e-4));
    CHECK(batched[i].token_ids.size() == 12);
    CHECK(batched[i].finish == FinishReason::Length);
  }
  // The cached greedy path agrees with argmax over full recomputation.
  auto seq = reqs[0].prompt_ids;
  torch::NoGradGuard ng;
  for (int t = 0; t < 12; ++t) {
    auto ids = torch::tensor(std::vector<int64_t>(seq.begin(), seq.end())).unsqueeze(0);
    auto logits = m->forward(ids, torch::ones_like(ids));
    seq.push_back(static_cast<int32_t>(logits[0][-1].argmax().item<int64_t>()));
  }
  CHECK(std::vector<int32_t>(seq.end() - 12, seq.end()) == batched[0].token_ids);
}

TEST_CASE("same seed gives the same sample whatever the batch", "[model][generate]") {
  torch::manual_seed(4);
  Transformer m(tiny_config("llama"), torch::kFloat32);
  SamplingParams sp;
  sp.temperature = 1.0;
  sp.top_p = 0.9;
  sp.top_k = 50;
  sp.max_new_tokens = 16;
  const auto reqs = some_requests();
  const auto all = generate(*m, reqs, sp);
  const auto two = generate(*m, {reqs[2], reqs[0]}, sp);
  const auto one = generate(*m, {reqs[0]}, sp);
  CHECK(all[0].token_ids == one[0].token_ids);
  CHECK(two[1].token_ids == one[0].token_ids);
  CHECK(all[2].token_ids == two[0].token_ids);
  auto other_seed = reqs[0];
  other_seed.seed = 12345;
  CHECK(generate(*m, {other_seed}, sp)[0].token_ids != one[0].token_ids);
  for (float lp : all[1].logprobs) {
    CHECK(lp <= 0.0f);
    CHECK(std::isfinite(lp));
  }
}

TEST_CASE("sampling log-probs are under the filtered distribution", "[model][generate]") {
  // Row of 4 logits; top_k = 2 keeps tokens 3 and 1; their renormalised probabilities are known.
  auto logits = torch::tensor({{0.0f, 2.0f, -1.0f, 3.0f}});
  SamplingParams sp;
  sp.temperature = 1.0;
  sp.top_k = 2;
  const double p3 = std::exp(3.0) / (std::exp(3.0) + std::exp(2.0));
  int n3 = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    auto [tok, lp] = sample_tokens(logits, sp, {seed}, {0});
    const int64_t t = tok[0].item<int64_t>();
    REQUIRE((t == 3 || t == 1));
    CHECK(lp[0].item<float>() == Approx(std::log(t == 3 ? p3 : 1 - p3)).margin(1e-5));
    n3 += t == 3;
  }
  CHECK(n3 / 400.0 == Approx(p3).margin(0.07));
  // top_p = 0.5 keeps only the most likely token here (p3 > 0.5): log-prob 0.
  sp.top_k = 0;
  sp.top_p = 0.5;
  auto [tok, lp] = sample_tokens(logits, sp, {7}, {3});
  CHECK(tok[0].item<int64_t>() == 3);
  CHECK(lp[0].item<float>() == Approx(0.0).margin(1e-6));
  // Greedy: argmax, log-prob under the unscaled distribution.
  sp.temperature = 0;
  auto [gt, glp] = sample_tokens(logits, sp, {0}, {0});
  CHECK(gt[0].item<int64_t>() == 3);
  CHECK(glp[0].item<float>() == Approx(torch::log_softmax(logits, -1)[0][3].item<float>()));
}

TEST_CASE("stop token ids end a row early and stay in its output", "[model][generate]") {
  torch::manual_seed(5);
  Transformer m(tiny_config("llama"), torch::kFloat32);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_new_tokens = 10;
  const auto reqs = some_requests();
  const auto free_run = generate(*m, reqs, sp);
  // Stop on the 3rd token row 0 produces: row 0 stops there, the other rows are unaffected unless they hit
  // it.
  const int32_t stop = free_run[0].token_ids[2];
  sp.stop_token_ids = {stop};
  const auto stopped = generate(*m, reqs, sp);
  const auto first = std::find(free_run[0].token_ids.begin(), free_run[0].token_ids.end(), stop) -
                     free_run[0].token_ids.begin();
  CHECK(stopped[0].token_ids ==
        std::vector<int32_t>(free_run[0].token_ids.begin(), free_run[0].token_ids.begin() + first + 1));
  CHECK(stopped[0].finish == FinishReason::Stop);
  for (size_t i = 1; i < reqs.size(); ++i) {
    const auto& f = free_run[i].token_ids;
    const auto k = std::find(f.begin(), f.end(), stop) - f.begin();
    const size_t n = k < static_cast<std::ptrdiff_t>(f.size()) ? k + 1 : f.size();
    CHECK(stopped[i].token_ids == std::vector<int32_t>(f.begin(), f.begin() + n));
  }
}

TEST_CASE("compute dtypes: FP32 and BF16 models agree", "[model][transformer]") {
  torch::manual_seed(6);
  Transformer m32(tiny_config("llama"), torch::kFloat32);
  Transformer m16(tiny_config("llama"), torch::kBFloat16);
  {
    torch::NoGradGuard ng;
    auto src = m16->named_parameters();
    for (auto& p : m32->named_parameters()) p.value().copy_(src[p.key()]);  // BF16-representable FP32
  }
  auto ids = torch::randint(0, 97, {2, 10}, torch::kInt64);
  auto a = m32->forward(ids, torch::ones_like(ids));
  auto b = m16->forward(ids, torch::ones_like(ids));
  CHECK(max_abs_diff(a, b) < 0.1);
  // Gradients flow in FP32 (the trainer's path).
  auto loss = torch::nn::functional::cross_entropy(a.reshape({-1, 97}), ids.reshape({-1}));
  loss.backward();
  CHECK(m32->model->embed_tokens->weight.grad().defined());
  CHECK(m32->model->embed_tokens->weight.grad().abs().sum().item<double>() > 0);
}

TEST_CASE("stop strings end a row once its decoded text contains them", "[model][generate]") {
  auto tok =
      load_tokenizer(pulse::test::shared_path("models/torchtune-test-tokenizers/tiny_bpe_tokenizer.json"));
  auto cfg = tiny_config("llama");
  cfg.vocab_size = tok->vocab_size();
  torch::manual_seed(9);
  Transformer m(cfg, torch::kFloat32);
  SamplingParams sp;
  sp.temperature = 0;
  sp.max_new_tokens = 8;
  const GenerationRequest req{tok->encode("Hello there"), 1};
  const auto free_run = generate(*m, {req}, sp);
  const std::vector<int32_t> first3(free_run[0].token_ids.begin(), free_run[0].token_ids.begin() + 3);
  const std::string stop = tok->decode(first3);
  REQUIRE(tok->decode(std::vector<int32_t>(first3.begin(), first3.begin() + 2)).size() < stop.size());
  sp.stop_strings = {stop};
  CHECK_THROWS_AS(generate(*m, {req}, sp), std::invalid_argument);  // needs the tokenizer
  const auto stopped = generate(*m, {req}, sp, tok.get());
  CHECK(stopped[0].token_ids == first3);
  CHECK(stopped[0].finish == FinishReason::Stop);
}
