// `pulse run` / `pulse trainer` (app/trainer/trainer.h): setup -> step loop -> finish.
//
// Rewards: the graders run on the workers inside rl::collect_rollouts (where the responses are); the
// trainer uses the rewards in the rollouts it receives.
#include "app/trainer/trainer.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "app/run/checkpoints.h"
#include "app/device.h"
#include "app/trainer/fleet.h"
#include "app/trainer/gpu_patch_encoder.h"
#include "app/trainer/progress.h"
#include "app/trainer/publisher.h"
#include "app/run/report.h"
#include "app/trainer/rollout_pipeline.h"
#include "model/checkpoint.h"
#include "rl/eval.h"
#include "rl/grpo.h"
#include "rl/sft.h"
#include "sync/io/atomic_file.h"
#include "sync/hash.h"
#include "sync/transport_http.h"

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

std::string random_token() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 4; ++i) out += sync::hash_hex((static_cast<uint64_t>(rd()) << 32) ^ rd());
  return out;
}

}  // namespace

Trainer::Trainer(JobOptions options) : opt_(std::move(options)), t_start_(Clock::now()) {}
Trainer::~Trainer() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

double Trainer::elapsed() const {
  // Wall time across a resume: up to the last kept metrics row, plus this process.
  return prior_wall_ + seconds_since(t_start_);
}

/// The trainer always holds the version it published last; the store has its root hash already.
std::string Trainer::weights_hash() const {
  return sync::hash_hex(publisher_->head_root_hash());
}

rl::EvalReport Trainer::pass_at_1() {
  torch::NoGradGuard no_grad;
  return rl::evaluate(*policy_, *tok_, tmpl_, sets_.held_out, config_.eval.pass_at_1);
}

void Trainer::setup() {
  open_run_dir();
  try {
    build_policy();
    open_servers();  // workers can register while SFT runs
  } catch (...) {
    agree_setup(false);  // removes a new run's folder
    throw;
  }
  agree_setup(true);
  resume_step_ = opt_.resume_dir.empty() ? -1 : resumable_checkpoint(run_dir_);
  if (group_ && !opt_.resume_dir.empty()) resume_step_ = common_resume_step(resume_step_);
  if (resume_step_ >= 0) {
    resume(resume_step_);
  } else {
    if (!opt_.resume_dir.empty())
      spdlog::warn("{}: no complete checkpoint yet, starting the run over", run_dir_);
    warm_start();
  }
  join_group_weights();
  start_workers();
  if (!opt_.resume_dir.empty()) sync::write_file_atomic(run_dir_ + "/config.toml", to_toml(config_));
}

/// A new run whose data, tokenizer, model or servers (a port in use) could not be set up leaves no run
/// directory behind (it would hold only its config.toml; resuming it would fail the same way), nor the
/// parent folders this process made for it (runs/, the run folder above rank-K/) once they are empty.
void Trainer::discard_new_run_dir() {
  if (!new_run_dir_) return;
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
  std::error_code ec;
  fs::remove_all(run_dir_, ec);
  if (created_top_.empty()) return;
  const fs::path top = fs::path(created_top_).lexically_normal();
  for (fs::path p = fs::absolute(run_dir_).lexically_normal().parent_path(); !p.empty();
       p = p.parent_path()) {
    const auto rel = p.lexically_relative(top);
    if (rel.empty() || *rel.begin() == "..") break;  // above what this process made
    if (!fs::remove(p, ec)) break;                   // not empty (another rank's folder), or gone
    if (p == top) break;
  }
}

/// Trainer groups: every rank says whether its setup (policy, servers) succeeded, so that when one
/// fails (its port taken, say) the others fail at once too, and a new run's ranks all remove their
/// folders, instead of the others training on into SFT and a checkpoint nobody can resume. A barrier
/// after the removal keeps every rank alive until all have removed theirs (`pulse launch` stops the
/// others once one exits). A failing rank whose peers are gone just goes on failing with its own error.
/// Without a group: a failed setup removes the new run's folder.
void Trainer::agree_setup(bool ok) {
  std::vector<int64_t> failed(1, ok ? 0 : 1);  // without a group: this process's own status
  if (group_) {
    try {
      failed = group_->allgather_i64(failed, "setup status");
    } catch (const std::exception&) {
      if (ok) throw;
    }
  }
  const auto first = std::find(failed.begin(), failed.end(), 1);
  if (first == failed.end()) return;
  discard_new_run_dir();
  if (group_) {
    try {
      group_->barrier("setup failure: run directories removed");
    } catch (const std::exception&) {  // a peer already gone
    }
  }
  if (!ok) return;  // the caller rethrows this rank's own error
  const auto first_failed = first - failed.begin();
  throw std::runtime_error("trainer rank " + std::to_string(first_failed) +
                           " could not set up (its log says why); this rank stops too" +
                           (new_run_dir_ ? ", and its new run directory " + run_dir_ + " was removed" : ""));
}

