// The trainer <-> inference worker control channel (HTTP + JSON, cpp-httplib): who the workers are (a
// membership with leases), which job they run next (sync to a version; generate rollouts for some shares of
// a step's prompts; stop), and their reports. Weights never travel here: they go as PULSESync patches
// through sync/transport_http.h.
//
// Routes (bearer token on every route when one is set, compared in constant time; 401 otherwise); the
// bodies are the typed messages of app/wire/messages.h:
//   POST /v1/register {"worker": name}      -> RegisterReply (409 while the run has all its live workers)
//   GET  /v1/tokenizer                      -> the tokenizer file (octet-stream)
//   GET  /v1/job?after=SEQ&worker=KEY       -> long poll: the current Job once its seq > SEQ and it holds
//                                              something for this member (204 after ~10 s without one)
//   POST /v1/report?worker=KEY WorkerReport -> 200; a report with an error aborts the trainer's wait;
//                                              400 (unreadable) / 422 (fails app/wire/report_check.h), the
//                                              message naming the field: the worker is dropped as faulty
//   POST /v1/heartbeat?worker=KEY           -> 200 (renews the lease)
// A KEY the server does not know (dropped after missing its lease, or a restarted trainer) is 410 Gone: the
// worker registers again. When a newer registration took the member's name, the 410 message holds
// kReplacedMarker and the worker stops instead (two live processes with one --id would otherwise replace
// each other forever).
//
// Membership policy. A member registers (a name it chooses, or "w<slot>"), gets a fresh lease key, and
// every request it makes renews its lease; a member silent for lease_s is dropped and logged. Registering
// a name that a live member holds replaces that member (a restarted worker need not wait for its lease).
// Each generate job holds `shares` fixed slices of the step's prompts (run.workers of them, so that the
// batch and every rollout seed are the same whoever samples them); they go round-robin to the live members
// in slot order, and the unfinished shares of a dropped member go to the live member with the fewest, at
// the same policy version. A sync job completes when every live member reported it (late joiners catch up
// through an anchor plus patches before they get work). With no live member the trainer waits, and fails
// after no_worker_timeout_s.
//
// Faulty workers. A report that cannot be read (400) or whose meaning is wrong (422: a share the job does
// not have, rollouts that do not match the share, token ids outside the vocabulary, ...) never counts: its
// worker is dropped at once, as if it had missed its lease, and its unfinished shares go to the live
// workers. When every worker is faulty the run does not spin: they are all dropped and the trainer waits for
// a new one up to no_worker_timeout_s (then fails naming the last drop), and a job that collects more than
// max_bad_reports bad reports (faulty workers registering again) fails at once with the last one's reason.
//
// The server is a sync::GatedServer (sync/http_gate.h): heads are read and the token checked before a
// request thread or a body is spent; bodies are limited per route (413); unknown routes are 404 and wrong
// methods 405 (with Allow); every error answer has a JSON body and an ASCII X-Pulse-Error header.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "app/wire/messages.h"
#include "app/wire/report_check.h"

namespace pulse::sync {
class GatedServer;
}

namespace pulse::app {

/// In a 410 message: this member's name was taken by a newer registration ("replaced by another worker
/// named 'ID' ..."); a worker that gets it stops (app/worker/worker.cpp) instead of registering again.
inline constexpr const char* kReplacedMarker = "replaced by another worker named";

/// Whether `name` may name a worker (`pulse worker --id`, POST /v1/register): 1..64 letters, digits, '.',
/// '_' or '-', not starting with '.' (names become file names in fs confirmations). Thread-safe.
bool valid_worker_name(const std::string& name);

/// Membership settings of the control server.
struct FleetPolicy {
  int64_t max_workers = 1;           ///< live members at most (409 beyond); also the shares per generate job
  double lease_s = 30;               ///< a member silent this long is dropped
  double no_worker_timeout_s = 600;  ///< waits throw after this long with no live member
  uint64_t max_report_bytes = 256ull << 20;  ///< a POST /v1/report body at most (413 beyond)
  int64_t max_bad_reports = 0;  ///< bad reports one job tolerates before it fails; 0 = 2 x max_workers
};

/// Counters of membership events since the server started (cumulative).
struct FleetEvents {
  int64_t joins = 0, drops = 0;
  int64_t reassigned_shares = 0, reassigned_prompts = 0;
  int64_t live = 0;  ///< live members now
};

/// The trainer's side. Thread-safe.
class ControlServer {
 public:
  /// `bootstrap` is the register answer every worker gets (its slot, id, key and lease filled in per
  /// member); `tokenizer_bytes` the file served at /v1/tokenizer; `n_workers` is FleetPolicy::max_workers
  /// (lease and timeout at their defaults) unless `policy` is given.
  ControlServer(std::string host, int port, std::string token, RegisterReply bootstrap,
                std::string tokenizer_bytes, int64_t n_workers, std::optional<FleetPolicy> policy = {});
  ~ControlServer();
  void start();  ///< binds and serves on a background thread; throws std::runtime_error when binding fails
  void stop();
  int port() const;
  std::string url() const;
  /// Replaces the register answer (e.g. once the patch server's URL is known). Thread-safe.
  void set_bootstrap(RegisterReply bootstrap);
  /// The limits generate reports are checked against on arrival (check_share_report); until set (group_size
  /// 0) only their form and share are checked. Thread-safe.
  void set_report_limits(const ReportLimits& limits);

