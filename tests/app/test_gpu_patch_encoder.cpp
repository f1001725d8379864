// The trainer's GPU patch encoder (app/trainer/gpu_patch_encoder.h): refused with a reason where it cannot run
// (every CPU-only machine, checked here), and, on a GPU, the same patches and store state as the CPU
// encode of MasterAdam::bf16_views (skipped with a message without CUDA).
#include <torch/cuda.h>
#include <torch/torch.h>
#include "tests/torch_catch.h"

#include "app/trainer/gpu_patch_encoder.h"
#include "model/transformer.h"
#include "rl/optimizer.h"
#include "sync/gpu_encode.h"
#include "sync/version_store.h"
#include "tests/rl/toy_grpo_task.h"

using namespace pulse;

TEST_CASE("GpuPatchEncoder is refused with a reason off a CUDA device or without the CUDA kernels",
          "[app][device]") {
  model::Transformer m(test::toy_config(), torch::kFloat32);
  rl::MasterAdam adam(*m, rl::OptimizerConfig{});
  std::string why;
  CHECK(app::GpuPatchEncoder::create(c10::Device(c10::DeviceType::CPU), adam, &why) == nullptr);
  CHECK(why == "the masters are on cpu");
  std::string no_cuda;
  if (!sync::cuda_encode_available(&no_cuda)) {
    why.clear();
    CHECK(app::GpuPatchEncoder::create(c10::Device(c10::DeviceType::CUDA, 0), adam, &why) == nullptr);
    CHECK(why == no_cuda);
    CHECK(!why.empty());
  }
}

TEST_CASE("GPU: patches encoded from CUDA masters equal the CPU encode of the host copies",
          "[app][device][gpu]") {
  if (!torch::cuda::is_available() || !sync::cuda_encode_available()) {
    WARN("skipped: no CUDA device, a LibTorch without CUDA or a build without PULSE_CUDA");
    return;
  }
  torch::manual_seed(11);
  model::Transformer m(test::toy_config(), torch::kBFloat16);
  m->to(torch::Device(torch::kCUDA, 0));
  rl::OptimizerConfig oc;
  oc.lr = 1e-3;
  rl::MasterAdam adam(*m, oc);
  std::string why;
  auto gpu = app::GpuPatchEncoder::create(torch::Device(torch::kCUDA, 0), adam, &why);
  INFO(why);
  REQUIRE(gpu != nullptr);
  sync::PatchOptions codec;
  codec.values = sync::ValueMode::Delta;
  sync::VersionStore cpu_store("", sync::RetentionPolicy{4, 2}, codec),
      gpu_store("", sync::RetentionPolicy{4, 2}, codec);
  cpu_store.publish(0, adam.bf16_views());
  gpu_store.publish(0, adam.bf16_views());
  for (uint64_t v = 1; v <= 5; ++v) {
    auto lp = m->forward(torch::tensor({{1, 3, 4, 5}}, torch::kInt64).to(m->device()),
                         torch::ones({1, 4}, torch::kInt64).to(m->device()));
    lp.to(torch::kFloat32).pow(2).mean().backward();
    REQUIRE_FALSE(adam.step().skipped);
    const sync::Blob want = cpu_store.publish(v, adam.bf16_views());
    const sync::Blob got =
        gpu_store.publish_encoded(v, [&](const sync::PatchOptions& o) { return gpu->encode(o); });
    INFO("version " << v);
    CHECK(*got == *want);
    CHECK(gpu_store.head().root_hash == cpu_store.head().root_hash);
  }
}
