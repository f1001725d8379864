#include "app/worker/worker.h"

#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "app/device.h"
#include "app/job.h"
#include "app/setup.h"
#include "app/wire/control.h"
#include "app/worker/device_weights.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "rl/rollout.h"
#include "sync/hash.h"
#include "sync/http_common.h"
#include "sync/io/atomic_file.h"
#include "sync/transport_fs.h"
#include "sync/transport_http.h"
#include "sync/transport_prefetch.h"
#include "sync/worker_replica.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace pulse::app {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// The scratch folders alive in this process (removed by the signal thread of `pulse worker` too).
std::mutex g_scratch_mu;
std::set<std::string> g_scratch;

/// A private scratch folder for the files the worker receives (tokenizer, config.json), named
/// pulse-worker-<pid>-XXXXXX so that a later worker can sweep it when this process was killed.
struct Scratch {
  std::string path;
  Scratch() {
    std::string tmpl =
        (fs::temp_directory_path() / ("pulse-worker-" + std::to_string(::getpid()) + "-XXXXXX")).string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("worker: cannot create a temp folder " + tmpl);
    path = buf.data();
    std::lock_guard<std::mutex> lock(g_scratch_mu);
    g_scratch.insert(path);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
    std::lock_guard<std::mutex> lock(g_scratch_mu);
    g_scratch.erase(path);
  }
};

/// What the worker says: a line (info for `pulse worker`, debug for threads of `pulse run`) and, with
/// --log-json, the event as one JSON object on stdout. Thread-safe.
class WorkerLog {
 public:
  explicit WorkerLog(const WorkerLoopOptions& o) : verbose_(o.verbose), json_(o.log_json) {}
  void event(json j, const std::string& text, bool warn = false) const {
    if (json_) {
      static std::mutex mu;
      std::lock_guard<std::mutex> lock(mu);
      std::cout << j.dump() << std::endl;
    }
    if (warn) {
      spdlog::warn("{}", text);
    } else if (verbose_) {
      spdlog::info("{}", text);
    } else {
      spdlog::debug("{}", text);
    }
  }

 private:
  bool verbose_, json_;
};

/// A trainer bound to every interface (0.0.0.0) advertises that address; reach its patch server through the
/// host this worker already reaches the control server at.
std::string reachable_patch_url(std::string patch_url, const std::string& control_url) {
  auto any = patch_url.find("://0.0.0.0:");
  if (any == std::string::npos) return patch_url;
  auto host_begin = control_url.find("://");
  auto host_end = control_url.rfind(':');
  if (host_begin != std::string::npos && host_end != std::string::npos && host_end > host_begin + 3)
    patch_url = patch_url.substr(0, any + 3) + control_url.substr(host_begin + 3, host_end - host_begin - 3) +
                patch_url.substr(any + 10);
  return patch_url;
}

/// Renews the member's lease every lease_s / 3 on its own connection until destroyed.
class Heartbeat {
 public:
  Heartbeat(const WorkerLoopOptions& o, const RegisterReply& boot)
      : client_(o.control_url, o.token, std::max(1.0, std::min(o.timeout_s, boot.lease_s / 3)), 0) {
    client_.set_key(boot.key);
    const auto period = std::chrono::duration<double>(boot.lease_s / 3);
    thread_ = std::thread([this, period] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!cv_.wait_for(lock, period, [this] { return done_; })) {
        lock.unlock();
        try {
          client_.heartbeat();
        } catch (const std::exception&) {
          // Dropped (410) or the trainer unreachable: the job loop finds out on its next request.
        }
        lock.lock();
      }
    });
  }
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  ControlClient client_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

