// Reward dispatch and the parallel batch grader.
#include "rl/grader.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "rl/math_grader.h"
#include "rl/mbpp_sandbox.h"

namespace pulse::rl {

namespace {

/// What a grade looks at: the extracted program for code, the whole response for math.
std::string graded_text(const Problem& problem, const std::string& response) {
  return problem.kind == TaskKind::Code ? extract_code(response) : response;
}

/// The grade of graded_text(problem, response).
RewardResult grade_text(const Problem& problem, const std::string& text) {
  switch (problem.kind) {
    case TaskKind::Math:
      return grade_math(text, problem.answer);
    case TaskKind::Code:
      return grade_mbpp(text, problem);
  }
  RewardResult r;
  r.reason = "unknown_task_kind";
  r.infrastructure_error = true;
  return r;
}

}  // namespace

RewardResult grade(const Problem& problem, const std::string& response) {
  return grade_text(problem, graded_text(problem, response));
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
  // One grade per distinct (problem, graded text): a group's samples often repeat a program, and a
  // sandbox run costs ~30 ms of CPU. The graded text is what grade() looks at (the extracted program for
  // code, the whole response for math), so a duplicate gets exactly the result its own grade would have
  // given (for a program whose verdict is random, the duplicates share one draw).
  std::vector<std::string> keys(problems.size());
  for (size_t i = 0; i < problems.size(); ++i) keys[i] = graded_text(*problems[i], responses[i]);
  std::map<std::pair<const Problem*, std::string_view>, size_t> first;
  std::vector<size_t> unique, source(problems.size());
  for (size_t i = 0; i < problems.size(); ++i) {
    auto [it, inserted] = first.emplace(std::make_pair(problems[i], std::string_view(keys[i])), i);
    if (inserted) unique.push_back(i);
    source[i] = it->second;
  }
  size_t n_threads =
      threads > 0 ? static_cast<size_t>(threads) : std::max(1u, std::thread::hardware_concurrency());
  n_threads = std::min(n_threads, unique.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t u; (u = next.fetch_add(1)) < unique.size();) {
      const size_t i = unique[u];
      try {
        results[i] = grade_text(*problems[i], keys[i]);
      } catch (const std::exception& e) {  // e.g. out of memory while forking: not the model's fault
        results[i].reason = std::string("grader_error: ") + e.what();
        results[i].infrastructure_error = true;
      }
    }
  };
  if (n_threads == 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < n_threads; ++t) pool.emplace_back(work);
    for (auto& t : pool) t.join();
  }
  for (size_t i = 0; i < problems.size(); ++i)
    if (source[i] != i) results[i] = results[source[i]];
  return results;
}

}  // namespace pulse::rl
