// The trainer's inference workers: the control server they register with and, in `pulse run`, the worker
// threads themselves (they still talk to the trainer over loopback HTTP, exactly as `pulse worker`
// processes on other machines do).
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "app/config.h"
#include "app/wire/control.h"
#include "app/wire/messages.h"
#include "app/worker/worker.h"

namespace pulse::app {

/// The rollout settings the workers get: rl.group_size, the sampler's distribution (rl.temperature, top_p,
/// top_k, max_new_tokens: rl::GrpoConfig::sampling, which GRPO recomputes log-probs under), the run seed,
/// the chat template and the compute dtype.
WorkerSettings worker_settings(const Config& config);

/// Worker threads of `pulse run`; the first exception any of them throws is rethrown by check().
class WorkerThreads {
 public:
  /// Starts n threads running worker_loop (the trainer names them w<slot>).
  void start(int64_t n, const WorkerLoopOptions& base);
  void check();
  void join();
  ~WorkerThreads() { join(); }

 private:
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::exception_ptr error_;
};

/// The trainer's fleet: the control server (membership with leases, app/wire/control.h) and, in `pulse run`,
/// the worker threads. Not thread-safe (the trainer thread drives it).
class WorkerFleet {
 public:
  /// Starts the control server: with `in_process` on a free loopback port (its worker threads start with
  /// start_local_workers()), else on transport.host:`port` (0 = a free one) for `pulse worker` processes
  /// (logs the command they run). Up from the start of the run, so that workers can register during SFT; they
  /// get jobs once the trainer posts them. Policy: transport.lease_s, transport.no_worker_timeout_s,
  /// run.workers shares per step and live workers at most. Throws std::runtime_error when the port cannot be
  /// bound.
  WorkerFleet(const Config& config, const std::string& token, RegisterReply bootstrap,
              std::string tokenizer_bytes, int port, bool in_process);
  /// Stops the workers (stop job first, then joins) and the server.
  ~WorkerFleet();

  /// The register answer from now on (the patch server's URL, once known).
  void set_bootstrap(RegisterReply bootstrap) { control_.set_bootstrap(std::move(bootstrap)); }
  /// `pulse run`: starts run.workers worker threads (no-op for `pulse trainer`).
  void start_local_workers();
  /// Blocks until run.workers workers are live, or at least one is and transport.lease_s passed since it
  /// joined (rethrows a worker thread's error; throws after transport.no_worker_timeout_s with none).
  void wait_for_workers();
  /// Shares per generate job (run.workers): the step's prompts are split into this many fixed slices.
  size_t size() const { return shares_; }
  std::vector<std::string> live_ids() const { return control_.live_ids(); }
  std::string url() const { return control_.url(); }

  /// The limits every generate report is checked against when it arrives (app/wire/report_check.h).
  void set_report_limits(const ReportLimits& limits) { control_.set_report_limits(limits); }

  uint64_t post(JobKind kind, uint64_t version, int64_t step, const std::vector<JobWork>& work);
  std::vector<WorkerReport> wait(uint64_t seq);
  /// A sync job to `version` for every live worker; returns their reports (by slot).
  std::vector<WorkerReport> sync_all(uint64_t version, int64_t step);
  /// Posts the stop job and joins the worker threads (idempotent).
  void stop();

  /// Membership events since the previous call (live = live workers now).
  FleetEvents take_events();

  /// True when every report holds `version` with root hash `trainer_hash`; logs each worker that does not.
  bool identical(const std::vector<WorkerReport>& reports, uint64_t version,
                 const std::string& trainer_hash) const;

 private:
  const Config& config_;
  const bool in_process_;
  const std::string token_;
  ControlServer control_;
  WorkerThreads threads_;
  size_t shares_ = 0;
  FleetEvents last_events_;
  bool stopped_ = false;
};

/// summary.json "fleet" from the metrics rows: workers joined after the first step started, dropped, and
/// prompts reassigned; null when none of them happened.
nlohmann::json fleet_summary(const std::vector<nlohmann::json>& rows);

}  // namespace pulse::app
