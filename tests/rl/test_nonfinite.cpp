// Nothing non-finite reaches the weights (issue 11): MasterAdam refuses an update that would make a master
// or a moment NaN/Inf and leaves its state bit for bit as it was; GRPO reports the refusal; a checkpoint
// (HF safetensors or MasterAdam state) holding NaN/Inf is refused at load, naming tensor and element.
#include "tests/torch_catch.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "rl/grpo.h"
#include "rl/optimizer.h"
#include "rl_test_util.h"
#include "sync/io/safetensors.h"
#include "tests/temp_dir.h"

using namespace pulse;

namespace {

/// Parameters "a.weight" [n] and "b.weight" [m], BF16, filled with small distinct values.
struct Pair : torch::nn::Module {
  torch::Tensor a, b;
  Pair(int64_t n, int64_t m) {
    auto ma = register_module("a", std::make_shared<torch::nn::Module>());
    auto mb = register_module("b", std::make_shared<torch::nn::Module>());
    a = ma->register_parameter("weight", torch::linspace(-0.5, 0.5, n).to(torch::kBFloat16));
    b = mb->register_parameter("weight", torch::linspace(0.1, 0.9, m).to(torch::kBFloat16));
  }
};

std::string temp_dir(const std::string& tag) {
  return test::process_temp_dir("pulse_test_nonfinite_", tag);
}

/// Every byte of the optimizer's state: the save_state file's tensors (masters, moments) and step, and the
/// BF16 views (the weights that would be published).
struct Snapshot {
  std::vector<std::vector<uint8_t>> state, bf16;
  int64_t step = 0;
  bool operator==(const Snapshot& o) const { return state == o.state && bf16 == o.bf16 && step == o.step; }
};

Snapshot snapshot(const rl::MasterAdam& opt, const std::string& dir) {
  Snapshot s;
  const std::string path = dir + "/snap.safetensors";
  opt.save_state(path);
  auto file = sync::SafetensorsFile::open(path);
  for (const auto& v : file.tensors()) s.state.emplace_back(v.data, v.data + v.nbytes);
  for (const auto& v : opt.bf16_views()) s.bf16.emplace_back(v.data, v.data + v.nbytes);
  s.step = opt.step_count();
  return s;
}

/// One ordinary step so that the moments are not zero.
void warm_step(Pair& m, rl::MasterAdam& opt) {
  m.a.mutable_grad() = torch::full({m.a.numel()}, 0.25, torch::kBFloat16);
  m.b.mutable_grad() = torch::full({m.b.numel()}, -0.5, torch::kBFloat16);
  REQUIRE_FALSE(opt.step().skipped);
}

/// Copies every tensor of a safetensors file into owned buffers (so that one can be edited and the file
/// rewritten).
struct Tensors {
  std::vector<sync::TensorView> views;
  std::vector<std::vector<uint8_t>> bytes;
  std::map<std::string, std::string> metadata;

  explicit Tensors(const std::string& path) {
    auto file = sync::SafetensorsFile::open(path);
    metadata = file.metadata();
    for (const auto& v : file.tensors()) {
      bytes.emplace_back(v.data, v.data + v.nbytes);
      views.push_back(v);
    }
    for (size_t i = 0; i < views.size(); ++i) views[i].data = bytes[i].data();
  }
  std::vector<uint8_t>& of(const std::string& name) {
    for (size_t i = 0; i < views.size(); ++i)
      if (views[i].name == name) return bytes[i];
    FAIL("no tensor " << name);
    return bytes.front();
  }
  void write(const std::string& path) const { sync::write_safetensors(path, views, metadata); }
};

void put_f32(std::vector<uint8_t>& bytes, size_t i, float v) {
  std::memcpy(bytes.data() + 4 * i, &v, 4);
}

}  // namespace

