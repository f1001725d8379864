// `pulse run` / `pulse trainer` (app/trainer/trainer.h): setup -> step loop -> finish.
//
// Rewards: the graders run on the workers inside rl::collect_rollouts (where the responses are); the
// trainer uses the rewards in the rollouts it receives.
#include "app/trainer/trainer.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>

#include "app/device.h"
#include "app/run/checkpoints.h"
#include "app/run/report.h"
#include "app/memory_check.h"
#include "app/trainer/fleet.h"
#include "app/trainer/gpu_patch_encoder.h"
#include "app/trainer/progress.h"
#include "app/trainer/publisher.h"
#include "app/trainer/rollout_pipeline.h"
#include "app/trainer/trainer_group.h"
#include "model/checkpoint.h"
#include "rl/eval.h"
#include "rl/grpo.h"
#include "rl/sft.h"
#include "sync/hash.h"
#include "sync/io/atomic_file.h"
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
Trainer::~Trainer() = default;

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
    agree_setup(group_.get(), false, run_dir_);  // removes a new run's folder
    throw;
  }
  agree_setup(group_.get(), true, run_dir_);
  resume_step_ = opt_.resume_dir.empty() ? -1 : resumable_checkpoint(run_dir());
  if (group_ && !opt_.resume_dir.empty())
    resume_step_ =
        common_resume_step(group_->allgather_i64({resume_step_}, "resume step"), resume_step_, run_dir());
  if (resume_step_ >= 0) {
    resume(resume_step_);
  } else {
    if (!opt_.resume_dir.empty())
      spdlog::warn("{}: no complete checkpoint yet, starting the run over", run_dir());
    warm_start();
  }
  join_group_weights();
  start_workers();
  if (!opt_.resume_dir.empty()) sync::write_file_atomic(run_dir() + "/config.toml", to_toml(config_));
}

/// The run directory; with several trainers (torchrun's WORLD_SIZE > 1) each rank writes DIR/rank-R, DIR
/// being what rank 0 resolved (sent to the others over the group).
void Trainer::open_run_dir() {
  setup_logging(opt_.quiet);  // before the group forms: its lines go to stderr like every other
  const rl::GroupOptions env = rl::GroupOptions::from_env();
  const bool resuming = !opt_.resume_dir.empty();
  std::string path;
  if (resuming) {
    path = RunDir::resumed_path(opt_.resume_dir, env.rank, env.world_size);
    config_ = load_config(path + "/config.toml", opt_.overrides);
    refuse_algorithm_changes(load_config(path + "/config.toml"), config_, opt_.resume_dir, opt_.overrides,
                             path);
    check_model_inputs(config_, config_source(), memory_role());
    start_group();
  } else {
    config_ = load_config(opt_.config_path, opt_.overrides);
    // Sizes and model config before the run folder exists: an absurd model leaves nothing behind.
    check_model_inputs(config_, config_source(), memory_role());
    start_group();
    const std::string base = agree_run_dir(group_.get(), resolve_run_dir(config_.run.dir, config_.run.name));
    path = RunDir::new_path(base, env.rank, env.world_size);
  }
  config_.run.dir = path;
  run_dir_.open(path, resuming, env.world_size);
  // A resumed run keeps its config.toml until its setup succeeded (a failed --set must not stick).
  if (!resuming) sync::write_file_atomic(path + "/config.toml", to_toml(config_));
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(config_.run.threads > 0 ? static_cast<int>(config_.run.threads) : hw);
  spdlog::info("run directory {}{}", path, resuming ? " (resuming)" : "");
}

/// run.device and, multi.mode != single, the group of trainers (app/trainer/trainer_group.h).
void Trainer::start_group() {
  GroupMembership m = join_trainer_group(config_);
  device_ = m.device;
  group_ = std::move(m.group);
}

/// Every rank starts from rank 0's weights (bytes, so that BF16 casts agree bit for bit), then gets its
/// multi-trainer machinery: the DDP gradient reducer, or the outer optimizer (restored on resume).
void Trainer::join_group_weights() {
  if (!group_) return;
  if (resume_step_ < 0 || !fs::exists(run_dir() + "/run_state.json")) {
    broadcast_initial_weights(*group_, *adam_);
    save_checkpoint(run_dir(), 0, *policy_, *adam_, CheckpointExtras{});
  }
  if (config_.multi.mode == rl::MultiMode::Ddp) {
    adam_->set_gradient_reducer(rl::ddp_gradient_reducer(*group_));
  } else if (config_.multi.mode != rl::MultiMode::Single) {
    outer_ = std::make_unique<rl::OuterOptimizer>(config_.multi, adam_->master_tensors(), adam_->names());
    const std::string path = checkpoint_dir(run_dir(), start_step_) + "/outer.safetensors";
    if (start_step_ > 0) outer_->load(path);
  }
  sets_.train = rank_shard(*group_, std::move(sets_.train));  // each trainer samples its own prompts
}

std::string Trainer::config_source() const {
  return opt_.resume_dir.empty() ? opt_.config_path : run_dir_.path() + "/config.toml";
}

MemoryRole Trainer::memory_role() const {
  return MemoryRole{true, opt_.in_process_workers ? config_.run.workers : 0};
}

