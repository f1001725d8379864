#include "app/worker.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <numeric>

#include "app/control.h"
#include "app/job.h"
#include "app/prefetch.h"
#include "app/setup.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "rl/rollout.h"
#include "sync/atomic_file.h"
#include "sync/hash.h"
#include "sync/transport_fs.h"
#include "sync/transport_http.h"
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

}  // namespace

void worker_loop(const WorkerLoopOptions& o) {
  if (o.torch_threads > 0) at::set_num_threads(o.torch_threads);
  ControlClient control(o.control_url, o.token, o.timeout_s, o.max_retries);
  json boot = control.register_worker(o.worker_id);
  const int64_t index = boot.at("index").get<int64_t>();
  const json& cfg = boot.at("config");

  Scratch scratch;
  std::string tok_path = scratch.path + "/" + boot.at("tokenizer_name").get<std::string>();
  sync::write_file_atomic(tok_path, control.tokenizer());
  auto tok = model::load_tokenizer(tok_path);
  std::string mc_path = scratch.path + "/config.json";
  sync::write_file_atomic(mc_path, boot.at("model_config").get<std::string>());
  model::ModelConfig mc = model::ModelConfig::from_hf_json(mc_path);
  model::Transformer policy(
      mc, cfg.at("dtype").get<std::string>() == "bfloat16" ? torch::kBFloat16 : torch::kFloat32);
  policy->eval();
  model::PromptTemplate tmpl = model::PromptTemplate::preset(cfg.at("chat_template").get<std::string>());

  sync::HttpClientOptions patch_opts;
  patch_opts.url = boot.at("patch_url").get<std::string>();
  // A trainer bound to every interface (0.0.0.0) advertises that address; reach its patch server through
  // the host this worker already reaches the control server at.
  auto any = patch_opts.url.find("://0.0.0.0:");
  if (any != std::string::npos) {
    auto host_begin = o.control_url.find("://");
    auto host_end = o.control_url.rfind(':');
    if (host_begin != std::string::npos && host_end != std::string::npos && host_end > host_begin + 3)
      patch_opts.url = patch_opts.url.substr(0, any + 3) +
                       o.control_url.substr(host_begin + 3, host_end - host_begin - 3) +
                       patch_opts.url.substr(any + 10);
  }
  patch_opts.token = o.token;
  patch_opts.max_retries = o.max_retries;
  patch_opts.timeout_s = o.timeout_s;
  sync::PatchClient client(patch_opts);
  // transport.kind = fs: patches come from the shared folder (one-step patches replayed, anchors to join).
  const std::string patch_dir = boot.value("patch_dir", std::string());
  std::unique_ptr<sync::FsPatchSource> folder;
  if (!patch_dir.empty()) folder = std::make_unique<sync::FsPatchSource>(patch_dir, o.timeout_s);
  PrefetchingSource patches(folder ? static_cast<sync::PatchSource&>(*folder) : client);
  sync::WorkerReplica replica(o.worker_id);

  rl::RolloutConfig rc;
  rc.group_size = cfg.at("group_size").get<int64_t>();
  rc.sampling.max_new_tokens = cfg.at("max_new_tokens").get<int64_t>();
  rc.sampling.temperature = cfg.at("temperature").get<double>();
  rc.sampling.top_p = cfg.at("top_p").get<double>();
  rc.sampling.top_k = cfg.at("top_k").get<int64_t>();
  rc.seed = cfg.at("seed").get<uint64_t>();
  rc.grade_threads = o.grade_threads;
  spdlog::debug("worker {} (index {}) ready: patches from {}", o.worker_id, index, patch_opts.url);

  uint64_t seq = 0;
  for (;;) {
    json job = control.next_job(seq);
    seq = job.at("seq").get<uint64_t>();
    const std::string kind = job.at("kind").get<std::string>();
    if (kind == "stop") {
      patches.stop();
      break;
    }
    json report{{"worker", index}, {"seq", seq}};
    try {
      const uint64_t version = job.at("version").get<uint64_t>();
      auto t0 = std::chrono::steady_clock::now();
      const uint64_t hits_before = patches.hits();
      sync::WorkerReplica::SyncStats st = replica.sync_to(patches, version);
      double sync_ms = ms_since(t0);
      double load_ms = 0;
      if (st.steps > 0) {
        auto t1 = std::chrono::steady_clock::now();
        set_model_weights(*policy, replica.views());
        load_ms = ms_since(t1);
      }
      report["version"] = replica.version();
      report["root_hash"] = sync::hash_hex(replica.root_hash());
      report["sync"] = json{{"from", st.from},         {"to", st.to},
                            {"bytes", st.bytes},       {"fetch_ms", st.fetch_ms},
                            {"apply_ms", st.apply_ms}, {"used_anchor", st.used_anchor},
                            {"rejected", st.rejected}, {"total_ms", sync_ms},
                            {"load_ms", load_ms},      {"prefetched", patches.hits() > hits_before}};
      // Download the next version's patch in the background while this worker generates (rl.max_lag = 1:
      // the trainer publishes it meanwhile) or waits for the next job; it is applied at the next sync.
      patches.start(replica.version());
      if (kind == "generate") {
        const json& work = job.at("work");
        std::vector<rl::Problem> problems;
        for (const auto& p : work.at("problems")) problems.push_back(problem_from_json(p));
        std::vector<int64_t> indices(problems.size());
        std::iota(indices.begin(), indices.end(), 0);
        rc.policy_version = replica.version();
        auto t2 = std::chrono::steady_clock::now();
        auto rollouts = rl::collect_rollouts(*policy, *tok, tmpl, problems, rc, indices,
                                             work.at("step_seed").get<uint64_t>());
        double gen_ms = ms_since(t2);
        json rj = json::array();
        int64_t tokens = 0;
        for (const auto& r : rollouts) {
          tokens += static_cast<int64_t>(r.response_ids.size());
          rj.push_back(rollout_to_json(r));
        }
        report["rollouts"] = std::move(rj);
        report["generate_ms"] = gen_ms;
        report["tokens"] = tokens;
      }
    } catch (const std::exception& e) {
      patches.stop();
      report["error"] = e.what();
      try {
        control.report(report);
      } catch (const std::exception&) {
      }
      throw;
    }
    control.report(report);
  }
  spdlog::debug("worker {} stopped at version {}", o.worker_id, replica.version());
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
