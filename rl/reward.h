// The result every grader returns (printed by `pulse reward ...` as one JSON object).
#pragma once
#include <string>

namespace pulse::rl {

/// score is 1.0 for a correct response and 0.0 otherwise. `infrastructure_error` marks a grade that
/// could not be made (e.g. the sandbox could not start): never counted as the model's failure.
struct RewardResult {
  double score = 0.0;
  std::string extracted;  ///< what was graded: the boxed answer, or the program that ran
  std::string reason;     ///< "correct", "no_boxed_answer", "assert_failed", "timeout", ...
  bool infrastructure_error = false;
};

}  // namespace pulse::rl
