// Runs the real `pulse` command line in-process (pulse::app::run_cli) with stdout and stderr captured.
#pragma once
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli.h"

namespace pulse::test_cli {

/// Exit code, stdout and stderr of `pulse ARGS...`.
struct CliResult {
  int code = -1;
  std::string out, err;
};

/// Runs `pulse ARGS...` through run_cli; std::cout/std::cerr are restored even when it throws.
inline CliResult pulse_cli(std::vector<std::string> args) {
  args.insert(args.begin(), "pulse");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  CliResult r;
  try {
    r.code = pulse::app::run_cli(static_cast<int>(argv.size()), argv.data());
  } catch (...) {
    std::cout.rdbuf(old_out);
    std::cerr.rdbuf(old_err);
    throw;
  }
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

}  // namespace pulse::test_cli
