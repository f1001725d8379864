#include "app/cmd/launch.h"

#include <CLI/CLI.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "app/cmd/commands.h"
#include "app/free_port.h"

extern char** environ;

namespace pulse::app {
namespace {

std::atomic<int> g_signal{0};  // the last SIGINT/SIGTERM the launcher received

extern "C" void on_launcher_signal(int sig) {
  g_signal.store(sig);
}

// Installs the forwarding handlers for the launcher's lifetime and restores the previous ones after.
class SignalGuard {
 public:
  SignalGuard() {
    g_signal.store(0);
    struct sigaction sa {};
    sa.sa_handler = on_launcher_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalGuard() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "was killed by signal " + std::string(name ? std::string("SIG") + name : "?") + " (" +
           std::to_string(sig) + ")";
  }
  return "ended with status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

bool failed(int status) {
  return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

// environ without the variables the launcher sets, plus those.
std::vector<std::string> child_environment(const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    const auto name = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& [k, v] : set) replaced = replaced || k == name;
    if (!replaced) env.push_back(std::move(kv));
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
};

void signal_running(std::vector<Child>& children, int sig) {
  for (auto& c : children)
    if (c.running) ::kill(-c.pid, sig);  // the rank's process group (its pid)
}

/// Refuses options that cannot launch (std::invalid_argument naming the option).
void check_options(const LaunchOptions& o) {
  if (o.nproc < 1)
    throw std::invalid_argument("launch: --nproc must be >= 1, got " + std::to_string(o.nproc));
  if (o.nnodes < 1)
    throw std::invalid_argument("launch: --nnodes must be >= 1, got " + std::to_string(o.nnodes));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw std::invalid_argument("launch: --node-rank must be in 0.." + std::to_string(o.nnodes - 1) +
                                ", got " + std::to_string(o.node_rank));
  if (o.master_port < 0 || o.master_port > 65535)
    throw std::invalid_argument("launch: --master-port must be in 0..65535, got " +
                                std::to_string(o.master_port));
  if (o.nnodes > 1 && o.master_port == 0)
    throw std::invalid_argument(
        "launch: --master-port is required with --nnodes > 1 (every node must agree)");
  if (!(o.grace_s >= 0)) throw std::invalid_argument("launch: --grace must be >= 0 seconds");
  if (o.args.empty()) throw std::invalid_argument("launch: nothing to run");
}

/// Starts local rank `i` as child `c` with torchrun's environment; returns "" or why it could not start.
std::string spawn_rank(Child& c, int i, int world, int port, const LaunchOptions& o,
                       const std::string& program, std::vector<char*>& argv) {
  c.rank = o.node_rank * o.nproc + i;
  std::vector<std::pair<std::string, std::string>> set = {{"RANK", std::to_string(c.rank)},
                                                          {"LOCAL_RANK", std::to_string(i)},
                                                          {"WORLD_SIZE", std::to_string(world)},
                                                          {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
                                                          {"GROUP_RANK", std::to_string(o.node_rank)},
                                                          {"MASTER_ADDR", o.master_addr},
                                                          {"MASTER_PORT", std::to_string(port)}};
  if (o.nproc > 1 && !std::getenv("OMP_NUM_THREADS")) set.emplace_back("OMP_NUM_THREADS", "1");
  auto env_s = child_environment(set);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, dfl;
  sigemptyset(&none);
  sigemptyset(&dfl);
  sigaddset(&dfl, SIGINT);
  sigaddset(&dfl, SIGTERM);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &dfl);
  posix_spawnattr_setpgroup(&attr, 0);  // each rank leads its own process group: signals reach its tree
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  const int rc = o.no_pulse ? posix_spawnp(&c.pid, program.c_str(), nullptr, &attr, argv.data(), envp.data())
                            : posix_spawn(&c.pid, program.c_str(), nullptr, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return "cannot start rank " + std::to_string(c.rank) + " (" + program + "): " + std::strerror(rc);
  c.running = true;
  return "";
}

/// Waits for every child: the first failure (or a signal to the launcher) stops the others, SIGKILL after
/// the grace period. Returns the launcher's exit code (see launch.h).
int supervise(std::vector<Child>& children, double grace_s, const std::string& spawn_error) {
  int first_failed = -1;  // index into children
  using Clock = std::chrono::steady_clock;
  bool stopping = false, killed = false;
  Clock::time_point kill_at{};
  int got_signal = 0;
  auto stop_all = [&] {
    if (stopping) return;
    stopping = true;
    signal_running(children, SIGTERM);
    kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
  };
  if (!spawn_error.empty()) {
    std::cerr << "pulse launch: " << spawn_error << "; stopping the others" << std::endl;
    stop_all();
  }

  for (;;) {
    bool any_running = false;
    for (size_t i = 0; i < children.size(); ++i) {
      auto& c = children[i];
      if (!c.running) continue;
      int status = 0;
      const pid_t r = ::waitpid(c.pid, &status, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) {
        any_running = true;
        continue;
      }
      c.running = false;
      c.status = r == c.pid ? status : (1 << 8);  // waitpid error: count as exit code 1
      if (failed(c.status) && !stopping) {
        first_failed = static_cast<int>(i);
        std::cerr << "pulse launch: rank " << c.rank << " (pid " << c.pid << ") " << describe_status(c.status)
                  << "; stopping the other ranks" << std::endl;
        stop_all();
      }
    }
    if (!any_running) break;
    if (const int sig = g_signal.exchange(0); sig != 0) {
      got_signal = got_signal ? got_signal : sig;
      std::cerr << "pulse launch: got signal " << sig << ", forwarding it to the ranks" << std::endl;
      signal_running(children, sig);
      if (!stopping) {
        stopping = true;
        kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
      }
    }
    if (stopping && !killed && Clock::now() >= kill_at) {
      killed = true;
      for (const auto& c : children)
        if (c.running)
          std::cerr << "pulse launch: rank " << c.rank << " (pid " << c.pid << ") still running after "
                    << grace_s << " s, sending SIGKILL" << std::endl;
      signal_running(children, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  if (!spawn_error.empty()) throw std::runtime_error("launch: " + spawn_error);
  if (first_failed >= 0) {
    const auto& f = children[static_cast<size_t>(first_failed)];
    std::cerr << "pulse launch: failed: rank " << f.rank << " " << describe_status(f.status) << std::endl;
    return exit_code_of(f.status) ? exit_code_of(f.status) : 1;
  }
  if (got_signal) return 128 + got_signal;
  for (const auto& c : children)
    if (failed(c.status)) return exit_code_of(c.status) ? exit_code_of(c.status) : 1;
  return 0;
}

}  // namespace

int launch(const LaunchOptions& o) {
  check_options(o);
  const int port = o.master_port ? o.master_port : free_tcp_port(o.master_addr);
  const int world = o.nnodes * o.nproc;
  std::string program;
  std::vector<std::string> argv_s;
  if (o.no_pulse) {
    program = o.args[0];
    argv_s = o.args;
  } else {
    // The running binary itself, even if a rebuild has replaced the file at its path since it started.
    program = "/proc/self/exe";
    // argv[0] is what ps shows: the binary's real path, not /proc/self/exe.
    std::error_code ec;
    const std::string self = std::filesystem::read_symlink(program, ec).string();
    argv_s.push_back(ec || self.empty() ? program : self);
    argv_s.insert(argv_s.end(), o.args.begin(), o.args.end());
  }
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::cerr << "pulse launch: " << o.nproc << " process" << (o.nproc > 1 ? "es" : "") << " (ranks "
            << o.node_rank * o.nproc << ".." << o.node_rank * o.nproc + o.nproc - 1 << " of " << world
            << "), MASTER_ADDR=" << o.master_addr << " MASTER_PORT=" << port << std::endl;

  SignalGuard guard;
  std::vector<Child> children(static_cast<size_t>(o.nproc));
  std::string spawn_error;
  for (int i = 0; i < o.nproc && spawn_error.empty(); ++i)
    spawn_error = spawn_rank(children[static_cast<size_t>(i)], i, world, port, o, program, argv);
  return supervise(children, o.grace_s, spawn_error);
}

void register_launch_command(CLI::App& root, int argc, char** argv) {
  // Arguments after `launch ... --` (the generic form), found in the raw command line.
  int launch_at = -1, dashdash = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (launch_at < 0 && a == "launch") launch_at = i;
    if (launch_at >= 0 && a == "--") {
      dashdash = i;
      break;
    }
  }
  struct State {
    LaunchOptions o;
    std::vector<std::string> positional, overrides;
    std::string resume;
    bool quiet = false, log_json = false;
  };
  auto st = std::make_shared<State>();
  auto* cmd = root.add_subcommand(
      "launch", "start N local trainer processes like torchrun --nproc-per-node (env, signals, fail-fast)");
  cmd->add_option("--nproc,--nproc-per-node", st->o.nproc, "processes on this node")->required();
  cmd->add_option("--nnodes", st->o.nnodes, "nodes in the job (default 1)");
  cmd->add_option("--node-rank", st->o.node_rank, "this node's rank (default 0)");
  cmd->add_option("--master-addr", st->o.master_addr, "MASTER_ADDR, rank 0's host (default 127.0.0.1)");
  cmd->add_option("--master-port", st->o.master_port, "MASTER_PORT (default: a free port, single node only)");
  cmd->add_option("--grace", st->o.grace_s,
                  "seconds from SIGTERM to SIGKILL when stopping ranks (default 10)");
  cmd->add_flag("--no-pulse", st->o.no_pulse, "after --, a program to run instead of pulse arguments");
  cmd->add_option("args", st->positional, "CONFIG, or after --: the arguments of each child's `pulse`");
  cmd->add_option("--set", st->overrides, "passed to `pulse run`: section.key=value (repeatable)")
      ->type_name("KEY=VALUE");
  cmd->add_option("--resume", st->resume, "passed to `pulse run`: continue the run in RUN_DIR");
  cmd->add_flag("--quiet,-q", st->quiet, "passed to `pulse run`");
  cmd->add_flag("--log-json", st->log_json, "passed to `pulse run`");
  cmd->callback([st, dashdash, argc, argv] {
    auto& o = st->o;
    if (dashdash >= 0) {
      if (!st->overrides.empty() || !st->resume.empty() || st->quiet || st->log_json)
        throw CLI::ValidationError("launch",
                                   "--set/--resume/--quiet/--log-json belong after -- in the generic form");
      o.args.assign(argv + dashdash + 1, argv + argc);
      if (o.args.empty()) throw CLI::ValidationError("launch", "nothing after --");
      if (st->positional.size() > o.args.size())
        throw CLI::ValidationError("launch", "the generic form takes no CONFIG before --");
    } else {
      if (o.no_pulse) throw CLI::ValidationError("launch", "--no-pulse needs -- PROGRAM ARGS...");
      if (st->positional.size() > 1)
        throw CLI::ValidationError("launch", "give one CONFIG, or -- ARGS... for another command");
      if (st->positional.empty() && st->resume.empty())
        throw CLI::ValidationError("launch", "give a CONFIG file or --resume RUN_DIR");
      o.args = {"run"};
      if (!st->positional.empty()) o.args.push_back(st->positional[0]);
      for (const auto& kv : st->overrides) o.args.insert(o.args.end(), {"--set", kv});
      if (!st->resume.empty()) o.args.insert(o.args.end(), {"--resume", st->resume});
      if (st->quiet) o.args.push_back("--quiet");
      if (st->log_json) o.args.push_back("--log-json");
    }
    throw Exit{launch(o)};
  });
}

}  // namespace pulse::app
