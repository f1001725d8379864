// An inference fleet that survives its members, end to end with real processes on loopback: `pulse worker`
// processes started before the trainer, one of them SIGKILLed mid-run and replaced, and a trainer killed
// and resumed under the same worker processes. Tiny runs (no SFT to speak of, no Pass@1).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

#include "app/free_port.h"
#include "app/run/run_files.h"
#include "sync/io/atomic_file.h"
#include "tests/app/run_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace pulse::test_run;

namespace {

/// Fields that must match an uninterrupted run (timings and fleet counters excluded).
const char* kSame[] = {"step", "version",         "reward_mean",      "reward_std",
                       "loss", "grad_norm",       "changed",          "patch_bytes",
                       "lr",   "response_tokens", "changed_fraction", "bit_identical"};

std::string read_or_empty(const std::string& path) {
  try {
    return pulse::sync::read_file(path);
  } catch (const std::exception&) {
    return "";
  }
}

/// Waits (up to `seconds`) until `path` contains `needle`; fails when `pid` exits first.
void wait_for_text(const std::string& path, const std::string& needle, pid_t pid, double seconds = 120) {
  const auto t0 = std::chrono::steady_clock::now();
  while (read_or_empty(path).find(needle) == std::string::npos) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) FAIL(path << ": process exited before '" << needle << "'");
    if (std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(seconds))
      FAIL(path << ": no '" << needle << "' after " << seconds << " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// The trainer's --set list of these tests: `steps` GRPO steps on a tiny model, lease 2 s. It listens on
/// port (control) and port+1 (patches): take both from free_tcp_port(host, 2).
std::vector<std::string> trainer_args(const std::string& cfg, const std::string& run, int port, int steps) {
  return {"trainer",
          cfg,
          "--quiet",
          "--set",
          "run.dir=" + run,
          "--set",
          "transport.port=" + std::to_string(port),
          "--set",
          "rl.steps=" + std::to_string(steps),
          "--set",
          "sft.steps=5",
          "--set",
          "sft.warmup_steps=1",
          "--set",
          "eval.before=false",
          "--set",
          "eval.after=false",
          "--set",
          "transport.lease_s=2",
          "--set",
          "transport.no_worker_timeout_s=60"};
}

std::vector<std::string> worker_args(int port, const std::string& id) {
  return {"worker", "--trainer", "http://127.0.0.1:" + std::to_string(port), "--id", id, "--threads",
          "1",      "--log-json"};
}

/// pulse-worker-<pid>-* folders under `tmp`.
int scratch_folders(const std::string& tmp, pid_t pid) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(tmp))
    if (e.path().filename().string().rfind("pulse-worker-" + std::to_string(pid) + "-", 0) == 0) ++n;
  return n;
}

}  // namespace

