// MBPP grading: two sandboxes per grade (the judge's and the candidate's), each cloned vfork-style (no
// atfork handlers, no page-table copy), privileges dropped and rlimits set, exec'd as bubblewrap ->
// python3; pulse polls the pipes with a wall-clock deadline and decides pass/fail from the judge's status
// pipe and exit status (and, for a candidate that died, the candidate's exit status).
#include "rl/mbpp_sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
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

#include "datasets/mbpp_fewshot.h"
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

std::vector<std::string> bwrap_argv(const SandboxLimits& lim, const std::vector<std::string>& python_args,
                                    const char* source) {
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
  a.insert(a.end(),
           {"--proc",     "/proc",    "--dev",   "/dev",          "--size",       std::to_string(tmp_bytes),
            "--tmpfs",    "/tmp",     "--chdir", "/tmp",          "--remount-ro", "/",
            "--clearenv", "--setenv", "PATH",    "/usr/bin:/bin", "--setenv",     "LANG",
            "C.UTF-8",    "--setenv", "HOME",    "/tmp",          "--",           lim.python});
  a.insert(a.end(), python_args.begin(), python_args.end());
  a.insert(a.end(), {"-c", source});
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

// Raw prlimit64 on the calling process: async-signal-safe in the cloned child.
void set_limit(int resource, rlim_t soft, rlim_t hard) {
  struct rlimit rl;
  rl.rlim_cur = soft;
  rl.rlim_max = hard;
  ::syscall(SYS_prlimit64, 0, resource, &rl, nullptr);
}

// What the cloned child needs, prepared by the parent before the clone (the child only reads it and
// makes raw system calls).
struct SpawnPlan {
  char** argv = nullptr;
  char** envp = nullptr;
  bool as_root = false;
  uid_t uid = 0;
  rlim_t cpu = 0, nproc = 0;
  const SandboxLimits* lim = nullptr;
  int src[8] = {};
  int nfds = 0;
};

// The child between clone and execve. It shares the parent's memory (CLONE_VM) while the parent thread
// waits (CLONE_VFORK), so it writes nothing the parent reads, and it runs on its own stack. Signals
// arrive blocked (the parent blocked all of them around the clone); handlers are reset to the default
// before they are unblocked, so no pulse handler can run in this half-made process.
int sandbox_child(void* arg) {
  const SpawnPlan& p = *static_cast<const SpawnPlan*>(arg);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction sa;
    if (::sigaction(sig, nullptr, &sa) == 0 && sa.sa_handler != SIG_IGN && sa.sa_handler != SIG_DFL) {
      sa.sa_handler = SIG_DFL;
      sa.sa_flags = 0;
      ::sigaction(sig, &sa, nullptr);
    }
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // Move the sources above the targets first: dup2(3, 3) would keep FD_CLOEXEC and lose fd 3.
  int src[8];
  for (int k = 0; k < p.nfds; ++k)
    if ((src[k] = ::fcntl(p.src[k], F_DUPFD_CLOEXEC, 16)) < 0) ::_exit(126);  // temps close at exec
  for (int target = 0; target < p.nfds; ++target)
    if (::dup2(src[target], target) < 0) ::_exit(126);
  ::syscall(SYS_close_range, static_cast<unsigned>(p.nfds), ~0u, 0u);
  if (p.as_root) {
    if (::syscall(SYS_setgroups, 0, nullptr) != 0 || ::syscall(SYS_setresgid, p.uid, p.uid, p.uid) != 0 ||
        ::syscall(SYS_setresuid, p.uid, p.uid, p.uid) != 0)
      ::_exit(126);
  }
  set_limit(RLIMIT_CPU, p.cpu, p.cpu + 1);
  set_limit(RLIMIT_AS, p.lim->memory_bytes, p.lim->memory_bytes);
  set_limit(RLIMIT_FSIZE, p.lim->file_bytes, p.lim->file_bytes);
  set_limit(RLIMIT_CORE, 0, 0);
  if (p.as_root) set_limit(RLIMIT_NPROC, p.nproc, p.nproc);
  ::execve(p.argv[0], p.argv, p.envp);
  ::_exit(127);
}

// Starts one bubblewrap sandbox running `python` on `source` with fds[k] as its fd k (k < nfds) and
// nothing else open. Returns the outer bwrap's pid, or -1 with `error` set.
pid_t spawn_sandbox(const SandboxLimits& lim, const std::vector<std::string>& python_args, const char* source,
                    const int* fds, int nfds, std::string& error) {
  // Everything the child needs is prepared before the clone (only raw system calls after it).
  std::vector<std::string> args = bwrap_argv(lim, python_args, source);
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  if (nfds > 8) {
    error = "too many fds";
    return -1;
  }
  SpawnPlan plan;
  plan.argv = argv.data();
  plan.envp = envp;
  plan.as_root = ::geteuid() == 0;
  plan.uid = sandbox_uid();
  plan.cpu = static_cast<rlim_t>(std::ceil(lim.cpu_seconds));
  plan.nproc = static_cast<rlim_t>(lim.max_processes);
  plan.lim = &lim;
  plan.nfds = nfds;
  for (int k = 0; k < nfds; ++k) plan.src[k] = fds[k];

  // clone(CLONE_VM | CLONE_VFORK), as posix_spawn does, instead of fork(): (1) fork() runs the process's
  // pthread_atfork handlers, and OpenBLAS's prepare handler shuts down its thread pool under another
  // thread's running sgemm (that caller then spins forever in exec_blas_async_wait: the hang with two
  // in-process workers, one generating while the other grades); (2) a fork-style clone copies the page
  // tables of the whole pulse process (hundreds of MB of weights and LibTorch) and makes its threads take
  // copy-on-write faults until the exec: 51 ms of kernel time per sandbox in `pulse eval` of
  // configs/mbpp-tiny.toml, more than the sandbox itself. posix_spawn cannot be used: the child must drop
  // to the sandbox uid and set rlimits before the exec. glibc's setuid/setrlimit wrappers are avoided
  // (they signal the parent's other threads).
  constexpr size_t kStackBytes = 64 << 10;
  void* stack =
      ::mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) {
    error = std::string("mmap (child stack): ") + std::strerror(errno);
    return -1;
  }
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = ::clone(sandbox_child, static_cast<char*>(stack) + kStackBytes,
                      CLONE_VM | CLONE_VFORK | SIGCHLD, &plan);
  const int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::munmap(stack, kStackBytes);
  if (pid < 0) {
    error = std::string("clone: ") + std::strerror(clone_errno);
    return -1;
  }
  return pid;
}