/// One process per run directory: an exclusive lock on RUN_DIR/.lock held for the process's lifetime.
void Trainer::lock_run_dir() {
  const std::string path = run_dir_ + "/.lock";
  lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) throw std::runtime_error(path + ": cannot open the run directory lock");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
    throw std::runtime_error(run_dir_ + ": in use by another pulse process (" + path + " is locked)");
}

/// --resume with --set: keys that would change the algorithm mid-run (the outer-round scheme and its
/// residual, the KL reference) are refused, and so are keys the resumed run would not read: where it
/// lives, and, when it resumes from a checkpoint, the model and tokenizer it started from and the SFT warm
/// start (a run without a checkpoint yet starts over and reads them).
void Trainer::refuse_algorithm_changes(const Config& stored) const {
  const std::string where = "--resume " + opt_.resume_dir + ": --set ";
  auto check = [&](bool same, const char* key) {
    if (!same)
      throw ConfigError(
          where + key +
          " cannot change on --resume (the run's state depends on it); start a new run instead");
  };
  const auto& a = stored.multi;
  const auto& b = config_.multi;
  check(a.mode == b.mode, "multi.mode");
  check(a.inner_steps == b.inner_steps, "multi.inner_steps");
  check(a.outer_lr == b.outer_lr && a.outer_momentum == b.outer_momentum, "multi.outer_lr/outer_momentum");
  check(a.gate_open == b.gate_open, "multi.gate_open");
  check((stored.rl.grpo.kl_coef > 0) == (config_.rl.grpo.kl_coef > 0), "rl.kl_coef (on/off)");

  const bool from_checkpoint = resumable_checkpoint(run_dir_) >= 0;
  const toml::table was = toml::parse(to_toml(stored)), now = toml::parse(to_toml(config_));
  auto text = [](const toml::table& t, const std::string& sec, const std::string& key) {
    std::ostringstream out;
    out << t[sec][key];
    return out.str();
  };
  // The same folder however it is spelled (trailing '/', "./", a symlink).
  auto same_path = [](const std::string& x, const std::string& y) {
    if (x.empty() || y.empty()) return x == y;
    std::error_code ex, ey;
    const fs::path cx = fs::weakly_canonical(fs::absolute(x), ex),
                   cy = fs::weakly_canonical(fs::absolute(y), ey);
    return fs::path(x).lexically_normal() == fs::path(y).lexically_normal() || (!ex && !ey && cx == cy);
  };
  for (const std::string& o : opt_.overrides) {
    const std::string key = o.substr(0, o.find('='));  // "section.key", checked by load_config
    const std::string sec = key.substr(0, key.find('.')), name = key.substr(key.find('.') + 1);
    bool same = true;
    const char* why = "";
    if (key == "run.dir" || key == "run.name") {
      same = key == "run.dir" ? same_path(config_.run.dir, opt_.resume_dir)
                              : stored.run.name == config_.run.name;
      why = "the run stays in the directory given to --resume";
    } else if (!from_checkpoint) {
      continue;
    } else if (key == "model.path" || key == "model.config") {
      same = key == "model.path" ? same_path(stored.model.path, config_.model.path)
                                 : same_path(stored.model.config, config_.model.config);
      why = "the checkpoint's weights replace the model the run started from";
    } else if (sec == "tokenizer" || sec == "sft") {
      same = text(was, sec, name) == text(now, sec, name);
      why = sec == "sft" ? "the SFT warm start ran before the run's first checkpoint"
                         : "the run keeps the tokenizer its model was trained with";
    }
    if (!same)
      throw ConfigError(where + key + " has no effect on --resume (" + why + "); start a new run instead");
  }
}

