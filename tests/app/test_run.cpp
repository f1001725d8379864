// End to end: a tiny `pulse run` (SFT, Pass@1, GRPO with 2 workers over loopback HTTP), its run directory,
// resume after kill -9, and CLI errors. Tiny dims so that the whole file stays around a minute on 2 cores.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "app/free_port.h"
#include "app/job.h"
#include "app/run/run_files.h"
#include "sync/io/atomic_file.h"
#include "tests/app/run_test_util.h"
#include "tests/test_paths.h"

extern char** environ;
namespace fs = std::filesystem;
using nlohmann::json;
using namespace pulse::test_run;

namespace {

/// Fields that must match between an uninterrupted and a resumed run (timings excluded).
const char* kDeterministic[] = {
    "step",          "version",       "reward_mean",   "reward_std",       "loss",
    "grad_norm",     "clip_fraction", "changed",       "changed_fraction", "patch_bytes",
    "patch_changed", "dense_bytes",   "bit_identical", "response_tokens"};

}  // namespace

TEST_CASE("tiny pulse run: workers bit-identical every step, Pass@1 and a complete summary", "[app][e2e]") {
  std::string dir = temp_dir("e2e");
  std::string cfg = write_tiny_config(dir);
  pulse::app::JobOptions o;
  o.config_path = cfg;
  o.overrides = {"run.dir=" + dir + "/run"};
  o.quiet = true;
  REQUIRE(pulse::app::run_job(o) == 0);
  std::string run = dir + "/run";

  json summary = pulse::app::read_json(run + "/summary.json");
  CHECK(summary.size() == 12);
  CHECK(summary["steps"] == 4);
  CHECK(summary["workers"] == 2);
  CHECK(summary["bit_identical_every_step"] == true);
  for (const char* key : {"pass_at_1_before", "pass_at_1_after", "reward_first", "reward_last"}) {
    INFO(key);
    double v = summary[key].get<double>();
    CHECK(v >= 0.0);
    CHECK(v <= 1.0);
  }
  CHECK(summary["patch_bytes_total"].get<uint64_t>() > 0);
  // The patches are smaller than shipping the dense BF16 weights every step.
  CHECK(summary["patch_bytes_total"].get<uint64_t>() < summary["dense_bytes_total"].get<uint64_t>());
  CHECK(summary["compression_ratio"].get<double>() > 1.0);
  double changed = summary["mean_changed_fraction"].get<double>();
  CHECK(changed > 0.0);
  CHECK(changed <= 1.0);
  CHECK(summary["wall_seconds"].get<double>() > 0.0);

  auto rows = pulse::app::MetricsLog::read(run + "/metrics.jsonl");
  REQUIRE(rows.size() == 4);
  for (size_t i = 0; i < rows.size(); ++i) {
    CHECK(rows[i]["step"] == static_cast<int64_t>(i));
    CHECK(rows[i]["bit_identical"] == true);
    CHECK(rows[i]["worker_versions"]["w0"] == static_cast<int64_t>(i + 1));
    CHECK(rows[i]["worker_versions"]["w1"] == static_cast<int64_t>(i + 1));
    // The patch carries exactly the BF16 elements the optimizer step changed.
    CHECK(rows[i]["patch_changed"] == rows[i]["changed"]);
  }
  CHECK(fs::exists(run + "/config.toml"));
  CHECK(fs::exists(run + "/tokenizer.model"));
  CHECK(fs::exists(run + "/report.html"));
  CHECK(latest_step(run) == 4);
  CHECK(fs::exists(run + "/checkpoints/step-000004/model/model.safetensors"));
  fs::remove_all(dir);
}

