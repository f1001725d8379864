// `pulse run` / `pulse trainer`: reads top-down like a training script — config, data, tokenizer, model,
// SFT warm start, Pass@1 before, then the GRPO step loop (rollouts on the workers -> GRPO step on the FP32
// masters -> BF16 cast -> PULSESync publish -> workers fetch/apply/confirm -> bit-identity check), Pass@1
// after, summary and report.
//
// Rewards: the graders run on the workers inside rl::collect_rollouts (where the responses are); the
// trainer uses the rewards in the rollouts it receives.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

#include "app/config.h"
#include "app/control.h"
#include "app/job.h"
#include "app/progress.h"
#include "app/report.h"
#include "app/run_files.h"
#include "app/setup.h"
#include "app/worker.h"
#include "model/chat_template.h"
#include "model/checkpoint.h"
#include "rl/eval.h"
#include "rl/grpo.h"
#include "rl/optimizer.h"
#include "rl/sft.h"
#include "rl/train_state.h"
#include "sync/atomic_file.h"
#include "sync/hash.h"
#include "sync/patch.h"
#include "sync/transport_fs.h"
#include "sync/transport_http.h"
#include "sync/version_store.h"

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace pulse::app {
namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
double ms_since(Clock::time_point t0) {
  return 1000.0 * seconds_since(t0);
}

void setup_logging(bool quiet) {
  auto logger = spdlog::get("pulse");
  if (!logger) logger = spdlog::stderr_color_mt("pulse");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S] %^%l%$ %v");
  spdlog::set_level(quiet ? spdlog::level::warn : spdlog::level::info);
}

std::string checkpoint_dir(const std::string& run_dir, int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06lld", static_cast<long long>(step));
  return run_dir + "/checkpoints/" + buf;
}

/// The newest complete checkpoint's step (checkpoints/LATEST), or -1.
int64_t latest_checkpoint(const std::string& run_dir) {
  std::string path = run_dir + "/checkpoints/LATEST";
  if (!fs::exists(path)) return -1;
  std::string text = sync::read_file(path);
  try {
    return std::stoll(text);
  } catch (const std::exception&) {
    throw std::runtime_error(path + ": not a step number: '" + text + "'");
  }
}

/// File of a checkpoint that holds the rollouts already generated for its step (rl.max_lag = 1).
const char* kPendingRollouts = "/pending_rollouts.json";

/// Model (HF safetensors) + train state (+ with rl.max_lag = 1 the in-flight rollouts for step `step`,
/// sampled at version step-1: {"step", "version", "reports"}), then LATEST; older checkpoints beyond the
/// newest two are removed.
void save_checkpoint(const std::string& run_dir, int64_t step, const model::TransformerImpl& model,
                     const rl::MasterAdam& opt, uint64_t data_cursor, const json& pending = json()) {
  std::string dir = checkpoint_dir(run_dir, step);
  fs::create_directories(dir);
  if (!pending.is_null()) write_json_atomic(dir + kPendingRollouts, pending);
  model::save_hf_checkpoint(model, dir + "/model");
  rl::TrainState st;
  st.step = step;
  st.data_cursor = data_cursor;
  st.policy_version = static_cast<uint64_t>(step);
  rl::save_train_state(dir + "/state", opt, st);
  sync::fsync_dir(run_dir + "/checkpoints");
  sync::write_file_atomic(run_dir + "/checkpoints/LATEST", std::to_string(step) + "\n");
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(run_dir + "/checkpoints"))
    if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0) old.push_back(e.path());
  std::sort(old.begin(), old.end());
  for (size_t i = 0; i + 2 < old.size(); ++i) fs::remove_all(old[i]);
}

rl::EvalReport pass_at_1(model::TransformerImpl& model, const model::Tokenizer& tok,
                         const model::PromptTemplate& tmpl, const std::vector<rl::Problem>& held_out,
                         const Config& config) {
  torch::NoGradGuard no_grad;
  return rl::evaluate(model, tok, tmpl, held_out, eval_config(config));
}

