#include "app/trainer/rollout_pipeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "app/setup.h"
#include "app/wire/report_check.h"

using nlohmann::json;

namespace pulse::app {
namespace {

/// [begin, end) of worker w's share of n prompts (as even as possible, in index order).
std::pair<size_t, size_t> share(size_t n, size_t workers, size_t w) {
  size_t base = n / workers, extra = n % workers;
  size_t begin = w * base + std::min(w, extra);
  return {begin, begin + base + (w < extra ? 1 : 0)};
}

}  // namespace

RolloutPipeline::RolloutPipeline(const Config& config, WorkerFleet& fleet,
                                 const std::vector<rl::Problem>& train, RolloutLimits limits)
    : config_(config), fleet_(fleet), train_(train), lagged_(config.rl.max_lag > 0), limits_(limits) {
  fleet_.set_report_limits(report_limits());
}

/// A worker's rollouts are checked again before GRPO sees them (the control server checked them on arrival;
/// a checkpoint's pending reports were not). Throws std::runtime_error naming the worker and the field.
void RolloutPipeline::check_report(const WorkerReport& report, size_t worker, size_t share, int64_t s) const {
  try {
    check_share_report(report, static_cast<int64_t>(share), report_limits());
  } catch (const MessageError& e) {
    throw std::runtime_error("rollouts of step " + std::to_string(s) + " from worker " +
                             std::to_string(worker) + ": " + e.what());
  }
}

ReportLimits RolloutPipeline::report_limits() const {
  return ReportLimits{config_.rl.group_size, limits_.vocab_size, limits_.max_tokens};
}

uint64_t RolloutPipeline::post_generate(int64_t s, uint64_t version) {
  const uint64_t seed = static_cast<uint64_t>(config_.run.seed);
  std::vector<int64_t> idx =
      step_prompt_indices(static_cast<int64_t>(train_.size()), config_.rl.prompts_per_step, seed, s);
  const size_t n = fleet_.size();
  std::vector<JobWork> work(n);
  for (size_t w = 0; w < n; ++w) {
    auto [b, e] = share(idx.size(), n, w);
    for (size_t i = b; i < e; ++i) work[w].problems.push_back(train_[static_cast<size_t>(idx[i])]);
    work[w].step_seed = derive_seed(seed, kSeedRollout, static_cast<uint64_t>(s));
  }
  return fleet_.post(JobKind::Generate, version, s, work);
}

StepRollouts RolloutPipeline::assemble(int64_t s, uint64_t version, std::vector<WorkerReport> reports) const {
  StepRollouts g;
  g.step = s;
  g.version = version;
  std::vector<int64_t> idx =
      step_prompt_indices(static_cast<int64_t>(train_.size()), config_.rl.prompts_per_step,
                          static_cast<uint64_t>(config_.run.seed), s);
  const size_t n = fleet_.size();
  if (reports.size() != n)
    throw std::runtime_error("rollouts of step " + std::to_string(s) + ": " + std::to_string(reports.size()) +
                             " worker reports, expected " + std::to_string(n));
  for (size_t w = 0; w < n; ++w) {
    auto [b, e] = share(idx.size(), n, w);
    check_report(reports[w], w, e - b, s);
    for (rl::Rollout r : reports[w].rollouts) {
      r.problem_index = idx.at(b + static_cast<size_t>(r.problem_index));
      r.group += static_cast<int64_t>(b);
      g.rollouts.push_back(std::move(r));
    }
    g.tokens += reports[w].tokens;
    g.generate_ms = std::max(g.generate_ms, reports[w].generate_ms);
  }
  g.reports = std::move(reports);
  return g;
}

void RolloutPipeline::prime(int64_t step, uint64_t version, const std::string& hash, const json& pending,
                            const std::string& pending_source) {
  if (!lagged_) return;
  if (!pending.is_null()) {
    const int64_t at = parse_message<int64_t>(pending.at("step"), pending_source + ": step");
    if (at != step)
      throw std::runtime_error(pending_source + ": rollouts of step " + std::to_string(at) +
                               ", expected step " + std::to_string(step));
    pending_ = assemble(step, parse_message<uint64_t>(pending.at("version"), pending_source + ": version"),
                        parse_message<std::vector<WorkerReport>>(pending.at("reports"), pending_source));
  } else {
    pending_ = assemble(step, version, fleet_.wait(post_generate(step, version)));
    pending_.identical = fleet_.identical(pending_.reports, version, hash);
  }
  have_pending_ = true;
}

StepRollouts RolloutPipeline::begin_step(int64_t s, uint64_t version, const std::string& hash, bool last) {
  if (!lagged_) {
    StepRollouts cur = assemble(s, version, fleet_.wait(post_generate(s, version)));
    cur.identical = fleet_.identical(cur.reports, version, hash);
    return cur;
  }
  if (!have_pending_)
    throw std::logic_error("rollout pipeline: lagged step " + std::to_string(s) + " not primed");
  StepRollouts cur = std::move(pending_);
  have_pending_ = false;
  if (!last) {
    next_seq_ = post_generate(s + 1, version);
    posted_version_ = version;
    posted_hash_ = hash;
  }
  return cur;
}

std::vector<WorkerReport> RolloutPipeline::end_step(int64_t s, uint64_t next_version,
                                                    const std::string& next_hash, bool last,
                                                    bool* identical) {
  if (!lagged_ || last) {
    auto reports = fleet_.sync_all(next_version, s);
    *identical = fleet_.identical(reports, next_version, next_hash);
    return reports;
  }
  pending_ = assemble(s + 1, posted_version_, fleet_.wait(next_seq_));
  have_pending_ = true;
  *identical = fleet_.identical(pending_.reports, posted_version_, posted_hash_);
  return pending_.reports;
}

json RolloutPipeline::pending_json() const {
  if (!lagged_ || !have_pending_) return json();
  return json{{"step", pending_.step}, {"version", pending_.version}, {"reports", pending_.reports}};
}

}  // namespace pulse::app
