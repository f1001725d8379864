// MBPP sandbox: clone (no atfork handlers), drop privileges and set rlimits, exec bubblewrap -> python3
// harness; poll pipes with a wall-clock deadline; decide pass/fail from the harness's status pipe and the
// exit status.
#include "rl/mbpp_sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <vector>

#include "rl/mbpp_harness.h"

namespace pulse::rl {
namespace {

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

bool make_pipe(Fd& r, Fd& w) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return false;
  r.fd = p[0];
  w.fd = p[1];
  return true;
}

std::string random_nonce() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 32; ++i) s += hex[rd() & 15];
  return s;
}

// One uid per run (256 in rotation) so that concurrent sandboxes do not share an RLIMIT_NPROC budget;
// spread by pid so that concurrent pulse processes do not either.
uid_t sandbox_uid() {
  static std::atomic<unsigned> next_slot{0};
  unsigned slot = next_slot.fetch_add(1) % 256;
  return static_cast<uid_t>(1000000u + ((static_cast<unsigned>(::getpid()) & 0xffffu) << 8) + slot);
}

bool is_symlink(const char* path) {
  struct stat st;
  return ::lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

std::vector<std::string> bwrap_argv(const SandboxLimits& lim) {
  std::vector<std::string> a = {lim.bwrap,
                                "--unshare-user",
                                "--unshare-ipc",
                                "--unshare-pid",
                                "--unshare-net",
                                "--unshare-uts",
                                "--unshare-cgroup-try",
                                "--disable-userns",
                                "--die-with-parent",
                                "--new-session",
                                "--ro-bind",
                                "/usr",
                                "/usr"};
  // Merged-/usr systems have /bin, /lib, /lib64, /sbin as symlinks into /usr; others get read-only binds.
  for (const char* d : {"bin", "lib", "lib64", "sbin", "lib32", "libx32"}) {
    std::string host = std::string("/") + d;
    if (is_symlink(host.c_str())) {
      char target[256];
      ssize_t n = ::readlink(host.c_str(), target, sizeof target - 1);
      if (n > 0) {
        target[n] = 0;
        a.insert(a.end(), {"--symlink", target, host});
      }
    } else if (::access(host.c_str(), F_OK) == 0) {
      a.insert(a.end(), {"--ro-bind", host, host});
    }
  }
  uint64_t tmp_bytes = lim.file_bytes * 4;
  a.insert(a.end(), {"--proc",       "/proc",
                     "--dev",        "/dev",
                     "--size",       std::to_string(tmp_bytes),
                     "--tmpfs",      "/tmp",
                     "--chdir",      "/tmp",
                     "--remount-ro", "/",
                     "--clearenv",   "--setenv",
                     "PATH",         "/usr/bin:/bin",
                     "--setenv",     "LANG",
                     "C.UTF-8",      "--setenv",
                     "HOME",         "/tmp",
                     "--",           lim.python,
                     "-I",           "-B",
                     "-c",           mbpp_harness_source()});
  return a;
}

// Host pids whose parent is `parent` (a /proc scan; only used when a run must be killed).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> kids;
  DIR* d = ::opendir("/proc");
  if (!d) return kids;
  while (dirent* e = ::readdir(d)) {
    char* end;
    long p = std::strtol(e->d_name, &end, 10);
    if (*end != 0 || p <= 0) continue;
    std::string path = std::string("/proc/") + e->d_name + "/stat";
    FILE* f = std::fopen(path.c_str(), "r");
    if (!f) continue;
    char buf[512];
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = 0;
    const char* rp = std::strrchr(buf, ')');  // "pid (comm) state ppid ..."; comm may hold spaces
    char state;
    long ppid;
    if (rp && std::sscanf(rp + 1, " %c %ld", &state, &ppid) == 2 && ppid == parent)
      kids.push_back(static_cast<pid_t>(p));
  }
  ::closedir(d);
  return kids;
}

struct RunOutcome {
  bool started = false;  // clone+exec happened
  bool timed_out = false, output_limit = false;
  int wait_status = 0;
  std::string status, out, err;  // status pipe, stdout, stderr (capped)
  std::string spawn_error;
};

// Raw prlimit64 on the calling process: async-signal-safe in the cloned child.
void set_limit(int resource, rlim_t soft, rlim_t hard) {
  struct rlimit rl;
  rl.rlim_cur = soft;
  rl.rlim_max = hard;
  ::syscall(SYS_prlimit64, 0, resource, &rl, nullptr);
}

