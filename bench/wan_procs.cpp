#include "bench/wan_procs.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace pulse::bench::wan {
namespace {

std::atomic<int> g_signal{0};
struct sigaction g_old[3];
constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void on_stop_signal(int sig) {
  g_signal.store(sig);
}

int code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

Process::Process(std::string what, const std::string& ns, const std::vector<std::string>& argv,
                 const std::vector<std::pair<std::string, std::string>>& env, std::string log_prefix)
    : what_(std::move(what)), log_prefix_(std::move(log_prefix)) {
  std::vector<std::string> args = {"ip", "netns", "exec", ns};
  args.insert(args.end(), argv.begin(), argv.end());
  std::vector<char*> a;
  for (auto& s : args) a.push_back(s.data());
  a.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& [k, v] : env) replaced = replaced || k == name;
    if (!replaced) env_s.push_back(kv);
  }
  for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const std::string out = out_path(), err = err_path();
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, dfl;
  sigemptyset(&none);
  sigemptyset(&dfl);
  for (int s : kSignals) sigaddset(&dfl, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &dfl);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group: a stop reaches everything it started
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  const int rc = ::posix_spawnp(&pid_, a[0], &fa, &attr, a.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("bench wan: cannot start " + what_ + ": " + std::strerror(rc));
}

Process::~Process() {
  if (pid_ > 0 && exit_code_ < 0) {
    ::kill(-pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

bool Process::running() {
  if (exit_code_ >= 0) return false;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == 0 || (r < 0 && errno == EINTR)) return true;
  exit_code_ = r == pid_ ? code_of(status) : 1;
  ::kill(-pid_, SIGKILL);  // anything it left behind in its group
  return false;
}

void Process::stop(double grace_s) {
  if (!running()) return;
  ::kill(-pid_, SIGTERM);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (running()) {
    if (std::chrono::steady_clock::now() >= until) {
      ::kill(-pid_, SIGKILL);
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      exit_code_ = code_of(status);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string Process::err_tail(int lines) const {
  std::ifstream f(err_path());
  std::deque<std::string> last;
  std::string line;
  while (std::getline(f, line)) {
    last.push_back(line);
    if (static_cast<int>(last.size()) > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += "  | " + l + "\n";
  return out;
}

StopSignals::StopSignals() {
  g_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &g_old[i]);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &g_old[i], nullptr);
}

int StopSignals::received() {
  return g_signal.load();
}

void StopSignals::check() {
  const int sig = g_signal.load();
  if (sig == 0) return;
  const char* name = sig == SIGINT    ? "SIGINT"
                     : sig == SIGTERM ? "SIGTERM"
                     : sig == SIGHUP  ? "SIGHUP"
                                      : "a signal";
  throw std::runtime_error(std::string("bench wan: stopped by ") + name +
                           "; every namespace, link, process and folder it made is removed");
}

}  // namespace pulse::bench::wan
