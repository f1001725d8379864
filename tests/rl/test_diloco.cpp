// DiLoCo / PULSELoCo outer rounds (rl/diloco.h), with a world of 1 and with two real processes on
// 127.0.0.1 (this test process is rank 0; rank 1 is this executable re-started on "[.diloco_peer]"), and
// with the outer state on a CUDA device against the same rounds on the CPU (skipped without CUDA).
#include <torch/cuda.h>
#include <torch/torch.h>
#include "tests/torch_catch.h"

#include <cstring>
#include <filesystem>

#include "app/free_port.h"
#include "kernels/bf16.h"
#include "rl/diloco.h"
#include "rl/process_group.h"
#include "tests/rl/peer_process.h"

namespace {

using pulse::rl::GroupOptions;
using pulse::rl::OuterConfig;
using pulse::rl::OuterOptimizer;
using pulse::rl::TrainerGroup;

const std::vector<std::string> kNames = {"a.weight", "b.weight"};

/// Two tensors of global weights ~ N(0, 0.02), seeded, the same on every rank.
std::vector<at::Tensor> global_weights() {
  torch::manual_seed(7);
  return {torch::randn({64, 33}) * 0.02, torch::randn({1001}) * 0.02};
}

/// Rank r's local weights after its "inner steps": g + a rank-dependent perturbation of RL scale.
std::vector<at::Tensor> local_weights(const std::vector<at::Tensor>& g, int rank, double scale) {
  torch::manual_seed(100 + rank);
  std::vector<at::Tensor> out;
  for (const auto& t : g) out.push_back(t + torch::randn_like(t) * scale);
  return out;
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * sizeof(float)) == 0;
}

std::vector<at::Tensor> clone_all(const std::vector<at::Tensor>& v) {
  std::vector<at::Tensor> out;
  for (const auto& t : v) out.push_back(t.clone());
  return out;
}

OuterConfig config(pulse::rl::MultiMode mode, double lr = 0.7, double mu = 0.9, bool open = false) {
  OuterConfig c;
  c.mode = mode;
  c.outer_lr = lr;
  c.outer_momentum = mu;
  c.gate_open = open;
  c.timeout_s = 60;
  return c;
}

/// The scenario both ranks run in the two-process test; REQUIREs on every result.
void two_rank_scenario(TrainerGroup& group) {
  const int me = group.rank();
  const auto g = global_weights();
  // 1) pulseloco with the gate forced open equals diloco bit for bit (two rounds: momentum included).
  {
    OuterOptimizer dense(config(pulse::rl::MultiMode::Diloco), g, kNames),
        open(config(pulse::rl::MultiMode::PulseLoco, 0.7, 0.9, true), g, kNames);
    for (int round = 0; round < 2; ++round) {
      auto l = local_weights(dense.global(), me, 1e-3 * (round + 1));
      auto l1 = clone_all(l), l2 = clone_all(l);
      auto sd = dense.round(l1, group);
      auto so = open.round(l2, group);
      for (size_t t = 0; t < g.size(); ++t) {
        REQUIRE(same_bits(dense.global()[t], open.global()[t]));
        REQUIRE(same_bits(l1[t], dense.global()[t]));  // local := global
        REQUIRE(same_bits(dense.momentum()[t], open.momentum()[t]));
      }
      REQUIRE(so.fired == sd.fired);
      REQUIRE(sd.dense_bytes == 4 * sd.elements);
    }
  }
  // 2) lr 1, momentum 0, gate open: the new global is exactly the mean of the local weights (dyadic values),
  //    and a round whose locals did not move leaves it unchanged (the outer gradient does not carry over).
  {
    std::vector<at::Tensor> g1 = {torch::full({5}, 1.0f), torch::full({3}, -2.0f)};
    OuterOptimizer o(config(pulse::rl::MultiMode::PulseLoco, 1.0, 0.0, true), g1, kNames);
    std::vector<at::Tensor> l = {torch::full({5}, me == 0 ? 0.5f : 0.25f),
                                 torch::full({3}, me == 0 ? -1.0f : -4.0f)};
    o.round(l, group);
    REQUIRE(o.global()[0].eq(0.375f).all().item<bool>());
    REQUIRE(o.global()[1].eq(-2.5f).all().item<bool>());
    auto again = clone_all(o.global());
    o.round(again, group);
    REQUIRE(o.global()[0].eq(0.375f).all().item<bool>());
    REQUIRE(o.global()[1].eq(-2.5f).all().item<bool>());
  }
  // 3) sparse exchange: rank 0 fires nothing (its locals equal the global), rank 1 fires many; the sum is
  //    rank 1's sent values / 2; each rank's residual is what it did not send (a local quantity).
  {
    OuterOptimizer o(config(pulse::rl::MultiMode::PulseLoco, 1.0, 0.0), g, kNames);
    auto l = me == 0 ? clone_all(g) : local_weights(g, 1, 0.01);
    auto before = clone_all(l);
    auto st = o.round(l, group);
    if (me == 0) REQUIRE(st.fired == 0);
    if (me == 1) REQUIRE(st.fired > st.elements / 2);
    for (size_t t = 0; t < g.size(); ++t) {
      const float* gp = g[t].data_ptr<float>();
      const float* lp = before[t].data_ptr<float>();
      const float* rp = o.residual()[t].data_ptr<float>();
      for (int64_t i = 0; i < g[t].numel(); ++i) {
        const float s = 0.0f + (gp[i] - lp[i]);
        const bool fires =
            pulse::kernels::fp32_to_bf16_rne(gp[i]) != pulse::kernels::fp32_to_bf16_rne(gp[i] - s);
        REQUIRE(rp[i] == (fires ? 0.0f : s));
      }
    }
    REQUIRE(st.payload_bytes > 0);
  }
}