/// The run directory; with several trainers (torchrun's WORLD_SIZE > 1) each rank writes DIR/rank-R, DIR
/// being what rank 0 resolved (sent to the others over the group).
void Trainer::open_run_dir() {
  setup_logging(opt_.quiet);  // before the group forms: its lines go to stderr like every other
  const rl::GroupOptions env = rl::GroupOptions::from_env();
  const std::string rank_dir = env.world_size > 1 ? "/rank-" + std::to_string(env.rank) : "";
  if (!opt_.resume_dir.empty()) {
    run_dir_ = opt_.resume_dir + rank_dir;
    if (!fs::exists(run_dir_ + "/config.toml")) {
      int ranks = 0;
      while (fs::exists(opt_.resume_dir + "/rank-" + std::to_string(ranks) + "/config.toml")) ++ranks;
      if (ranks > 0)
        throw std::runtime_error(opt_.resume_dir + ": this run has " + std::to_string(ranks) +
                                 " trainer ranks; resume it with `pulse launch --nproc " +
                                 std::to_string(ranks) + " --resume " + opt_.resume_dir +
                                 "` (WORLD_SIZE is " + std::to_string(env.world_size) + ")");
      throw std::runtime_error(run_dir_ + ": no config.toml (is this a run directory?)");
    }
    config_ = load_config(run_dir_ + "/config.toml", opt_.overrides);
    refuse_algorithm_changes(load_config(run_dir_ + "/config.toml"));
    start_group();
  } else {
    config_ = load_config(opt_.config_path, opt_.overrides);
    start_group();
    std::string base = resolve_run_dir(config_.run.dir, config_.run.name);
    if (group_) {
      auto bytes =
          group_->broadcast_bytes(std::vector<uint8_t>(base.begin(), base.end()), 0, "run directory");
      base.assign(bytes.begin(), bytes.end());
    }
    run_dir_ = base + rank_dir;
    if (fs::exists(run_dir_ + "/checkpoints/LATEST"))
      throw std::runtime_error(run_dir_ + ": already holds a run; use --resume " + base +
                               " or another run.dir");
  }
  config_.run.dir = run_dir_;
  new_run_dir_ = opt_.resume_dir.empty() && !fs::exists(run_dir_);
  if (new_run_dir_) {  // the outermost missing folder of the path: discard_new_run_dir removes up to it
    const fs::path mine = fs::absolute(run_dir_).lexically_normal();
    for (fs::path p = mine; !p.empty() && !fs::exists(p); p = p.parent_path()) created_top_ = p.string();
    // The folder above rank-K/ is the run's, whichever rank made it: the last rank to go removes it.
    if (!rank_dir.empty() && created_top_ == mine.string()) created_top_ = mine.parent_path().string();
  }
  fs::create_directories(run_dir_ + "/checkpoints");
  lock_run_dir();
  // A resumed run keeps its config.toml until its setup succeeded (a failed --set must not stick).
  if (opt_.resume_dir.empty()) sync::write_file_atomic(run_dir_ + "/config.toml", to_toml(config_));
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(config_.run.threads > 0 ? static_cast<int>(config_.run.threads) : hw);
  spdlog::info("run directory {}{}", run_dir_, opt_.resume_dir.empty() ? "" : " (resuming)");
}

/// run.device for this rank (LOCAL_RANK's GPU on cuda); multi.mode != single: joins the group of trainers
/// (c10d TCPStore rendezvous + Gloo, plus NCCL for CUDA gradients in a build with it, rl/process_group.h).
void Trainer::start_group() {
  rl::GroupOptions o = rl::GroupOptions::from_env(config_.multi.timeout_s);
  device_ = resolve_device(config_.run.device, o.local_rank);
  if (device_.is_cuda()) o.cuda_device = device_.index();
  if (config_.multi.mode == "single") {
    if (o.world_size > 1)
      throw ConfigError("multi.mode = single but WORLD_SIZE = " + std::to_string(o.world_size) +
                        ": set multi.mode to ddp, diloco or pulseloco for several trainers");
    return;
  }
  if (o.world_size == 1)
    spdlog::warn("multi.mode = {} with one trainer: the outer rounds run locally", config_.multi.mode);
  group_ = std::make_unique<rl::TrainerGroup>(o);
  spdlog::info("trainer rank {} of {} ({} via {}:{}; {})", group_->rank(), group_->world_size(),
               config_.multi.mode, o.master_addr, o.master_port,
               group_->nccl_active() ? "NCCL for the CUDA gradients, Gloo for bytes"
               : device_.is_cuda()   ? "Gloo through host copies of the CUDA tensors"
                                     : "Gloo");
  // Every rank must run the same config (bar its run directory): compare a hash of it.
  Config c = config_;
  c.run.dir.clear();
  const std::string text = to_toml(c);
  const auto hashes =
      group_->allgather_i64({static_cast<int64_t>(XXH3_64bits(text.data(), text.size()))}, "config hash");
  for (int r = 0; r < group_->world_size(); ++r)
    if (hashes[static_cast<size_t>(r)] != hashes[static_cast<size_t>(group_->rank())])
      throw ConfigError("rank " + std::to_string(group_->rank()) + ": rank " + std::to_string(r) +
                        " runs a different config (every trainer needs the same config and --set values)");
}

/// Each rank writes its own checkpoints/LATEST, so a kill between two ranks' writes leaves them one
/// checkpoint apart (rank 0 at step 8, rank 1 at 6): each then resumed from its own and the ranks ran
/// different steps (one finished, the other failed on "peer closed the connection"). Every rank resumes
/// from the oldest of the ranks' latest checkpoints (the two newest are kept, so it is still there), or
/// starts over when a rank has none; a rank that lacks it fails naming the steps.
int64_t Trainer::common_resume_step(int64_t mine) {
  const auto steps = group_->allgather_i64({mine}, "resume step");
  const int64_t common = *std::min_element(steps.begin(), steps.end());
  if (common == mine) return mine;
  std::string all;
  for (size_t r = 0; r < steps.size(); ++r)
    all += (r ? ", rank " : "rank ") + std::to_string(r) + ": " + std::to_string(steps[r]);
  if (common >= 0 && !fs::exists(checkpoint_dir(run_dir_, common) + "/state"))
    throw std::runtime_error(run_dir_ + ": the ranks' latest checkpoints differ (" + all +
                             ") and this rank no longer has step " + std::to_string(common) +
                             "; start a new run");
  spdlog::warn("the ranks' latest checkpoints differ ({}): every rank resumes from {}", all,
               common >= 0 ? "step " + std::to_string(common) : std::string("the start"));
  return common;
}