// Kills the namespace's pid 1 (bwrap's child): the kernel then kills everything in the PID namespace
// and the outer bwrap reaps it and exits. Killing the outer bwrap first would orphan pid 1 to the
// container's init, which may never reap it (a zombie that keeps counting against RLIMIT_NPROC).
void kill_sandbox(pid_t bwrap) {
  for (pid_t child : children_of(bwrap)) ::kill(child, SIGKILL);
}

struct RunOutcome {
  bool started = false;  // both sandboxes were cloned and exec'd
  bool timed_out = false, output_limit = false;
  bool candidate_killed = false;            // pulse killed the candidate's sandbox (verdict in, or a limit)
  int judge_wait = 0, candidate_wait = 0;   // wait statuses of the two outer bwrap processes
  std::string status, judge_err, out, err;  // judge status pipe and stderr; candidate stdout, stderr
  std::string spawn_error;
};

// Runs the judge and the candidate, each in its own sandbox, wired together by two pipes; pulse feeds
// the judge its job and reads its status; the candidate's stdout/stderr are drained (and capped).
RunOutcome run_judged(const std::string& job_json, const SandboxLimits& lim) {
  RunOutcome res;
  Fd job_r, job_w, st_r, st_w, req_r, req_w, ans_r, ans_w, jout_r, jout_w, jerr_r, jerr_w, out_r, out_w,
      err_r, err_w;
  if (!make_pipe(job_r, job_w) || !make_pipe(st_r, st_w) || !make_pipe(req_r, req_w) ||
      !make_pipe(ans_r, ans_w) || !make_pipe(jout_r, jout_w) || !make_pipe(jerr_r, jerr_w) ||
      !make_pipe(out_r, out_w) || !make_pipe(err_r, err_w)) {
    res.spawn_error = std::string("pipe: ") + std::strerror(errno);
    return res;
  }
  Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int judge_fds[] = {devnull.fd, jout_w.fd, jerr_w.fd, job_r.fd, st_w.fd, req_w.fd, ans_r.fd};
  const int cand_fds[] = {devnull.fd, out_w.fd, err_w.fd, req_r.fd, ans_w.fd};
  pid_t judge = spawn_sandbox(lim, {"-I", "-B", "-S"}, mbpp_judge_source(), judge_fds, 7, res.spawn_error);
  if (judge < 0) return res;
  pid_t cand = spawn_sandbox(lim, {"-I", "-B"}, mbpp_candidate_source(), cand_fds, 5, res.spawn_error);
  if (cand < 0) {
    kill_sandbox(judge);
    ::kill(judge, SIGKILL);
    while (::waitpid(judge, nullptr, 0) < 0 && errno == EINTR) {
    }
    return res;
  }
  res.started = true;
  for (Fd* f : {&job_r, &st_w, &req_r, &req_w, &ans_r, &ans_w, &jout_w, &jerr_w, &out_w, &err_w}) f->reset();
  ::fcntl(job_w.fd, F_SETFL, O_NONBLOCK);

  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(lim.wall_seconds));
  size_t job_off = 0;
  bool killed = false, judge_done = false;
  Clock::time_point killed_at;
  auto kill_all = [&] {
    if (killed) return;
    kill_sandbox(judge);
    kill_sandbox(cand);
    res.candidate_killed = killed = true;
    killed_at = Clock::now();
  };
  Fd* readers[] = {&st_r, &jerr_r, &jout_r, &out_r, &err_r};
  std::string* sinks[] = {&res.status, &res.judge_err, nullptr, &res.out, &res.err};
  char buf[65536];
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<int> which;  // -1 job, else an index into readers
    if (job_w.fd >= 0) {
      fds.push_back({job_w.fd, POLLOUT, 0});
      which.push_back(-1);
    }
    for (int k = 0; k < 5; ++k)
      if (readers[k]->fd >= 0) {
        fds.push_back({readers[k]->fd, POLLIN, 0});
        which.push_back(k);
      }
    if (which.empty() || (which.size() == 1 && which[0] == -1)) break;  // all output seen: both are gone
    auto now = Clock::now();
    if (now >= deadline && !killed) {
      res.timed_out = !judge_done;
      kill_all();
    }
    int timeout_ms =
        killed ? 200
               : static_cast<int>(
                     std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) +
                     1;
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) break;
    if (killed && Clock::now() - killed_at > std::chrono::seconds(2)) {
      ::kill(judge, SIGKILL);  // last resort: bwrap did not go down with its namespace
      ::kill(cand, SIGKILL);
      break;
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      if (which[i] == -1) {
        ssize_t w = ::write(job_w.fd, job_json.data() + job_off, job_json.size() - job_off);
        if (w > 0) job_off += static_cast<size_t>(w);
        if ((w < 0 && errno != EAGAIN) || job_off >= job_json.size()) job_w.reset();
        continue;
      }
      Fd* r = readers[which[i]];
      ssize_t got = ::read(r->fd, buf, sizeof buf);
      if (got <= 0) {
        if (got == 0 || errno != EAGAIN) r->reset();
        if (r == &st_r && r->fd < 0 && !judge_done) {
          judge_done = true;
          // The verdict is in. Unless the judge saw the candidate end by itself (GONE: its exit status
          // says how), stop the candidate now; otherwise give it a moment to be reaped.
          if (first_line_with(res.status, "GONE").empty()) {
            kill_sandbox(cand);
            res.candidate_killed = true;
          }
          deadline = std::min<Clock::time_point>(deadline, Clock::now() + std::chrono::seconds(2));
        }
        continue;
      }
      size_t used = res.out.size() + res.err.size() + res.status.size() + res.judge_err.size();
      size_t room = lim.output_bytes > used ? lim.output_bytes - used : 0;
      if (sinks[which[i]]) sinks[which[i]]->append(buf, std::min(room, static_cast<size_t>(got)));
      // The first read past the cap decides: reads of what was still buffered after the kill (by then
      // the judge is gone too) must not turn an output flood into a judge error.
      if (static_cast<size_t>(got) > room && !killed) {
        res.output_limit = !judge_done;
        kill_all();
      }
    }
  }
  for (auto [pid, status] : {std::pair<pid_t, int*>{judge, &res.judge_wait}, {cand, &res.candidate_wait}})
    while (::waitpid(pid, status, 0) < 0 && errno == EINTR) {
    }
  return res;
}

}  // namespace

