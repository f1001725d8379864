// The trainer's inference workers: the control server they register with and, in `pulse run`, the worker
// threads themselves (they still talk to the trainer over loopback HTTP, exactly as `pulse worker`
// processes on other machines do).
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "app/config.h"
#include "app/control.h"
#include "app/messages.h"
#include "app/worker.h"

namespace pulse::app {

/// The rollout settings the workers get: rl.group_size, the sampler's distribution (rl.temperature, top_p,
/// top_k, max_new_tokens: rl::GrpoConfig::sampling, which GRPO recomputes log-probs under), the run seed,
/// the chat template and the compute dtype.
WorkerSettings worker_settings(const Config& config);

/// Worker threads of `pulse run`; the first exception any of them throws is rethrown by check().
class WorkerThreads {
 public:
  /// Starts n threads running worker_loop with ids w0..w{n-1}.
  void start(int64_t n, const WorkerLoopOptions& base);
  void check();
  void join();
  ~WorkerThreads() { join(); }

 private:
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::exception_ptr error_;
};

/// Not thread-safe (the trainer thread drives it).
class WorkerFleet {
 public:
  /// Starts the control server (transport.host/port, `token`) serving `bootstrap`, then run.workers worker
  /// threads when `in_process`; else logs the command that external workers run.
  WorkerFleet(const Config& config, const std::string& token, RegisterReply bootstrap,
              std::string tokenizer_bytes, bool in_process);
  /// Stops the workers (stop job first, then joins) and the server.
  ~WorkerFleet();

  /// Blocks until every worker registered (rethrows a worker thread's error).
  void wait_for_workers();
  size_t size() const { return ids_.size(); }
  const std::vector<std::string>& ids() const { return ids_; }
  std::string url() const { return control_.url(); }

  uint64_t post(JobKind kind, uint64_t version, int64_t step, const std::vector<JobWork>& work);
  std::vector<WorkerReport> wait(uint64_t seq);
  /// A sync job to `version` for every worker; returns their reports.
  std::vector<WorkerReport> sync_all(uint64_t version, int64_t step);
  /// Posts the stop job and joins the worker threads (idempotent).
  void stop();

  /// True when every report holds `version` with root hash `trainer_hash`; logs each worker that does not.
  bool identical(const std::vector<WorkerReport>& reports, uint64_t version,
                 const std::string& trainer_hash) const;

 private:
  ControlServer control_;
  WorkerThreads threads_;
  std::vector<std::string> ids_;
  bool stopped_ = false;
};

}  // namespace pulse::app