/// Every rank starts from rank 0's weights (bytes, so that BF16 casts agree bit for bit), then gets its
/// multi-trainer machinery: the DDP gradient reducer, or the outer optimizer (restored on resume).
void Trainer::join_group_weights() {
  if (!group_) return;
  if (resume_step_ < 0 || !fs::exists(run_dir_ + "/run_state.json")) {
    for (auto& m : adam_->master_tensors()) {
      at::Tensor host = m.to(torch::kCPU).contiguous();  // m itself on a CPU run, a copy on a GPU
      const auto* p = static_cast<const uint8_t*>(host.data_ptr());
      std::vector<uint8_t> mine(p, p + host.numel() * sizeof(float));
      auto got =
          group_->broadcast_bytes(group_->rank() == 0 ? mine : std::vector<uint8_t>(), 0, "initial weights");
      if (got.size() != mine.size())
        throw std::runtime_error("initial weights: rank 0 sent " + std::to_string(got.size()) +
                                 " bytes for a master of " + std::to_string(mine.size()));
      std::memcpy(host.data_ptr(), got.data(), got.size());
      if (!host.is_same(m)) m.copy_(host);
    }
    adam_->cast_to_model();
    save_checkpoint(run_dir_, 0, *policy_, *adam_, CheckpointExtras{});
  }
  if (config_.multi.mode == "ddp") {
    adam_->set_gradient_reducer(rl::ddp_gradient_reducer(*group_));
  } else if (config_.multi.mode != "single") {
    outer_ = std::make_unique<rl::OuterOptimizer>(config_.multi, adam_->master_tensors(), adam_->names());
    const std::string path = checkpoint_dir(run_dir_, start_step_) + "/outer.safetensors";
    if (start_step_ > 0) outer_->load(path);
  }
  // Each trainer samples its own prompt shard (disjoint by rank).
  if (group_->world_size() > 1) {
    std::vector<rl::Problem> shard;
    for (size_t i = 0; i < sets_.train.size(); ++i)
      if (static_cast<int>(i % static_cast<size_t>(group_->world_size())) == group_->rank())
        shard.push_back(sets_.train[i]);
    sets_.train = std::move(shard);
  }
}

void Trainer::build_policy() {
  sets_ = load_problems(config_);
  if (sets_.train.empty() && config_.rl.steps > 0) throw std::runtime_error("data: no train problems");
  tok_ = prepare_tokenizer(config_, sets_, run_dir_ + "/tokenizer.model", &tok_path_);
  if (fs::is_directory(tok_path_))
    throw std::runtime_error("tokenizer.path: give the tokenizer file, not a folder");
  mc_ = model_config_for(config_, *tok_);
  policy_ = build_model(config_, mc_);  // initialised on the CPU (same weights on every device)
  if (!device_.is_cpu()) policy_->to(device_);
  tmpl_ = model::PromptTemplate::preset(config_.tokenizer.chat_template);
  spdlog::info(
      "{} train / {} held-out problems ({}); tokenizer {} ({} pieces); model {} layers x {} wide, {:.2f} M "
      "parameters, {} on {}",
      sets_.train.size(), sets_.held_out.size(), config_.data.task, tok_path_, tok_->vocab_size(),
      mc_.num_hidden_layers, mc_.hidden_size, static_cast<double>(policy_->num_parameters()) / 1e6,
      config_.model.dtype, device_.str());
}

/// A fresh run: SFT warm start, the frozen KL reference, Pass@1 before, checkpoint 0.
void Trainer::warm_start() {
  const std::string metrics_path = run_dir_ + "/metrics.jsonl";
  sync::write_file_atomic(metrics_path, std::string());
  run_state_ = json::object();
  if (config_.sft.loop.steps > 0 && config_.model.path.empty()) {
    rl::MasterAdam sft_opt(*policy_, config_.sft.optimizer);
    const rl::SftConfig& cfg = config_.sft.loop;
    auto t0 = Clock::now();
    spdlog::info("SFT warm start: {} steps x {} sequences", cfg.steps, cfg.batch_size);
    json curve = json::array();  // the loss every 10 steps (run_state.json sft_loss_curve)
    auto stats =
        rl::sft_train(*policy_, sft_opt, *tok_, tmpl_, sets_.train, cfg, [&](int64_t step, double loss) {
          if (step % 10 == 0 || step == 1) curve.push_back(json{step, loss});
          if (step % 25 == 0 || step == cfg.steps)
            spdlog::info("  SFT step {}/{} loss {:.4f}", step, cfg.steps, loss);
        });
    run_state_["sft_loss_curve"] = curve;
    run_state_["sft_first_loss"] = stats.first_loss;
    run_state_["sft_last_loss"] = stats.last_loss;
    run_state_["sft_seconds"] = seconds_since(t0);
  } else if (config_.sft.loop.steps > 0) {
    // model.path (a pretrained or fine-tuned checkpoint) is the warm start; the SFT warm start exists for
    // models built from scratch. Said, so that a given sft.steps is not silently ignored.
    spdlog::info(
        "SFT warm start skipped: model.path is set ({}), sft.steps = {} applies to models built from "
        "scratch",
        config_.model.path, config_.sft.loop.steps);
  }
  // GRPO starts from the BF16 weights (as an RL run starting from a BF16 HF checkpoint does).
  adam_ = std::make_unique<rl::MasterAdam>(*policy_, config_.optimizer);
  if (config_.rl.grpo.kl_coef > 0) {
    reference_ = rl::make_reference_policy(*policy_, compute_dtype(config_));
    model::save_hf_checkpoint(*reference_, run_dir_ + "/reference");
  }
  run_state_["pass_at_1_before"] = nullptr;  // not measured unless eval.before runs
  if (config_.eval.before && !sets_.held_out.empty()) {
    auto t0 = Clock::now();
    auto report = pass_at_1();
    run_state_["pass_at_1_before"] = report.pass_at_1;
    spdlog::info("Pass@1 before GRPO: {:.4f} on {} held-out problems ({:.1f} s)", report.pass_at_1,
                 report.problems, seconds_since(t0));
  }
  run_state_["wall_seconds_before_grpo"] = seconds_since(t_start_);
  write_json_atomic(run_dir_ + "/run_state.json", run_state_);
  CheckpointExtras x;
  save_checkpoint(run_dir_, 0, *policy_, *adam_, x);
  prior_wall_ = 0;
}