RunOutcome run_sandboxed(const std::string& job_json, const SandboxLimits& lim) {
  RunOutcome res;
  Fd job_r, job_w, st_r, st_w, out_r, out_w, err_r, err_w;
  if (!make_pipe(job_r, job_w) || !make_pipe(st_r, st_w) || !make_pipe(out_r, out_w) ||
      !make_pipe(err_r, err_w)) {
    res.spawn_error = std::string("pipe: ") + std::strerror(errno);
    return res;
  }
  Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  // Everything the child needs is prepared before the clone (only raw system calls after it).
  std::vector<std::string> args = bwrap_argv(lim);
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  bool as_root = ::geteuid() == 0;
  uid_t uid = sandbox_uid();
  rlim_t cpu = static_cast<rlim_t>(std::ceil(lim.cpu_seconds));
  rlim_t nproc = static_cast<rlim_t>(lim.max_processes);

  // A raw clone instead of fork(): fork() runs the process's pthread_atfork handlers, and OpenBLAS's
  // prepare handler shuts down its thread pool under another thread's running sgemm (that caller then
  // spins forever in exec_blas_async_wait: the hang with two in-process workers, one generating while
  // the other grades). The child runs only raw system calls until execve, so skipping glibc's fork
  // bookkeeping is safe; glibc's setuid/setrlimit wrappers are avoided too (they consult the parent's
  // thread list).
  pid_t pid = static_cast<pid_t>(::syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0));
  if (pid < 0) {
    res.spawn_error = std::string("clone: ") + std::strerror(errno);
    return res;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Move the sources above the targets first: dup2(3, 3) would keep FD_CLOEXEC and lose fd 3.
    int src[5] = {devnull.fd, out_w.fd, err_w.fd, job_r.fd, st_w.fd};
    for (int& f : src)
      if ((f = ::fcntl(f, F_DUPFD_CLOEXEC, 16)) < 0) ::_exit(126);  // temps close at exec
    for (int target = 0; target < 5; ++target)
      if (::dup2(src[target], target) < 0) ::_exit(126);
    ::syscall(SYS_close_range, 5u, ~0u, 0u);
    if (as_root) {
      if (::syscall(SYS_setgroups, 0, nullptr) != 0 || ::syscall(SYS_setresgid, uid, uid, uid) != 0 ||
          ::syscall(SYS_setresuid, uid, uid, uid) != 0)
        ::_exit(126);
    }
    set_limit(RLIMIT_CPU, cpu, cpu + 1);
    set_limit(RLIMIT_AS, lim.memory_bytes, lim.memory_bytes);
    set_limit(RLIMIT_FSIZE, lim.file_bytes, lim.file_bytes);
    set_limit(RLIMIT_CORE, 0, 0);
    if (as_root) set_limit(RLIMIT_NPROC, nproc, nproc);
    ::execve(argv[0], argv.data(), envp);
    ::_exit(127);
  }
  res.started = true;
  job_r.reset();
  st_w.reset();
  out_w.reset();
  err_w.reset();
  ::fcntl(job_w.fd, F_SETFL, O_NONBLOCK);

  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(lim.wall_seconds);
  size_t job_off = 0;
  bool killed = false;
  std::chrono::steady_clock::time_point killed_at;
  // Kill the namespace's pid 1 (bwrap's child): the kernel then kills everything in the PID namespace
  // and the outer bwrap reaps it and exits. Killing the outer bwrap first would orphan pid 1 to the
  // container's init, which may never reap it (a zombie that keeps counting against RLIMIT_NPROC).
  auto kill_all = [&] {
    if (killed) return;
    for (pid_t child : children_of(pid)) ::kill(child, SIGKILL);
    killed = true;
    killed_at = std::chrono::steady_clock::now();
  };
  char buf[65536];
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<int> which;  // 0 job, 1 status, 2 out, 3 err
    if (job_w.fd >= 0) {
      fds.push_back({job_w.fd, POLLOUT, 0});
      which.push_back(0);
    }
    Fd* readers[] = {&st_r, &out_r, &err_r};
    for (int k = 0; k < 3; ++k)
      if (readers[k]->fd >= 0) {
        fds.push_back({readers[k]->fd, POLLIN, 0});
        which.push_back(k + 1);
      }
    if (st_r.fd < 0 && out_r.fd < 0 && err_r.fd < 0) break;  // all output seen: the sandbox is gone
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline && !killed) {
      res.timed_out = true;
      kill_all();
    }
    int timeout_ms =
        killed ? 200
               : static_cast<int>(
                     std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) +
                     1;
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) break;
    if (killed && std::chrono::steady_clock::now() - killed_at > std::chrono::seconds(2)) {
      ::kill(pid, SIGKILL);  // last resort: bwrap did not go down with its namespace
      break;
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      if (which[i] == 0) {
        ssize_t w = ::write(job_w.fd, job_json.data() + job_off, job_json.size() - job_off);
        if (w > 0) job_off += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN) job_w.reset();
        if (job_off >= job_json.size()) job_w.reset();
        continue;
      }
      Fd* r = readers[which[i] - 1];
      ssize_t got = ::read(r->fd, buf, sizeof buf);
      if (got <= 0) {
        if (got == 0 || errno != EAGAIN) r->reset();
        continue;
      }
      std::string& sink = which[i] == 1 ? res.status : which[i] == 2 ? res.out : res.err;
      size_t room = lim.output_bytes > res.out.size() + res.err.size() + res.status.size()
                        ? lim.output_bytes - (res.out.size() + res.err.size() + res.status.size())
                        : 0;
      sink.append(buf, std::min(room, static_cast<size_t>(got)));
      if (static_cast<size_t>(got) > room) {
        res.output_limit = true;
        kill_all();
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  res.wait_status = status;
  return res;
}

