// Reward dispatch: one entry point for every task kind, and a parallel batch version for rollouts.
#pragma once
#include <string>
#include <vector>

#include "rl/problem.h"
#include "rl/reward.h"

namespace pulse::rl {

/// Grades one response. Math: grade_math(response, problem.answer) (lenient mode, math_grader.h).
/// Code: grade_mbpp(extract_code(response), problem) with default SandboxLimits (mbpp_sandbox.h).
/// Never throws for bad responses; infrastructure failures come back with infrastructure_error=true.
RewardResult grade(const Problem& problem, const std::string& response);

/// Grades responses[i] against *problems[i] on `threads` worker threads (0 = one per hardware thread).
/// Results are in input order and identical to calling grade() one by one. Duplicates (the same problem
/// object and the same graded text: the extracted program for code, the response for math) are graded
/// once and share that result. Each code task occupies one grade (two sandboxes) at a time, so `threads`
/// also bounds concurrent sandboxes.
/// Throws std::invalid_argument when the two vectors differ in length or a problem is null.
std::vector<RewardResult> grade_batch(const std::vector<const Problem*>& problems,
                                      const std::vector<std::string>& responses, int threads = 0);

}  // namespace pulse::rl