TEST_CASE("an update that would make a master non-finite is refused, state bit-identical",
          "[optimizer][nonfinite]") {
  const std::string dir = temp_dir("refuse");
  Pair m(64, 8);
  rl::OptimizerConfig oc;
  oc.lr = 1e-3;

  SECTION("a finite gradient and lr that carry a master past FLT_MAX") {
    {
      torch::NoGradGuard no_grad;
      m.a[5] = 3.3e38f;  // finite in BF16 and FP32
    }
    rl::MasterAdam opt(m, oc);
    warm_step(m, opt);  // lr 1e-3: a.weight[5] stays ~3.3e38, the moments are not zero
    oc.lr = 5e37;
    oc.grad_clip = 0;
    opt.set_config(oc);
    const Snapshot before = snapshot(opt, dir);
    m.a.mutable_grad() = torch::full({64}, -1.0, torch::kBFloat16);
    const auto st = opt.step();
    CHECK(st.skipped);
    CHECK(st.skip_reason == rl::StepSkip::NonFiniteUpdate);
    CHECK_THAT(st.skip_detail, Catch::Contains("'a.weight'"));
    CHECK(std::string(rl::step_skip_name(st.skip_reason)) == "nonfinite_update");
    CHECK(std::isfinite(st.grad_norm));  // the update is ~ +0.56 lr = 2.8e37: 3.3e38 + 2.8e37 = +Inf
    CHECK(st.step == 1);
    CHECK(st.bf16_changed == 0);
    CHECK(snapshot(opt, dir) == before);
  }

  SECTION("an lr whose update factor overflows FP32") {
    oc.lr = 1e38;  // lr / (1 - beta1) = 1e39
    rl::MasterAdam opt(m, oc);
    const Snapshot before = snapshot(opt, dir);
    m.a.mutable_grad() = torch::full({64}, 1.0, torch::kBFloat16);
    const auto st = opt.step();
    CHECK(st.skipped);
    CHECK(st.skip_reason == rl::StepSkip::NonFiniteUpdate);
    CHECK_THAT(st.skip_detail, Catch::Contains("overflows FP32"));
    CHECK(snapshot(opt, dir) == before);
  }

  SECTION("a finite gradient whose norm overflows FP32 is refused") {
    oc.grad_clip = 0;
    rl::MasterAdam opt(m, oc);
    warm_step(m, opt);
    const Snapshot before = snapshot(opt, dir);
    auto g = torch::zeros({64}, torch::kFloat32);
    g[5] = 1e20f;  // finite, but its square is not
    m.a.mutable_grad() = g.to(torch::kBFloat16);
    const auto st = opt.step();
    CHECK(st.skipped);
    CHECK(st.step == 1);
    CHECK(snapshot(opt, dir) == before);
  }

  SECTION("Adam's L2 term makes the second moment overflow (huge weight decay)") {
    oc.name = "adam";
    oc.weight_decay = 1e30;  // (g + wd * master)^2 overflows FP32 although the gradient itself is tiny
    rl::MasterAdam opt(m, oc);
    const Snapshot before = snapshot(opt, dir);
    m.b.mutable_grad() = torch::full({8}, 1e-3, torch::kBFloat16);
    const auto st = opt.step();
    CHECK(st.skipped);
    CHECK(st.skip_reason == rl::StepSkip::NonFiniteUpdate);
    CHECK(opt.step_count() == 0);
    CHECK(snapshot(opt, dir) == before);
  }

  SECTION("a NaN gradient is refused with its own reason") {
    rl::MasterAdam opt(m, oc);
    warm_step(m, opt);
    const Snapshot before = snapshot(opt, dir);
    auto g = torch::zeros({8}, torch::kFloat32);
    g[2] = std::numeric_limits<float>::quiet_NaN();
    m.b.mutable_grad() = g.to(torch::kBFloat16);
    const auto st = opt.step();
    CHECK(st.skipped);
    CHECK(st.skip_reason == rl::StepSkip::NonFiniteGradient);
    CHECK(snapshot(opt, dir) == before);
  }

  SECTION("after a refusal the next step is exactly the step the refused one never happened before") {
    oc.grad_clip = 0;
    Pair twin_m(64, 8);
    rl::MasterAdam opt(m, oc), twin(twin_m, oc);
    warm_step(m, opt);
    warm_step(twin_m, twin);
    auto huge = torch::zeros({64}, torch::kFloat32);
    huge[0] = 1e20f;
    m.a.mutable_grad() = huge.to(torch::kBFloat16);
    REQUIRE(opt.step().skipped);  // its gradient must not leak into the next step
    for (auto* p : {&m, &twin_m}) p->b.mutable_grad() = torch::full({8}, 0.125, torch::kBFloat16);
    CHECK_FALSE(opt.step().skipped);
    CHECK_FALSE(twin.step().skipped);
    CHECK(snapshot(opt, dir) == snapshot(twin, temp_dir("twin")));
  }
}

TEST_CASE("GRPO reports an optimizer refusal and leaves the policy's weights as they were",
          "[grpo][nonfinite]") {
  torch::manual_seed(11);
  model::Transformer policy(test::tiny_llama(99), torch::kFloat32);
  rl::OptimizerConfig oc;
  oc.name = "adam";
  oc.weight_decay = 1e30;
  rl::MasterAdam opt(*policy, oc);
  std::vector<std::vector<uint8_t>> before;
  for (const auto& v : opt.bf16_views()) before.emplace_back(v.data, v.data + v.nbytes);
  std::vector<rl::Rollout> rollouts(4);
  for (size_t i = 0; i < rollouts.size(); ++i) {
    rollouts[i].group = 0;
    rollouts[i].prompt_ids = {1, 10, 11};
    rollouts[i].response_ids = {static_cast<int32_t>(20 + i), 2};
    rollouts[i].sampler_logprobs = {-4.6f, -4.6f};
    rollouts[i].reward = i % 2 == 0 ? 1.0 : 0.0;
  }
  rl::GrpoConfig gc;
  gc.sampling.temperature = 1.0;
  const auto st = rl::grpo_step(*policy, opt, rollouts, gc);
  CHECK(st.skipped);
  CHECK(st.skip_reason == rl::StepSkip::NonFiniteUpdate);
  CHECK_FALSE(st.skip_detail.empty());
  CHECK(st.bf16_changed == 0);
  std::vector<std::vector<uint8_t>> after;
  for (const auto& v : opt.bf16_views()) after.emplace_back(v.data, v.data + v.nbytes);
  CHECK(after == before);
  for (const auto& p : policy->parameters()) CHECK(torch::isfinite(p).all().item<bool>());
}

