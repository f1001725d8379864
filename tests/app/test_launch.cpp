// `pulse launch`: the real pulse binary (next to this test executable) starting children, bounded in time;
// every child process the tests start is gone when a test ends and its folder is removed.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "app/free_port.h"
#include "app/cmd/launch.h"
#include "tests/app/run_test_util.h"

namespace {

using Clock = std::chrono::steady_clock;
using pulse::test_run::spawn_pulse;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Exit code of `pid` (128 + signal), or -1 after SIGKILLing it when it has not ended within `limit_s`.
int wait_bounded(pid_t pid, double limit_s) {
  const auto t0 = Clock::now();
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (since(t0) > limit_s) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The pid a child shell wrote to `path` (its own $$), waiting up to 20 s for the file.
pid_t read_pid(const std::string& path) {
  const auto t0 = Clock::now();
  while (since(t0) < 20) {
    std::ifstream f(path);
    long pid = 0;
    if (f >> pid && pid > 0) return static_cast<pid_t>(pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  FAIL("no pid in " << path);
  return -1;
}

bool process_gone(pid_t pid) {
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

// Kills whatever a failed test left running (the pids the child shells wrote).
struct Reaper {
  std::vector<std::string> pid_files;
  ~Reaper() {
    for (const auto& f : pid_files) {
      std::ifstream in(f);
      long pid = 0;
      if (in >> pid && pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
    }
  }
};

struct Dir {
  std::string path;
  explicit Dir(const std::string& name) : path(pulse::test_run::temp_dir("launch-" + name)) {}
  ~Dir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("pulse launch: a rank that fails stops the others and the launch exits non-zero", "[launch]") {
  Dir dir("fail");
  Reaper reaper{{dir.path + "/pid0"}};
  // Rank 0 would sleep for a minute; rank 1 fails after 0.5 s with exit code 3.
  const std::string script =
      "echo $$ > " + dir.path + "/pid$RANK; if [ \"$RANK\" = 1 ]; then sleep 0.5; exit 3; fi; exec sleep 60";
  const auto t0 = Clock::now();
  pid_t launcher =
      spawn_pulse({"launch", "--nproc", "2", "--grace", "2", "--no-pulse", "--", "/bin/sh", "-c", script},
                  dir.path + "/launch");
  const pid_t rank0 = read_pid(dir.path + "/pid0");
  const int code = wait_bounded(launcher, 30);
  const std::string err = slurp(dir.path + "/launch.err");
  INFO(err);
  REQUIRE(code == 3);
  CHECK(since(t0) < 10);
  CHECK_THAT(err, Catch::Contains("rank 1 (pid"));
  CHECK_THAT(err, Catch::Contains("exited with code 3; stopping the other ranks"));
  CHECK_THAT(err, Catch::Contains("failed: rank 1 exited with code 3"));
  CHECK(process_gone(rank0));
}

TEST_CASE("pulse launch: a rank killed by a signal is reported with the signal", "[launch]") {
  Dir dir("signal");
  Reaper reaper{{dir.path + "/pid0"}};
  // Rank 0 ignores SIGTERM, so the launcher needs its SIGKILL after the grace period.
  const std::string script = "echo $$ > " + dir.path +
                             "/pid$RANK; if [ \"$RANK\" = 1 ]; then sleep 0.3; kill -9 $$; fi; trap '' TERM; "
                             "while true; do sleep 0.1; done";
  const auto t0 = Clock::now();
  pid_t launcher =
      spawn_pulse({"launch", "--nproc", "2", "--grace", "1", "--no-pulse", "--", "/bin/sh", "-c", script},
                  dir.path + "/launch");
  const pid_t rank0 = read_pid(dir.path + "/pid0");
  const int code = wait_bounded(launcher, 30);
  const std::string err = slurp(dir.path + "/launch.err");
  INFO(err);
  REQUIRE(code == 128 + SIGKILL);
  CHECK(since(t0) < 10);
  CHECK_THAT(err, Catch::Contains("rank 1 (pid"));
  CHECK_THAT(err, Catch::Contains("was killed by signal SIGKILL (9)"));
  CHECK_THAT(err, Catch::Contains("still running after 1 s, sending SIGKILL"));
  CHECK(process_gone(rank0));
}

TEST_CASE("pulse launch: children get torchrun's environment and run this pulse", "[launch]") {
  Dir dir("env");
  const std::string script =
      "echo \"$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT\" > " + dir.path +
      "/env$RANK";
  const std::string port = std::to_string(pulse::app::free_tcp_port("127.0.0.1"));
  pid_t launcher = spawn_pulse(
      {"launch", "--nproc", "3", "--master-port", port, "--no-pulse", "--", "/bin/sh", "-c", script},
      dir.path + "/launch");
  REQUIRE(wait_bounded(launcher, 30) == 0);
  for (int r = 0; r < 3; ++r)
    CHECK(slurp(dir.path + "/env" + std::to_string(r)) ==
          std::to_string(r) + " " + std::to_string(r) + " 3 3 127.0.0.1 " + port + "\n");

  // The generic form runs `pulse ARGS...` with this same binary; every rank succeeds, so does the launch.
  launcher =
      spawn_pulse({"launch", "--nproc", "2", "--", "config", "--print-defaults"}, dir.path + "/defaults");
  REQUIRE(wait_bounded(launcher, 60) == 0);
  const std::string out = slurp(dir.path + "/defaults.out");
  CHECK(out.size() > 100);

  // The CONFIG form runs `pulse run CONFIG --set ...`: a config that does not exist fails on every rank.
  launcher = spawn_pulse(
      {"launch", "--nproc", "2", "--grace", "2", dir.path + "/missing.toml", "--set", "rl.steps=1"},
      dir.path + "/missing");
  const int code = wait_bounded(launcher, 60);
  INFO(slurp(dir.path + "/missing.err"));
  CHECK(code != 0);
  CHECK(code != -1);
  CHECK_THAT(slurp(dir.path + "/missing.err"), Catch::Contains("failed: rank"));
}

TEST_CASE("pulse launch: SIGTERM to the launcher is forwarded and it exits non-zero", "[launch]") {
  Dir dir("term");
  Reaper reaper{{dir.path + "/pid0", dir.path + "/pid1"}};
  const std::string script = "echo $$ > " + dir.path + "/pid$RANK; exec sleep 60";
  pid_t launcher = spawn_pulse({"launch", "--nproc", "2", "--no-pulse", "--", "/bin/sh", "-c", script},
                               dir.path + "/launch");
  const pid_t r0 = read_pid(dir.path + "/pid0"), r1 = read_pid(dir.path + "/pid1");
  const auto t0 = Clock::now();
  ::kill(launcher, SIGTERM);
  const int code = wait_bounded(launcher, 30);
  INFO(slurp(dir.path + "/launch.err"));
  REQUIRE(code == 128 + SIGTERM);
  CHECK(since(t0) < 5);
  CHECK(process_gone(r0));
  CHECK(process_gone(r1));
}

TEST_CASE("pulse launch: bad options are refused", "[launch]") {
  pulse::app::LaunchOptions o;
  o.args = {"--version"};
  o.nproc = 0;
  REQUIRE_THROWS_WITH(pulse::app::launch(o), Catch::Contains("--nproc must be >= 1"));
  o.nproc = 1;
  o.nnodes = 2;
  REQUIRE_THROWS_WITH(pulse::app::launch(o), Catch::Contains("--master-port is required"));
}