/// A registered worker: its model, tokenizer, patch source and replica.
class WorkerSession {
 public:
  /// `replica`: the weights to start from (empty, or what this worker held when the same trainer
  /// dropped it); it confirms under the new registration's id.
  WorkerSession(const WorkerLoopOptions& o, ControlClient& control, RegisterReply boot, const WorkerLog& log,
                sync::WorkerReplica replica)
      : o_(o), boot_(std::move(boot)), log_(log), replica_(std::move(replica)) {
    replica_.set_id(boot_.worker_id);
    std::string tok_path = scratch_.path + "/" + boot_.tokenizer_name;
    sync::write_file_atomic(tok_path, control.tokenizer());
    tok_ = model::load_tokenizer(tok_path);
    std::string mc_path = scratch_.path + "/config.json";
    sync::write_file_atomic(mc_path, boot_.model_config);
    model::ModelConfig mc = model::ModelConfig::from_hf_json(mc_path);
    policy_ = model::Transformer(mc, boot_.settings.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32);
    // The trainer's run.device, resolved here: worker threads of `pulse run` share the trainer's GPU
    // (same LOCAL_RANK); the replica's BF16 bytes stay in host memory. BF16 parameters on a GPU take each
    // sync's patches on the device; otherwise, and after an anchor or a failed device apply, the replica
    // is copied in whole (app/worker/device_weights.h).
    c10::Device device(c10::DeviceType::CPU);
    try {
      device = resolve_device(boot_.settings.device, local_rank_from_env());
    } catch (const ConfigError& e) {
      throw std::runtime_error("worker " + boot_.worker_id + " on this machine: the trainer's " + e.what());
    }
    if (!device.is_cpu()) policy_->to(device);
    policy_->eval();
    loader_ = std::make_unique<ModelWeightLoader>(*policy_);
    tmpl_ = model::PromptTemplate::preset(boot_.settings.chat_template);
    sync::HttpClientOptions patch_opts;
    patch_opts.url = reachable_patch_url(boot_.patch_url, o.control_url);
    patch_opts.token = o.token;
    patch_opts.max_retries = o.max_retries;
    patch_opts.timeout_s = o.timeout_s;
    client_ = std::make_unique<sync::PatchClient>(patch_opts);
    // transport.kind = fs: patches come from the shared folder (one-step patches replayed, anchors to join).
    if (!boot_.patch_dir.empty())
      folder_ = std::make_unique<sync::FsPatchSource>(boot_.patch_dir, o.timeout_s);
    patches_ = std::make_unique<sync::PrefetchingSource>(folder_ ? static_cast<sync::PatchSource&>(*folder_)
                                                                 : static_cast<sync::PatchSource&>(*client_));
    rc_ = rollout_config(boot_.settings, o.grade_threads);
    patch_from_ = folder_ ? "folder " + boot_.patch_dir : patch_opts.url;
    // Kept weights ahead of the trainer's head, or at its head with another root, belong to another
    // history (a trainer restarted on the same port also answers 410): start empty. Behind the head they
    // are safe either way: a patch from their version is checked against their root before it is applied.
    if (!replica_.empty()) {
      const sync::VersionHead head = patches_->head();
      if (replica_.version() > head.version ||
          (replica_.version() == head.version && replica_.root_hash() != head.root_hash)) {
        const std::string why = "its weights at version " + std::to_string(replica_.version()) + " (root " +
                                sync::hash_hex(replica_.root_hash()) + ") are not the trainer's (head " +
                                std::to_string(head.version) + ", root " + sync::hash_hex(head.root_hash) +
                                "): a restarted trainer";
        log_.event(json{{"event", "kept_weights_dropped"}, {"worker", boot_.worker_id}, {"reason", why}},
                   "worker " + boot_.worker_id + ": " + why + "; starting from an anchor", true);
        replica_ = sync::WorkerReplica(boot_.worker_id);
      }
    }
  }

  const RegisterReply& boot() const { return boot_; }
  const std::string& patch_source() const { return patch_from_; }
  uint64_t version() const { return replica_.version(); }
  /// Whether it starts with weights (kept from the session the trainer dropped).
  bool has_weights() const { return !replica_.empty(); }
  /// The replica, moved out (the session is done with it).
  sync::WorkerReplica take_replica() { return std::move(replica_); }
  /// How syncs reach the model: "device patches" or "full copies (<why not device patches>)".
  std::string weight_path() const {
    return loader_->unusable_reason().empty() ? "device patches"
                                              : "full copies (" + loader_->unusable_reason() + ")";
  }
  void stop() { patches_->stop(); }