  /// Blocks until max_workers members are live, or at least one is and `grace_s` passed since the first
  /// joined; `check` is called about every 100 ms (it may throw to abort, e.g. when a worker thread died).
  /// Throws std::runtime_error after no_worker_timeout_s without any. Returns the live ids by slot.
  std::vector<std::string> wait_for_workers(double grace_s, const std::function<void()>& check);

  /// Posts a job and blocks until it is complete (see wait_job).
  std::vector<WorkerReport> run_job(JobKind kind, uint64_t version, int64_t step,
                                    const std::vector<JobWork>& work, const std::function<void()>& check);
  /// Posts a job and returns its id. Sync: `work` is ignored (every live member syncs). Generate: work[i]
  /// is share i (its `share` field is set to i).
  uint64_t post_job(JobKind kind, uint64_t version, int64_t step, const std::vector<JobWork>& work);
  /// Blocks until job `id` (still the current one) is complete: generate: every share has a report
  /// (returned by share); sync: every live member reported (returned by slot). Throws std::runtime_error
  /// with a worker's message when it reports an error, or when no member was live for no_worker_timeout_s.
  std::vector<WorkerReport> wait_job(uint64_t id, const std::function<void()>& check);
  /// Posts the stop job and waits up to `wait_s` until every live member fetched it.
  void post_stop(double wait_s = 5);

  FleetEvents events() const;
  /// Ids of the live members, by slot.
  std::vector<std::string> live_ids() const;

 private:
  struct Member {
    int64_t slot = -1;
    std::string id, key;
    std::chrono::steady_clock::time_point seen;
    bool live = true;
    uint64_t reported_job = 0;  ///< the last job id it reported for
    bool got_stop = false;
    bool replaced = false;  ///< dropped because another registration took its name
  };
  Member* find_locked(const std::string& key);
  /// The 410 text for a request with `key` that names no live member (kReplacedMarker when a newer
  /// registration took its name).
  std::string gone_message_locked(const std::string& key, const char* what) const;
  int64_t live_count_locked() const;
  void sweep_locked();
  void drop_locked(Member& m, const std::string& why);
  void assign_orphans_locked();
  bool deliverable_locked(const Member& m, uint64_t after) const;
  Job job_for_locked(const Member& m) const;
  bool complete_locked() const;
  void install_routes();
  void handle_register(const std::string& body, int& status, std::string& out);
  /// Sets `status` and `out` (the answer body, or the error message when status >= 400).
  void handle_report(const std::string& key, const std::string& body, int& status, std::string& out);
  /// A bad report from `m`: drops it (faulty) and counts it against the job; `why` names the field.
  void refuse_report_locked(Member& m, const std::string& why);

  std::string host_, token_;
  int port_;
  RegisterReply boot_;
  std::string tokenizer_bytes_;
  FleetPolicy policy_;
  std::unique_ptr<sync::GatedServer> server_;
  std::thread thread_, sweeper_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Member> members_;  ///< every member ever, by slot
  // The current job.
  uint64_t job_id_ = 0;      ///< the trainer's id of the current job
  uint64_t wire_ = 0;        ///< Job::seq: grows on every post and reassignment
  uint64_t first_wire_ = 0;  ///< the wire seq the current job was posted with
  JobKind kind_ = JobKind::Sync;
  uint64_t version_ = 0;
  int64_t step_ = 0;
  std::vector<JobWork> shares_;
  std::vector<int64_t> owner_;                     ///< share -> member slot (-1: nobody live yet)
  std::vector<std::optional<WorkerReport>> done_;  ///< share -> its report
  std::vector<WorkerReport> sync_reports_;         ///< sync-only reports of the current job
  std::string worker_error_;
  ReportLimits limits_;
  int64_t bad_reports_ = 0;  ///< of the current job
  std::string last_drop_;    ///< why the last member was dropped ("" = none yet)
  FleetEvents events_;
  std::chrono::steady_clock::time_point none_live_since_;
  bool any_live_before_ = false;
  bool stopping_ = false;
};

/// The worker's side: a thin client with retries on network errors. Throws std::runtime_error on HTTP
/// errors (sync::VersionGoneError on 410: this member is unknown to the server) and MessageError on a
/// malformed answer. Not thread-safe (one request at a time).
class ControlClient {
 public:
  ControlClient(std::string url, std::string token, double timeout_s = 60, int max_retries = 5);
  ~ControlClient();
  /// Registers as `name` ("" = let the trainer name it). While the trainer cannot be reached or answers 5xx
  /// it retries with backoff (0.25 s doubling to 5 s), while it answers 409 (the run has all its live
  /// workers) every 0.25 s; for up to
  /// `wait_s` seconds, calling `waiting(reason)` before each wait; then throws sync::TransportError. 401
  /// and other 4xx throw at once.
  RegisterReply register_worker(const std::string& name, double wait_s = 0,
                                const std::function<void(const std::string&)>& waiting = {});
  std::string tokenizer();
  /// Waits for the next job after `after_seq` (loops over the server's long polls).
  Job next_job(uint64_t after_seq);
  void report(const WorkerReport& report);
  /// Renews the lease (one attempt, no retries).
  void heartbeat();
  /// The lease key this client sends (set by register_worker; settable for a second client).
  void set_key(const std::string& key);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pulse::app