GroupOptions two_ranks(int rank, int port) {
  GroupOptions o;
  o.rank = rank;
  o.world_size = 2;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.timeout_s = 60;
  return o;
}

}  // namespace

TEST_CASE("diloco peer (started by the two-process outer round test)", "[.diloco_peer]") {
  const char* port = std::getenv("PULSE_DILOCO_PEER_PORT");
  if (!port) return;
  TrainerGroup g(two_ranks(1, std::atoi(port)));
  two_rank_scenario(g);
}

TEST_CASE("two trainers: gate-open PULSELoCo == DiLoCo, exact mean, sparse exchange with 0 and many fired",
          "[diloco]") {
  const int port = pulse::app::free_tcp_port("127.0.0.1");
  pulse::test::TempFolder dir("pulse-test-diloco");
  pulse::test::PeerProcess peer("[.diloco_peer]", {"PULSE_DILOCO_PEER_PORT=" + std::to_string(port)},
                                dir.file("peer.log"));
  {
    TrainerGroup g(two_ranks(0, port));
    two_rank_scenario(g);
  }
  const int rc = peer.wait(120);
  INFO(peer.output());
  REQUIRE(rc == 0);
}

TEST_CASE("outer state: the gate and error feedback with one trainer, and save/load restores it exactly",
          "[diloco]") {
  GroupOptions one;
  one.master_port = 1;  // world of 1: never opened
  TrainerGroup group(one);
  const auto g = global_weights();
  OuterOptimizer o(config(pulse::rl::MultiMode::PulseLoco), g, kNames);
  for (int round = 0; round < 3; ++round) {
    auto l = local_weights(o.global(), 0, 3e-4);
    const auto g_before = clone_all(o.global()), r_before = clone_all(o.residual()), l_before = clone_all(l);
    auto st = o.round(l, group);
    // Mass conservation: this rank's s = residual + delta is either sent (then averaged over W = 1 and
    // applied) or kept in the residual; with W = 1 the averaged pseudo-gradient is the sent part.
    uint64_t fired = 0;
    for (size_t t = 0; t < g.size(); ++t) {
      const float* gp = g_before[t].data_ptr<float>();
      const float* lp = l_before[t].data_ptr<float>();
      const float* rb = r_before[t].data_ptr<float>();
      const float* ra = o.residual()[t].data_ptr<float>();
      for (int64_t i = 0; i < g[t].numel(); ++i) {
        const float s = rb[i] + (gp[i] - lp[i]);
        const bool fires =
            pulse::kernels::fp32_to_bf16_rne(gp[i]) != pulse::kernels::fp32_to_bf16_rne(gp[i] - s);
        fired += fires;
        REQUIRE(ra[i] == (fires ? 0.0f : s));
      }
    }
    REQUIRE(st.fired == fired);
    REQUIRE(st.fired < st.elements);  // RL-scale updates: most entries wait in the residual
  }
  const auto dir =
      std::filesystem::temp_directory_path() / ("pulse-test-outer-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "outer.safetensors").string();
  o.save(path);
  OuterOptimizer back(config(pulse::rl::MultiMode::PulseLoco), global_weights(), kNames);
  back.load(path);
  REQUIRE(back.rounds_done() == 3);
  for (size_t t = 0; t < g.size(); ++t) {
    REQUIRE(same_bits(back.global()[t], o.global()[t]));
    REQUIRE(same_bits(back.residual()[t], o.residual()[t]));
    REQUIRE(same_bits(back.momentum()[t], o.momentum()[t]));
  }
  std::filesystem::remove_all(dir);
  REQUIRE_THROWS_WITH(back.load(path), Catch::Contains("outer.safetensors"));
}

namespace {

std::vector<at::Tensor> to_device(const std::vector<at::Tensor>& v, const torch::Device& d) {
  std::vector<at::Tensor> out;
  for (const auto& t : v) out.push_back(t.to(d).clone());
  return out;
}

bool same_bits_anywhere(const at::Tensor& a, const at::Tensor& b) {
  return same_bits(a.to(torch::kCPU).contiguous(), b.to(torch::kCPU).contiguous());
}

}  // namespace

TEST_CASE("GPU: DiLoCo and PULSELoCo rounds with the outer state on CUDA equal the CPU rounds bit for bit",
          "[gpu][diloco]") {
  if (!torch::cuda::is_available()) {
    WARN("skipped: no CUDA device or a LibTorch without CUDA (torch::cuda::is_available() is false)");
    return;
  }
  const torch::Device cuda(torch::kCUDA, 0);
  GroupOptions one;
  one.master_port = 1;  // world of 1: never opened
  TrainerGroup group(one);
  const auto g = global_weights();
  for (const auto mode : {pulse::rl::MultiMode::PulseLoco, pulse::rl::MultiMode::Diloco}) {
    INFO("mode " << pulse::rl::name_of(mode));
    OuterOptimizer cpu(config(mode), g, kNames), gpu(config(mode), to_device(g, cuda), kNames);
    REQUIRE(gpu.global()[0].is_cuda());
    for (int round = 0; round < 3; ++round) {
      auto l_cpu = local_weights(cpu.global(), 0, 3e-4);
      auto l_gpu = to_device(l_cpu, cuda);
      const auto sc = cpu.round(l_cpu, group);
      const auto sg = gpu.round(l_gpu, group);
      REQUIRE(sg.fired == sc.fired);
      if (mode == pulse::rl::MultiMode::PulseLoco)
        REQUIRE(sc.fired < sc.elements);  // the gate held most entries back
      CHECK(sg.pseudo_grad_norm == Approx(sc.pseudo_grad_norm).epsilon(1e-5));
      for (size_t t = 0; t < g.size(); ++t) {
        REQUIRE(l_gpu[t].is_cuda());
        REQUIRE(same_bits_anywhere(gpu.global()[t], cpu.global()[t]));
        REQUIRE(same_bits_anywhere(gpu.residual()[t], cpu.residual()[t]));
        REQUIRE(same_bits_anywhere(gpu.momentum()[t], cpu.momentum()[t]));
        REQUIRE(same_bits_anywhere(l_gpu[t], l_cpu[t]));  // local := global on both
      }
    }
    // The device state saves as host FP32 and loads into a CPU optimizer unchanged.
    const auto dir =
        std::filesystem::temp_directory_path() / ("pulse-test-outer-gpu-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "outer.safetensors").string();
    gpu.save(path);
    OuterOptimizer back(config(mode), global_weights(), kNames);
    back.load(path);
    std::filesystem::remove_all(dir);
    for (size_t t = 0; t < g.size(); ++t) {
      REQUIRE(same_bits(back.global()[t], cpu.global()[t]));
      REQUIRE(same_bits(back.residual()[t], cpu.residual()[t]));
      REQUIRE(same_bits(back.momentum()[t], cpu.momentum()[t]));
    }
  }
}