std::string first_line_with(const std::string& text, const std::string& prefix) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    std::string line = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (line.compare(0, prefix.size(), prefix) == 0) return line;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return "";
}

}  // namespace

RewardResult grade_mbpp(const std::string& code, const Problem& task, const SandboxLimits& limits) {
  static std::once_flag sigpipe_once;  // a sandbox that dies before reading its job must not kill pulse
  std::call_once(sigpipe_once, [] { ::signal(SIGPIPE, SIG_IGN); });
  RewardResult r;
  r.extracted = code;
  if (task.tests.empty()) {
    r.reason = "no_tests";
    return r;
  }
  std::string nonce = random_nonce();
  nlohmann::json job = {
      {"nonce", nonce}, {"code", code}, {"setup", task.test_setup_code}, {"tests", task.tests}};
  std::string job_text = job.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  RunOutcome out = run_sandboxed(job_text, limits);
  if (!out.started) {
    r.infrastructure_error = true;
    r.reason = "sandbox_unavailable: " + out.spawn_error;
    return r;
  }
  bool harness_started = out.status.compare(0, 6, "START\n") == 0;
  bool exited = WIFEXITED(out.wait_status);
  int code_rc = exited ? WEXITSTATUS(out.wait_status) : -1;
  std::string ok_line = "OK " + nonce + " " + std::to_string(task.tests.size());
  if (!harness_started && !out.timed_out && !out.output_limit) {
    // bwrap or python never reached the harness (or the code failed to compile, reported before START).
    std::string syntax = first_line_with(out.status, "SYNTAX");
    if (!syntax.empty()) {
      r.reason = "syntax_error";
      return r;
    }
    r.infrastructure_error = true;
    std::string err = out.err.substr(0, 300);
    r.reason = "sandbox_unavailable: exit " + std::to_string(code_rc) + (err.empty() ? "" : ": " + err);
    return r;
  }
  if (out.timed_out) {
    r.reason = "timeout";
  } else if (out.output_limit) {
    r.reason = "output_limit";
  } else if (exited && code_rc == 0 && first_line_with(out.status, "OK ") == ok_line) {
    r.score = 1.0;
    r.reason = "passed";
  } else if (!first_line_with(out.status, "EARLY_EXIT").empty()) {
    r.reason = "early_exit";
  } else if (!first_line_with(out.status, "FAIL").empty()) {
    r.reason = "assert_failed";
  } else if (!first_line_with(out.status, "ERROR").empty() ||
             !first_line_with(out.status, "RUNTIME").empty()) {
    std::string line = first_line_with(out.status, "ERROR");
    if (line.empty()) line = first_line_with(out.status, "RUNTIME");
    r.reason = line.find("MemoryError") != std::string::npos      ? "memory_limit"
               : line.find("RecursionError") != std::string::npos ? "recursion_limit"
                                                                  : "runtime_error";
  } else if (!exited) {
    r.reason = "killed";
  } else {
    r.reason = "no_result";
  }
  return r;
}

std::string extract_code(const std::string& response) {
  auto fenced = [&](const std::vector<std::string>& tags) -> std::optional<std::string> {
    size_t pos = 0;
    while ((pos = response.find("```", pos)) != std::string::npos) {
      size_t eol = response.find('\n', pos);
      if (eol == std::string::npos) return std::nullopt;
      std::string tag = response.substr(pos + 3, eol - pos - 3);
      while (!tag.empty() && (tag.back() == ' ' || tag.back() == '\r')) tag.pop_back();
      size_t close = response.find("```", eol + 1);
      for (const auto& t : tags)
        if (tag == t) {
          return response.substr(eol + 1, close == std::string::npos ? std::string::npos : close - eol - 1);
        }
      if (close == std::string::npos) return std::nullopt;
      pos = close + 3;
    }
    return std::nullopt;
  };
  if (auto c = fenced({"python", "py", "python3", "Python"})) return *c;
  if (auto c = fenced({""})) return *c;
  return response;
}

bool sandbox_available(const SandboxLimits& limits) {
  static std::once_flag once;
  static bool available = false;
  std::call_once(once, [&] {
    Problem p;
    p.kind = TaskKind::Code;
    p.tests = {"assert f() == 1"};
    available = grade_mbpp("def f():\n    return 1\n", p, limits).score == 1.0;
  });
  return available;
}

}  // namespace pulse::rl
