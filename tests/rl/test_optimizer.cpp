// MasterAdam, LR schedules, the BF16 cast and training-state round trips.
// LibTorch before Catch2: c10/glog define a CHECK macro that Catch2's must replace (as with the PCH).
#include <torch/torch.h>

#include "tests/torch_catch.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "kernels/bf16.h"
#include "rl/optimizer.h"
#include "rl/train_state.h"
#include "sync/io/atomic_file.h"
#include "sync/io/safetensors.h"
#include "tests/temp_dir.h"

using namespace pulse;

namespace {

/// A module with named parameters "a.weight" [n] and "b.weight" [m] (no bias), dtype chosen.
struct Two : torch::nn::Module {
  torch::Tensor a, b;
  Two(int64_t n, int64_t m, torch::Dtype dt) {
    auto ma = register_module("a", std::make_shared<torch::nn::Module>());
    auto mb = register_module("b", std::make_shared<torch::nn::Module>());
    a = ma->register_parameter("weight", torch::zeros({n}, dt));
    b = mb->register_parameter("weight", torch::zeros({m}, dt));
  }
};

/// Sets the gradients of a module's parameters directly.
void set_grad(torch::Tensor& p, const torch::Tensor& g) {
  p.mutable_grad() = g.to(p.scalar_type());
}

std::vector<uint16_t> bits_of(const sync::TensorView& v) {
  std::vector<uint16_t> out(v.nbytes / 2);
  std::memcpy(out.data(), v.data, v.nbytes);
  return out;
}

std::string temp_dir(const std::string& tag) {
  return test::process_temp_dir("pulse_test_opt_", tag);
}

/// One FP32 tensor of the optimizer state ("master/a.weight", "exp_avg/b.weight", ...), read back from
/// save_state.
std::vector<float> state_tensor(const rl::MasterAdam& opt, const std::string& name) {
  const std::string path = temp_dir("state") + "/s.safetensors";
  opt.save_state(path);
  auto file = sync::SafetensorsFile::open(path);
  for (const auto& v : file.tensors()) {
    if (v.name != name) continue;
    std::vector<float> out(v.nbytes / 4);
    std::memcpy(out.data(), v.data, v.nbytes);
    return out;
  }
  FAIL("no tensor " << name);
  return {};
}

float bf16_round(double x) {
  return kernels::bf16_to_fp32(kernels::fp32_to_bf16_rne(static_cast<float>(x)));
}

}  // namespace

TEST_CASE("lr schedules follow their formulas", "[optimizer][lr]") {
  rl::OptimizerConfig c;
  c.lr = 1.0;
  CHECK(rl::lr_at_step(c, 0) == 1.0);
  CHECK(rl::lr_at_step(c, 1000) == 1.0);

  c.schedule = rl::LrSchedule::LinearWarmup;
  c.warmup_steps = 4;
  CHECK(rl::lr_at_step(c, 0) == Approx(0.25));
  CHECK(rl::lr_at_step(c, 2) == Approx(0.75));
  CHECK(rl::lr_at_step(c, 3) == Approx(1.0));
  CHECK(rl::lr_at_step(c, 50) == Approx(1.0));

  c.schedule = rl::LrSchedule::Cosine;
  c.warmup_steps = 2;
  c.total_steps = 6;
  c.min_lr_ratio = 0.1;
  CHECK(rl::lr_at_step(c, 0) == Approx(0.5));
  CHECK(rl::lr_at_step(c, 2) == Approx(1.0));                                         // p = 0
  CHECK(rl::lr_at_step(c, 3) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4))));  // p = 1/4
  CHECK(rl::lr_at_step(c, 4) == Approx(0.55));                                        // p = 1/2
  CHECK(rl::lr_at_step(c, 6) == Approx(0.1));
  CHECK(rl::lr_at_step(c, 60) == Approx(0.1));

  c.total_steps = 0;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("optimizer.total_steps"));
  c = rl::OptimizerConfig{};
  c.beta2 = 1.0;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("optimizer.beta2: must be < 1"));
}