TEST_CASE("fleet e2e: workers started first, one SIGKILLed mid-run and replaced, same metrics as without",
          "[app][e2e][fleet]") {
  ScopedTempDir dir("fleet-kill");
  const std::string cfg = write_tiny_config(dir);
  ::setenv("PULSE_TOKEN", "fleet-test-token", 1);  // inherited by every process
  // Many tiny steps (tens of ms each): the run goes on long enough after the drop for the replacement to
  // join (it asks every 0.25 s while the run is full).
  const int steps = 40;
  auto targs = [&](const std::string& run, int port) {
    auto a = trainer_args(cfg, run, port, steps);
    a.insert(a.end(), {"--set", "run.checkpoint_every=0"});
    return a;
  };

  // The uninterrupted reference: trainer first, two workers.
  const int ref_port = pulse::app::free_tcp_port("127.0.0.1", 2);
  pid_t ref = spawn_pulse(targs(dir.path + "/ref", ref_port), dir.path + "/ref");
  pid_t r0 = spawn_pulse(worker_args(ref_port, "ref-a"), dir.path + "/ref-a");
  pid_t r1 = spawn_pulse(worker_args(ref_port, "ref-b"), dir.path + "/ref-b");
  REQUIRE(wait_exit(ref) == 0);
  CHECK(wait_exit(r0) == 0);
  CHECK(wait_exit(r1) == 0);
  const auto ref_rows = pulse::app::MetricsLog::read(dir.path + "/ref/metrics.jsonl");
  REQUIRE(ref_rows.size() == static_cast<size_t>(steps));

  // Workers first (their temp folders under our TMPDIR), then the trainer.
  const std::string tmp = dir.path + "/tmp";
  fs::create_directories(tmp);
  ::setenv("TMPDIR", tmp.c_str(), 1);
  const int port = pulse::app::free_tcp_port("127.0.0.1", 2);
  pid_t wa = spawn_pulse(worker_args(port, "gpu-a"), dir.path + "/gpu-a");
  pid_t wb = spawn_pulse(worker_args(port, "gpu-b"), dir.path + "/gpu-b");
  wait_for_text(dir.path + "/gpu-a.err", "waiting to register", wa);
  CHECK_THAT(read_or_empty(dir.path + "/gpu-a.err"), Catch::Contains("not reachable"));
  const std::string run = dir.path + "/run";
  pid_t trainer = spawn_pulse(targs(run, port), dir.path + "/trainer");
  wait_for_text(dir.path + "/gpu-a.err", "registered with", wa);

  // gpu-b dies with SIGKILL once it applied version 2 (it is then in step 2's jobs).
  wait_for_text(dir.path + "/gpu-b.out", "\"version\":2", wb);
  CHECK(scratch_folders(tmp, wb) == 1);
  ::kill(wb, SIGKILL);
  CHECK(wait_exit(wb) == 128 + SIGKILL);
  CHECK(scratch_folders(tmp, wb) == 1);  // nobody could remove it yet
  // Its replacement is started at once: refused (409) until gpu-b's lease expires, then joins.
  pid_t wc = spawn_pulse(worker_args(port, "gpu-c"), dir.path + "/gpu-c");
  ::unsetenv("TMPDIR");

  REQUIRE(wait_exit(trainer) == 0);
  CHECK(wait_exit(wa) == 0);
  CHECK(wait_exit(wc) == 0);
  ::unsetenv("PULSE_TOKEN");
  const std::string log = read_or_empty(dir.path + "/trainer.err");
  INFO(log);
  CHECK_THAT(log, Catch::Contains("worker gpu-b missed its lease of 2 s: dropped"));
  CHECK_THAT(log, Catch::Contains("live worker(s)"));  // its unfinished prompts went to gpu-a
  CHECK_THAT(read_or_empty(dir.path + "/gpu-c.out"), Catch::Contains("\"event\":\"registered\""));
  CHECK(scratch_folders(tmp, wb) == 0);  // swept by gpu-c at its start
  int left = 0;
  for (const auto& e : fs::directory_iterator(tmp))
    left += e.path().filename().string().rfind("pulse-worker-", 0) == 0;
  CHECK(left == 0);  // the survivors removed their own
  CHECK_THAT(read_or_empty(dir.path + "/gpu-a.out"), Catch::Contains("\"event\":\"stopped\""));

  const auto rows = pulse::app::MetricsLog::read(run + "/metrics.jsonl");
  REQUIRE(rows.size() == ref_rows.size());
  int64_t dropped = 0, joined = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    INFO("step " << i);
    CHECK(rows[i]["bit_identical"] == true);
    for (const char* key : kSame) {
      INFO(key);
      CHECK(rows[i][key] == ref_rows[i][key]);
    }
    // The step the kill fell in completed within the lease plus a margin.
    CHECK(rows[i]["step_ms"].get<double>() < (2.0 + 15.0) * 1000);
    dropped += rows[i]["workers_dropped"].get<int64_t>();
    joined += rows[i]["workers_joined"].get<int64_t>();
  }
  CHECK(dropped == 1);
  CHECK(joined == 1);
  // The replacement holds the trainer's weights from its first job on (bit_identical above covers its
  // reports) and was synced at the end.
  CHECK(rows.back()["worker_versions"].contains("gpu-c"));
  CHECK(rows.back()["worker_versions"]["gpu-c"] == steps);
  const json summary = pulse::app::read_json(run + "/summary.json");
  CHECK(summary["bit_identical_every_step"] == true);
  CHECK(summary["fleet"]["workers_dropped"] == 1);
  CHECK(summary["fleet"]["workers_joined"] == 1);
}

