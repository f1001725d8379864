// The transformer checked against an independent implementation: Karpathy's stories260K (a 260K-parameter
// Llama pretrained on TinyStories, GQA 8/4 heads, tied embeddings) converted to HF safetensors, with logits
// and a greedy continuation computed by llama2.c's own C forward pass (run.c, FP32) on the original .bin
// (../shared/models/SOURCES.md, section "stories260k/"). The fixture is part of the test: when it is
// missing the tests FAIL, they never skip.
//
// Measured (x86-64, LibTorch 1.13 CPU), |pulse - llama2.c| over all 129 x 512 logits, which span
// [-17.5, 20.2]:
//   FP32 compute: max 7.0e-5 (asserted < 1e-4, the bound), argmax equal at every position. Through
//     the KV cache one token at a time: max 1.004e-4 on an AMD EPYC with avx512_bf16 (2026-12-02; below
//     1e-4 on the CPUs measured before), asserted < 1.5e-4. What differs there is FP32 summation order:
//     one-token GEMVs and a 64-token prefill instead of one 129-token GEMM, in the BLAS kernels the CPU
//     gets; cached and full forward differ from each other by up to 5.8e-5 at every position, prefill
//     positions included, and the maximum over the 66 K logits is one outlier (1.0e-4 at position 126,
//     where the full forward is also at its maximum, 6.9e-5; the other positions 1e-5 - 5e-5).
//   BF16 compute (weights rounded to BF16, BF16 activations and residual stream, FP32 RMSNorm statistics
//     and attention softmax, as HF transformers does): max 1.74, mean 0.18 (asserted < 3.0 and < 0.3,
//     ~1.7x margin); argmax equal at 121 of 129 positions. Rounding the weights alone to BF16 and computing
//     in FP32 already gives max 1.39 / mean 0.13: a 64-wide model has little averaging to hide the 2^-9
//     relative weight error. BF16 greedy decoding from BOS follows llama2.c for 9 tokens, then diverges
//     (not asserted).
#include <torch/torch.h>
#include "tests/torch_catch.h"

#include <cmath>
#include <vector>

#include "model/checkpoint.h"
#include "model/generate.h"
#include "tests/model/stories260k_fixture.h"

namespace {

using pulse::test::Stories260k;

/// Full-sequence forward of the 129 reference ids in `dtype`; returns logits [129, 512] float32.
torch::Tensor forward_reference_ids(const Stories260k& fx, torch::Dtype dtype) {
  auto model = pulse::model::load_hf_model(fx.dir, dtype);
  model->eval();
  torch::NoGradGuard ng;
  std::vector<int64_t> ids(fx.input_ids.begin(), fx.input_ids.end());
  const auto T = static_cast<int64_t>(ids.size());
  auto input = torch::tensor(ids, torch::kInt64).view({1, T});
  return model->forward(input, torch::ones({1, T}, torch::kInt64)).squeeze(0);
}

/// Greedy continuation of the reference prompt in `dtype` (KV-cached decoding through generate()).
std::vector<int32_t> greedy(const Stories260k& fx, torch::Dtype dtype) {
  auto model = pulse::model::load_hf_model(fx.dir, dtype);
  pulse::model::SamplingParams sp;
  sp.temperature = 0.0;
  sp.max_new_tokens = static_cast<int64_t>(fx.greedy_continuation.size());
  auto out = pulse::model::generate(*model, {{fx.greedy_prompt, 0}}, sp);
  REQUIRE(out.size() == 1);
  return out[0].token_ids;
}

}  // namespace

TEST_CASE("stories260k FP32 logits match llama2.c's forward pass within 1e-4", "[model][parity]") {
  const Stories260k fx = pulse::test::load_stories260k();
  auto got = forward_reference_ids(fx, torch::kFloat32);
  REQUIRE(got.sizes() == fx.logits.sizes());
  const double d = (got - fx.logits).abs().max().item<double>();
  INFO("FP32 max |pulse - llama2.c| over 129 x 512 logits = " << d);
  CHECK(std::isfinite(d));
  CHECK(d < 1e-4);
  // A gross error (e.g. a wrong RoPE layout) would already show above; the argmax agreeing everywhere is
  // what the greedy test below depends on.
  CHECK(got.argmax(-1).equal(fx.logits.argmax(-1)));
}

TEST_CASE("stories260k FP32 logits through the KV cache match llama2.c within 1.5e-4", "[model][parity]") {
  // llama2.c decodes one position at a time; so does this, after a 64-token prefill.
  const Stories260k fx = pulse::test::load_stories260k();
  auto model = pulse::model::load_hf_model(fx.dir, torch::kFloat32);
  model->eval();
  torch::NoGradGuard ng;
  std::vector<int64_t> ids(fx.input_ids.begin(), fx.input_ids.end());
  const auto T = static_cast<int64_t>(ids.size());
  const int64_t prefill = 64;
  auto all = torch::tensor(ids, torch::kInt64).view({1, T});
  auto pos = torch::arange(T, torch::kInt64).view({1, T});
  auto cache = model->new_cache(1, T);
  std::vector<torch::Tensor> parts = {model->forward_cached(
      all.narrow(1, 0, prefill), torch::ones({1, prefill}, torch::kInt64), pos.narrow(1, 0, prefill), cache)};
  for (int64_t t = prefill; t < T; ++t)
    parts.push_back(model->forward_cached(all.narrow(1, t, 1), torch::ones({1, 1}, torch::kInt64),
                                          pos.narrow(1, t, 1), cache));
  auto got = torch::cat(parts, 1).squeeze(0);
  REQUIRE(got.sizes() == fx.logits.sizes());
  const double d = (got - fx.logits).abs().max().item<double>();
  INFO("FP32 cached max |pulse - llama2.c| = " << d);
  CHECK(d < 1.5e-4);
}

TEST_CASE("stories260k FP32 greedy decoding reproduces llama2.c's 40-token continuation", "[model][parity]") {
  const Stories260k fx = pulse::test::load_stories260k();
  REQUIRE(fx.greedy_continuation.size() == 40);
  CHECK(greedy(fx, torch::kFloat32) == fx.greedy_continuation);
}

TEST_CASE("stories260k BF16 logits stay within the measured BF16 tolerance of llama2.c", "[model][parity]") {
  const Stories260k fx = pulse::test::load_stories260k();
  auto got = forward_reference_ids(fx, torch::kBFloat16);
  REQUIRE(got.sizes() == fx.logits.sizes());
  const double d = (got - fx.logits).abs().max().item<double>();
  const double mean = (got - fx.logits).abs().mean().item<double>();
  INFO("BF16 max |pulse - llama2.c| = " << d << ", mean = " << mean);
  CHECK(std::isfinite(d));
  CHECK(d < 3.0);      // measured 1.74 (see the top of this file)
  CHECK(mean < 0.3);   // measured 0.18
  CHECK(mean > 1e-3);  // really BF16: an FP32 fallback would pass the lines above silently
}
