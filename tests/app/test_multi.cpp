// Multi-trainer runs end to end: `pulse launch --nproc 2` of the tiny config with PULSELoCo outer rounds,
// each trainer with its own inference workers on loopback HTTP; and a rank killed mid-run.
#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>
#include <sstream>

#include "app/free_port.h"
#include "app/run/run_files.h"
#include "sync/io/atomic_file.h"
#include "sync/io/safetensors.h"
#include "tests/app/run_test_util.h"

using nlohmann::json;
using namespace pulse::test_run;

namespace {

/// The tiny run as two trainers: 4 GRPO steps = 2 outer rounds of 2 local steps, one worker each.
std::vector<std::string> two_trainers(const std::string& cfg, const std::string& run,
                                      const std::string& mode) {
  return {"launch",
          "--nproc",
          "2",
          cfg,
          "--quiet",
          "--set",
          "multi.mode=" + mode,
          "--set",
          "multi.inner_steps=2",
          "--set",
          "run.workers=1",
          "--set",
          "run.checkpoint_every=2",
          "--set",
          "multi.timeout_s=30",
          "--set",
          "run.dir=" + run};
}

}  // namespace

TEST_CASE(
    "pulse launch --nproc 2, pulseloco: both trainers end on the same global weights, bit-identical workers",
    "[app][multi]") {
  const std::string dir = temp_dir("multi");
  const std::string cfg = write_tiny_config(dir), run = dir + "/run";
  pid_t pid = spawn_pulse(two_trainers(cfg, run, "pulseloco"), dir + "/launch");
  REQUIRE(wait_exit(pid) == 0);
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const std::string rd = run + "/rank-" + std::to_string(rank);
    json s = pulse::app::read_json(rd + "/summary.json");
    CHECK(s["steps"] == 4);
    CHECK(s["bit_identical_every_step"] == true);
    CHECK(s["multi"]["mode"] == "pulseloco");
    CHECK(s["multi"]["world_size"] == 2);
    CHECK(s["multi"]["rounds"] == 2);
    const double fired = s["multi"]["mean_fired_fraction"].get<double>();
    CHECK(fired > 0.0);
    CHECK(fired < 1.0);  // only the entries that change BF16 weights are sent
    CHECK(s["multi"]["comm_payload_bytes_total"].get<uint64_t>() > 0);
    // The dense exchanges of the same run: an FP32 tensor per parameter per outer round (DiLoCo) or per
    // step (DDP: 4 steps = 2 rounds of 2); PULSELoCo hands less than dense DiLoCo to the collectives.
    const uint64_t diloco = s["multi"]["dense_diloco_bytes_equivalent"].get<uint64_t>();
    CHECK(diloco % 8 == 0);  // 4 bytes x params x 2 rounds
    CHECK(s["multi"]["ddp_bytes_equivalent"].get<uint64_t>() == 2 * diloco);
    CHECK(s["multi"]["comm_payload_bytes_total"].get<uint64_t>() < diloco);
    auto rows = pulse::app::MetricsLog::read(rd + "/metrics.jsonl");
    REQUIRE(rows.size() == 4);
    CHECK(rows[1].contains("fired_fraction"));  // the round ends after steps 1 and 3 (0-based)
    CHECK_FALSE(rows[0].contains("fired_fraction"));
  }
  // The outer rounds leave every trainer on the same global weights: the last checkpoints are equal.
  auto weights = [&](int rank) {
    return pulse::sync::read_file(run + "/rank-" + std::to_string(rank) +
                                  "/checkpoints/step-000004/model/model.safetensors");
  };
  CHECK(weights(0) == weights(1));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a trainer killed mid-run makes the launch stop the other and exit non-zero", "[app][multi]") {
  const std::string dir = temp_dir("multi-kill");
  const std::string cfg = write_tiny_config(dir), run = dir + "/run";
  auto args = two_trainers(cfg, run, "diloco");
  args.push_back("--set");
  args.push_back("rl.steps=40");  // long enough to be killed mid-run
  pid_t pid = spawn_pulse(args, dir + "/launch");
  // Kill rank 1's trainer (not the launcher) once it has checkpointed step 2.
  const std::string rank1 = run + "/rank-1";
  bool killed = false;
  for (int i = 0; i < 6000 && !killed; ++i) {
    if (latest_step(rank1) >= 2) {
      std::string pids = pulse::sync::read_file("/proc/" + std::to_string(pid) + "/task/" +
                                                std::to_string(pid) + "/children");
      std::istringstream in(pids);
      pid_t child = 0, second = 0;
      in >> child >> second;  // rank 0, rank 1 (started in rank order)
      REQUIRE(second > 0);
      ::kill(second, SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(killed);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = wait_exit(pid);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(rc != 0);
  CHECK(secs < 60);  // multi.timeout_s = 30 plus the launcher's grace period
  const std::string err = pulse::sync::read_file(dir + "/launch.err");
  INFO(err);
  CHECK(err.find("rank 1") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "pulse launch --resume when the ranks' latest checkpoints differ: every rank resumes from the older",
    "[app][multi][resume]") {
  // Each rank writes its own checkpoints/LATEST: a kill between two ranks' writes leaves rank 0 at step 4
  // and rank 1 at step 2. Each resumed from its own, so rank 0 finished at once while rank 1 ran step 3
  // alone and failed with "peer rank 0 closed the connection".
  const std::string dir = temp_dir("multi-resume-skew");
  const std::string cfg = write_tiny_config(dir), run = dir + "/run";
  REQUIRE(wait_exit(spawn_pulse(two_trainers(cfg, run, "pulseloco"), dir + "/launch")) == 0);
  auto weights = [&](int rank) {
    return pulse::sync::read_file(run + "/rank-" + std::to_string(rank) +
                                  "/checkpoints/step-000004/model/model.safetensors");
  };
  const std::string final_weights = weights(0);
  const auto rows_before = pulse::app::MetricsLog::read(run + "/rank-0/metrics.jsonl");
  REQUIRE(latest_step(run + "/rank-1") == 4);
  pulse::sync::write_file_atomic(run + "/rank-1/checkpoints/LATEST", std::string("2\n"));
  REQUIRE(wait_exit(spawn_pulse({"launch", "--nproc", "2", "--resume", run}, dir + "/resumed")) == 0);
  const std::string err = pulse::sync::read_file(dir + "/resumed.err");
  INFO(err);
  CHECK(err.find(
            "the ranks' latest checkpoints differ (rank 0: 4, rank 1: 2): every rank resumes from step 2") !=
        std::string::npos);
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const std::string rd = run + "/rank-" + std::to_string(rank);
    CHECK(latest_step(rd) == 4);
    CHECK(pulse::app::MetricsLog::read(rd + "/metrics.jsonl").size() == 4);
    CHECK(weights(rank) == final_weights);  // steps 3-4 again, from the same state: the same weights
  }
  const auto rows_after = pulse::app::MetricsLog::read(run + "/rank-0/metrics.jsonl");
  REQUIRE(rows_after.size() == rows_before.size());
  for (size_t i = 0; i < rows_after.size(); ++i)
    CHECK(rows_after[i]["reward_mean"] == rows_before[i]["reward_mean"]);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a rank whose port is taken stops every rank of a new launch, and no run directory is left",
          "[app][multi]") {
  ScopedTempDir dir("multi-port-taken");
  const std::string cfg = write_tiny_config(dir), run = dir.path + "/run";
  ::setenv("PULSE_TOKEN", "multi-port-token", 1);
  // Rank r listens on port + 2r (control) and port + 2r + 1 (patches): rank 1's control port is taken.
  const int port = pulse::app::free_tcp_port("127.0.0.1", 4);
  auto holder = std::make_unique<PortHolder>(port + 2);
  pid_t pid = spawn_pulse({"launch", "--nproc", "2", "--", "trainer", cfg, "--quiet", "--set",
                           "multi.mode=ddp", "--set", "run.workers=1", "--set", "multi.timeout_s=30", "--set",
                           "transport.port=" + std::to_string(port), "--set", "run.dir=" + run},
                          dir.path + "/launch");
  CHECK(wait_exit(pid) != 0);
  holder.reset();
  ::unsetenv("PULSE_TOKEN");
  const std::string err = pulse::sync::read_file(dir.path + "/launch.err");
  CHECK_THAT(err, Catch::Contains("control server: cannot bind 127.0.0.1:" + std::to_string(port + 2)));
  CHECK_THAT(err, Catch::Contains("trainer rank 1 could not set up"));  // rank 0, before its SFT
  CHECK_FALSE(std::filesystem::exists(run));
}
