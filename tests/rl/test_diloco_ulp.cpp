// PULSELoCo outer rounds with multi.values = ulp (rl/diloco.h, kernels/loco_ulp.h), two real processes on
// 127.0.0.1 (this test process is rank 0; rank 1 is this executable re-started on "[.diloco_ulp_peer]"):
// with the gate open and every pseudo-gradient an exact multiple of its BF16 step, ulp equals fp32 bit
// for bit; a rank that fires nothing and one that fires many exchange cleanly, each residual being its
// own remainder and the new global the exact mean; a killed peer is named within the timeout, leaving
// the outer state as it was; and a saved outer state resumes exactly.
#include <signal.h>
#include <torch/torch.h>
#include "tests/torch_catch.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "app/free_port.h"
#include "kernels/bf16.h"
#include "kernels/loco_ulp.h"
#include "rl/diloco.h"
#include "rl/process_group.h"
#include "tests/rl/peer_process.h"

namespace {

using pulse::kernels::kLocoUlpEscape;
using pulse::kernels::loco_ulp_step;
using pulse::rl::GroupError;
using pulse::rl::GroupOptions;
using pulse::rl::OuterConfig;
using pulse::rl::OuterOptimizer;
using pulse::rl::TrainerGroup;
using pulse::sync::LocoValues;

const std::vector<std::string> kNames = {"a.weight", "b.weight"};
constexpr double kTimeoutS = 5;

std::vector<at::Tensor> global_weights() {
  torch::manual_seed(7);
  return {torch::randn({64, 33}) * 0.02, torch::randn({1001}) * 0.02};
}

std::vector<at::Tensor> clone_all(const std::vector<at::Tensor>& v) {
  std::vector<at::Tensor> out;
  for (const auto& t : v) out.push_back(t.clone());
  return out;
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * sizeof(float)) == 0;
}

OuterConfig config(LocoValues values, double lr = 0.7, double mu = 0.9, bool open = false) {
  OuterConfig c;
  c.mode = pulse::rl::MultiMode::PulseLoco;
  c.values = values;
  c.outer_lr = lr;
  c.outer_momentum = mu;
  c.gate_open = open;
  c.timeout_s = kTimeoutS;
  return c;
}

/// Local weights l = g - k * step(g), k in {0, 1, 2, 3} with the sign of g (so |l| < |g| and the
/// subtraction is exact): every pseudo-gradient g - l is then exactly k steps. Seeded by rank and round.
std::vector<at::Tensor> step_multiple_locals(const std::vector<at::Tensor>& g, int rank, int round) {
  std::mt19937 rng(1000 + 10 * rank + round);
  std::vector<at::Tensor> out;
  for (const auto& t : g) {
    at::Tensor l = t.clone();
    const float* gp = t.data_ptr<float>();
    float* lp = l.data_ptr<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float k = static_cast<float>(rng() % 4) * (gp[i] < 0 ? -1.0f : 1.0f);
      lp[i] = gp[i] - k * loco_ulp_step(gp[i]);
      REQUIRE(static_cast<double>(gp[i]) - static_cast<double>(lp[i]) ==
              static_cast<double>(k) * loco_ulp_step(gp[i]));
    }
    out.push_back(l);
  }
  return out;
}

/// Rank r's RL-scale local weights for the sparse scenario (computable by every rank).
std::vector<at::Tensor> noisy_locals(const std::vector<at::Tensor>& g, int rank, double scale) {
  torch::manual_seed(100 + rank);
  std::vector<at::Tensor> out;
  for (const auto& t : g) out.push_back(t + torch::randn_like(t) * scale);
  return out;
}