TEST_CASE("fleet e2e: a worker paused past its lease is dropped, registers again and keeps its weights",
          "[app][e2e][fleet]") {
  ScopedTempDir dir("fleet-pause");
  const std::string cfg = write_tiny_config(dir);
  ::setenv("PULSE_TOKEN", "pause-test-token", 1);
  const int port = pulse::app::free_tcp_port("127.0.0.1", 2);
  const std::string run = dir.path + "/run";
  auto args = trainer_args(cfg, run, port, 150);
  args.insert(args.end(), {"--set", "run.checkpoint_every=0"});
  pid_t trainer = spawn_pulse(args, dir.path + "/trainer");
  pid_t wa = spawn_pulse(worker_args(port, "gpu-a"), dir.path + "/gpu-a");
  pid_t wb = spawn_pulse(worker_args(port, "gpu-b"), dir.path + "/gpu-b");
  wait_for_text(dir.path + "/gpu-b.out", "\"version\":2", wb);
  ::kill(wb, SIGSTOP);  // no heartbeat for longer than the 2 s lease
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  ::kill(wb, SIGCONT);
  REQUIRE(wait_exit(trainer) == 0);
  CHECK(wait_exit(wa) == 0);
  CHECK(wait_exit(wb) == 0);
  ::unsetenv("PULSE_TOKEN");

  // gpu-b's events: dropped, registered again with its weights kept, then a patch from the kept version.
  std::vector<json> events;
  std::istringstream lines(read_or_empty(dir.path + "/gpu-b.out"));
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] == '{') events.push_back(json::parse(line));
  size_t again = events.size();
  for (size_t i = 0; i < events.size(); ++i)
    if (events[i].value("event", "") == "registered" && !events[i]["kept_version"].is_null()) again = i;
  INFO(read_or_empty(dir.path + "/gpu-b.out"));
  REQUIRE(again < events.size());
  const uint64_t kept = events[again]["kept_version"].get<uint64_t>();
  CHECK(kept >= 2);
  bool dropped_before = false;
  for (size_t i = 0; i < again; ++i)
    dropped_before = dropped_before || events[i].value("event", "") == "dropped";
  CHECK(dropped_before);
  size_t first_apply = again + 1;
  while (first_apply < events.size() && events[first_apply].value("event", "") != "applied") ++first_apply;
  REQUIRE(first_apply < events.size());
  CHECK(events[first_apply]["anchor"] == false);  // no anchor download: a patch from the kept version
  CHECK(events[first_apply]["from"].get<uint64_t>() == kept);
  CHECK(events[first_apply]["load"] == "full_copy");  // the new session's model is filled from the replica

  const auto rows = pulse::app::MetricsLog::read(run + "/metrics.jsonl");
  REQUIRE(rows.size() == 150);
  int64_t dropped = 0;
  for (const auto& r : rows) {
    CHECK(r["bit_identical"] == true);
    dropped += r["workers_dropped"].get<int64_t>();
  }
  CHECK(dropped == 1);
  CHECK(rows.back()["worker_versions"]["gpu-b"] == 150);
}