  /// Sync to the job's version (fetch, validate, apply, confirm the root hash), then bring the model's
  /// parameters there (ModelWeightLoader: the same patches on the device, or a full copy); returns the
  /// sync-only report (share -1). A failed device apply is logged as a warning and repaired by a copy.
  WorkerReport sync(const Job& job) {
    WorkerReport report;
    report.worker = boot_.index;
    report.worker_id = boot_.worker_id;
    report.seq = job.seq;
    auto t0 = std::chrono::steady_clock::now();
    const uint64_t hits_before = patches_->hits();
    // sync.dense (the bench's baseline): drop the weights so that the sync takes the newest anchor, the
    // whole model, as a trainer without PULSESync would ship it.
    if (boot_.settings.dense && job.version > replica_.version())
      replica_ = sync::WorkerReplica(boot_.worker_id);
    sync::WorkerReplica::SyncStats st = replica_.sync_to(*patches_, job.version);
    const double sync_ms = ms_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    const ModelWeightLoader::Result loaded = loader_->load(replica_, st);
    const double load_ms = loaded.load == WeightLoad::None ? 0 : ms_since(t1);
    if (!loaded.failure.empty())
      log_.event(json{{"event", "device_apply_failed"},
                      {"worker", boot_.worker_id},
                      {"version", replica_.version()},
                      {"reason", loaded.failure}},
                 "worker " + boot_.worker_id + ": version " + std::to_string(replica_.version()) + ": " +
                     loaded.failure + "; the whole model was copied from the replica instead",
                 true);
    report.version = replica_.version();
    report.root_hash = sync::hash_hex(replica_.root_hash());
    report.sync.from = st.from;
    report.sync.to = st.to;
    report.sync.bytes = st.bytes;
    report.sync.fetch_ms = st.fetch_ms;
    report.sync.apply_ms = st.apply_ms;
    report.sync.total_ms = sync_ms;
    report.sync.load_ms = load_ms;
    report.sync.load = weight_load_name(loaded.load);
    report.sync.load_reason = loaded.reason;
    report.sync.used_anchor = st.used_anchor;
    report.sync.rejected = static_cast<uint64_t>(st.rejected);
    report.sync.prefetched = patches_->hits() > hits_before;
    if (st.steps > 0) log_applied(report);
    // Download the next version's patch in the background while this worker generates (rl.max_lag = 1:
    // the trainer publishes it meanwhile) or waits for the next job; it is applied at the next sync.
    if (!boot_.settings.dense) patches_->start(replica_.version());  // dense: the next sync takes an anchor
    return report;
  }

  /// Samples and grades one share at the replica's version. `base` is the job's sync report (its sync
  /// numbers travel with the first share only).
  WorkerReport generate(const JobWork& work, WorkerReport base) {
    base.share = work.share;
    std::vector<int64_t> indices(work.problems.size());
    std::iota(indices.begin(), indices.end(), 0);
    rc_.policy_version = replica_.version();
    auto t2 = std::chrono::steady_clock::now();
    base.rollouts = rl::collect_rollouts(*policy_, *tok_, tmpl_, work.problems, rc_, indices, work.step_seed);
    base.generate_ms = ms_since(t2);
    base.tokens = 0;
    for (const auto& r : base.rollouts) base.tokens += static_cast<int64_t>(r.response_ids.size());
    return base;
  }

 private:
  void log_applied(const WorkerReport& r) const {
    const auto& s = r.sync;
    log_.event(
        json{{"event", "applied"},
             {"worker", boot_.worker_id},
             {"from", s.from},
             {"version", s.to},
             {"bytes", s.bytes},
             {"ms", s.total_ms},
             {"fetch_ms", s.fetch_ms},
             {"apply_ms", s.apply_ms},
             {"load_ms", s.load_ms},
             {"load", s.load},
             {"anchor", s.used_anchor},
             {"root_hash", r.root_hash},
             {"root_hash_ok", true}},
        "worker " + boot_.worker_id + ": version " + std::to_string(s.to) + " applied (from " +
            std::to_string(s.from) + (s.used_anchor ? ", via an anchor" : "") + "): " +
            std::to_string(s.bytes) + " bytes in " + std::to_string(static_cast<int64_t>(s.total_ms)) +
            " ms; root hash " + r.root_hash + " matches the trainer's" +
            // A model that can only take full copies (on the CPU, FP32) says so once, at registration.
            (loader_->unusable_reason().empty()
                 ? "; model loaded by " + s.load + (s.load_reason.empty() ? "" : " (" + s.load_reason + ")")
                 : ""));
  }

  const WorkerLoopOptions& o_;
  const RegisterReply boot_;
  const WorkerLog& log_;
  Scratch scratch_;
  std::unique_ptr<model::Tokenizer> tok_;
  model::Transformer policy_{nullptr};
  std::unique_ptr<ModelWeightLoader> loader_;  ///< keeps policy_'s parameters at replica_'s weights
  model::PromptTemplate tmpl_;
  std::unique_ptr<sync::PatchClient> client_;
  std::unique_ptr<sync::FsPatchSource> folder_;
  std::unique_ptr<sync::PrefetchingSource> patches_;
  sync::WorkerReplica replica_;
  rl::RolloutConfig rc_;
  std::string patch_from_;
};

/// Why a session ended.
enum class SessionEnd { Stopped, Lost, Dropped };