void Trainer::resume(int64_t checkpoint_step) {
  const std::string metrics_path = run_dir_ + "/metrics.jsonl";
  adam_ = std::make_unique<rl::MasterAdam>(*policy_, config_.optimizer);
  CheckpointExtras x = load_checkpoint(run_dir_, checkpoint_step, *adam_, *policy_, &start_step_);
  version_ = x.policy_version;
  if (checkpoint_step > 0) resume_pending_ = x.pending;
  if (config_.rl.grpo.kl_coef > 0) {
    reference_ = model::load_hf_model(run_dir_ + "/reference", compute_dtype(config_));
    if (!device_.is_cpu()) reference_->to(device_);
    reference_->eval();
  }
  run_state_ = read_json(run_dir_ + "/run_state.json");
  MetricsLog::truncate_before_step(metrics_path, start_step_);
  auto rows = MetricsLog::read(metrics_path);
  prior_wall_ =
      rows.empty() ? run_state_.value("wall_seconds_before_grpo", 0.0) : rows.back().value("elapsed_s", 0.0);
  refused_steps_ = rows.empty() ? 0 : rows.back().value("refused_nonfinite_steps", int64_t{0});
  if (config_.rl.steps < start_step_)
    throw ConfigError("--resume " + opt_.resume_dir + ": rl.steps = " + std::to_string(config_.rl.steps) +
                      " is below the " + std::to_string(start_step_) + " GRPO steps the run has done");
  spdlog::info("resuming from checkpoint step {} ({} metrics rows kept)", start_step_, rows.size());
  if (start_step_ == config_.rl.steps)
    spdlog::info("the run has done all its {} GRPO steps; to train on, --resume with --set rl.steps=N",
                 start_step_);
}

/// The patch and control servers, up before SFT so that `pulse worker` processes started first can register
/// (they get work once the first version is published). `pulse trainer` listens on transport.port (control)
/// and port+1 (patches), shifted by 2 per trainer rank; `pulse run` on free loopback ports.
void Trainer::open_servers() {
  std::string token = sync::load_token(config_.transport.token_env, config_.transport.token_file);
  if (token.empty()) {
    if (opt_.in_process_workers) {
      token = random_token();  // loopback workers learn it in-process; nobody else can
    } else {
      spdlog::warn("no bearer token ({} unset, transport.token_file empty): the trainer accepts anyone",
                   config_.transport.token_env);
    }
  }
  int port = 0;  // control; patches on port + 1
  if (!opt_.in_process_workers && config_.transport.port != 0)
    port = static_cast<int>(config_.transport.port) + (group_ ? 2 * group_->rank() : 0);
  publisher_ = std::make_unique<Publisher>(config_, run_dir_, token, port == 0 ? 0 : port + 1);
  RegisterReply boot;
  boot.patch_url = publisher_->patch_url();
  boot.patch_dir = publisher_->patch_dir();
  boot.settings = worker_settings(config_);
  boot.model_config = mc_.to_hf_json();
  boot.tokenizer_name = fs::path(tok_path_).filename().string();
  fleet_ = std::make_unique<WorkerFleet>(config_, token, boot, sync::read_file(tok_path_), port,
                                         opt_.in_process_workers);
  publisher_->set_live_workers([this] { return fleet_->live_ids(); });
}

