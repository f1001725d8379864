// Logit parity with HF transformers on tiny random models written by make_parity_fixtures.py (run where
// python3 + transformers exist; the fixtures are then kept under ../shared/models/parity). Skips with a
// warning when they are absent.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include "model/checkpoint.h"
#include "sync/safetensors.h"
#include "tests/test_paths.h"

namespace {

torch::Tensor read_tensor(const pulse::sync::Checkpoint& ck, const std::string& name, torch::Dtype dtype) {
  const auto* tv = ck.find(name);
  REQUIRE(tv != nullptr);
  auto t = torch::empty(tv->shape, torch::TensorOptions().dtype(dtype));
  REQUIRE(static_cast<size_t>(t.nbytes()) == tv->nbytes);
  std::memcpy(t.data_ptr(), tv->data, tv->nbytes);
  return t;
}

}  // namespace

TEST_CASE("logits match HF transformers on tiny random Llama and Qwen2 models", "[model][parity]") {
  const auto root = std::filesystem::path(pulse::test::shared_path("models/parity"));
  if (!std::filesystem::is_directory(root)) {
    WARN("HF parity fixtures absent ("
         << root.string() << "): run tests/model/make_parity_fixtures.py there; parity check owed");
    return;
  }
  int n_models = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    if (!std::filesystem::exists(entry.path() / "reference.safetensors")) continue;
    ++n_models;
    INFO(entry.path().string());
    auto ref = pulse::sync::Checkpoint::open((entry.path() / "reference.safetensors").string());
    auto ids = read_tensor(ref, "input_ids", torch::kInt64);
    auto mask = read_tensor(ref, "attention_mask", torch::kInt64);
    auto real = mask.to(torch::kBool).unsqueeze(-1);
    // FP32: same weights (BF16 values), FP32 math on both sides -> only summation order differs.
    // BF16: both round activations to BF16, at slightly different points -> looser.
    for (auto [dtype, key, tol] : {std::tuple{torch::kFloat32, "logits_fp32", 2e-4},
                                   std::tuple{torch::kBFloat16, "logits_bf16", 0.1}}) {
      auto model = pulse::model::load_hf_model(entry.path().string(), dtype);
      torch::NoGradGuard ng;
      auto got = model->forward(ids, mask);
      auto want = read_tensor(ref, key, torch::kFloat32);
      REQUIRE(got.sizes() == want.sizes());
      const double d = (got - want).abs().masked_select(real.expand_as(got)).max().item<double>();
      INFO(key << ": max |pulse - HF| = " << d);
      CHECK(d < tol);
    }
  }
  CHECK(n_models > 0);
}