rl::OptimizerConfig grpo_optimizer(const Config& c) {
  rl::OptimizerConfig o;
  o.name = c.optimizer.name;
  o.lr = c.optimizer.lr;
  o.beta1 = c.optimizer.beta1;
  o.beta2 = c.optimizer.beta2;
  o.eps = c.optimizer.eps;
  o.weight_decay = c.optimizer.weight_decay;
  o.grad_clip = c.optimizer.grad_clip;
  o.schedule = c.optimizer.schedule;
  o.warmup_steps = c.optimizer.warmup_steps;
  o.total_steps = std::max<int64_t>(1, c.rl.steps);
  o.min_lr_ratio = c.optimizer.min_lr_ratio;
  return o;
}

rl::GrpoConfig grpo_config(const Config& c) {
  rl::GrpoConfig g;
  g.eps_low = c.rl.eps_low;
  g.eps_high = c.rl.eps_high;
  g.scale_by_std = c.rl.scale_by_std;
  g.loss_agg = c.rl.loss_agg;
  g.kl_coef = c.rl.kl_coef;
  g.tis_cap = c.rl.tis_cap;
  g.micro_batch = c.rl.micro_batch;
  // Lagged rollouts were sampled by an older policy: pi_old must be the trainer's current policy, and
  // the TIS weight pi_old / pi_sampler corrects the gap (rl/grpo.h).
  g.recompute_old_logprobs = true;
  return g;
}

std::string random_token() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 4; ++i) out += sync::hash_hex((static_cast<uint64_t>(rd()) << 32) ^ rd());
  return out;
}

/// Worker threads of `pulse run`; the first exception any of them throws is rethrown by check().
class WorkerThreads {
 public:
  void start(int64_t n, const WorkerLoopOptions& base) {
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
  void check() {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(error_);
  }
  void join() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  ~WorkerThreads() { join(); }

 private:
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::exception_ptr error_;
};

/// [begin, end) of worker w's share of n prompts (as even as possible, in index order).
std::pair<size_t, size_t> share(size_t n, size_t workers, size_t w) {
  size_t base = n / workers, extra = n % workers;
  size_t begin = w * base + std::min(w, extra);
  return {begin, begin + base + (w < extra ? 1 : 0)};
}

}  // namespace

