// The MBPP judge and candidate server are Python files (rl/mbpp_judge.py, rl/mbpp_candidate.py) compiled
// into the binary as text: the embedded text is the file's, and python3's own compiler accepts it.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "rl/mbpp_harness.h"
#include "sync/io/atomic_file.h"
#include "tests/test_paths.h"

namespace {

/// Exit status of python3 compiling `path` with compile() (no __pycache__ written into the checkout);
/// `quiet`: its error message is dropped.
int python_compile_status(const std::string& path, bool quiet = false) {
  const std::string cmd =
      "python3 -I -c \"import sys; compile(open(sys.argv[1], encoding='utf-8').read(), sys.argv[1], "
      "'exec')\" '" +
      path + "'" + (quiet ? " 2>/dev/null" : "");
  const int rc = std::system(cmd.c_str());
  return rc == -1 ? -1 : WEXITSTATUS(rc);
}

}  // namespace

TEST_CASE("embedded MBPP judge equals rl/mbpp_judge.py and python3 compiles it", "[rl][mbpp]") {
  const std::string path = pulse::test::source_path("rl/mbpp_judge.py");
  const std::string text = pulse::sync::read_file(path);
  CHECK(text.find("def _pulse_judge():") != std::string::npos);
  CHECK(std::string(pulse::rl::mbpp_judge_source()) == text);
  CHECK(python_compile_status(path) == 0);
}

TEST_CASE("embedded MBPP candidate server equals rl/mbpp_candidate.py and python3 compiles it",
          "[rl][mbpp]") {
  const std::string path = pulse::test::source_path("rl/mbpp_candidate.py");
  const std::string text = pulse::sync::read_file(path);
  CHECK(text.find("def _pulse_serve():") != std::string::npos);
  CHECK(std::string(pulse::rl::mbpp_candidate_source()) == text);
  CHECK(python_compile_status(path) == 0);
}

TEST_CASE("python3 compile check fails on a file that is not Python", "[rl][mbpp]") {
  // The check above must be able to fail: a C++ file is not Python.
  CHECK(python_compile_status(pulse::test::source_path("rl/mbpp_harness.h"), true) != 0);
}
