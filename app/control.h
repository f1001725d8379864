// The trainer <-> inference worker control channel (HTTP + JSON, cpp-httplib): who the workers are, which
// job they run next (sync to a version; generate rollouts for some prompts; stop), and their reports.
// Weights never travel here: they go as PULSESync patches through sync/transport_http.h.
//
// Routes (bearer token on every route when one is set; 401 otherwise); the bodies are the typed messages
// of app/messages.h:
//   POST /v1/register {"worker": id}     -> RegisterReply (409 when the run has all its workers)
//   GET  /v1/tokenizer                   -> the tokenizer file (octet-stream)
//   GET  /v1/job?after=SEQ&worker=INDEX  -> long poll: the first Job with seq > SEQ, with this worker's
//                                           share of the work (204 after ~10 s without one)
//   POST /v1/report WorkerReport         -> 200; a report with an error aborts the trainer's wait
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "app/messages.h"

namespace httplib {
class Server;
}

namespace pulse::app {

/// The trainer's side. Thread-safe.
class ControlServer {
 public:
  /// `bootstrap` is the register answer every worker gets (its index filled in per worker);
  /// `tokenizer_bytes` the file served at /v1/tokenizer.
  ControlServer(std::string host, int port, std::string token, RegisterReply bootstrap,
                std::string tokenizer_bytes, int64_t n_workers);
  ~ControlServer();
  void start();  ///< binds and serves on a background thread; throws std::runtime_error when binding fails
  void stop();
  int port() const;
  std::string url() const;

  /// Blocks until n_workers workers registered; `check` is called about every 100 ms (it may throw to abort,
  /// e.g. when a worker thread died). Returns the worker ids by index.
  std::vector<std::string> wait_for_workers(const std::function<void()>& check);

  /// Posts a job (work[i] goes to worker i) and blocks until every worker reported for it; returns the
  /// reports by worker index. Throws std::runtime_error with a worker's message when it reports an error.
  std::vector<WorkerReport> run_job(JobKind kind, uint64_t version, int64_t step,
                                    const std::vector<JobWork>& work, const std::function<void()>& check);
  /// run_job in two halves, so that the trainer can work while the workers run the job (rl.max_lag = 1):
  /// post_job posts and returns the job's seq; wait_job blocks until every worker reported for that seq
  /// (which must still be the current job). Same errors as run_job.
  uint64_t post_job(JobKind kind, uint64_t version, int64_t step, const std::vector<JobWork>& work);
  std::vector<WorkerReport> wait_job(uint64_t seq, const std::function<void()>& check);
  /// Posts the stop job (does not wait).
  void post_stop();

 private:
  std::string host_, token_;
  int port_;
  RegisterReply boot_;
  std::string tokenizer_bytes_;
  int64_t n_workers_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> workers_;
  Job job_;                                  ///< the current job (its work field unused)
  std::vector<JobWork> job_work_;            ///< the current job's work, by worker index
  std::map<int64_t, WorkerReport> reports_;  ///< for job_.seq, by worker index
  std::string worker_error_;
  bool stopping_ = false;
};

/// The worker's side: a thin client with retries on network errors. Throws std::runtime_error on HTTP
/// errors and MessageError on a malformed answer.
class ControlClient {
 public:
  ControlClient(std::string url, std::string token, double timeout_s = 60, int max_retries = 5);
  ~ControlClient();
  RegisterReply register_worker(const std::string& worker_id);
  std::string tokenizer();
  /// Waits for the next job after `after_seq` (loops over the server's long polls).
  Job next_job(uint64_t after_seq);
  void report(const WorkerReport& report);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pulse::app