TEST_CASE("torch's BF16 cast equals the kernels RNE reference bit for bit", "[optimizer][bf16]") {
  std::mt19937_64 rng(7);
  std::vector<uint32_t> patterns;
  for (int i = 0; i < 200000; ++i) patterns.push_back(static_cast<uint32_t>(rng()));
  // Exact ties (low half 0x8000) with even and odd kept bit, around 1.0, denormals, the overflow edge.
  for (uint32_t hi : {0x3f80u, 0x3f81u, 0x0001u, 0x0002u, 0x7f7eu, 0x7f7fu, 0xbf80u, 0xbf81u, 0x8001u}) {
    for (uint32_t lo : {0x8000u, 0x7fffu, 0x8001u, 0x0000u, 0xffffu}) patterns.push_back((hi << 16) | lo);
  }
  patterns.push_back(0x7f800000u);  // +inf
  patterns.push_back(0xff800000u);  // -inf
  std::vector<float> values;
  for (uint32_t p : patterns) {
    float f;
    std::memcpy(&f, &p, 4);
    if (!std::isnan(f)) values.push_back(f);  // masters are never NaN: a non-finite step is skipped
  }
  auto src = torch::from_blob(values.data(), {static_cast<int64_t>(values.size())}, torch::kFloat32);

  // Through MasterAdam's one cast: the module starts with these FP32 values.
  Two m(static_cast<int64_t>(values.size()), 1, torch::kFloat32);
  {
    torch::NoGradGuard g;
    m.a.copy_(src);
  }
  rl::MasterAdam opt(m, rl::OptimizerConfig{});
  auto views = opt.bf16_views();
  REQUIRE(views.size() == 2);
  REQUIRE(views[0].name == "a.weight");
  std::vector<uint16_t> got = bits_of(views[0]);
  std::vector<uint16_t> want(values.size());
  kernels::fp32_to_bf16_rne(values.data(), want.data(), values.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < values.size(); ++i) mismatches += got[i] != want[i];
  CHECK(mismatches == 0);
  // The model now holds exactly those BF16 values.
  for (size_t i = 0; i < values.size(); i += 997) {
    const float model_value = m.a[static_cast<int64_t>(i)].item<float>();
    const float ref = kernels::bf16_to_fp32(want[i]);
    CHECK(std::memcmp(&model_value, &ref, 4) == 0);
  }
}

TEST_CASE("one AdamW step matches the hand-computed update", "[optimizer]") {
  Two m(1, 1, torch::kFloat32);
  {
    torch::NoGradGuard g;
    m.a.fill_(1.0f);
    m.b.fill_(-2.0f);
  }
  rl::OptimizerConfig c;
  c.name = "adamw";
  c.lr = 0.1;
  c.weight_decay = 0.5;
  c.grad_clip = 0;
  rl::MasterAdam opt(m, c);
  set_grad(m.a, torch::full({1}, 0.5f));
  set_grad(m.b, torch::full({1}, -0.25f));
  auto st = opt.step();
  CHECK(st.step == 1);
  CHECK(st.lr == 0.1);
  CHECK(st.grad_norm == Approx(std::sqrt(0.25 + 0.0625)));
  // First step, bias-corrected: mhat = g, vhat = g^2, so the Adam update is g/(|g|+eps).
  // AdamW: w <- w*(1 - lr*wd) - lr*g/(|g|+eps).
  const double a = 1.0 * (1 - 0.1 * 0.5) - 0.1 * (0.5 / (0.5 + 1e-8));
  const double b = -2.0 * (1 - 0.1 * 0.5) - 0.1 * (-0.25 / (0.25 + 1e-8));
  CHECK(state_tensor(opt, "master/a.weight")[0] == Approx(a).epsilon(1e-6));
  CHECK(state_tensor(opt, "master/b.weight")[0] == Approx(b).epsilon(1e-6));
  CHECK(state_tensor(opt, "exp_avg/a.weight")[0] == Approx(0.1 * 0.5));
  CHECK(state_tensor(opt, "exp_avg_sq/b.weight")[0] == Approx(0.01 * 0.0625));
  // The model holds the BF16 cast of the masters.
  CHECK(m.a.item<float>() == bf16_round(a));
  CHECK(m.b.item<float>() == bf16_round(b));
}

