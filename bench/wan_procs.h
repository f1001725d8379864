// `pulse bench wan`: the pulse processes it starts inside its namespaces, and its stop signals.
#pragma once
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace pulse::bench::wan {

/// A process started as `ip netns exec NS PROGRAM ARGS...` (ip execs the program: the pid is the
/// program's) in a process group of its own, stdout/stderr to LOG.out / LOG.err. The destructor SIGKILLs
/// the group if it still runs and reaps it. Not thread-safe.
class Process {
 public:
  /// Throws std::runtime_error naming `what` when it cannot start.
  Process(std::string what, const std::string& ns, const std::vector<std::string>& argv,
          const std::vector<std::pair<std::string, std::string>>& env, std::string log_prefix);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  /// True while it runs (reaps it when it has ended).
  bool running();
  /// Exit code once ended (128 + signal when killed); -1 while running.
  int exit_code() const { return exit_code_; }
  /// SIGTERM to the group, SIGKILL after `grace_s`; returns once it is reaped.
  void stop(double grace_s);
  const std::string& what() const { return what_; }
  std::string out_path() const { return log_prefix_ + ".out"; }
  std::string err_path() const { return log_prefix_ + ".err"; }
  /// The last `lines` lines of its stderr (for error messages).
  std::string err_tail(int lines = 15) const;

 private:
  std::string what_, log_prefix_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
};

/// From construction to destruction, SIGINT, SIGTERM and SIGHUP set a flag instead of ending the bench,
/// so that the bench unwinds and removes what it made; the previous handlers come back after.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  /// The signal received (0 = none).
  static int received();
  /// Throws std::runtime_error("bench wan: stopped by SIGxxx") once a signal came.
  static void check();
};

}  // namespace pulse::bench::wan
