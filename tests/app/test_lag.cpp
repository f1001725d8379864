// rl.max_lag = 1 end to end: the workers sample step s+1 at version s while the trainer takes step s.
// A tiny run (lag 1 after the first step, workers bit-identical at every version) and kill -9 + --resume
// reproducing the uninterrupted lagged run (the in-flight rollouts travel in the checkpoint).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "app/config.h"
#include "app/job.h"
#include "app/run/run_files.h"
#include "sync/io/atomic_file.h"
#include "tests/app/run_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace pulse::test_run;

TEST_CASE("rl.max_lag accepts 0 and 1 only", "[app][config][lag]") {
  std::string dir = temp_dir("lag-config");
  std::string cfg = write_tiny_config(dir);
  CHECK(pulse::app::load_config(cfg, {"rl.max_lag=1"}).rl.max_lag == 1);
  CHECK_THROWS_WITH(pulse::app::load_config(cfg, {"rl.max_lag=2"}), Catch::Contains("rl.max_lag"));
  fs::remove_all(dir);
}

TEST_CASE("tiny pulse run with max_lag = 1: lag 1 after the first step, bit-identical", "[app][e2e][lag]") {
  std::string dir = temp_dir("lag-e2e");
  std::string cfg = write_tiny_config(dir);
  pulse::app::JobOptions o;
  o.config_path = cfg;
  o.overrides = {"run.dir=" + dir + "/run", "rl.max_lag=1"};
  o.quiet = true;
  REQUIRE(pulse::app::run_job(o) == 0);
  std::string run = dir + "/run";
  json summary = pulse::app::read_json(run + "/summary.json");
  CHECK(summary["steps"] == 4);
  CHECK(summary["bit_identical_every_step"] == true);
  auto rows = pulse::app::MetricsLog::read(run + "/metrics.jsonl");
  REQUIRE(rows.size() == 4);
  for (size_t i = 0; i < rows.size(); ++i) {
    INFO("step " << i);
    const int64_t s = static_cast<int64_t>(i);
    CHECK(rows[i]["step"] == s);
    CHECK(rows[i]["bit_identical"] == true);
    // Step 0 samples at version 0; step s >= 1 uses rollouts sampled at version s-1.
    CHECK(rows[i]["lag"] == (i == 0 ? 0 : 1));
    CHECK(rows[i]["rollout_version"] == (i == 0 ? 0 : s - 1));
    // The workers were checked at version s (sampling step s+1), the last step after syncing to the end.
    const int64_t checked = i + 1 == rows.size() ? s + 1 : s;
    CHECK(rows[i]["worker_versions"]["w0"] == checked);
    CHECK(rows[i]["worker_versions"]["w1"] == checked);
    CHECK(std::isfinite(rows[i]["reward_mean"].get<double>()));
    CHECK(std::isfinite(rows[i]["loss"].get<double>()));
    CHECK(rows[i]["patch_changed"] == rows[i]["changed"]);
  }
  // The step-2 checkpoint holds step 2's rollouts, sampled at version 1; the final one holds none.
  json pending = pulse::app::read_json(run + "/checkpoints/step-000002/pending_rollouts.json");
  CHECK(pending["step"] == 2);
  CHECK(pending["version"] == 1);
  CHECK(pending["reports"].size() == 2);
  CHECK_FALSE(fs::exists(run + "/checkpoints/step-000004/pending_rollouts.json"));
  fs::remove_all(dir);
}

TEST_CASE("max_lag = 1: kill -9 then --resume reproduces the uninterrupted run", "[app][e2e][resume][lag]") {
  std::string dir = temp_dir("lag-resume");
  std::string cfg = write_tiny_config(dir);
  pid_t ref = spawn_pulse(
      {"run", cfg, "--quiet", "--set", "rl.max_lag=1", "--set", "run.dir=" + dir + "/ref"}, dir + "/ref");
  REQUIRE(wait_exit(ref) == 0);
  auto ref_rows = pulse::app::MetricsLog::read(dir + "/ref/metrics.jsonl");
  REQUIRE(ref_rows.size() == 4);

  const std::string run = kill_and_resume(cfg, dir, {"--set", "rl.max_lag=1"});
  auto rows = pulse::app::MetricsLog::read(run + "/metrics.jsonl");
  REQUIRE(rows.size() == ref_rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    for (const char* key :
         {"step", "version", "lag", "rollout_version", "reward_mean", "reward_std", "loss", "grad_norm",
          "clip_fraction", "tis_mismatch", "changed", "patch_bytes", "bit_identical", "response_tokens"}) {
      INFO("step " << i << " key " << key);
      CHECK(rows[i][key] == ref_rows[i][key]);
    }
  fs::remove_all(dir);
}