TEST_CASE("fleet e2e: a trainer killed with SIGKILL and resumed is found by the same worker processes",
          "[app][e2e][fleet][resume]") {
  ScopedTempDir dir("fleet-resume");
  const std::string cfg = write_tiny_config(dir);
  pulse::sync::write_file_atomic(dir.path + "/token", "resume-test-token\n");
  ::setenv("PULSE_TOKEN", "resume-test-token", 1);
  const int port = pulse::app::free_tcp_port("127.0.0.1", 2);
  const std::string run = dir.path + "/run";
  auto args = trainer_args(cfg, run, port, 6);
  pid_t trainer = spawn_pulse(args, dir.path + "/trainer");
  ::unsetenv("PULSE_TOKEN");  // the workers read it from a file
  auto wargs = [&](const std::string& id) {
    auto a = worker_args(port, id);
    a.insert(a.end(), {"--token-file", dir.path + "/token"});
    return a;
  };
  pid_t w0 = spawn_pulse(wargs("gpu-a"), dir.path + "/gpu-a");
  pid_t w1 = spawn_pulse(wargs("gpu-b"), dir.path + "/gpu-b");
  kill_after_checkpoint(trainer, run, 2);
  // The workers wait for their trainer to come back on the same port.
  wait_for_text(dir.path + "/gpu-a.err", "lost the trainer", w0);
  ::setenv("PULSE_TOKEN", "resume-test-token", 1);
  pid_t resumed = spawn_pulse({"trainer", "--quiet", "--resume", run}, dir.path + "/resumed");
  ::unsetenv("PULSE_TOKEN");
  REQUIRE(wait_exit(resumed) == 0);
  CHECK(wait_exit(w0) == 0);
  CHECK(wait_exit(w1) == 0);
  const std::string a_log = read_or_empty(dir.path + "/gpu-a.out");
  size_t registrations = 0;
  for (size_t p = a_log.find("\"event\":\"registered\""); p != std::string::npos;
       p = a_log.find("\"event\":\"registered\"", p + 1))
    ++registrations;
  CHECK(registrations == 2);
  const auto rows = pulse::app::MetricsLog::read(run + "/metrics.jsonl");
  REQUIRE(rows.size() == 6);
  for (const auto& r : rows) CHECK(r["bit_identical"] == true);
  CHECK(rows.back()["worker_versions"]["gpu-a"] == 6);
  CHECK(rows.back()["worker_versions"]["gpu-b"] == 6);
}

TEST_CASE("fleet e2e: a worker stopped with SIGTERM says so and leaves no temp folder", "[app][e2e][fleet]") {
  ScopedTempDir dir("fleet-term");
  const std::string cfg = write_tiny_config(dir);
  const std::string tmp = dir.path + "/tmp";
  fs::create_directories(tmp);
  ::setenv("PULSE_TOKEN", "term-test-token", 1);
  const int port = pulse::app::free_tcp_port("127.0.0.1", 2);
  auto args = trainer_args(cfg, dir.path + "/run", port, 1000);
  args.insert(args.end(), {"--set", "run.checkpoint_every=0", "--set", "run.workers=1"});
  pid_t trainer = spawn_pulse(args, dir.path + "/trainer");
  ::setenv("TMPDIR", tmp.c_str(), 1);
  pid_t w = spawn_pulse(worker_args(port, "gpu-t"), dir.path + "/gpu-t");
  ::unsetenv("TMPDIR");
  ::unsetenv("PULSE_TOKEN");
  wait_for_text(dir.path + "/gpu-t.out", "\"version\":3", w);
  CHECK(scratch_folders(tmp, w) == 1);
  ::kill(w, SIGTERM);
  CHECK(wait_exit(w) == 128 + SIGTERM);
  CHECK(scratch_folders(tmp, w) == 0);
  CHECK_THAT(read_or_empty(dir.path + "/gpu-t.err"), Catch::Contains("stopping: SIGTERM"));
  ::kill(trainer, SIGKILL);
  CHECK(wait_exit(trainer) == 128 + SIGKILL);
}