TEST_CASE("Adam (L2) adds weight decay to the gradient", "[optimizer]") {
  Two m(1, 1, torch::kFloat32);
  {
    torch::NoGradGuard g;
    m.a.fill_(2.0f);
  }
  rl::OptimizerConfig c;
  c.name = "adam";
  c.lr = 0.01;
  c.weight_decay = 0.1;
  c.grad_clip = 0;
  rl::MasterAdam opt(m, c);
  set_grad(m.a, torch::full({1}, 0.3f));
  set_grad(m.b, torch::zeros({1}));
  opt.step();
  // g' = 0.3 + 0.1*2 = 0.5; m = 0.1*0.5
  CHECK(state_tensor(opt, "exp_avg/a.weight")[0] == Approx(0.05));
  CHECK(state_tensor(opt, "master/a.weight")[0] == Approx(2.0 - 0.01).epsilon(1e-6));
}

TEST_CASE("global grad-norm clipping scales every gradient by clip/norm", "[optimizer]") {
  Two m(1, 1, torch::kFloat32);
  rl::OptimizerConfig c;
  c.lr = 0.0;
  c.grad_clip = 1.0;
  rl::MasterAdam opt(m, c);
  set_grad(m.a, torch::full({1}, 3.0f));
  set_grad(m.b, torch::full({1}, 4.0f));
  auto st = opt.step();
  CHECK(st.grad_norm == Approx(5.0));
  // exp_avg = (1 - beta1) * g * (1/5)
  CHECK(state_tensor(opt, "exp_avg/a.weight")[0] == Approx(0.1 * 0.6).epsilon(1e-5));
  CHECK(state_tensor(opt, "exp_avg/b.weight")[0] == Approx(0.1 * 0.8).epsilon(1e-5));

  // Below the threshold nothing is scaled.
  set_grad(m.a, torch::full({1}, 0.3f));
  set_grad(m.b, torch::full({1}, 0.4f));
  st = opt.step();
  CHECK(st.grad_norm == Approx(0.5));
  CHECK(state_tensor(opt, "exp_avg/a.weight")[0] == Approx(0.9 * 0.06 + 0.1 * 0.3).epsilon(1e-5));
}

TEST_CASE("micro-batch gradients of a BF16 model are summed in FP32", "[optimizer]") {
  Two m(1, 1, torch::kBFloat16);
  rl::OptimizerConfig c;
  c.lr = 0.0;
  c.grad_clip = 0;
  rl::MasterAdam opt(m, c);
  // 1 + 2^-9 is not representable in BF16 (8 significant bits); the FP32 sum keeps it.
  set_grad(m.a, torch::ones({1}));
  set_grad(m.b, torch::zeros({1}));
  opt.accumulate_grads();
  CHECK_FALSE(m.a.grad().defined());
  set_grad(m.a, torch::full({1}, 1.0f / 512));
  opt.step();
  CHECK(state_tensor(opt, "exp_avg/a.weight")[0] == Approx(0.1 * (1.0 + 1.0 / 512)).epsilon(1e-7));
}

TEST_CASE("bf16_changed counts the BF16 elements whose bit pattern changed", "[optimizer]") {
  const int64_t n = 4096;
  Two m(n, 16, torch::kFloat32);
  {
    torch::NoGradGuard g;
    torch::manual_seed(3);
    m.a.copy_(torch::randn({n}) * 4);
    m.b.copy_(torch::randn({16}));
  }
  rl::OptimizerConfig c;
  c.lr = 1e-3;  // small against |w| ~ 4: only some BF16 values move
  c.grad_clip = 0;
  rl::MasterAdam opt(m, c);
  auto before_a = bits_of(opt.bf16_views()[0]);
  auto before_b = bits_of(opt.bf16_views()[1]);
  set_grad(m.a, torch::randn({n}));
  set_grad(m.b, torch::randn({16}));
  auto st = opt.step();
  auto after_a = bits_of(opt.bf16_views()[0]);
  auto after_b = bits_of(opt.bf16_views()[1]);
  uint64_t changed = 0;
  for (int64_t i = 0; i < n; ++i) changed += before_a[i] != after_a[i];
  for (int i = 0; i < 16; ++i) changed += before_b[i] != after_b[i];
  CHECK(st.elements == static_cast<uint64_t>(n + 16));
  CHECK(st.bf16_changed == changed);
  CHECK(changed > 0);
  CHECK(changed < static_cast<uint64_t>(n));
}

