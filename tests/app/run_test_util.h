// Helpers of the end-to-end app tests: a temp folder, the tiny run config, and the pulse binary as a child
// process (posix_spawn, logs to files) for kill -9 / resume tests.
#pragma once
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "sync/io/atomic_file.h"
#include "tests/temp_dir.h"

extern char** environ;

namespace pulse::test_run {

/// A fresh folder under the temp dir (removed first if it exists), removed again when the test process
/// exits, so that a failed REQUIRE or FAIL leaves nothing behind.
inline std::string temp_dir(const std::string& name) {
  auto p =
      std::filesystem::temp_directory_path() / ("pulse-test-run-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  pulse::test::remove_at_exit(p);
  return p.string();
}

/// temp_dir(name) removed again when the scope ends, also when a REQUIRE ends the test early.
struct ScopedTempDir {
  std::string path;
  explicit ScopedTempDir(const std::string& name) : path(temp_dir(name)) {}
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  operator const std::string&() const { return path; }
};

/// A 2-layer, 64-wide Llama and a short run: 4 GRPO steps, checkpoints every 2. Returns the TOML path.
inline std::string write_tiny_config(const std::string& dir) {
  pulse::sync::write_file_atomic(dir + "/tiny.json", R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 320, "hidden_size": 64,
  "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true,
  "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"})");
  std::string cfg = dir + "/tiny.toml";
  pulse::sync::write_file_atomic(cfg, "[model]\nconfig = \"" + dir + "/tiny.json\"\n" + R"(
[tokenizer]
vocab_size = 320
[data]
task = "synthetic_math"
n_problems = 300
max_level = 1
held_out_fraction = 0.1
[sft]
steps = 100
batch_size = 16
max_len = 32
lr = 3e-3
warmup_steps = 5
[rl]
steps = 4
prompts_per_step = 4
group_size = 4
max_new_tokens = 12
temperature = 0.7
[optimizer]
lr = 1e-4
[eval]
max_problems = 16
max_new_tokens = 12
[run]
name = "tiny"
workers = 2
checkpoint_every = 2
threads = 1
)");
  return cfg;
}

/// The pulse binary next to the test executable (built by the default target).
inline std::string pulse_binary() {
  auto exe = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "pulse";
  REQUIRE(std::filesystem::exists(exe));
  return exe.string();
}

/// Starts `argv[0]` (found on PATH when it has no '/') with `argv`; stdout/stderr go to `log_prefix`.out
/// / .err.
inline pid_t spawn_logged(std::vector<std::string> argv, const std::string& log_prefix) {
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  std::string out = log_prefix + ".out", err = log_prefix + ".err";
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  return pid;
}

/// Starts the pulse binary with `args`; stdout/stderr go to `log_prefix`.out / .err.
inline pid_t spawn_pulse(const std::vector<std::string>& args, const std::string& log_prefix) {
  std::vector<std::string> all = {pulse_binary()};
  all.insert(all.end(), args.begin(), args.end());
  return spawn_logged(std::move(all), log_prefix);
}

/// Another process's server on 127.0.0.1:port, as far as a bind is concerned: a socket bound there and
/// listening until the holder is destroyed. REQUIREs that the port was free.
struct PortHolder {
  int fd = -1;
  explicit PortHolder(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(fd, 1) == 0);
  }
  ~PortHolder() {
    if (fd >= 0) ::close(fd);
  }
  PortHolder(const PortHolder&) = delete;
  PortHolder& operator=(const PortHolder&) = delete;
};

/// The child's exit code, or 128 + signal.
inline int wait_exit(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// checkpoints/LATEST of a run directory, or -1.
inline int64_t latest_step(const std::string& run_dir) {
  try {
    return std::stoll(pulse::sync::read_file(run_dir + "/checkpoints/LATEST"));
  } catch (const std::exception&) {
    return -1;
  }
}

/// SIGKILLs `victim` (a `pulse run` into `run_dir`) as soon as its checkpoint of `step` exists, polling for
/// up to 120 s; fails the test if the run ends first. Asserts it died of SIGKILL before writing a summary.
inline void kill_after_checkpoint(pid_t victim, const std::string& run_dir, int64_t step) {
  bool killed = false;
  for (int i = 0; i < 6000 && !killed; ++i) {
    if (latest_step(run_dir) >= step) {
      ::kill(victim, SIGKILL);
      killed = true;
    } else {
      int status = 0;
      if (::waitpid(victim, &status, WNOHANG) == victim) FAIL("run ended before it could be killed");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  REQUIRE(killed);
  CHECK(wait_exit(victim) == 128 + SIGKILL);
  CHECK_FALSE(std::filesystem::exists(run_dir + "/summary.json"));
}

/// Starts `pulse run cfg --quiet <extra...> --set run.dir=<dir>/killed`, SIGKILLs it once its step-2
/// checkpoint exists, continues it with `pulse run --resume` and requires that to exit 0. Returns the run
/// directory.
inline std::string kill_and_resume(const std::string& cfg, const std::string& dir,
                                   const std::vector<std::string>& extra) {
  const std::string run = dir + "/killed";
  std::vector<std::string> args{"run", cfg, "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--set", "run.dir=" + run});
  kill_after_checkpoint(spawn_pulse(args, dir + "/killed"), run, 2);
  REQUIRE(wait_exit(spawn_pulse({"run", "--quiet", "--resume", run}, dir + "/resumed")) == 0);
  return run;
}

}  // namespace pulse::test_run