/// The first version published and the workers (threads of `pulse run`) started; every live worker syncs
/// to the trainer's weights before any step.
void Trainer::start_workers() {
  const auto views = adam_->bf16_views();
  dense_bytes_ = 0;
  for (const auto& v : views) dense_bytes_ += v.nbytes;
  publisher_->publish_first(version_, views);
  std::string why_host;
  gpu_encoder_ = GpuPatchEncoder::create(device_, *adam_, &why_host);
  if (gpu_encoder_)
    spdlog::info("PULSESync patches are encoded on {} (sync/gpu_encode.h)", device_.str());
  else if (device_.is_cuda())
    spdlog::info("PULSESync patches are encoded on the CPU from host copies: {}", why_host);
  if (outer_ && group_->rank() == 0) {  // at a round boundary the local weights are the global ones
    publisher_->publish_global(outer_->rounds_done(), views);
    spdlog::info("global weights (one version per outer round) served at {}", publisher_->global_url());
  }
  fleet_->start_local_workers();
  fleet_->wait_for_workers();
  if (!fleet_->identical(fleet_->sync_all(version_, start_step_), version_, weights_hash()))
    throw std::runtime_error("workers failed to bootstrap to the trainer's weights");

  metrics_ = std::make_unique<MetricsLog>(run_dir_ + "/metrics.jsonl");
  progress_ = std::make_unique<ProgressBar>(start_step_, steps(), !opt_.quiet);
  pipeline_ = std::make_unique<RolloutPipeline>(config_, *fleet_, sets_.train,
                                                RolloutLimits{mc_.vocab_size, mc_.max_position_embeddings});
  if (start_step_ < steps()) {
    spdlog::info(
        "GRPO: {} steps x {} prompts x {} samples, {} workers (control {}, patches {}), {:.2f} MB dense "
        "BF16{}",
        steps(), config_.rl.prompts_per_step, config_.rl.group_size, fleet_->size(), fleet_->url(),
        publisher_->patch_dir().empty() ? "over HTTP at " + publisher_->patch_url()
                                        : "through the folder " + publisher_->patch_dir(),
        dense_bytes_ / 1e6,
        pipeline_->lagged() ? ", off-policy lag 1 (generation overlapped with training)" : "");
    if (pipeline_->lagged() && resume_step_ > 0 && resume_pending_.is_null())
      spdlog::warn("checkpoint {}: no pending rollouts; sampling step {} at version {} (lag 0)", resume_step_,
                   start_step_, version_);
    pipeline_->prime(start_step_, version_, weights_hash(), resume_pending_,
                     checkpoint_dir(run_dir_, start_step_) + "/pending_rollouts.json");
  }
}

StepRecord Trainer::step(int64_t s) {
  const auto t_step = Clock::now();
  const bool last = s + 1 == steps();
  if (group_) comm_at_step_start_ = group_->stats().total();
  StepRollouts cur = pipeline_->begin_step(s, version_, weights_hash(), last);
  StepRecord r = train_on(s, cur);
  // Publish the next version: the patch holds the BF16 elements that changed.
  version_ += 1;
  PublishStats ps =
      gpu_encoder_ ? publisher_->publish_encoded(
                         version_, [this](const sync::PatchOptions& o) { return gpu_encoder_->encode(o); })
                   : publisher_->publish(version_, adam_->bf16_views());
  r.version = version_;
  r.patch_changed = ps.changed;
  r.patch_bytes = ps.patch_bytes;
  r.patch_index_bytes_raw = ps.index_raw_bytes;
  r.patch_value_bytes_raw = ps.value_raw_bytes;
  r.patch_payload_raw_bytes = ps.payload_raw_bytes;
  r.patch_payload_compressed_bytes = ps.payload_compressed_bytes;
  r.encode_ms = ps.encode_ms;
  r.dense_bytes = dense_bytes_;
  // The workers' root hashes against the trainer's (after syncing, or at the version they sampled the
  // next step with; rl/rollout_pipeline.h).
  const auto t_wait = Clock::now();
  bool same = true;
  std::vector<WorkerReport> reports = pipeline_->end_step(s, version_, weights_hash(), last, &same);
  if (pipeline_->lagged() && !last) r.generate_wait_ms = ms_since(t_wait);
  r.bit_identical = same && cur.identical;
  for (size_t w = 0; w < reports.size(); ++w) {
    r.transfer_ms = std::max(r.transfer_ms, reports[w].sync.fetch_ms);
    r.apply_ms = std::max(r.apply_ms, reports[w].sync.apply_ms);
    r.load_ms = std::max(r.load_ms, reports[w].sync.load_ms);
    r.worker_versions[reports[w].worker_id] = reports[w].version;
    if (reports[w].sync.prefetched) ++r.prefetched_workers;
    if (reports[w].sync.load == "device_patch") ++r.device_patch_loads;
    if (reports[w].sync.load == "full_copy") ++r.full_copy_loads;
  }
  const FleetEvents ev = fleet_->take_events();  // joins, drops and reassigned prompts during the step
  r.extra["live_workers"] = ev.live;
  r.extra["workers_joined"] = ev.joins;
  r.extra["workers_dropped"] = ev.drops;
  r.extra["reassigned_prompts"] = ev.reassigned_prompts;
  r.step_ms = ms_since(t_step);
  r.elapsed_s = elapsed();
  return r;
}