TEST_CASE("a non-finite gradient skips the step", "[optimizer]") {
  Two m(2, 1, torch::kFloat32);
  rl::MasterAdam opt(m, rl::OptimizerConfig{});
  set_grad(m.a, torch::tensor({1.0f, std::nanf("")}));
  auto st = opt.step();
  CHECK(st.skipped);
  CHECK(opt.step_count() == 0);
  CHECK(state_tensor(opt, "master/a.weight")[0] == 0.0f);
}

namespace {

/// A small MLP trained on random data drawn from torch's global RNG: resuming must restore that RNG too.
struct Mlp : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }
};

void train_steps(Mlp& net, rl::MasterAdam& opt, int n) {
  for (int i = 0; i < n; ++i) {
    for (int micro = 0; micro < 2; ++micro) {
      auto x = torch::randn({4, 8});
      auto loss = (net.forward(x) - x.sum(1, true)).pow(2).mean();
      loss.backward();
      opt.accumulate_grads();
    }
    opt.step();
  }
}

std::vector<std::vector<uint16_t>> weights_of(const rl::MasterAdam& opt) {
  std::vector<std::vector<uint16_t>> out;
  for (const auto& v : opt.bf16_views()) out.push_back(bits_of(v));
  return out;
}

}  // namespace

TEST_CASE("training state round trip resumes bit-identically", "[optimizer][train_state]") {
  rl::OptimizerConfig c;
  c.lr = 3e-3;
  c.schedule = rl::LrSchedule::Cosine;
  c.warmup_steps = 1;
  c.total_steps = 10;
  c.weight_decay = 0.01;
  const std::string dir = temp_dir("resume") + "/ckpt";

  torch::manual_seed(11);
  Mlp a;
  rl::MasterAdam opt_a(a, c);
  rl::save_train_state(dir, opt_a, rl::TrainState{});  // an older checkpoint, swapped out below
  train_steps(a, opt_a, 2);
  rl::TrainState st;
  st.step = 2;
  st.data_cursor = 77;
  st.policy_version = 5;
  st.extra_json = R"({"note":"x"})";
  rl::save_train_state(dir, opt_a, st);
  train_steps(a, opt_a, 2);  // uninterrupted
  const auto want = weights_of(opt_a);
  const auto want_master = state_tensor(opt_a, "master/fc1.weight");

  torch::manual_seed(12345);  // a different init and RNG position
  Mlp r;
  rl::MasterAdam opt_r(r, c);
  rl::TrainState back = rl::load_train_state(dir, opt_r);
  CHECK(back.step == 2);
  CHECK(back.data_cursor == 77);
  CHECK(back.policy_version == 5);
  CHECK(back.extra_json == R"({"note":"x"})");
  CHECK(opt_r.step_count() == 2);
  train_steps(r, opt_r, 2);
  CHECK(weights_of(opt_r) == want);
  CHECK(state_tensor(opt_r, "master/fc1.weight") == want_master);
  CHECK(std::filesystem::exists(dir + "/optimizer.safetensors"));
  CHECK_FALSE(std::filesystem::exists(dir + ".tmp"));
  CHECK_FALSE(std::filesystem::exists(dir + ".old"));

  // "rng_state", which earlier versions wrote, is ignored on load.
  auto j = nlohmann::json::parse(pulse::sync::read_file(dir + "/train_state.json"));
  CHECK_FALSE(j.contains("rng_state"));
  j["rng_state"] = "mt 1 2 3";
  pulse::sync::write_file_atomic(dir + "/train_state.json", j.dump());
  rl::MasterAdam opt_old(r, c);
  CHECK(rl::load_train_state(dir, opt_old).data_cursor == 77);
}

TEST_CASE("loading a state into a different model fails naming the file", "[optimizer][train_state]") {
  Two m(3, 2, torch::kFloat32);
  rl::MasterAdam opt(m, rl::OptimizerConfig{});
  const std::string path = temp_dir("mismatch") + "/s.safetensors";
  opt.save_state(path);
  Two other(4, 2, torch::kFloat32);
  rl::MasterAdam opt2(other, rl::OptimizerConfig{});
  CHECK_THROWS_WITH(opt2.load_state(path), Catch::Contains(path) && Catch::Contains("master/a.weight"));
  CHECK_THROWS_WITH(rl::load_train_state(temp_dir("missing"), opt2), Catch::Contains("train_state.json"));
}
