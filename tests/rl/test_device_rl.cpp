// The model and RL on a CUDA device (run.device = cuda): generation with the KV cache, GRPO's passes and
// backward, MasterAdam's FP32 masters and moments on the device, their host copies (bf16_views, the
// optimizer state file). Every test here needs a GPU and a CUDA LibTorch and skips with a message
// without them (Debian's LibTorch 1.13 has no CUDA); the same code runs on the CPU in test_grpo.cpp and
// test_optimizer.cpp.
#include <torch/cuda.h>
#include <torch/torch.h>
#include "tests/torch_catch.h"

#include <unistd.h>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "model/generate.h"
#include "model/transformer.h"
#include "rl/grpo.h"
#include "rl/optimizer.h"
#include "sync/io/atomic_file.h"
#include "tests/rl/toy_grpo_task.h"

using namespace pulse;

namespace {

bool have_cuda() {
  if (torch::cuda::is_available()) return true;
  WARN("skipped: no CUDA device or a LibTorch without CUDA (torch::cuda::is_available() is false)");
  return false;
}

using test::toy_config;

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

TEST_CASE("GPU: the toy GRPO task learns on CUDA, bf16_views are the device model's BF16 weights",
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
    const auto [before, after] = test::train_toy(*m, opt);
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