void two_rank_scenario(TrainerGroup& group) {
  const int me = group.rank();
  const auto g = global_weights();
  // 1) Gate open, exact step multiples: ulp == fp32 bit for bit over two rounds (momentum included).
  {
    OuterOptimizer fp32(config(LocoValues::Fp32, 0.7, 0.9, true), g, kNames),
        ulp(config(LocoValues::Ulp, 0.7, 0.9, true), g, kNames);
    for (int round = 0; round < 2; ++round) {
      REQUIRE(same_bits(fp32.global()[0], ulp.global()[0]));
      auto l = step_multiple_locals(fp32.global(), me, round);
      auto l1 = clone_all(l), l2 = clone_all(l);
      const auto sf = fp32.round(l1, group);
      const auto su = ulp.round(l2, group);
      for (size_t t = 0; t < g.size(); ++t) {
        REQUIRE(same_bits(fp32.global()[t], ulp.global()[t]));
        REQUIRE(same_bits(fp32.momentum()[t], ulp.momentum()[t]));
        REQUIRE(same_bits(l1[t], l2[t]));
        REQUIRE(ulp.residual()[t].eq(0.0f).all().item<bool>());  // whole steps: nothing left over
      }
      REQUIRE(sf.fired == sf.elements);
      REQUIRE(su.fired < su.elements);  // k = 0 entries are deferred, not sent
      REQUIRE(su.fired > su.elements / 2);
    }
  }
  // 2) Rank 0 fires nothing, rank 1 many: the residual is each rank's own remainder, the new global the
  //    exact mean (lr 1, momentum 0: g - (sum of rank 1's sent values) / 2).
  {
    OuterOptimizer o(config(LocoValues::Ulp, 1.0, 0.0), g, kNames);
    auto l = me == 0 ? clone_all(g) : noisy_locals(g, 1, 1e-3);
    const auto l1 = noisy_locals(g, 1, 1e-3);  // rank 1's locals, known to both
    const auto st = o.round(l, group);
    uint64_t sent = 0;
    for (size_t t = 0; t < g.size(); ++t) {
      const float* gp = g[t].data_ptr<float>();
      const float* lp = l1[t].data_ptr<float>();
      const float* rp = o.residual()[t].data_ptr<float>();
      const float* np = o.global()[t].data_ptr<float>();
      for (int64_t i = 0; i < g[t].numel(); ++i) {
        const float s = 0.0f + (gp[i] - lp[i]);
        const bool fires =
            pulse::kernels::fp32_to_bf16_rne(gp[i]) != pulse::kernels::fp32_to_bf16_rne(gp[i] - s);
        const float step = loco_ulp_step(gp[i]);
        const bool escape = fires && !(std::fabs(s / step) <= 16777216.0f);  // a tiny |g|: a tiny step
        const float c = fires && !escape ? std::rint(s / step) : 0.0f;
        const float sent_value = escape ? s : c * step;  // c * step is exact
        sent += c != 0.0f || escape;
        if (me == 1) REQUIRE(rp[i] == s - sent_value);
        if (me == 0) REQUIRE(rp[i] == 0.0f);
        REQUIRE(np[i] == gp[i] - (sent_value + 0.0f) / 2.0f);
      }
    }
    REQUIRE(st.fired == (me == 0 ? 0 : sent));
    REQUIRE(sent > st.elements / 4);
  }
}