int run_job(const JobOptions& opt) {
  const auto t_start = Clock::now();
  // ---- config and run directory --------------------------------------------------------------------
  const bool resuming = !opt.resume_dir.empty();
  Config config;
  std::string run_dir;
  if (resuming) {
    run_dir = opt.resume_dir;
    if (!fs::exists(run_dir + "/config.toml"))
      throw std::runtime_error(run_dir + ": no config.toml (is this a run directory?)");
    config = load_config(run_dir + "/config.toml", opt.overrides);
  } else {
    config = load_config(opt.config_path, opt.overrides);
    run_dir = resolve_run_dir(config.run.dir, config.run.name);
    if (fs::exists(run_dir + "/checkpoints/LATEST"))
      throw std::runtime_error(run_dir + ": already holds a run; use --resume " + run_dir +
                               " or another run.dir");
  }
  config.run.dir = run_dir;
  fs::create_directories(run_dir + "/checkpoints");
  sync::write_file_atomic(run_dir + "/config.toml", to_toml(config));
  setup_logging(opt.quiet);
  const uint64_t seed = static_cast<uint64_t>(config.run.seed);
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int trainer_threads = config.run.threads > 0 ? static_cast<int>(config.run.threads) : hw;
  at::set_num_threads(trainer_threads);
  spdlog::info("run directory {}{}", run_dir, resuming ? " (resuming)" : "");

  // ---- data, tokenizer, model ------------------------------------------------------------------------
  ProblemSets sets = load_problems(config);
  if (sets.train.empty() && config.rl.steps > 0) throw std::runtime_error("data: no train problems");
  std::string tok_path;
  auto tok = prepare_tokenizer(config, sets, run_dir + "/tokenizer.model", &tok_path);
  model::ModelConfig mc = model_config_for(config, *tok);
  model::Transformer policy = build_model(config, mc);
  model::PromptTemplate tmpl = model::PromptTemplate::preset(config.tokenizer.chat_template);
  spdlog::info(
      "{} train / {} held-out problems ({}); tokenizer {} ({} pieces); model {} layers x {} wide, {:.2f} M "
      "parameters, {}",
      sets.train.size(), sets.held_out.size(), config.data.task, tok_path, tok->vocab_size(),
      mc.num_hidden_layers, mc.hidden_size, static_cast<double>(policy->num_parameters()) / 1e6,
      config.model.dtype);

  // ---- SFT warm start and Pass@1 before (or the resume point) ----------------------------------------
  const std::string metrics_path = run_dir + "/metrics.jsonl";
  const std::string state_path = run_dir + "/run_state.json";
  std::unique_ptr<rl::MasterAdam> adam;
  int64_t start_step = 0;
  json run_state;
  double prior_wall = 0;
  int64_t resume_step = resuming ? latest_checkpoint(run_dir) : -1;
  if (resume_step >= 0 && fs::exists(state_path)) {
    adam = std::make_unique<rl::MasterAdam>(*policy, grpo_optimizer(config));
    rl::TrainState st = rl::load_train_state(checkpoint_dir(run_dir, resume_step) + "/state", *adam);
    start_step = st.step;
    run_state = read_json(state_path);
    MetricsLog::truncate_before_step(metrics_path, start_step);
    auto rows = MetricsLog::read(metrics_path);
    prior_wall =
        rows.empty() ? run_state.value("wall_seconds_before_grpo", 0.0) : rows.back().value("elapsed_s", 0.0);
    spdlog::info("resuming from checkpoint step {} ({} metrics rows kept)", start_step, rows.size());
  } else {
    if (resuming) spdlog::warn("{}: no complete checkpoint yet, starting the run over", run_dir);
    sync::write_file_atomic(metrics_path, std::string());
    run_state = json::object();
    if (config.sft.steps > 0 && config.model.path.empty()) {
      rl::OptimizerConfig sc;
      sc.lr = config.sft.lr;
      sc.schedule = "cosine";
      sc.warmup_steps = config.sft.warmup_steps;
      sc.total_steps = config.sft.steps;
      sc.grad_clip = 1.0;
      rl::MasterAdam sft_opt(*policy, sc);
      rl::SftConfig cfg;
      cfg.steps = config.sft.steps;
      cfg.batch_size = config.sft.batch_size;
      cfg.max_len = config.sft.max_len;
      cfg.seed = derive_seed(seed, kSeedSft);
      auto t0 = Clock::now();
      spdlog::info("SFT warm start: {} steps x {} sequences", cfg.steps, cfg.batch_size);
      auto stats =
          rl::sft_train(*policy, sft_opt, *tok, tmpl, sets.train, cfg, [&](int64_t step, double loss) {
            if (step % 25 == 0 || step == cfg.steps)
              spdlog::info("  SFT step {}/{} loss {:.4f}", step, cfg.steps, loss);
          });
      run_state["sft_first_loss"] = stats.first_loss;
      run_state["sft_last_loss"] = stats.last_loss;
      run_state["sft_seconds"] = seconds_since(t0);
    }
    // GRPO starts from the BF16 weights (as an RL run starting from a BF16 HF checkpoint does).
    adam = std::make_unique<rl::MasterAdam>(*policy, grpo_optimizer(config));
    run_state["pass_at_1_before"] = 0.0;
    if (config.eval.before && !sets.held_out.empty()) {
      auto t0 = Clock::now();
      auto report = pass_at_1(*policy, *tok, tmpl, sets.held_out, config);
      run_state["pass_at_1_before"] = report.pass_at_1;
      spdlog::info("Pass@1 before GRPO: {:.4f} on {} held-out problems ({:.1f} s)", report.pass_at_1,
                   report.problems, seconds_since(t0));
    }
    run_state["wall_seconds_before_grpo"] = seconds_since(t_start);
    write_json_atomic(state_path, run_state);
    save_checkpoint(run_dir, 0, *policy, *adam, 0);
    prior_wall = 0;
  }
  // Wall time across a resume: up to the last kept metrics row, plus this process.
  auto elapsed = [&] { return prior_wall + seconds_since(t_start); };

  // ---- PULSESync publisher, control server, workers ----------------------------------------------------
  std::string token = sync::load_token(config.transport.token_env, config.transport.token_file);
  if (token.empty()) {
    if (opt.in_process_workers) {
      token = random_token();  // loopback workers learn it in-process; nobody else can
    } else {
      spdlog::warn("no bearer token ({} unset, transport.token_file empty): the trainer accepts anyone",
                   config.transport.token_env);
    }
  }
  sync::PatchOptions popt;
  popt.values = config.sync.values == "delta" ? sync::ValueMode::Delta : sync::ValueMode::Absolute;
  popt.zstd_level = static_cast<int>(config.sync.zstd_level);
  popt.model_id = config.run.name;
  popt.threads = static_cast<int>(config.sync.threads);
  sync::RetentionPolicy retention{static_cast<uint64_t>(config.sync.anchor_every),
                                  static_cast<uint64_t>(config.sync.keep_anchors)};
  std::string store_dir;
  if (config.sync.store_on_disk) {
    store_dir = run_dir + "/sync";
    fs::remove_all(store_dir);
    fs::create_directories(store_dir);
  }
  sync::VersionStore store(store_dir, retention, popt);
  store.publish(static_cast<uint64_t>(start_step), adam->bf16_views());
  // transport.kind = fs: every patch (and anchor) is also written to a shared folder, temp name + fsync +
  // rename + READY marker; workers replay it from there and never fetch over HTTP.
  std::unique_ptr<sync::FsPublisher> fs_publisher;
  std::string patch_dir;
  if (config.transport.kind == "fs") {
    patch_dir = config.transport.dir.empty() ? run_dir + "/patches" : config.transport.dir;
    // Versions a killed run published past this start would look newer to a joining worker: drop them
    // (only pulse's own patch-*/anchor-* files and confirmations; nothing else in the folder is touched).
    if (fs::is_directory(patch_dir)) {
      for (const auto& e : fs::directory_iterator(patch_dir)) {
        const std::string name = e.path().filename().string();
        if ((name.rfind("patch-", 0) == 0 || name.rfind("anchor-", 0) == 0) &&
            name.find(".pulse") != std::string::npos)
          fs::remove(e.path());
      }
      fs::remove_all(fs::path(patch_dir) / "workers");
    }
    fs_publisher = std::make_unique<sync::FsPublisher>(patch_dir);
    fs_publisher->publish_anchor(static_cast<uint64_t>(start_step),
                                 *store.anchor(static_cast<uint64_t>(start_step)));
  }
  uint64_t dense_bytes = 0;
  for (const auto& v : adam->bf16_views()) dense_bytes += v.nbytes;

  sync::HttpServerOptions sopt;
  sopt.host = config.transport.host;
  sopt.token = token;
  sopt.tls_cert = config.transport.tls_cert;
  sopt.tls_key = config.transport.tls_key;
  sopt.threads = static_cast<int>(std::max<int64_t>(8, 2 * config.run.workers));
  sync::PatchServer patch_server(store, sopt);
  patch_server.start();

  WorkerBootstrap boot;
  boot.patch_url = patch_server.url();
  boot.patch_dir = patch_dir;
  boot.model_config = mc.to_hf_json();
  boot.tokenizer_bytes = sync::read_file(tok_path);
  boot.tokenizer_name = fs::path(tok_path).filename().string();
  if (fs::is_directory(tok_path))
    throw std::runtime_error("tokenizer.path: give the tokenizer file, not a folder");
  boot.config = json{{"group_size", config.rl.group_size},
                     {"max_new_tokens", config.rl.max_new_tokens},
                     {"temperature", config.rl.temperature},
                     {"top_p", config.rl.top_p},
                     {"top_k", config.rl.top_k},
                     {"seed", seed},
                     {"chat_template", config.tokenizer.chat_template},
                     {"dtype", config.model.dtype}};
  ControlServer control(config.transport.host, static_cast<int>(config.transport.port), token, boot,
                        config.run.workers);
  control.start();
  WorkerThreads threads;
  if (opt.in_process_workers) {
    WorkerLoopOptions wo;
    wo.control_url = control.url();
    wo.token = token;
    wo.torch_threads = std::max(1, hw / static_cast<int>(config.run.workers));
    wo.grade_threads = 1;
    wo.timeout_s = config.transport.timeout_s;
    wo.max_retries = static_cast<int>(config.transport.max_retries);
    threads.start(config.run.workers, wo);
  } else {
    spdlog::info(
        "trainer listening: control {} , patches {} ; start {} workers with `pulse worker --trainer {}`",
        control.url(), patch_server.url(), config.run.workers, control.url());
  }
  auto check = [&] { threads.check(); };
  // Stops the workers and servers on every exit path (the thread joins need the stop job first).
  struct Shutdown {
    ControlServer& control;
    WorkerThreads& threads;
    sync::PatchServer& patches;
    ~Shutdown() {
      control.post_stop();
      threads.join();
      control.stop();
      patches.stop();
    }
  } shutdown{control, threads, patch_server};
  std::vector<std::string> worker_ids = control.wait_for_workers(check);
  const size_t n_workers = worker_ids.size();
  std::vector<json> empty_work(n_workers, json::object());

  /// True when every report holds `version` with the trainer's own BF16 root hash.
  auto identical = [&](const std::vector<json>& reports, uint64_t version, const std::string& trainer_hash) {
    bool ok = true;
    for (size_t w = 0; w < reports.size(); ++w) {
      bool same = reports[w].at("version").get<uint64_t>() == version &&
                  reports[w].at("root_hash").get<std::string>() == trainer_hash;
      if (!same)
        spdlog::error("worker {} holds version {} hash {}, trainer version {} hash {}", worker_ids[w],
                      reports[w].at("version").dump(), reports[w].at("root_hash").dump(), version,
                      trainer_hash);
      ok = ok && same;
    }
    return ok;
  };
  {
    auto reports = control.run_job("sync", static_cast<uint64_t>(start_step), start_step, empty_work, check);
    if (!identical(reports, static_cast<uint64_t>(start_step),
                   sync::hash_hex(sync::root_hash(adam->bf16_views()))))
      throw std::runtime_error("workers failed to bootstrap to the trainer's weights");
  }

  // ---- GRPO steps ----------------------------------------------------------------------------------------
  // rl.max_lag = 0: generate at version s -> GRPO step -> publish s+1 -> workers sync to s+1 -> next step.
  // rl.max_lag = 1: while the trainer takes step s on rollouts sampled at version s-1, the workers sample
  // step s+1's rollouts at version s (syncing to it first); the last version is confirmed by a sync job.
  // Every version's worker root hashes are compared with the trainer's.
  const rl::GrpoConfig gcfg = grpo_config(config);
  const int64_t steps = config.rl.steps;
  const bool lagged = config.rl.max_lag > 0;
  MetricsLog metrics(metrics_path);
  ProgressBar progress(start_step, steps, !opt.quiet);
  if (start_step < steps)
    spdlog::info(
        "GRPO: {} steps x {} prompts x {} samples, {} workers over HTTP ({}), {:.2f} MB dense BF16{}", steps,
        config.rl.prompts_per_step, config.rl.group_size, n_workers, control.url(), dense_bytes / 1e6,
        lagged ? ", off-policy lag 1 (generation overlapped with training)" : "");

  /// Rollouts of one step as the workers reported them.
  struct Generated {
    int64_t step = -1;
    uint64_t version = 0;       ///< the version the workers sampled with
    std::vector<json> reports;  ///< by worker index
    std::vector<rl::Rollout> rollouts;
    int64_t tokens = 0;
    double gen_ms = 0;
  };
  auto post_generate = [&](int64_t s, uint64_t version) {
    std::vector<int64_t> idx =
        step_prompt_indices(static_cast<int64_t>(sets.train.size()), config.rl.prompts_per_step, seed, s);
    std::vector<json> work(n_workers);
    for (size_t w = 0; w < n_workers; ++w) {
      auto [b, e] = share(idx.size(), n_workers, w);
      json problems = json::array();
      for (size_t i = b; i < e; ++i)
        problems.push_back(problem_to_json(sets.train[static_cast<size_t>(idx[i])]));
      work[w] = json{{"problems", problems},
                     {"step_seed", derive_seed(seed, kSeedRollout, static_cast<uint64_t>(s))}};
    }
    return control.post_job("generate", version, s, work);
  };
  // The step's rollouts from the workers' reports (the prompts split among the workers in index order).
  auto assemble = [&](int64_t s, uint64_t version, std::vector<json> reports) {
    Generated g;
    g.step = s;
    g.version = version;
    std::vector<int64_t> idx =
        step_prompt_indices(static_cast<int64_t>(sets.train.size()), config.rl.prompts_per_step, seed, s);
    if (reports.size() != n_workers)
      throw std::runtime_error("rollouts of step " + std::to_string(s) + ": " +
                               std::to_string(reports.size()) + " worker reports, expected " +
                               std::to_string(n_workers));
    for (size_t w = 0; w < n_workers; ++w) {
      auto b = share(idx.size(), n_workers, w).first;
      for (const auto& rj : reports[w].at("rollouts")) {
        rl::Rollout r = rollout_from_json(rj);
        r.problem_index = idx.at(b + static_cast<size_t>(r.problem_index));
        r.group += static_cast<int64_t>(b);
        g.rollouts.push_back(std::move(r));
      }
      g.tokens += reports[w].at("tokens").get<int64_t>();
      g.gen_ms = std::max(g.gen_ms, reports[w].at("generate_ms").get<double>());
    }
    g.reports = std::move(reports);
    return g;
  };
  auto sync_stats = [&](const std::vector<json>& reports, double* fetch_ms, double* apply_ms, double* load_ms,
                        json* versions, int64_t* prefetched) {
    for (size_t w = 0; w < n_workers; ++w) {
      const json& st = reports[w].at("sync");
      *fetch_ms = std::max(*fetch_ms, st.at("fetch_ms").get<double>());
      *apply_ms = std::max(*apply_ms, st.at("apply_ms").get<double>());
      *load_ms = std::max(*load_ms, st.at("load_ms").get<double>());
      (*versions)[worker_ids[w]] = reports[w].at("version");
      if (st.value("prefetched", false)) ++*prefetched;
    }
  };

  // With lag, the first step's rollouts come from the resumed checkpoint or are sampled now (lag 0).
  Generated pending;
  bool pending_identical = true;
  if (lagged && start_step < steps) {
    std::string path = checkpoint_dir(run_dir, start_step) + kPendingRollouts;
    if (resume_step > 0 && fs::exists(path)) {
      json p = read_json(path);
      if (p.at("step").get<int64_t>() != start_step)
        throw std::runtime_error(path + ": rollouts of step " + p.at("step").dump() + ", expected step " +
                                 std::to_string(start_step));
      pending =
          assemble(start_step, p.at("version").get<uint64_t>(), p.at("reports").get<std::vector<json>>());
    } else {
      if (resume_step > 0)
        spdlog::warn("{}: missing; sampling step {} at version {} (lag 0)", path, start_step, start_step);
      const std::string hash = sync::hash_hex(sync::root_hash(adam->bf16_views()));
      pending =
          assemble(start_step, static_cast<uint64_t>(start_step),
                   control.wait_job(post_generate(start_step, static_cast<uint64_t>(start_step)), check));
      pending_identical = identical(pending.reports, static_cast<uint64_t>(start_step), hash);
    }
  }

  for (int64_t s = start_step; s < steps; ++s) {
    auto t_step = Clock::now();
    const bool last = s + 1 == steps;
    // 1) rollouts for step s: sampled now at version s, or (lag) already sampled at version s-1; with lag
    //    the workers start step s+1's rollouts at version s before the trainer steps.
    const std::string hash_s = sync::hash_hex(sync::root_hash(adam->bf16_views()));
    bool same = true;
    Generated cur;
    uint64_t next_seq = 0;
    if (lagged) {
      cur = std::move(pending);
      same = pending_identical;
      pending_identical = true;
      if (!last) next_seq = post_generate(s + 1, static_cast<uint64_t>(s));
    } else {
      cur = assemble(s, static_cast<uint64_t>(s),
                     control.wait_job(post_generate(s, static_cast<uint64_t>(s)), check));
      same = identical(cur.reports, static_cast<uint64_t>(s), hash_s);
    }
    uint64_t oldest = static_cast<uint64_t>(s);
    for (const auto& r : cur.rollouts) oldest = std::min(oldest, r.policy_version);
    const int64_t lag = s - static_cast<int64_t>(oldest);
    // 2) GRPO step on the FP32 masters; the model then holds their BF16 cast.
    auto t_train = Clock::now();
    rl::GrpoStepStats gs = rl::grpo_step(*policy, *adam, cur.rollouts, gcfg);
    double train_ms = ms_since(t_train);
    // 3) publish version s+1: the patch holds the BF16 elements that changed.
    auto t_enc = Clock::now();
    sync::Blob blob = store.publish(static_cast<uint64_t>(s + 1), adam->bf16_views());
    if (fs_publisher) {
      const uint64_t v = static_cast<uint64_t>(s + 1);
      fs_publisher->publish(v - 1, v, *blob);
      if (config.sync.anchor_every != 0 && v % static_cast<uint64_t>(config.sync.anchor_every) == 0)
        fs_publisher->publish_anchor(v, *store.anchor(v));
    }
    double encode_ms = ms_since(t_enc);
    sync::PatchInfo info = sync::inspect_patch(blob->data(), blob->size());
    uint64_t changed = 0, index_raw = 0, value_raw = 0;
    for (const auto& t : info.tensors) {
      changed += t.changed;
      index_raw += t.index_bytes;
      value_raw += t.value_bytes;
    }
    // 4) the workers' root hashes against the trainer's: after syncing to s+1 (no lag, or the last step),
    //    else at version s where they sampled step s+1 (version s+1 is checked at the next step).
    const std::string hash_next = sync::hash_hex(sync::root_hash(adam->bf16_views()));
    double fetch_ms = 0, apply_ms = 0, load_ms = 0;
    json versions = json::object();
    double wait_ms = 0;
    int64_t prefetched = 0;  // workers whose patch came from their background prefetch
    if (!lagged || last) {
      auto sync_reports = control.run_job("sync", static_cast<uint64_t>(s + 1), s, empty_work, check);
      same = identical(sync_reports, static_cast<uint64_t>(s + 1), hash_next) && same;
      sync_stats(sync_reports, &fetch_ms, &apply_ms, &load_ms, &versions, &prefetched);
    } else {
      auto t_wait = Clock::now();
      pending = assemble(s + 1, static_cast<uint64_t>(s), control.wait_job(next_seq, check));
      wait_ms = ms_since(t_wait);
      same = identical(pending.reports, static_cast<uint64_t>(s), hash_s) && same;
      sync_stats(pending.reports, &fetch_ms, &apply_ms, &load_ms, &versions, &prefetched);
    }
    const double elements = static_cast<double>(std::max<uint64_t>(1, gs.elements));
    json row{{"step", s},
             {"version", s + 1},
             {"rollout_version", oldest},
             {"lag", lag},
             {"reward_mean", gs.reward_mean},
             {"reward_std", gs.reward_std},
             {"loss", gs.loss},
             {"clip_fraction", gs.clip_fraction},
             {"kl", gs.kl},
             {"grad_norm", gs.grad_norm},
             {"lr", gs.lr},
             {"entropy", gs.entropy},
             {"tis_mismatch", gs.tis_mismatch},
             {"tis_clipped_fraction", gs.tis_clipped_fraction},
             {"response_tokens", cur.tokens},
             {"truncated", gs.truncated},
             {"zero_variance_groups", gs.zero_variance_groups},
             {"tokens_per_s", cur.gen_ms > 0 ? cur.tokens / (cur.gen_ms / 1000.0) : 0.0},
             {"changed", gs.bf16_changed},
             {"changed_fraction", static_cast<double>(gs.bf16_changed) / elements},
             {"patch_changed", changed},
             {"patch_bytes", blob->size()},
             {"patch_index_bytes_raw", index_raw},
             {"patch_value_bytes_raw", value_raw},
             {"patch_payload_raw_bytes", info.payload_raw_bytes},
             {"patch_payload_compressed_bytes", info.payload_compressed_bytes},
             {"dense_bytes", dense_bytes},
             {"encode_ms", encode_ms},
             {"transfer_ms", fetch_ms},
             {"apply_ms", apply_ms},
             {"load_ms", load_ms},
             {"generate_ms", cur.gen_ms},
             {"train_ms", train_ms},
             {"generate_wait_ms", wait_ms},
             {"prefetched_workers", prefetched},
             {"step_ms", ms_since(t_step)},
             {"worker_versions", versions},
             {"bit_identical", same},
             {"elapsed_s", elapsed()}};
    metrics.append(row);
    if (opt.log_json) std::cout << row.dump() << std::endl;
    if (last || (config.run.checkpoint_every > 0 && (s + 1) % config.run.checkpoint_every == 0)) {
      json pending_json;
      if (lagged && !last)
        pending_json =
            json{{"step", pending.step}, {"version", pending.version}, {"reports", pending.reports}};
      save_checkpoint(run_dir, s + 1, *policy, *adam,
                      static_cast<uint64_t>((s + 1) * config.rl.prompts_per_step), pending_json);
    }
    char status[160];
    std::snprintf(status, sizeof status, "reward %.3f  changed %.2e  patch %.1f KB (%.0fx)", gs.reward_mean,
                  static_cast<double>(gs.bf16_changed) / elements, blob->size() / 1e3,
                  static_cast<double>(dense_bytes) / static_cast<double>(blob->size()));
    if (progress.active()) {
      progress.update(s, status);
    } else {
      spdlog::info("step {}/{} {} bit-identical {} ({:.1f} s)", s + 1, steps, status, same ? "yes" : "NO",
                   seconds_since(t_step));
    }
  }
  progress.finish();
  // Workers stop before the final evaluation so that it has the cores to itself.
  control.post_stop();
  threads.join();

  // ---- Pass@1 after, summary, report -------------------------------------------------------------------
  double pass_after = 0;
  if (config.eval.after && !sets.held_out.empty()) {
    auto t0 = Clock::now();
    auto report = pass_at_1(*policy, *tok, tmpl, sets.held_out, config);
    pass_after = report.pass_at_1;
    spdlog::info("Pass@1 after GRPO: {:.4f} on {} held-out problems ({:.1f} s)", pass_after, report.problems,
                 seconds_since(t0));
  }
  Summary summary = summarize(MetricsLog::read(metrics_path));
  summary.pass_at_1_before = run_state.value("pass_at_1_before", 0.0);
  summary.pass_at_1_after = pass_after;
  summary.workers = static_cast<int64_t>(n_workers);
  summary.wall_seconds = elapsed();
  write_json_atomic(run_dir + "/summary.json", summary.to_json());
  try {
    write_report(run_dir);
  } catch (const std::exception& e) {
    spdlog::warn("report.html not written: {}", e.what());
  }
  if (opt.log_json) {
    std::cout << json{{"summary", summary.to_json()}}.dump() << std::endl;
  } else if (!opt.quiet) {
    std::printf(
        "\nrun %s\n  GRPO steps          %lld (%lld workers, bit-identical every step: %s)\n"
        "  reward              %.3f -> %.3f\n  Pass@1 (held-out)   %.3f -> %.3f\n"
        "  changed fraction    %.3g of BF16 elements per step (mean)\n"
        "  bytes shipped       %.3f MB of patches vs %.3f MB dense BF16 (%.1fx less)\n"
        "  wall time           %.1f s\n  report              %s/report.html\n",
        run_dir.c_str(), static_cast<long long>(summary.steps), static_cast<long long>(summary.workers),
        summary.bit_identical_every_step ? "yes" : "NO", summary.reward_first, summary.reward_last,
        summary.pass_at_1_before, summary.pass_at_1_after, summary.mean_changed_fraction,
        summary.patch_bytes_total / 1e6, summary.dense_bytes_total / 1e6, summary.compression_ratio,
        summary.wall_seconds, run_dir.c_str());
  }
  return summary.bit_identical_every_step || summary.steps == 0 ? 0 : 3;
}

}  // namespace pulse::app
