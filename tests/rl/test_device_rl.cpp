// The model and RL on a CUDA device (run.device = cuda): generation with the KV cache, GRPO's passes and
// backward, MasterAdam's FP32 masters and moments on the device, their host copies (bf16_views, the
// optimizer state file). Every test here needs a GPU and a CUDA LibTorch and skips with a message
// without them (Debian's LibTorch 1.13 has no CUDA); the same code runs on the CPU in test_grpo.cpp and
// test_optimizer.cpp.
#include <torch/cuda.h>
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "model/generate.h"
#include "model/transformer.h"
#include "rl/grpo.h"
#include "rl/optimizer.h"
#include "sync/atomic_file.h"

using namespace pulse;

namespace {

bool have_cuda() {
  if (torch::cuda::is_available()) return true;
  WARN("skipped: no CUDA device or a LibTorch without CUDA (torch::cuda::is_available() is false)");
  return false;
}

model::ModelConfig toy_config() {
  model::ModelConfig c;
  c.vocab_size = 16;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 64;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  return c;
}

constexpr int32_t kTarget = 7;

/// G samples for each prompt token; reward 1 when the first sampled token is kTarget.
std::vector<rl::Rollout> toy_rollouts(model::TransformerImpl& m, int64_t G, uint64_t seed) {
  const std::vector<int32_t> prompt_tokens = {3, 4, 5, 6};
  std::vector<model::GenerationRequest> reqs;
  for (size_t p = 0; p < prompt_tokens.size(); ++p)
    for (int64_t g = 0; g < G; ++g) reqs.push_back({{1, prompt_tokens[p]}, seed * 1000003 + p * 101 + g});
  model::SamplingParams sp;
  sp.max_new_tokens = 3;
  sp.temperature = 1.0;
  sp.stop_token_ids = {2};
  auto res = model::generate(m, reqs, sp);
  std::vector<rl::Rollout> out(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    out[i].group = static_cast<int64_t>(i / G);
    out[i].problem_index = out[i].group;
    out[i].prompt_ids = reqs[i].prompt_ids;
    out[i].response_ids = res[i].token_ids;
    out[i].sampler_logprobs = res[i].logprobs;
    out[i].truncated = res[i].finish == model::FinishReason::Length;
    out[i].reward = res[i].token_ids.at(0) == kTarget ? 1.0 : 0.0;
  }
  return out;
}

double mean_reward(const std::vector<rl::Rollout>& r) {
  double s = 0;
  for (const auto& x : r) s += x.reward;
  return s / static_cast<double>(r.size());
}

/// The model's parameters as BF16 bytes in host memory, by name (what bf16_views must equal).
std::map<std::string, std::vector<uint8_t>> model_bf16_bytes(torch::nn::Module& m) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& p : m.named_parameters()) {
    at::Tensor h = p.value().detach().to(torch::kCPU).to(torch::kBFloat16).contiguous();
    const auto* b = static_cast<const uint8_t*>(h.data_ptr());
    out[p.key()] = std::vector<uint8_t>(b, b + h.nbytes());
  }
  return out;
}

}  // namespace

TEST_CASE("GPU: the toy GRPO task learns on CUDA; bf16_views are the device model's BF16 weights",
          "[grpo][device][gpu]") {
  if (!have_cuda()) return;
  torch::manual_seed(1234);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    model::Transformer m(toy_config(), dtype);
    m->to(torch::Device(torch::kCUDA, 0));
    REQUIRE(m->device().is_cuda());
    rl::OptimizerConfig oc;
    oc.lr = 2e-2;
    rl::MasterAdam opt(*m, oc);
    for (const auto& t : opt.master_tensors()) CHECK(t.is_cuda());
    rl::GrpoConfig gc;
    gc.micro_batch = 16;
    const double before = mean_reward(toy_rollouts(*m, 64, 999));
    for (int step = 0; step < 12; ++step) {
      auto rollouts = toy_rollouts(*m, 8, static_cast<uint64_t>(step));
      auto st = rl::grpo_step(*m, opt, rollouts, gc);
      CHECK(std::isfinite(st.loss));
      CHECK(st.tis_mismatch < 0.05);
      CHECK(st.bf16_changed > 0);
    }
    const double after = mean_reward(toy_rollouts(*m, 64, 999));
    INFO("dtype " << dtype << " reward before " << before << " after " << after);
    CHECK(after > before + 0.4);
    // The host copies PULSESync encodes are exactly the weights the device model computes with.
    const auto want = model_bf16_bytes(*m);
    for (const auto& v : opt.bf16_views()) {
      INFO(v.name);
      REQUIRE(want.count(v.name) == 1);
      CHECK(std::vector<uint8_t>(v.data, v.data + v.nbytes) == want.at(v.name));
    }
  }
}

TEST_CASE("GPU: MasterAdam state saved from CUDA loads back bit for bit onto another CUDA model",
          "[optimizer][device][gpu]") {
  if (!have_cuda()) return;
  torch::manual_seed(7);
  const torch::Device dev(torch::kCUDA, 0);
  model::Transformer a(toy_config(), torch::kFloat32), b(toy_config(), torch::kFloat32);
  a->to(dev);
  b->to(dev);
  rl::MasterAdam oa(*a, rl::OptimizerConfig{}), ob(*b, rl::OptimizerConfig{});
  for (int s = 0; s < 3; ++s) {
    auto lp = a->forward(torch::tensor({{1, 3, 4, 5}}, torch::kInt64), torch::ones({1, 4}, torch::kInt64));
    lp.pow(2).mean().backward();
    CHECK_FALSE(oa.step().skipped);
  }
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("pulse-gpu-adam-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  oa.save_state(dir + "/a.safetensors");
  ob.load_state(dir + "/a.safetensors");
  ob.save_state(dir + "/b.safetensors");
  CHECK(ob.step_count() == 3);
  CHECK(sync::read_file(dir + "/a.safetensors") == sync::read_file(dir + "/b.safetensors"));
  CHECK(model_bf16_bytes(*a) == model_bf16_bytes(*b));
  std::filesystem::remove_all(dir);
}