GroupOptions two_ranks(int rank, int port) {
  GroupOptions o;
  o.rank = rank;
  o.world_size = 2;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.timeout_s = kTimeoutS;
  return o;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("diloco ulp peer (started by the two-process ulp tests)", "[.diloco_ulp_peer]") {
  const char* port = std::getenv("PULSE_ULP_PEER_PORT");
  const char* scenario = std::getenv("PULSE_ULP_PEER_SCENARIO");
  if (!port || !scenario) return;
  TrainerGroup group(two_ranks(1, std::atoi(port)));
  if (std::string(scenario) == "rounds") {
    two_rank_scenario(group);
    return;
  }
  // "round-then-sleep": one ulp round, then idle until killed.
  OuterOptimizer o(config(LocoValues::Ulp), global_weights(), kNames);
  auto l = noisy_locals(global_weights(), 1, 1e-3);
  o.round(l, group);
  std::this_thread::sleep_for(std::chrono::seconds(60));
}

TEST_CASE("two trainers, ulp values: gate-open step multiples == fp32 bit for bit, 0 and many fired",
          "[diloco][ulp]") {
  const int port = pulse::app::free_tcp_port("127.0.0.1");
  pulse::test::TempFolder dir("pulse-test-diloco-ulp");
  pulse::test::PeerProcess peer(
      "[.diloco_ulp_peer]", {"PULSE_ULP_PEER_PORT=" + std::to_string(port), "PULSE_ULP_PEER_SCENARIO=rounds"},
      dir.file("peer.log"));
  {
    TrainerGroup group(two_ranks(0, port));
    two_rank_scenario(group);
  }
  const int rc = peer.wait(120);
  INFO(peer.output());
  REQUIRE(rc == 0);
}

TEST_CASE("two trainers, ulp values: a killed peer is named within the timeout, the outer state kept",
          "[diloco][ulp]") {
  const int port = pulse::app::free_tcp_port("127.0.0.1");
  pulse::test::TempFolder dir("pulse-test-diloco-ulp-kill");
  pulse::test::PeerProcess peer(
      "[.diloco_ulp_peer]",
      {"PULSE_ULP_PEER_PORT=" + std::to_string(port), "PULSE_ULP_PEER_SCENARIO=round-then-sleep"},
      dir.file("peer.log"));
  TrainerGroup group(two_ranks(0, port));
  OuterOptimizer o(config(LocoValues::Ulp), global_weights(), kNames);
  auto l = noisy_locals(global_weights(), 0, 1e-3);
  o.round(l, group);
  ::kill(peer.pid(), SIGKILL);
  REQUIRE(peer.wait(10) == 128 + SIGKILL);
  const auto g_before = clone_all(o.global()), r_before = clone_all(o.residual()),
             m_before = clone_all(o.momentum());
  auto l2 = noisy_locals(o.global(), 0, 1e-3);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    o.round(l2, group);
    FAIL("an outer round with a dead peer returned");
  } catch (const GroupError& e) {
    INFO(e.what());
    CHECK(since(t0) < kTimeoutS + 5);
    CHECK(e.peer_rank() == 1);
    CHECK_THAT(e.what(), Catch::Contains("peer rank 1"));
  }
  CHECK(o.rounds_done() == 1);
  for (size_t t = 0; t < kNames.size(); ++t) {
    CHECK(same_bits(o.global()[t], g_before[t]));
    CHECK(same_bits(o.residual()[t], r_before[t]));
    CHECK(same_bits(o.momentum()[t], m_before[t]));
  }
}

TEST_CASE("ulp outer state: save/load restores residual and momentum exactly, and the rounds continue alike",
          "[diloco][ulp]") {
  GroupOptions one;
  one.master_port = 1;  // world of 1: never opened
  TrainerGroup group(one);
  OuterOptimizer o(config(LocoValues::Ulp), global_weights(), kNames);
  for (int round = 0; round < 3; ++round) {
    auto l = noisy_locals(o.global(), round, 3e-4);
    o.round(l, group);
  }
  bool residual_nonzero = false;
  for (const auto& r : o.residual()) residual_nonzero |= r.ne(0.0f).any().item<bool>();
  REQUIRE(residual_nonzero);  // the remainders are what a resume must not lose
  pulse::test::TempFolder dir("pulse-test-outer-ulp");
  const std::string path = dir.file("outer.safetensors");
  o.save(path);
  OuterOptimizer back(config(LocoValues::Ulp), global_weights(), kNames);
  back.load(path);
  REQUIRE(back.rounds_done() == 3);
  for (size_t t = 0; t < kNames.size(); ++t) {
    REQUIRE(same_bits(back.global()[t], o.global()[t]));
    REQUIRE(same_bits(back.residual()[t], o.residual()[t]));
    REQUIRE(same_bits(back.momentum()[t], o.momentum()[t]));
  }
  auto la = noisy_locals(o.global(), 9, 3e-4), lb = clone_all(la);
  const auto sa = o.round(la, group);
  const auto sb = back.round(lb, group);
  REQUIRE(sa.fired == sb.fired);
  for (size_t t = 0; t < kNames.size(); ++t) {
    REQUIRE(same_bits(back.global()[t], o.global()[t]));
    REQUIRE(same_bits(back.residual()[t], o.residual()[t]));
  }
}