bool Trainer::round_ends_after(int64_t s) const {
  return outer_ && (s + 1) % config_.multi.inner_steps == 0;
}

void Trainer::outer_round(StepRecord& r) {
  auto masters = adam_->master_tensors();
  rl::OuterRoundStats st = outer_->round(masters, *group_);
  adam_->cast_to_model();
  // The workers move from the local to the new global BF16 weights: one more PULSESync version.
  version_ += 1;
  PublishStats ps = publisher_->publish(version_, adam_->bf16_views());
  if (gpu_encoder_) gpu_encoder_->reset_base();  // the global weights were published from host copies
  auto reports = fleet_->sync_all(version_, r.step);
  r.bit_identical = fleet_->identical(reports, version_, weights_hash()) && r.bit_identical;
  r.version = version_;
  r.patch_bytes += ps.patch_bytes;
  r.dense_bytes += dense_bytes_;
  r.extra["outer_round"] = st.round;
  r.extra["fired"] = st.fired;
  r.extra["fired_fraction"] =
      static_cast<double>(st.fired) / static_cast<double>(std::max<uint64_t>(1, st.elements));
  r.extra["outer_step_ms"] = 1000.0 * st.seconds;
  r.extra["pseudo_grad_norm"] = st.pseudo_grad_norm;
  r.extra["round_payload_bytes"] = st.payload_bytes;
  r.extra["round_wire_bytes"] = st.wire_bytes;
  r.extra["dense_pseudo_grad_bytes"] = st.dense_bytes;
  r.extra["local_to_global_patch_bytes"] = ps.patch_bytes;
  // Rank 0 also publishes the global weights alone (round over round) for evaluation and external workers.
  if (group_->rank() == 0)
    r.extra["global_patch_bytes"] = publisher_->publish_global(st.round + 1, adam_->bf16_views());
  r.elapsed_s = elapsed();
}

/// The GRPO step on the FP32 masters (the model then holds their BF16 cast) and its statistics.
StepRecord Trainer::train_on(int64_t s, const StepRollouts& cur) {
  StepRecord r;
  r.step = s;
  uint64_t oldest = version_;
  for (const auto& ro : cur.rollouts) oldest = std::min(oldest, ro.policy_version);
  r.rollout_version = oldest;
  r.lag = static_cast<int64_t>(version_) - static_cast<int64_t>(oldest);
  const auto t_train = Clock::now();
  rl::GrpoStepStats gs = rl::grpo_step(*policy_, *adam_, cur.rollouts, config_.rl.grpo,
                                       reference_.is_empty() ? nullptr : reference_.get());
  r.train_ms = ms_since(t_train);
  const double elements = static_cast<double>(std::max<uint64_t>(1, gs.elements));
  r.reward_mean = gs.reward_mean;
  r.reward_std = gs.reward_std;
  r.loss = gs.loss;
  r.clip_fraction = gs.clip_fraction;
  r.kl = gs.kl;
  r.grad_norm = gs.grad_norm;
  r.lr = gs.lr;
  r.entropy = gs.entropy;
  r.tis_mismatch = gs.tis_mismatch;
  r.tis_clipped_fraction = gs.tis_clipped_fraction;
  r.response_tokens = cur.tokens;
  r.truncated = gs.truncated;
  r.zero_variance_groups = gs.zero_variance_groups;
  r.tokens_per_s = cur.generate_ms > 0 ? static_cast<double>(cur.tokens) / (cur.generate_ms / 1000.0) : 0.0;
  r.changed = gs.bf16_changed;
  r.changed_fraction = static_cast<double>(gs.bf16_changed) / elements;
  if (gs.skipped) {  // nothing non-finite is published: the weights (and so the patch) did not move
    ++refused_steps_;
    r.refused_nonfinite = true;
    spdlog::warn("step {}: optimizer step refused ({}): {}; weights unchanged ({} refused so far)", s,
                 rl::step_skip_name(gs.skip_reason), gs.skip_detail, refused_steps_);
  }
  r.refused_reason = rl::step_skip_name(gs.skip_reason);
  r.refused_nonfinite_steps = refused_steps_;
  r.generate_ms = cur.generate_ms;
  return r;
}

