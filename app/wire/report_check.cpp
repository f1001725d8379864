// The checks of a worker's generate report (app/wire/report_check.h).
#include "app/wire/report_check.h"

#include <cmath>
#include <string>

namespace pulse::app {

namespace {

[[noreturn]] void fail(const std::string& field, const std::string& what) {
  throw MessageError("field '" + field + "': " + what);
}

void check_ids(const std::vector<int32_t>& ids, const std::string& field, int64_t vocab_size) {
  if (ids.empty()) fail(field, "empty");
  for (size_t k = 0; k < ids.size(); ++k)
    if (ids[k] < 0 || ids[k] >= vocab_size)
      fail(field + "[" + std::to_string(k) + "]", "token id " + std::to_string(ids[k]) +
                                                      " outside the vocabulary [0, " +
                                                      std::to_string(vocab_size) + ")");
}

void check_ms(double v, const char* field) {
  if (!std::isfinite(v) || v < 0) fail(field, "must be a finite number of milliseconds >= 0");
}

}  // namespace

void check_share_report(const WorkerReport& report, int64_t prompts, const ReportLimits& limits) {
  const int64_t expected = prompts * limits.group_size;
  if (static_cast<int64_t>(report.rollouts.size()) != expected)
    fail("rollouts", std::to_string(report.rollouts.size()) + " rollouts, expected " +
                         std::to_string(prompts) + " prompts x " + std::to_string(limits.group_size));
  int64_t response_tokens = 0;
  for (size_t i = 0; i < report.rollouts.size(); ++i) {
    const rl::Rollout& r = report.rollouts[i];
    const std::string at = "rollouts[" + std::to_string(i) + "].";
    const int64_t g = static_cast<int64_t>(i) / limits.group_size;
    if (r.problem_index != g) fail(at + "problem_index", "must be " + std::to_string(g));
    if (r.group != g) fail(at + "group", "must be " + std::to_string(g));
    check_ids(r.prompt_ids, at + "prompt_ids", limits.vocab_size);
    check_ids(r.response_ids, at + "response_ids", limits.vocab_size);
    if (static_cast<int64_t>(r.prompt_ids.size() + r.response_ids.size()) > limits.max_tokens)
      fail(at + "response_ids",
           "prompt + response of " + std::to_string(r.prompt_ids.size() + r.response_ids.size()) +
               " tokens, longer than the model's " + std::to_string(limits.max_tokens) + " positions");
    for (size_t k = 0; k < r.sampler_logprobs.size(); ++k)
      if (!std::isfinite(r.sampler_logprobs[k]) || r.sampler_logprobs[k] > 0)
        fail(at + "sampler_logprobs[" + std::to_string(k) + "]", "must be a finite log-probability (<= 0)");
    if (!std::isfinite(r.reward)) fail(at + "reward", "must be finite");
    response_tokens += static_cast<int64_t>(r.response_ids.size());
  }
  if (report.tokens != response_tokens)
    fail("tokens", std::to_string(report.tokens) + ", but the rollouts hold " +
                       std::to_string(response_tokens) + " response tokens");
  check_ms(report.generate_ms, "generate_ms");
  check_ms(report.sync.fetch_ms, "sync.fetch_ms");
  check_ms(report.sync.apply_ms, "sync.apply_ms");
  check_ms(report.sync.total_ms, "sync.total_ms");
  check_ms(report.sync.load_ms, "sync.load_ms");
  const std::string& h = report.root_hash;
  if (h.empty() || h.size() > 16 || h.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    fail("root_hash", "must be 1..16 hex digits");
}

}  // namespace pulse::app
