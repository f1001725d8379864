// `pulse reward math|mbpp`: grade one response and print {"score", "extracted", "reason"} as JSON.
// Exit status: 0 correct, 1 incorrect, 2 bad input (unreadable file, malformed task), 3 infrastructure
// error (e.g. bubblewrap cannot start): a caller can tell a wrong answer from a broken call.
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "app/cmd/commands.h"
#include "datasets/boxed.h"
#include "datasets/loaders.h"
#include "rl/math_grader.h"
#include "rl/mbpp_sandbox.h"

namespace pulse::app {
namespace {

struct RewardOptions {
  std::string response_path, answer, code_path, task_path;
  bool strict = false;
};

std::string read_text(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

[[noreturn]] void print_and_exit(const rl::RewardResult& r) {
  nlohmann::ordered_json j = {{"score", r.score}, {"extracted", r.extracted}, {"reason", r.reason}};
  if (r.infrastructure_error) j["infrastructure_error"] = true;
  std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  throw Exit{r.infrastructure_error ? 3 : (r.score > 0 ? 0 : 1)};
}

/// Runs a grading callback; an input error (not a grade) is reported on stderr with exit status 2, so it
/// cannot be mistaken for "incorrect" (1).
template <typename Fn>
void with_input_errors_as_2(Fn&& fn) {
  try {
    fn();
  } catch (const Exit&) {
    throw;
  } catch (const std::exception& e) {
    std::cerr << "pulse: error: " << e.what() << "\n";
    throw Exit{2};
  }
}

}  // namespace

void register_reward_commands(CLI::App& root) {
  auto o = std::make_shared<RewardOptions>();
  auto* reward = root.add_subcommand(
      "reward",
      "grade one response like the RL reward does; prints {\"score\",\"extracted\",\"reason\"} "
      "(exit 0 correct, 1 incorrect, 2 bad input, 3 infrastructure error)");
  reward->require_subcommand(1);

  auto* math = reward->add_subcommand("math", "MATH grader: last \\boxed{} of the response vs the answer");
  math->add_option("--response", o->response_path, "file with the model response ('-' = stdin)")->required();
  math->add_option("--answer", o->answer, "reference answer, e.g. '\\frac{3}{4}'")->required();
  math->add_flag("--strict", o->strict, "PRM800K grading rules instead of pulse's lenient tiers");
  math->callback([o] {
    with_input_errors_as_2([&] {
      if (auto problem = datasets::reference_answer_problem(o->answer))
        throw std::runtime_error("--answer: " + *problem +
                                 " (a reference answer, e.g. '3' or '\\frac{3}{4}')");
      print_and_exit(rl::grade_math(read_text(o->response_path), o->answer, o->strict));
    });
  });

  auto* mbpp =
      reward->add_subcommand("mbpp", "MBPP grader: run the program and the task's asserts in bubblewrap");
  mbpp->add_option("--code", o->code_path,
                   "file with the program or a response with a ```python block ('-' = stdin)")
      ->required();
  mbpp->add_option("--task", o->task_path, "file holding one MBPP jsonl record (text, code, test_list, ...)")
      ->required()
      ->check(CLI::ExistingFile);
  mbpp->callback([o] {
    with_input_errors_as_2([&] {
      auto tasks = datasets::load_mbpp_jsonl(o->task_path);
      if (tasks.size() != 1)
        throw std::runtime_error(o->task_path + ": expected exactly one MBPP record, found " +
                                 std::to_string(tasks.size()));
      print_and_exit(rl::grade_mbpp(rl::extract_code(read_text(o->code_path)), tasks[0]));
    });
  });
}

}  // namespace pulse::app
