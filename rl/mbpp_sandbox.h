// MBPP reward: a candidate program plus the task's asserts, run by python3 inside bubblewrap.
//
// Sandbox (Debian bubblewrap >= 0.8): a fresh root with only /usr read-only (plus the /bin, /lib
// symlinks), /proc, a minimal /dev, a size-capped private tmpfs /tmp as the work dir, new user / PID /
// network / IPC / UTS namespaces, --die-with-parent, --new-session, root remounted read-only, nested
// user namespaces disabled; environment cleared to PATH, LANG=C.UTF-8, HOME=/tmp; `python3 -I -B`
// (PYTHON* variables and user site ignored); stdin /dev/null; stdout/stderr captured up to
// output_bytes (both sandboxes together), then the run is killed. rlimits set in the cloned child before
// exec: RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_CORE=0. When pulse runs as root (where the
// kernel does not enforce RLIMIT_NPROC) the child first drops to an unused uid/gid (one per sandbox, 256 in
// rotation), so the process cap holds. A wall-clock timeout SIGKILLs bwrap, which takes down the whole PID
// namespace.
//
// Threat model. The candidate program is adversarial (an RL policy searches for any way to score 1
// without solving the task) and may run arbitrary Python and native code (ctypes) in its process. It
// must not (a) harm the host, (b) make a grade score 1 without every assert holding, (c) make pulse
// hang or report an infrastructure error. Trusted: pulse, the judge program, the kernel, bubblewrap
// and python3 under /usr, and the task's asserts and setup code (dataset text). The candidate's own
// interpreter, including the server code that runs in it before the candidate (mbpp_harness.h), is
// untrusted: the candidate can read or rewrite all of it.
//
// Judge out of reach. Each grade runs two sandboxes of the kind above, with separate namespaces (and,
// as root, separate uids): the judge's (`python3 -I -B -S`) and the candidate's. pulse gives only the
// judge the job (code, setup, asserts, a random per-run nonce) and reads only the judge's status pipe;
// the candidate holds nothing but a request pipe from the judge and an answer pipe to it (plus its
// stdout/stderr, which pulse drains and caps). The candidate's process therefore never holds the
// nonce, the asserts or any expected value, cannot see or signal the judge's processes (another PID
// namespace), and cannot write to pulse's status pipe: walking frames or the gc heap (sys._getframe,
// gc.get_objects, inspect), reading its fds, or printing or writing a forged "OK" line finds nothing and
// reaches nothing. The judge sends the program and setup, which the candidate's server runs; then it
// parses each assert with `ast` in ITS process and evaluates it itself: a name the program defines
// becomes a remote reference (calls, attribute reads, iteration, len, indexing, str/repr are requests
// over the pipes with plain-data arguments and results, wire format in rl/mbpp_judge.py); every other
// name is the judge's own (its builtins; math, sys, re, collections, ... imported by the judge). A
// built-in name the program redefines is the program's only as the called function of an assert's first
// operand (MBPP 126 defines `sum`); the expected side and truth asserts (`math.isclose(...)`) always use
// the judge's own builtins and modules, so a redefined `set`, `sorted` or `math` cannot decide them.
// Every answer is decoded into exact built-in types (int, float, complex, bool, str, bytes, bytearray,
// None, list, tuple, dict, set, frozenset, and the stdlib's Counter, OrderedDict, deque built by the
// judge), with depth and line-size caps; anything else stays a remote reference whose truth,
// comparison and hashing are refused (`not_plain_value`), so no object of the candidate's (always-equal
// classes, int subclasses, patched builtins in its process) can decide an assert. A malformed answer is
// a protocol failure (score 0).
//
// Passing rule: the judge ran every assert of test_list and each held, then wrote "OK <nonce> <n>" and
// exited 0; pulse checks both. exit(0) / sys.exit / os._exit before or during the asserts, `python -O`,
// replacing AssertionError or builtins, and always-equal objects all score 0. A program killed by a
// signal (SIGSEGV from C-level recursion or ctypes, os.kill(os.getpid(), 9), abort) is
// "runtime_error: killed by signal N (SIGNAME)": bwrap reports it as exit status 128 + N (a program that
// calls os._exit(128 + N) reads the same; it fails either way); SIGXCPU (RLIMIT_CPU) is "cpu_limit".
// Residual risks (not defended): a test whose own shape lets the candidate decide it (`assert f(x)`
// where f returns True, `assert f(a) == f(b)`) is only as strong as that shape; the judge spends CPU and
// memory on answers the candidate chooses (bounded by the judge's rlimits, a 16 MiB answer line and the
// wall clock: such a run fails, never passes); a sandbox escape through the kernel or bubblewrap is out
// of scope. Arguments the judge cannot send as plain data (a lambda in an assert) fail the assert.
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
/// "runtime_error" (an exception; or "runtime_error: killed by signal N (SIGNAME)"), "memory_limit",
/// "recursion_limit", "early_exit" (the program exited by itself), "cpu_limit" (RLIMIT_CPU), "timeout"
/// (wall clock), "output_limit", "no_result" (it stopped answering without exiting), "judge_error: ..."
/// (the judge ended without a verdict), "no_tests", "sandbox_unavailable: ..." (infrastructure_error:
/// bwrap or python could not run the judge or the candidate). `extracted` is the program that ran.
/// Thread-safe; never throws for bad code.
RewardResult grade_mbpp(const std::string& code, const Problem& task, const SandboxLimits& limits = {});

/// The program in a model response: the text before the first "[DONE]" (the few-shot format's end
/// marker, datasets/mbpp_fewshot.h), and of that the first ```python (or ```py) fenced block, else the
/// first ``` fenced block, else all of it.
std::string extract_code(const std::string& response);

/// True when bubblewrap + python start and run a trivial program (checked once, cached).
bool sandbox_available(const SandboxLimits& limits = {});

}  // namespace pulse::rl
