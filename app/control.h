// The trainer <-> inference worker control channel (HTTP + JSON, cpp-httplib): who the workers are, which
// job they run next (sync to a version; generate rollouts for some prompts; stop), and their reports.
// Weights never travel here: they go as PULSESync patches through sync/transport_http.h.
//
// Routes (bearer token on every route when one is set; 401 otherwise):
//   POST /v1/register {"worker": id}   -> {"index": i, "patch_url": .., "config": {..}, "model_config":
//   "..json.."} GET  /v1/tokenizer                 -> the tokenizer file (octet-stream) GET /v1/job?after=SEQ
//   -> long poll: the first job with seq > SEQ (204 after ~10 s without one) POST /v1/report {"worker": i,
//   "seq": S, ...} -> 200; a report with "error" aborts the trainer's wait
// A job is {"seq": S, "kind": "sync"|"generate"|"stop", "version": V, "step": s, "work": [per worker {..}]}.
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

#include "rl/problem.h"
#include "rl/rollout.h"

namespace httplib {
class Server;
}

namespace pulse::app {

/// Problem / Rollout <-> JSON (lossless: float log-probs survive the round trip bit for bit).
nlohmann::json problem_to_json(const rl::Problem& p);
rl::Problem problem_from_json(const nlohmann::json& j);
nlohmann::json rollout_to_json(const rl::Rollout& r);
rl::Rollout rollout_from_json(const nlohmann::json& j);

/// What a worker needs to start: sent in the /v1/register answer.
struct WorkerBootstrap {
  std::string patch_url;  ///< PULSESync server ("http://127.0.0.1:PORT")
  std::string patch_dir;  ///< transport.kind = fs: the shared folder patches appear in ("" = use patch_url)
  nlohmann::json config;  ///< rollout settings: group_size, sampling, seed, chat_template, dtype
  std::string model_config;     ///< HF config.json text of the model
  std::string tokenizer_bytes;  ///< the tokenizer file, served at /v1/tokenizer
  std::string tokenizer_name;   ///< its file name (keeps the extension load_tokenizer dispatches on)
};

/// The trainer's side. Thread-safe.
class ControlServer {
 public:
  ControlServer(std::string host, int port, std::string token, WorkerBootstrap bootstrap, int64_t n_workers);
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
  std::vector<nlohmann::json> run_job(const std::string& kind, uint64_t version, int64_t step,
                                      const std::vector<nlohmann::json>& work,
                                      const std::function<void()>& check);
  /// run_job in two halves, so that the trainer can work while the workers run the job (rl.max_lag = 1):
  /// post_job posts and returns the job's seq; wait_job blocks until every worker reported for that seq
  /// (which must still be the current job). Same errors as run_job.
  uint64_t post_job(const std::string& kind, uint64_t version, int64_t step,
                    const std::vector<nlohmann::json>& work);
  std::vector<nlohmann::json> wait_job(uint64_t seq, const std::function<void()>& check);
  /// Posts the stop job (does not wait).
  void post_stop();

 private:
  struct Job {
    uint64_t seq = 0;
    nlohmann::json body;
  };
  std::string host_, token_;
  int port_;
  WorkerBootstrap boot_;
  int64_t n_workers_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> workers_;
  Job job_;
  std::map<int64_t, nlohmann::json> reports_;  ///< for job_.seq, by worker index
  std::string worker_error_;
  bool stopping_ = false;
};

/// The worker's side: a thin JSON client with retries on network errors.
class ControlClient {
 public:
  ControlClient(std::string url, std::string token, double timeout_s = 60, int max_retries = 5);
  ~ControlClient();
  nlohmann::json register_worker(const std::string& worker_id);
  std::string tokenizer();
  /// Waits for the next job after `after_seq` (loops over the server's long polls).
  nlohmann::json next_job(uint64_t after_seq);
  void report(const nlohmann::json& report);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pulse::app
