// MBPP reward: a candidate program plus the task's asserts, run by python3 inside bubblewrap.
//
// Sandbox (Debian bubblewrap >= 0.8): a fresh root with only /usr read-only (plus the /bin, /lib
// symlinks), /proc, a minimal /dev, a size-capped private tmpfs /tmp as the work dir, new user / PID /
// network / IPC / UTS namespaces, --die-with-parent, --new-session, root remounted read-only, nested
// user namespaces disabled; environment cleared to PATH, LANG=C.UTF-8, HOME=/tmp; `python3 -I -B`
// (PYTHON* variables and user site ignored); stdin /dev/null; stdout/stderr captured up to
// output_bytes, then the run is killed. rlimits set in the cloned child before exec: RLIMIT_CPU,
// RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_CORE=0. When pulse runs as root (where the kernel does
// not enforce RLIMIT_NPROC) the child first drops to an unused uid/gid (one per grading thread), so
// the process cap holds. A wall-clock timeout SIGKILLs bwrap, which takes down the whole PID namespace.
//
// Passing rule: every assert of test_list ran and held. A trusted harness (first code in the
// interpreter) reads the job (code, setup, asserts, a random per-run nonce) from an inherited pipe and
// closes it, compiles everything, runs the candidate, then evaluates each assert itself: operands of a
// comparison are evaluated separately and must be plain built-in values (exact types int, float,
// complex, bool, str, bytes, None, list, tuple, dict, set, frozenset, recursively), compared with
// operator functions captured before the candidate ran, in a namespace whose builtins are a snapshot
// taken before the candidate ran. Only after the last assert does it write "OK <nonce> <n>" to a
// second pipe. A pass needs exit status 0 AND that line. So exit(0) / sys.exit / os._exit before or
// during the asserts, `python -O`, replacing AssertionError or builtins, and always-equal objects all
// score 0. Residual risk (documented, not defended): code that walks the harness's own frames or
// objects (sys._getframe, gc) to read the nonce, or that patches a stdlib function the assert itself
// calls and restores it, can still forge a pass: an in-process adversary cannot be fully contained.
//
// Where bubblewrap or python cannot start, the result is infrastructure_error=true, score 0 (never an
// unsandboxed run, never the model's failure).
#pragma once
#include <cstdint>
#include <string>

#include "rl/problem.h"
#include "rl/reward.h"

namespace pulse::rl {

/// Resource limits of one sandboxed run.
struct SandboxLimits {
  double cpu_seconds = 5;                   ///< RLIMIT_CPU per process (seconds)
  double wall_seconds = 10;                 ///< wall clock for the whole run (seconds)
  uint64_t memory_bytes = 512ull << 20;     ///< RLIMIT_AS per process (bytes)
  uint64_t file_bytes = 16ull << 20;        ///< RLIMIT_FSIZE per file (bytes); /tmp holds 4x this
  int max_processes = 16;                   ///< RLIMIT_NPROC (processes + threads of the sandbox uid)
  uint64_t output_bytes = 1ull << 20;       ///< stdout + stderr cap (bytes); more kills the run
  std::string python = "/usr/bin/python3";  ///< interpreter inside the sandbox; must live under /usr
  std::string bwrap = "/usr/bin/bwrap";     ///< bubblewrap binary
};

/// Runs `code` then task.test_setup_code then task.tests (MBPP asserts) in the sandbox.
/// score 1 only when every assert passed. reason: "passed", "syntax_error", "assert_failed",
/// "runtime_error", "early_exit", "no_result" (ended before the asserts finished), "timeout",
/// "output_limit", "killed" (signal, e.g. memory or CPU limit), "no_tests", "sandbox_unavailable"
/// (infrastructure_error). `extracted` is the program that ran. Thread-safe; never throws for bad code.
RewardResult grade_mbpp(const std::string& code, const Problem& task, const SandboxLimits& limits = {});

/// The program in a model response: the first ```python (or ```py) fenced block, else the first
/// ``` fenced block, else the whole text.
std::string extract_code(const std::string& response);

/// True when bubblewrap + python start and run a trivial program (checked once, cached).
bool sandbox_available(const SandboxLimits& limits = {});

}  // namespace pulse::rl
