#include "app/trainer/fleet.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "app/worker/worker.h"

namespace pulse::app {

WorkerSettings worker_settings(const Config& config) {
  WorkerSettings s;
  s.group_size = config.rl.group_size;
  s.sampling = config.rl.grpo.sampling;
  s.seed = static_cast<uint64_t>(config.run.seed);
  s.chat_template = config.tokenizer.chat_template;
  s.dtype = config.model.dtype;
  s.device = config.run.device;
  s.dense = config.sync.dense;
  return s;
}

void WorkerThreads::start(int64_t n, const WorkerLoopOptions& base) {
  for (int64_t i = 0; i < n; ++i) {
    threads_.emplace_back([this, base] {
      try {
        worker_loop(base);
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
                         std::string tokenizer_bytes, int port, bool in_process)
    : config_(config),
      in_process_(in_process),
      token_(token),
      control_(
          in_process ? "127.0.0.1" : config.transport.host, in_process ? 0 : port, token,
          std::move(bootstrap), std::move(tokenizer_bytes), config.run.workers,
          FleetPolicy{config.run.workers, config.transport.lease_s, config.transport.no_worker_timeout_s}),
      shares_(static_cast<size_t>(config.run.workers)) {
  control_.start();
  if (!in_process)
    spdlog::info("trainer listening: control {} ; start {} worker{} with `pulse worker --trainer {}`",
                 control_.url(), config.run.workers, config.run.workers == 1 ? "" : "s", control_.url());
}

WorkerFleet::~WorkerFleet() {
  stop();
  control_.stop();
}

void WorkerFleet::start_local_workers() {
  if (!in_process_) return;
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  WorkerLoopOptions wo;
  wo.control_url = control_.url();
  wo.token = token_;
  wo.torch_threads = std::max(1, hw / static_cast<int>(config_.run.workers));
  wo.grade_threads = 1;
  wo.timeout_s = config_.transport.timeout_s;
  wo.max_retries = static_cast<int>(config_.transport.max_retries);
  wo.register_wait_s = config_.transport.register_wait_s;
  wo.reconnect = false;  // the trainer is this process: when it is gone, so are they
  threads_.start(config_.run.workers, wo);
}

void WorkerFleet::stop() {
  if (stopped_) return;
  stopped_ = true;
  control_.post_stop();
  threads_.join();
}

void WorkerFleet::wait_for_workers() {
  control_.wait_for_workers(config_.transport.lease_s, [this] { threads_.check(); });
  last_events_ = control_.events();  // the members that started the run are not "joins" in the metrics
}

FleetEvents WorkerFleet::take_events() {
  const FleetEvents now = control_.events();
  FleetEvents d;
  d.joins = now.joins - last_events_.joins;
  d.drops = now.drops - last_events_.drops;
  d.reassigned_shares = now.reassigned_shares - last_events_.reassigned_shares;
  d.reassigned_prompts = now.reassigned_prompts - last_events_.reassigned_prompts;
  d.live = now.live;
  last_events_ = now;
  return d;
}

uint64_t WorkerFleet::post(JobKind kind, uint64_t version, int64_t step, const std::vector<JobWork>& work) {
  return control_.post_job(kind, version, step, work);
}

std::vector<WorkerReport> WorkerFleet::wait(uint64_t seq) {
  return control_.wait_job(seq, [this] { threads_.check(); });
}

std::vector<WorkerReport> WorkerFleet::sync_all(uint64_t version, int64_t step) {
  return wait(post(JobKind::Sync, version, step, {}));
}

bool WorkerFleet::identical(const std::vector<WorkerReport>& reports, uint64_t version,
                            const std::string& trainer_hash) const {
  bool ok = true;
  for (const auto& r : reports) {
    bool same = r.version == version && r.root_hash == trainer_hash;
    if (!same)
      spdlog::error("worker {} holds version {} hash {}, trainer version {} hash {}", r.worker_id, r.version,
                    r.root_hash, version, trainer_hash);
    ok = ok && same;
  }
  return ok;
}

nlohmann::json fleet_summary(const std::vector<nlohmann::json>& rows) {
  int64_t joined = 0, dropped = 0, reassigned = 0;
  for (const auto& r : rows) {
    joined += r.value("workers_joined", int64_t{0});
    dropped += r.value("workers_dropped", int64_t{0});
    reassigned += r.value("reassigned_prompts", int64_t{0});
  }
  if (joined == 0 && dropped == 0 && reassigned == 0) return nullptr;
  return nlohmann::json{
      {"workers_joined", joined}, {"workers_dropped", dropped}, {"reassigned_prompts", reassigned}};
}

}  // namespace pulse::app