namespace {

// The reason for a candidate that ended by itself while the judge waited on it. bwrap reports a
// command killed by signal N as exit status 128 + N (a program that calls os._exit(128 + N) reads the
// same: it fails either way).
std::string candidate_end_reason(const RunOutcome& out) {
  int sig = 0;
  if (WIFSIGNALED(out.candidate_wait)) sig = WTERMSIG(out.candidate_wait);
  if (WIFEXITED(out.candidate_wait) && WEXITSTATUS(out.candidate_wait) > 128 &&
      WEXITSTATUS(out.candidate_wait) <= 128 + 64)
    sig = WEXITSTATUS(out.candidate_wait) - 128;
  if (out.candidate_killed) return "no_result";  // still running when the grace period ended
  if (sig == SIGXCPU) return "cpu_limit";
  if (sig != 0) {
    const char* abbrev = ::sigabbrev_np(sig);
    return "runtime_error: killed by signal " + std::to_string(sig) +
           (abbrev ? std::string(" (SIG") + abbrev + ")" : std::string());
  }
  return "early_exit";
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
  RunOutcome out = run_judged(job_text, limits);
  if (!out.started) {
    r.infrastructure_error = true;
    r.reason = "sandbox_unavailable: " + out.spawn_error;
    return r;
  }
  auto has = [&](const char* prefix) { return !first_line_with(out.status, prefix).empty(); };
  bool judge_started = out.status.compare(0, 6, "JUDGE\n") == 0;
  auto exit_text = [](int status) {
    return WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                             : "signal " + std::to_string(WTERMSIG(status));
  };
  if (out.timed_out) {
    r.reason = "timeout";
  } else if (out.output_limit) {
    r.reason = "output_limit";
  } else if (!judge_started || has("NOSTART")) {
    // bwrap or python never ran the judge, or the candidate's interpreter never answered: not the
    // model's failure.
    r.infrastructure_error = true;
    const std::string& err = judge_started ? out.err : out.judge_err;
    r.reason = std::string("sandbox_unavailable: ") + (judge_started ? "candidate " : "judge ") +
               exit_text(judge_started ? out.candidate_wait : out.judge_wait) +
               (err.empty() ? "" : ": " + err.substr(0, 300));
  } else if (has("SYNTAX")) {
    r.reason = "syntax_error";
  } else if (WIFEXITED(out.judge_wait) && WEXITSTATUS(out.judge_wait) == 0 &&
             first_line_with(out.status, "OK ") == "OK " + nonce + " " + std::to_string(task.tests.size())) {
    r.score = 1.0;
    r.reason = "passed";
  } else if (has("EARLY_EXIT")) {
    r.reason = "early_exit";
  } else if (has("FAIL")) {
    r.reason = "assert_failed";
  } else if (has("ERROR") || has("RUNTIME")) {
    std::string line = first_line_with(out.status, "ERROR");
    if (line.empty()) line = first_line_with(out.status, "RUNTIME");
    r.reason = line.find("MemoryError") != std::string::npos      ? "memory_limit"
               : line.find("RecursionError") != std::string::npos ? "recursion_limit"
                                                                  : "runtime_error";
  } else if (has("GONE")) {
    r.reason = candidate_end_reason(out);
  } else {
    // The judge ended without a verdict (e.g. its own memory limit on a huge answer): score 0.
    r.reason = "judge_error: " + exit_text(out.judge_wait) +
               (out.judge_err.empty() ? "" : ": " + out.judge_err.substr(0, 300));
  }
  return r;
}

std::string extract_code(const std::string& full_response) {
  // The few-shot format (datasets/mbpp_fewshot.h) ends the program at [DONE].
  const std::string response = full_response.substr(0, full_response.find(datasets::kMbppDoneMarker));
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