/// Runs jobs until stop (Stopped), the trainer is unreachable past the retries (Lost) or no longer knows
/// this member (Dropped). A failing job is reported and rethrown.
SessionEnd run_jobs(WorkerSession& session, ControlClient& control, const WorkerLog& log, std::string* why) {
  uint64_t seq = 0;
  for (;;) {
    Job job;
    try {
      job = control.next_job(seq);
    } catch (const sync::VersionGoneError& e) {
      *why = e.what();
      return SessionEnd::Dropped;
    } catch (const sync::TransportError& e) {
      *why = e.what();
      return SessionEnd::Lost;
    }
    seq = job.seq;
    if (job.kind == JobKind::Stop) return SessionEnd::Stopped;
    std::vector<WorkerReport> reports;
    try {
      WorkerReport base = session.sync(job);
      if (job.work.empty()) reports.push_back(base);
      for (size_t i = 0; i < job.work.size(); ++i) {
        if (i == 1) base.sync = SyncReport{};  // the sync numbers count once per job
        WorkerReport r = session.generate(job.work[i], base);
        // Each share is posted as soon as it is done: a crash later loses only the shares not yet sent.
        control.report(r);
      }
    } catch (const sync::VersionGoneError& e) {  // a share's report: the trainer dropped this worker
      *why = e.what();
      return SessionEnd::Dropped;
    } catch (const std::exception& e) {
      WorkerReport failed;
      failed.worker = session.boot().index;
      failed.seq = seq;
      failed.error = e.what();
      try {
        control.report(failed);
      } catch (const std::exception&) {
        // The trainer is gone too: the caller decides whether to wait for it.
        *why = e.what();
        return SessionEnd::Lost;
      }
      throw;
    }
    try {
      for (const auto& r : reports) control.report(r);
    } catch (const sync::VersionGoneError& e) {
      *why = e.what();
      return SessionEnd::Dropped;
    } catch (const sync::TransportError& e) {
      *why = e.what();
      return SessionEnd::Lost;
    }
    if (!job.work.empty())
      log.event(json{{"event", "generated"}, {"step", job.step}, {"shares", job.work.size()}},
                "worker " + session.boot().worker_id + ": step " + std::to_string(job.step) + ": " +
                    std::to_string(job.work.size()) + " share(s) of prompts sampled and reported");
  }
}

}  // namespace

int sweep_stale_worker_dirs(const std::string& tmp_dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(tmp_dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::string prefix = "pulse-worker-";
    if (name.rfind(prefix, 0) != 0 || !e.is_directory(ec)) continue;
    const size_t dash = name.find('-', prefix.size());
    if (dash == std::string::npos) continue;
    pid_t pid = 0;
    try {
      pid = static_cast<pid_t>(std::stol(name.substr(prefix.size(), dash - prefix.size())));
    } catch (const std::exception&) {
      continue;
    }
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (!rm) ++removed;
  }
  return removed;
}

