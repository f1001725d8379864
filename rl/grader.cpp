// Reward dispatch and the parallel batch grader.
#include "rl/grader.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>

#include "rl/math_grader.h"
#include "rl/mbpp_sandbox.h"

namespace pulse::rl {

RewardResult grade(const Problem& problem, const std::string& response) {
  switch (problem.kind) {
    case TaskKind::Math:
      return grade_math(response, problem.answer);
    case TaskKind::Code:
      return grade_mbpp(extract_code(response), problem);
  }
  RewardResult r;
  r.reason = "unknown_task_kind";
  r.infrastructure_error = true;
  return r;
}

std::vector<RewardResult> grade_batch(const std::vector<const Problem*>& problems,
                                      const std::vector<std::string>& responses, int threads) {
  if (problems.size() != responses.size())
    throw std::invalid_argument("grade_batch: " + std::to_string(problems.size()) + " problems but " +
                                std::to_string(responses.size()) + " responses");
  for (size_t i = 0; i < problems.size(); ++i)
    if (!problems[i]) throw std::invalid_argument("grade_batch: problem " + std::to_string(i) + " is null");
  std::vector<RewardResult> results(problems.size());
  if (problems.empty()) return results;
  size_t n_threads =
      threads > 0 ? static_cast<size_t>(threads) : std::max(1u, std::thread::hardware_concurrency());
  n_threads = std::min(n_threads, problems.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < problems.size();) {
      try {
        results[i] = grade(*problems[i], responses[i]);
      } catch (const std::exception& e) {  // e.g. out of memory while forking: not the model's fault
        results[i].reason = std::string("grader_error: ") + e.what();
        results[i].infrastructure_error = true;
      }
    }
  };
  if (n_threads == 1) {
    work();
    return results;
  }
  std::vector<std::thread> pool;
  for (size_t t = 0; t < n_threads; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  return results;
}

}  // namespace pulse::rl