TEST_CASE("a MasterAdam state holding NaN/Inf is refused at load, naming tensor and element",
          "[optimizer][nonfinite]") {
  const std::string dir = temp_dir("state");
  Pair m(64, 8);
  rl::MasterAdam opt(m, rl::OptimizerConfig{});
  warm_step(m, opt);
  const std::string good = dir + "/good.safetensors", bad = dir + "/bad.safetensors";
  opt.save_state(good);

  Pair m2(64, 8);
  rl::MasterAdam fresh(m2, rl::OptimizerConfig{});
  const Snapshot before = snapshot(fresh, dir);
  {
    Tensors t(good);
    put_f32(t.of("exp_avg/b.weight"), 3, std::numeric_limits<float>::quiet_NaN());
    t.write(bad);
  }
  CHECK_THROWS_WITH(fresh.load_state(bad),
                    Catch::Equals(bad + ": tensor 'exp_avg/b.weight' element 3 is NaN"));
  CHECK(snapshot(fresh, dir) == before);  // nothing was copied
  {
    Tensors t(good);
    put_f32(t.of("master/a.weight"), 40, -std::numeric_limits<float>::infinity());
    t.write(bad);
  }
  CHECK_THROWS_WITH(fresh.load_state(bad),
                    Catch::Equals(bad + ": tensor 'master/a.weight' element 40 is -Inf"));
  CHECK(snapshot(fresh, dir) == before);
  fresh.load_state(good);  // the untouched file still loads
  CHECK(fresh.step_count() == 1);
}

TEST_CASE("an HF checkpoint holding NaN/Inf is refused at load, naming tensor and element",
          "[checkpoint][nonfinite]") {
  const std::string dir = temp_dir("hf");
  torch::manual_seed(5);
  model::Transformer src(test::tiny_llama(99), torch::kBFloat16);
  model::save_hf_checkpoint(*src, dir + "/good");
  const std::string file = dir + "/good/model.safetensors";
  const std::string name = "model.layers.0.mlp.up_proj.weight";

  SECTION("a BF16 NaN in the file") {
    Tensors t(file);
    auto& bytes = t.of(name);
    const uint16_t nan_bits = 0x7FC0;
    std::memcpy(bytes.data() + 2 * 1234, &nan_bits, 2);
    const std::string bad = dir + "/nan.safetensors";
    t.write(bad);
    model::Transformer dst(test::tiny_llama(99), torch::kBFloat16);
    CHECK_THROWS_WITH(model::load_hf_weights(*dst, bad),
                      Catch::Equals(bad + ": tensor '" + name + "' element 1234 is NaN"));
    model::load_hf_weights(*dst, file);  // the original loads
  }

  SECTION("an F32 value finite in the file but Inf after the cast to BF16") {
    model::Transformer f32(test::tiny_llama(99), torch::kFloat32);
    model::load_hf_weights(*f32, file);
    std::vector<torch::Tensor> keep;
    std::vector<sync::TensorView> views;
    for (const auto& p : f32->named_parameters()) {
      auto t = p.value().detach().contiguous().clone();
      if (p.key() == name) t.view({-1})[7] = std::numeric_limits<float>::max();  // BF16 RNE -> +Inf
      keep.push_back(t);
      views.push_back(sync::TensorView{p.key(), sync::DType::F32, t.sizes().vec(),
                                       static_cast<const uint8_t*>(t.data_ptr()),
                                       static_cast<size_t>(t.nbytes())});
    }
    const std::string bad = dir + "/overflow.safetensors";
    sync::write_safetensors(bad, views);
    model::Transformer f32_dst(test::tiny_llama(99), torch::kFloat32);
    model::load_hf_weights(*f32_dst, bad);  // finite in FP32: accepted
    model::Transformer bf16_dst(test::tiny_llama(99), torch::kBFloat16);
    CHECK_THROWS_WITH(
        model::load_hf_weights(*bf16_dst, bad),
        Catch::Equals(bad + ": tensor '" + name + "' element 7 is +Inf after the cast to BFloat16"));
  }

  SECTION("first_nonfinite finds the first bad element in any dtype") {
    auto t = torch::zeros({3, 5}, torch::kFloat32);
    CHECK(model::first_nonfinite(t) == -1);
    t[2][1] = std::numeric_limits<float>::infinity();
    t[2][4] = std::numeric_limits<float>::quiet_NaN();
    CHECK(model::first_nonfinite(t) == 11);
    CHECK(model::first_nonfinite(t.to(torch::kBFloat16)) == 11);
    CHECK(model::first_nonfinite(torch::ones({4}, torch::kInt64)) == -1);
  }
}
