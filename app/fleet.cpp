#include "app/fleet.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "app/worker.h"

namespace pulse::app {

WorkerSettings worker_settings(const Config& config) {
  WorkerSettings s;
  s.group_size = config.rl.group_size;
  s.sampling = config.rl.grpo.sampling;
  s.seed = static_cast<uint64_t>(config.run.seed);
  s.chat_template = config.tokenizer.chat_template;
  s.dtype = config.model.dtype;
  return s;
}

void WorkerThreads::start(int64_t n, const WorkerLoopOptions& base) {
  for (int64_t i = 0; i < n; ++i) {
    WorkerLoopOptions o = base;
    o.worker_id = "w" + std::to_string(i);
    threads_.emplace_back([this, o] {
      try {
        worker_loop(o);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
    });
  }
}

void WorkerThreads::check() {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

void WorkerThreads::join() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

WorkerFleet::WorkerFleet(const Config& config, const std::string& token, RegisterReply bootstrap,
                         std::string tokenizer_bytes, bool in_process)
    : control_(config.transport.host, static_cast<int>(config.transport.port), token, std::move(bootstrap),
               std::move(tokenizer_bytes), config.run.workers) {
  control_.start();
  if (in_process) {
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    WorkerLoopOptions wo;
    wo.control_url = control_.url();
    wo.token = token;
    wo.torch_threads = std::max(1, hw / static_cast<int>(config.run.workers));
    wo.grade_threads = 1;
    wo.timeout_s = config.transport.timeout_s;
    wo.max_retries = static_cast<int>(config.transport.max_retries);
    threads_.start(config.run.workers, wo);
  } else {
    spdlog::info("trainer listening: control {} ; start {} workers with `pulse worker --trainer {}`",
                 control_.url(), config.run.workers, control_.url());
  }
}

WorkerFleet::~WorkerFleet() {
  stop();
  control_.stop();
}

void WorkerFleet::stop() {
  if (stopped_) return;
  stopped_ = true;
  control_.post_stop();
  threads_.join();
}

void WorkerFleet::wait_for_workers() {
  ids_ = control_.wait_for_workers([this] { threads_.check(); });
}

uint64_t WorkerFleet::post(JobKind kind, uint64_t version, int64_t step, const std::vector<JobWork>& work) {
  return control_.post_job(kind, version, step, work);
}

std::vector<WorkerReport> WorkerFleet::wait(uint64_t seq) {
  return control_.wait_job(seq, [this] { threads_.check(); });
}

std::vector<WorkerReport> WorkerFleet::sync_all(uint64_t version, int64_t step) {
  return wait(post(JobKind::Sync, version, step, std::vector<JobWork>(ids_.size())));
}

bool WorkerFleet::identical(const std::vector<WorkerReport>& reports, uint64_t version,
                            const std::string& trainer_hash) const {
  bool ok = true;
  for (size_t w = 0; w < reports.size(); ++w) {
    bool same = reports[w].version == version && reports[w].root_hash == trainer_hash;
    if (!same)
      spdlog::error("worker {} holds version {} hash {}, trainer version {} hash {}", ids_.at(w),
                    reports[w].version, reports[w].root_hash, version, trainer_hash);
    ok = ok && same;
  }
  return ok;
}

}  // namespace pulse::app
