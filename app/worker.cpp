#include "app/worker.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <numeric>

#include "app/control.h"
#include "app/job.h"
#include "app/setup.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "rl/rollout.h"
#include "sync/atomic_file.h"
#include "sync/hash.h"
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

/// A private scratch folder for the files the worker receives (tokenizer, config.json).
struct Scratch {
  std::string path;
  Scratch() {
    std::string tmpl = (fs::temp_directory_path() / "pulse-worker-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("worker: cannot create a temp folder " + tmpl);
    path = buf.data();
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
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

/// A registered worker: its model, tokenizer, patch source and replica.
class WorkerSession {
 public:
  WorkerSession(const WorkerLoopOptions& o, ControlClient& control)
      : o_(o), boot_(control.register_worker(o.worker_id)) {
    std::string tok_path = scratch_.path + "/" + boot_.tokenizer_name;
    sync::write_file_atomic(tok_path, control.tokenizer());
    tok_ = model::load_tokenizer(tok_path);
    std::string mc_path = scratch_.path + "/config.json";
    sync::write_file_atomic(mc_path, boot_.model_config);
    model::ModelConfig mc = model::ModelConfig::from_hf_json(mc_path);
    policy_ = model::Transformer(mc, boot_.settings.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32);
    policy_->eval();
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
    spdlog::debug("worker {} (index {}) ready: patches from {}", o.worker_id, boot_.index, patch_opts.url);
  }

  int64_t index() const { return boot_.index; }
  uint64_t version() const { return replica_.version(); }
  void stop() { patches_->stop(); }

  /// Sync to the job's version (fetch, validate, apply, confirm the root hash, set the model's weights),
  /// then for a generate job sample and grade the rollouts.
  WorkerReport run(const Job& job) {
    WorkerReport report;
    report.worker = boot_.index;
    report.seq = job.seq;
    auto t0 = std::chrono::steady_clock::now();
    const uint64_t hits_before = patches_->hits();
    sync::WorkerReplica::SyncStats st = replica_.sync_to(*patches_, job.version);
    const double sync_ms = ms_since(t0);
    double load_ms = 0;
    if (st.steps > 0) {
      auto t1 = std::chrono::steady_clock::now();
      set_model_weights(*policy_, replica_.views());
      load_ms = ms_since(t1);
    }
    report.version = replica_.version();
    report.root_hash = sync::hash_hex(replica_.root_hash());
    report.sync.from = st.from;
    report.sync.to = st.to;
    report.sync.bytes = st.bytes;
    report.sync.fetch_ms = st.fetch_ms;
    report.sync.apply_ms = st.apply_ms;
    report.sync.total_ms = sync_ms;
    report.sync.load_ms = load_ms;
    report.sync.used_anchor = st.used_anchor;
    report.sync.rejected = static_cast<uint64_t>(st.rejected);
    report.sync.prefetched = patches_->hits() > hits_before;
    // Download the next version's patch in the background while this worker generates (rl.max_lag = 1:
    // the trainer publishes it meanwhile) or waits for the next job; it is applied at the next sync.
    patches_->start(replica_.version());
    if (job.kind == JobKind::Generate) {
      std::vector<int64_t> indices(job.work.problems.size());
      std::iota(indices.begin(), indices.end(), 0);
      rc_.policy_version = replica_.version();
      auto t2 = std::chrono::steady_clock::now();
      report.rollouts =
          rl::collect_rollouts(*policy_, *tok_, tmpl_, job.work.problems, rc_, indices, job.work.step_seed);
      report.generate_ms = ms_since(t2);
      for (const auto& r : report.rollouts) report.tokens += static_cast<int64_t>(r.response_ids.size());
    }
    return report;
  }

 private:
  const WorkerLoopOptions& o_;
  const RegisterReply boot_;
  Scratch scratch_;
  std::unique_ptr<model::Tokenizer> tok_;
  model::Transformer policy_{nullptr};
  model::PromptTemplate tmpl_;
  std::unique_ptr<sync::PatchClient> client_;
  std::unique_ptr<sync::FsPatchSource> folder_;
  std::unique_ptr<sync::PrefetchingSource> patches_;
  sync::WorkerReplica replica_{o_.worker_id};
  rl::RolloutConfig rc_;
};

}  // namespace

void worker_loop(const WorkerLoopOptions& o) {
  if (o.torch_threads > 0) at::set_num_threads(o.torch_threads);
  ControlClient control(o.control_url, o.token, o.timeout_s, o.max_retries);
  WorkerSession session(o, control);
  uint64_t seq = 0;
  for (;;) {
    const Job job = control.next_job(seq);
    seq = job.seq;
    if (job.kind == JobKind::Stop) break;
    WorkerReport report;
    try {
      report = session.run(job);
    } catch (const std::exception& e) {
      session.stop();
      WorkerReport failed;
      failed.worker = session.index();
      failed.seq = seq;
      failed.error = e.what();
      try {
        control.report(failed);
      } catch (const std::exception&) {
      }
      throw;
    }
    control.report(report);
  }
  session.stop();
  spdlog::debug("worker {} stopped at version {}", o.worker_id, session.version());
}

int worker_main(const WorkerOptions& options) {
  WorkerLoopOptions o;
  o.control_url = options.trainer_url;
  o.token = options.token;
  if (o.token.empty()) o.token = sync::load_token("PULSE_TOKEN", "");
  o.worker_id = options.worker_id;
  if (o.worker_id.empty()) {
    char host[256] = {0};
    ::gethostname(host, sizeof host - 1);
    o.worker_id = std::string(host) + "-" + std::to_string(::getpid());
  }
  o.torch_threads = options.threads;
  o.grade_threads = 0;
  worker_loop(o);
  return 0;
}

}  // namespace pulse::app