void Trainer::build_policy() {
  sets_ = load_problems(config_);
  if (sets_.train.empty() && config_.rl.steps > 0) throw std::runtime_error("data: no train problems");
  tok_ = prepare_tokenizer(config_, sets_, run_dir() + "/tokenizer.model", &tok_path_);
  if (fs::is_directory(tok_path_))
    throw std::runtime_error("tokenizer.path: give the tokenizer file, not a folder");
  mc_ = model_config_for(config_, *tok_);
  // GRPO's log-probs under the workers' rule for a padded vocabulary (model::SamplingParams::vocab_limit).
  config_.rl.grpo.sampling.vocab_limit = tok_->vocab_size();
  // Again with the tokenizer's own vocabulary, before anything of the model's size is allocated.
  check_memory(config_, mc_, memory_role(), config_source(), model_source_name(config_));
  tmpl_ = model::PromptTemplate::preset(config_.tokenizer.chat_template);
  check_prompt_tokens(config_, sets_, *tok_, tmpl_);
  policy_ = build_model(config_, mc_);  // initialised on the CPU (same weights on every device)
  if (!device_.is_cpu()) policy_->to(device_);
  spdlog::info(
      "{} train / {} held-out problems ({}); tokenizer {} ({} pieces); model {} layers x {} wide, {:.2f} M "
      "parameters, {} on {}",
      sets_.train.size(), sets_.held_out.size(), name_of(config_.data.task), tok_path_, tok_->vocab_size(),
      mc_.num_hidden_layers, mc_.hidden_size, static_cast<double>(policy_->num_parameters()) / 1e6,
      config_.model.dtype, device_.str());
}

/// A fresh run: SFT warm start, the frozen KL reference, Pass@1 before, checkpoint 0.
void Trainer::warm_start() {
  const std::string metrics_path = run_dir() + "/metrics.jsonl";
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
    model::save_hf_checkpoint(*reference_, run_dir() + "/reference");
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
  write_json_atomic(run_dir() + "/run_state.json", run_state_);
  CheckpointExtras x;
  save_checkpoint(run_dir(), 0, *policy_, *adam_, x);
  prior_wall_ = 0;
}

void Trainer::resume(int64_t checkpoint_step) {
  const std::string metrics_path = run_dir() + "/metrics.jsonl";
  adam_ = std::make_unique<rl::MasterAdam>(*policy_, config_.optimizer);
  CheckpointExtras x = load_checkpoint(run_dir(), checkpoint_step, *adam_, *policy_, &start_step_);
  version_ = x.policy_version;
  if (checkpoint_step > 0) resume_pending_ = x.pending;
  if (config_.rl.grpo.kl_coef > 0) {
    reference_ = model::load_hf_model(run_dir() + "/reference", compute_dtype(config_));
    if (!device_.is_cpu()) reference_->to(device_);
    reference_->eval();
  }
  run_state_ = read_json(run_dir() + "/run_state.json");
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
  publisher_ = std::make_unique<Publisher>(config_, run_dir(), token, port == 0 ? 0 : port + 1);
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

  metrics_ = std::make_unique<MetricsLog>(run_dir() + "/metrics.jsonl");
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
                     checkpoint_dir(run_dir(), start_step_) + "/pending_rollouts.json");
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
  if (group_) add_comm_bytes(r, *group_, comm_at_step_start_);
  metrics_->append(r.to_json());
  if (opt_.log_json) std::cout << r.to_json().dump() << std::endl;
  if (last || (config_.run.checkpoint_every > 0 && (s + 1) % config_.run.checkpoint_every == 0)) {
    CheckpointExtras x;
    x.data_cursor = static_cast<uint64_t>((s + 1) * config_.rl.prompts_per_step);
    x.policy_version = version_;
    x.pending = pipeline_->pending_json();
    if (outer_) x.write_files = [this](const std::string& dir) { outer_->save(dir + "/outer.safetensors"); };
    save_checkpoint(run_dir(), s + 1, *policy_, *adam_, x);
  }
  if (progress_->active()) {
    progress_->update(s, r.status_line());
  } else {
    spdlog::info("step {}/{} {} bit-identical {} ({:.1f} s)", s + 1, steps(), r.status_line(),
                 r.bit_identical ? "yes" : "NO", r.step_ms / 1000.0);
  }
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
  const std::vector<json> rows = MetricsLog::read(run_dir() + "/metrics.jsonl");
  Summary summary = summarize(rows);
  if (run_state_.contains("pass_at_1_before") && run_state_["pass_at_1_before"].is_number())
    summary.pass_at_1_before = run_state_["pass_at_1_before"].get<double>();
  summary.pass_at_1_after = pass_after;
  summary.workers = n_workers;
  summary.wall_seconds = elapsed();
  json summary_json = summary.to_json();
  if (group_) {
    uint64_t params = 0;
    for (const auto& t : adam_->master_tensors()) params += static_cast<uint64_t>(t.numel());
    summary_json["multi"] = multi_summary(config_, *group_, outer_ != nullptr, params, rows);
  }
  const json fleet = fleet_summary(rows);
  if (!fleet.is_null())
    summary_json["fleet"] = fleet;  // only when a worker joined late, died or was replaced
  write_json_atomic(run_dir() + "/summary.json", summary_json);
  try {
    write_report(run_dir());
  } catch (const std::exception& e) {
    spdlog::warn("report.html not written: {}", e.what());
  }
  if (opt_.log_json) {
    std::cout << json{{"summary", summary.to_json()}}.dump() << std::endl;
  } else if (!opt_.quiet) {
    print_summary(summary, run_dir());
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
