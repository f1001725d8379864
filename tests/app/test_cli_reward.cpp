// `pulse reward math|mbpp` through the real command line (run_cli): the exit status tells a correct
// answer (0), a wrong one (1) and a broken call (2: unreadable file, malformed task) apart.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli.h"
#include "sync/io/atomic_file.h"
#include "tests/app/cli_test_util.h"

using pulse::test_cli::CliResult;
using pulse::test_cli::pulse_cli;

namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = std::filesystem::temp_directory_path().string() + "/pulse_cli_reward_" +
                           std::to_string(::getpid()) + "_" + name;
  pulse::sync::write_file_atomic(path, text);
  return path;
}

}  // namespace

TEST_CASE("pulse reward math: exit 0 correct, 1 incorrect, 2 unreadable response", "[app][cli][reward]") {
  const std::string response = temp_file("resp.txt", "So the answer is \\boxed{\\frac{3}{4}}.");
  CliResult ok = pulse_cli({"reward", "math", "--response", response, "--answer", "0.75"});
  CHECK(ok.code == 0);
  CHECK(ok.out.find("\"score\":1") != std::string::npos);

  CliResult wrong = pulse_cli({"reward", "math", "--response", response, "--answer", "4/3"});
  CHECK(wrong.code == 1);
  CHECK(wrong.out.find("\"score\":0") != std::string::npos);

  CliResult missing = pulse_cli({"reward", "math", "--response", "/nonexistent/resp.txt", "--answer", "1"});
  CHECK(missing.code == 2);
  CHECK(missing.out.empty());
  CHECK(missing.err.find("/nonexistent/resp.txt") != std::string::npos);

  // A reference answer the loaders would refuse as a gold is bad input here too, never "incorrect".
  for (const std::string bad : {"\\boxed{3", "\\frac{1}{2", "\\boxed{}", "  "}) {
    INFO(bad);
    CliResult r = pulse_cli({"reward", "math", "--response", response, "--answer", bad});
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find("--answer") != std::string::npos);
  }
  std::filesystem::remove(response);
}

TEST_CASE("pulse reward mbpp: a malformed task file is exit 2 naming the file", "[app][cli][reward]") {
  const std::string code = temp_file("code.py", "def f(x):\n    return x\n");
  const std::string task = temp_file("task.jsonl", "{\"text\": \"no tests here\"\n");
  CliResult r = pulse_cli({"reward", "mbpp", "--code", code, "--task", task});
  CHECK(r.code == 2);
  CHECK(r.err.find(task) != std::string::npos);
  std::filesystem::remove(code);
  std::filesystem::remove(task);
}