/// metrics.jsonl row, progress line, checkpoint when due.
void Trainer::record(StepRecord r) {
  const int64_t s = r.step;
  const bool last = s + 1 == steps();
  if (group_) {
    // Bytes this trainer handed to the collectives during the step (DDP: its gradients; a round's end:
    // the pseudo-gradient exchange), as payload and as the wire estimate of rl/process_group.h.
    const rl::CommCounters now = group_->stats().total();
    r.extra["comm_payload_bytes"] = now.payload_bytes - comm_at_step_start_.payload_bytes;
    r.extra["comm_wire_bytes"] = now.wire_bytes - comm_at_step_start_.wire_bytes;
    r.extra["rank"] = group_->rank();
    r.extra["world_size"] = group_->world_size();
  }
  metrics_->append(r.to_json());
  if (opt_.log_json) std::cout << r.to_json().dump() << std::endl;
  if (last || (config_.run.checkpoint_every > 0 && (s + 1) % config_.run.checkpoint_every == 0)) {
    CheckpointExtras x;
    x.data_cursor = static_cast<uint64_t>((s + 1) * config_.rl.prompts_per_step);
    x.policy_version = version_;
    x.pending = pipeline_->pending_json();
    if (outer_) x.write_files = [this](const std::string& dir) { outer_->save(dir + "/outer.safetensors"); };
    save_checkpoint(run_dir_, s + 1, *policy_, *adam_, x);
  }
  if (progress_->active()) {
    progress_->update(s, r.status_line());
  } else {
    spdlog::info("step {}/{} {} bit-identical {} ({:.1f} s)", s + 1, steps(), r.status_line(),
                 r.bit_identical ? "yes" : "NO", r.step_ms / 1000.0);
  }
}

/// summary.json "multi": bytes this trainer sent over the run, rounds, mean fired fraction.
json Trainer::multi_summary(const std::vector<json>& rows) const {
  uint64_t payload = 0, wire = 0, rounds = 0;
  double fired = 0;
  for (const auto& r : rows) {
    payload += r.value("comm_payload_bytes", uint64_t{0});
    wire += r.value("comm_wire_bytes", uint64_t{0});
    if (r.contains("fired_fraction")) {
      ++rounds;
      fired += r.at("fired_fraction").get<double>();
    }
  }
  json out{{"mode", config_.multi.mode},
           {"values", sync::loco_values_name(config_.multi.values)},
           {"rank", group_->rank()},
           {"world_size", group_->world_size()},
           {"comm_payload_bytes_total", payload},
           {"comm_wire_bytes_total", wire}};
  // What the dense exchanges of the same run would hand to the collectives: an FP32 gradient per step
  // (DDP) or an FP32 pseudo-gradient per outer round (DiLoCo), 4 bytes per parameter each time.
  uint64_t params = 0;
  for (const auto& t : adam_->master_tensors()) params += static_cast<uint64_t>(t.numel());
  const uint64_t steps = static_cast<uint64_t>(rows.size());
  out["ddp_bytes_equivalent"] = 4 * params * steps;
  if (outer_) {  // outer rounds (diloco, pulseloco); ddp has none
    out["inner_steps"] = config_.multi.inner_steps;
    out["rounds"] = rounds;
    out["mean_fired_fraction"] = rounds > 0 ? fired / static_cast<double>(rounds) : 0.0;
    out["dense_diloco_bytes_equivalent"] = 4 * params * rounds;
  }
  return out;
}

int Trainer::finish() {
  progress_->finish();
  // Workers stop before the final evaluation so that it has the cores to itself.
  const int64_t n_workers = static_cast<int64_t>(fleet_->size());
  fleet_->stop();
  std::optional<double> pass_after;  // unset: not measured
  if (config_.eval.after && !sets_.held_out.empty()) {
    auto t0 = Clock::now();
    auto report = pass_at_1();
    pass_after = report.pass_at_1;
    spdlog::info("Pass@1 after GRPO: {:.4f} on {} held-out problems ({:.1f} s)", report.pass_at_1,
                 report.problems, seconds_since(t0));
  }
  const std::vector<json> rows = MetricsLog::read(run_dir_ + "/metrics.jsonl");
  Summary summary = summarize(rows);
  if (run_state_.contains("pass_at_1_before") && run_state_["pass_at_1_before"].is_number())
    summary.pass_at_1_before = run_state_["pass_at_1_before"].get<double>();
  summary.pass_at_1_after = pass_after;
  summary.workers = n_workers;
  summary.wall_seconds = elapsed();
  json summary_json = summary.to_json();
  if (group_) summary_json["multi"] = multi_summary(rows);
  const json fleet = fleet_summary(rows);
  if (!fleet.is_null())
    summary_json["fleet"] = fleet;  // only when a worker joined late, died or was replaced
  write_json_atomic(run_dir_ + "/summary.json", summary_json);
  try {
    write_report(run_dir_);
  } catch (const std::exception& e) {
    spdlog::warn("report.html not written: {}", e.what());
  }
  if (opt_.log_json) {
    std::cout << json{{"summary", summary.to_json()}}.dump() << std::endl;
  } else if (!opt_.quiet) {
    print_summary(summary, run_dir_);
    if (summary_json.contains("multi")) print_multi_summary(summary_json["multi"]);
  }
  return summary.bit_identical_every_step || summary.steps == 0 ? 0 : 3;
}

int run_job(const JobOptions& options) {
  Trainer trainer(options);
  trainer.setup();
  // With multi.mode = diloco | pulseloco, every multi.inner_steps local steps end with an outer round.
  for (int64_t s = trainer.first_step(); s < trainer.steps(); ++s) {
    StepRecord r = trainer.step(s);
    if (trainer.round_ends_after(s)) trainer.outer_round(r);
    trainer.record(std::move(r));
  }
  return trainer.finish();
}

}  // namespace pulse::app