void worker_loop(const WorkerLoopOptions& o) {
  if (o.torch_threads > 0) at::set_num_threads(o.torch_threads);
  WorkerLog log(o);
  auto last_note = std::chrono::steady_clock::now() - std::chrono::hours(1);
  auto waiting = [&](const std::string& reason) {
    if (std::chrono::steady_clock::now() - last_note < std::chrono::seconds(10)) return;
    last_note = std::chrono::steady_clock::now();
    log.event(json{{"event", "waiting"}, {"reason", reason}},
              "worker: waiting to register (up to " +
                  std::to_string(static_cast<int64_t>(o.register_wait_s)) + " s): " + reason);
  };
  // Weights kept from a session the trainer ended by dropping this worker (a missed lease): the same
  // trainer process, whose versions only move forward, so the next sync is a patch from the kept
  // version (or an anchor if that base was retired). After losing the trainer they are not kept: a
  // restarted trainer may have resumed at an earlier version, and its version numbers then name other
  // weights.
  sync::WorkerReplica kept("");
  std::string kept_model;  // the model config the kept weights belong to
  for (;;) {
    ControlClient control(o.control_url, o.token, o.timeout_s, o.max_retries);
    RegisterReply boot = control.register_worker(o.worker_name, o.register_wait_s, waiting);
    if (kept.empty() || boot.model_config != kept_model) kept = sync::WorkerReplica(boot.worker_id);
    WorkerSession session(o, control, boot, log, std::move(kept));
    kept = sync::WorkerReplica("");
    const bool keeps = session.has_weights();
    const uint64_t kept_version = session.version();
    log.event(json{{"event", "registered"},
                   {"worker", boot.worker_id},
                   {"slot", boot.index},
                   {"trainer", o.control_url},
                   {"lease_s", boot.lease_s},
                   {"weights", session.weight_path()},
                   {"kept_version", keeps ? json(kept_version) : json(nullptr)}},
              "worker " + boot.worker_id + ": registered with " + o.control_url + " (slot " +
                  std::to_string(boot.index) + ", lease " +
                  std::to_string(static_cast<int64_t>(boot.lease_s)) + " s); patches from " +
                  session.patch_source() + ", into the model by " + session.weight_path() +
                  (keeps ? "; kept its weights at version " + std::to_string(kept_version) : ""));
    SessionEnd end;
    std::string why;
    {
      Heartbeat heartbeat(o, boot);
      try {
        end = run_jobs(session, control, log, &why);
      } catch (...) {
        session.stop();
        throw;
      }
    }
    session.stop();
    if (end == SessionEnd::Stopped) {
      log.event(json{{"event", "stopped"}, {"reason", "finished"}, {"version", session.version()}},
                "worker " + boot.worker_id + ": stopping: the trainer finished the run (at version " +
                    std::to_string(session.version()) + ")");
      return;
    }
    if (end == SessionEnd::Dropped) {
      kept = session.take_replica();
      kept_model = boot.model_config;
    }
    const std::string what =
        end == SessionEnd::Dropped ? "the trainer dropped this worker" : "lost the trainer";
    if (!o.reconnect) throw std::runtime_error("worker " + boot.worker_id + ": " + what + ": " + why);
    // Registering again would take the name back from the newer holder, which would do the same.
    if (end == SessionEnd::Dropped && why.find(kReplacedMarker) != std::string::npos)
      throw std::runtime_error("worker " + boot.worker_id + ": stopping: " + why +
                               "; give each live worker its own --id");
    log.event(json{{"event", end == SessionEnd::Dropped ? "dropped" : "lost"}, {"reason", why}},
              "worker " + boot.worker_id + ": " + what + " (" + why + "); registering again", true);
    last_note = std::chrono::steady_clock::now() - std::chrono::hours(1);
  }
}

namespace {

void setup_worker_logging(bool quiet) {
  auto logger = spdlog::get("pulse");
  if (!logger) logger = spdlog::stderr_color_mt("pulse");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S] %^%l%$ %v");
  spdlog::set_level(quiet ? spdlog::level::warn : spdlog::level::info);
}

// SIGINT/SIGTERM: the handler (async-signal-safe) writes the signal number to a pipe; a thread reading it
// removes the scratch folders, says why, and exits 128+sig. (Threads LibTorch started before main leave
// sigwait-style blocking unreliable, so a handler it is.)
int g_signal_pipe[2] = {-1, -1};

void on_stop_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &b, 1);
}

void install_stop_signals(const char* who) {
  if (::pipe(g_signal_pipe) != 0) return;  // no cleanup on signals then; the next worker sweeps
  std::thread([who] {
    unsigned char b = 0;
    if (::read(g_signal_pipe[0], &b, 1) != 1) return;
    const int sig = b;
    {
      std::lock_guard<std::mutex> lock(g_scratch_mu);
      for (const auto& p : g_scratch) {
        std::error_code ec;
        fs::remove_all(p, ec);
      }
    }
    spdlog::warn("{}: stopping: {}", who, sig == SIGINT ? "SIGINT" : "SIGTERM");
    spdlog::default_logger()->flush();
    std::_Exit(128 + sig);
  }).detach();
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace

int manage_worker_scratch(const char* who) {
  static std::once_flag once;
  std::call_once(once, [who] { install_stop_signals(who); });
  return sweep_stale_worker_dirs(fs::temp_directory_path().string());
}

int worker_main(const WorkerOptions& options) {
  setup_worker_logging(options.quiet);
  const int swept = manage_worker_scratch("worker");
  if (swept > 0) spdlog::info("worker: removed {} temp folder(s) of killed workers", swept);
  WorkerLoopOptions o;
  o.control_url = options.trainer_url;
  if (!options.token.empty() && !options.token_file.empty())
    throw std::runtime_error("worker: give --token or --token-file, not both");
  o.token = options.token;
  if (o.token.empty()) o.token = sync::load_token("", options.token_file);
  if (o.token.empty()) o.token = sync::load_token("PULSE_TOKEN", "");
  o.worker_name = options.worker_id;
  o.torch_threads = options.threads;
  o.grade_threads = 0;
  o.register_wait_s = options.register_wait_s;
  o.reconnect = true;
  o.verbose = !options.quiet;
  o.log_json = options.log_json;
  worker_loop(o);  // an error ends it as "pulse: error: <why>" (app/cli.cpp), exit code 1
  return 0;
}

}  // namespace pulse::app