TEST_CASE("kill -9 then --resume reproduces the uninterrupted run's metrics", "[app][e2e][resume]") {
  std::string dir = temp_dir("resume");
  std::string cfg = write_tiny_config(dir);
  // Uninterrupted reference.
  pid_t ref = spawn_pulse({"run", cfg, "--quiet", "--set", "run.dir=" + dir + "/ref"}, dir + "/ref");
  REQUIRE(wait_exit(ref) == 0);
  auto ref_rows = pulse::app::MetricsLog::read(dir + "/ref/metrics.jsonl");
  REQUIRE(ref_rows.size() == 4);

  // Killed once the step-2 checkpoint exists, somewhere in steps 2..3.
  const std::string run = kill_and_resume(cfg, dir, {});
  auto rows = pulse::app::MetricsLog::read(run + "/metrics.jsonl");
  REQUIRE(rows.size() == ref_rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    for (const char* key : kDeterministic) {
      INFO("step " << i << " key " << key);
      CHECK(rows[i][key] == ref_rows[i][key]);
    }
  json a = pulse::app::read_json(run + "/summary.json"), b = pulse::app::read_json(dir + "/ref/summary.json");
  for (const char* key : {"steps", "pass_at_1_before", "pass_at_1_after", "reward_first", "reward_last",
                          "patch_bytes_total", "dense_bytes_total", "bit_identical_every_step"}) {
    INFO(key);
    CHECK(a[key] == b[key]);
  }
  // A finished run: --set rl.steps below the steps it has done is refused, config.toml unchanged; at
  // the same steps it says there is nothing to train.
  const std::string stored = pulse::sync::read_file(run + "/config.toml");
  CHECK(wait_exit(spawn_pulse({"run", "--quiet", "--resume", run, "--set", "rl.steps=2"}, dir + "/fewer")) !=
        0);
  CHECK_THAT(pulse::sync::read_file(dir + "/fewer.err"),
             Catch::Contains("rl.steps = 2 is below the 4 GRPO steps"));
  CHECK(pulse::sync::read_file(run + "/config.toml") == stored);
  CHECK(wait_exit(spawn_pulse({"run", "--resume", run}, dir + "/again")) == 0);
  CHECK_THAT(pulse::sync::read_file(dir + "/again.err") + pulse::sync::read_file(dir + "/again.out"),
             Catch::Contains("has done all its 4 GRPO steps"));
  CHECK(pulse::app::MetricsLog::read(run + "/metrics.jsonl").size() == 4);
  fs::remove_all(dir);
}

TEST_CASE("pulse trainer + two pulse worker processes run the same job over HTTP", "[app][e2e][roles]") {
  std::string dir = temp_dir("roles");
  std::string cfg = write_tiny_config(dir);
  ::setenv("PULSE_TOKEN", "roles-test-token", 1);  // inherited by the three processes
  // Not the fixed default (tests run in parallel): control + patch ports, both free.
  const int port = pulse::app::free_tcp_port("127.0.0.1", 2);
  pid_t trainer =
      spawn_pulse({"trainer", cfg, "--set", "run.dir=" + dir + "/run", "--set",
                   "transport.port=" + std::to_string(port), "--set", "rl.steps=2", "--set", "sft.steps=5",
                   "--set", "sft.warmup_steps=1", "--set", "eval.before=false", "--set", "eval.after=false"},
                  dir + "/trainer");
  // The control URL is in the trainer's log once it listens.
  std::string url;
  for (int i = 0; i < 3000 && url.empty(); ++i) {
    std::string log;
    try {
      log = pulse::sync::read_file(dir + "/trainer.err");
    } catch (const std::exception&) {
    }
    auto p = log.find("--trainer http://");
    if (p != std::string::npos) {
      auto end = log.find_first_of("` \n", p + 10);
      url = log.substr(p + 10, end - (p + 10));
    } else {
      int status = 0;
      if (::waitpid(trainer, &status, WNOHANG) == trainer) FAIL("trainer exited: " << log);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  REQUIRE_FALSE(url.empty());
  pid_t w0 = spawn_pulse({"worker", "--trainer", url, "--id", "gpu-a", "--threads", "1"}, dir + "/w0");
  pid_t w1 = spawn_pulse({"worker", "--trainer", url, "--id", "gpu-b", "--threads", "1"}, dir + "/w1");
  CHECK(wait_exit(trainer) == 0);
  CHECK(wait_exit(w0) == 0);
  CHECK(wait_exit(w1) == 0);
  ::unsetenv("PULSE_TOKEN");
  auto rows = pulse::app::MetricsLog::read(dir + "/run/metrics.jsonl");
  REQUIRE(rows.size() == 2);
  for (const auto& r : rows) {
    CHECK(r["bit_identical"] == true);
    CHECK(r["worker_versions"].size() == 2);
  }
  CHECK(rows[1]["worker_versions"]["gpu-a"] == 2);
  fs::remove_all(dir);
}

TEST_CASE("pulse trainer whose patch port is taken names transport.port + 1 and leaves no run directory",
          "[app][cli][roles]") {
  ScopedTempDir dir("port-taken");
  const std::string cfg = write_tiny_config(dir);
  const int port = pulse::app::free_tcp_port("127.0.0.1", 2);
  // Another process's server on the patch port (control port + 1).
  auto holder = std::make_unique<PortHolder>(port + 1);
  pid_t trainer = spawn_pulse({"trainer", cfg, "--set", "run.dir=" + dir.path + "/run", "--set",
                               "transport.port=" + std::to_string(port)},
                              dir.path + "/trainer");
  CHECK(wait_exit(trainer) != 0);
  holder.reset();
  CHECK_THAT(
      pulse::sync::read_file(dir.path + "/trainer.err"),
      Catch::Contains("127.0.0.1:" + std::to_string(port + 1) + " (the patch port: transport.port + 1") &&
          Catch::Contains("Address already in use"));
  CHECK_FALSE(fs::exists(dir.path + "/run"));
}

TEST_CASE("pulse run with a typo in a config key fails naming the key and file", "[app][cli]") {
  std::string dir = temp_dir("cli");
  std::string cfg = dir + "/typo.toml";
  pulse::sync::write_file_atomic(cfg, "[rl]\ngrup_size = 4\n");
  pid_t pid = spawn_pulse({"run", cfg}, dir + "/typo");
  CHECK(wait_exit(pid) != 0);
  std::string err = pulse::sync::read_file(dir + "/typo.err");
  CHECK(err.find("typo.toml") != std::string::npos);
  CHECK(err.find("unknown key 'rl.grup_size'") != std::string::npos);
  CHECK(err.find("did you mean 'group_size'") != std::string::npos);

  pid = spawn_pulse({"run", pulse::test::source_path("configs/default.toml"), "--set", "rl.group_size=1"},
                    dir + "/badset");
  CHECK(wait_exit(pid) != 0);
  CHECK(pulse::sync::read_file(dir + "/badset.err").find("'rl.group_size' must be >= 2") !=
        std::string::npos);

  pid = spawn_pulse({"config", "--print-defaults"}, dir + "/defaults");
  CHECK(wait_exit(pid) == 0);
  std::string defaults = pulse::sync::read_file(dir + "/defaults.out");
  CHECK(defaults.find("[rl]") != std::string::npos);
  CHECK(defaults.find("group_size = 8") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("pulse run stopped by SIGTERM removes its workers' temp folders and resumes",
          "[app][e2e][resume]") {
  pulse::test_run::ScopedTempDir dir("sigterm");
  const std::string cfg = write_tiny_config(dir);
  const fs::path tmp = fs::temp_directory_path();
  // A folder left by a worker process that is gone (a run killed with SIGKILL): swept at the next start.
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  REQUIRE(wait_exit(gone) == 0);
  const fs::path stale = tmp / ("pulse-worker-" + std::to_string(gone) + "-test01");
  fs::create_directories(stale);
  auto ours = [&](pid_t pid) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(tmp))
      n += e.path().filename().string().rfind("pulse-worker-" + std::to_string(pid) + "-", 0) == 0;
    return n;
  };
  const std::string run = dir.path + "/run";
  const pid_t p = spawn_pulse({"run", cfg, "--set", "run.dir=" + run, "--set", "rl.steps=400", "--set",
                               "eval.before=false", "--set", "eval.after=false"},
                              dir.path + "/stopped");
  for (int i = 0; i < 6000 && latest_step(run) < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(latest_step(run) >= 2);
  CHECK(ours(p) == 2);  // the two in-process workers' scratch folders
  CHECK_FALSE(fs::exists(stale));
  ::kill(p, SIGTERM);
  CHECK(wait_exit(p) == 128 + SIGTERM);
  CHECK(ours(p) == 0);
  CHECK_THAT(pulse::sync::read_file(dir.path + "/stopped.err"), Catch::Contains("run: stopping: SIGTERM"));
  // The run goes on from its last checkpoint, as after a kill.
  const int64_t at = latest_step(run);
  REQUIRE(wait_exit(
              spawn_pulse({"run", "--quiet", "--resume", run, "--set", "rl.steps=" + std::to_string(at + 1)},
                          dir.path + "/resumed")) == 0);
  CHECK(pulse::app::MetricsLog::read(run + "/metrics.jsonl").size() == static_cast<size_t>(at + 1));
}
