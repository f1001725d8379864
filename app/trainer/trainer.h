// The trainer of `pulse run` / `pulse trainer`, read top-down like a training script:
//   setup()   run directory (app/run/run_dir.h) or resume point, problems, tokenizer, model, SFT warm start,
//   Pass@1 before,
//             PULSESync publisher, inference workers (bootstrapped to the trainer's weights);
//   step(s)   rollouts from the workers -> GRPO step on the FP32 masters -> BF16 cast -> PULSESync publish
//             -> workers fetch/apply/confirm -> bit-identity check; returns the step's record;
//   finish()  Pass@1 after, summary.json, report.html.
// Multi-trainer runs (DDP, DiLoCo / PULSELoCo rounds, rl/diloco.h) join a group of trainers
// (app/trainer/trainer_group.h); the rounds are one more call after the same step().
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "app/config.h"
#include "app/job.h"
#include "app/memory_check.h"
#include "app/run/run_dir.h"
#include "app/run/run_files.h"
#include "app/setup.h"
#include "app/trainer/step_record.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "rl/diloco.h"
#include "rl/optimizer.h"
#include "rl/process_group.h"

namespace pulse::app {

class Publisher;
class GpuPatchEncoder;
class WorkerFleet;
class RolloutPipeline;
class ProgressBar;
struct StepRollouts;

/// One trainer process. Not thread-safe; owns the worker threads and servers it starts (stopped by
/// finish() or the destructor on every exit path).
class Trainer {
 public:
  explicit Trainer(JobOptions options);
  ~Trainer();

  /// Everything before the first GRPO step (see the file comment). Throws on bad config, data or
  /// checkpoint, and when the workers cannot be bootstrapped to the trainer's weights.
  void setup();
  /// The first step this process runs (0, or the resume point) and the run's step count.
  int64_t first_step() const { return start_step_; }
  int64_t steps() const { return config_.rl.steps; }
  /// One GRPO step s (rollouts, GRPO, publish, worker sync); returns its record.
  StepRecord step(int64_t s);
  /// multi.mode = diloco | pulseloco: whether an outer round ends after step s.
  bool round_ends_after(int64_t s) const;
  /// The outer round (rl/diloco.h): pseudo-gradient exchange, outer Nesterov step, local := global, then
  /// the workers get the global BF16 weights as one more PULSESync version. Adds its numbers to `r`.
  void outer_round(StepRecord& r);
  /// Appends the metrics row, prints progress, checkpoints when due.
  void record(StepRecord r);
  /// Pass@1 after, summary, report. Returns the process exit code (3 when a worker was not bit-identical).
  int finish();

  const Config& config() const { return config_; }
  const std::string& run_dir() const { return run_dir_.path(); }
  rl::MasterAdam& optimizer() { return *adam_; }
  model::TransformerImpl& policy() { return *policy_; }

 private:
  void open_run_dir();
  /// The config file named in messages: CONFIG, or RUN_DIR/config.toml when resuming.
  std::string config_source() const;
  /// What this process holds besides the model (app/memory_check.h): `pulse run` its worker threads too.
  MemoryRole memory_role() const;
  void build_policy();
  void warm_start();
  void resume(int64_t checkpoint_step);
  void open_servers();
  void start_workers();
  StepRecord train_on(int64_t s, const StepRollouts& cur);
  void start_group();
  void join_group_weights();
  double elapsed() const;
  std::string weights_hash() const;
  rl::EvalReport pass_at_1();

  JobOptions opt_;
  Config config_;
  RunDir run_dir_;  ///< RUN_DIR, locked from open_run_dir() on
  std::chrono::steady_clock::time_point t_start_;
  ProblemSets sets_;
  std::string tok_path_;
  std::unique_ptr<model::Tokenizer> tok_;
  model::ModelConfig mc_;
  c10::Device device_{c10::DeviceType::CPU};  ///< run.device resolved for this rank (app/device.h)
  model::Transformer policy_{nullptr};
  model::Transformer reference_{nullptr};  ///< rl.kl_coef > 0: the frozen policy GRPO started from
  model::PromptTemplate tmpl_;
  std::unique_ptr<rl::MasterAdam> adam_;
  int64_t start_step_ = 0, resume_step_ = -1;
  uint64_t version_ = 0;  ///< weights version held by the trainer (published)
  uint64_t dense_bytes_ = 0;
  int64_t refused_steps_ = 0;  ///< GRPO steps the optimizer refused (non-finite), across resumes
  nlohmann::json run_state_;
  nlohmann::json resume_pending_;  ///< rl.max_lag = 1: rollouts stored with the resumed checkpoint
  double prior_wall_ = 0;
  std::unique_ptr<Publisher> publisher_;
  std::unique_ptr<GpuPatchEncoder> gpu_encoder_;  ///< run.device = cuda in a PULSE_CUDA build; else null
  std::unique_ptr<WorkerFleet> fleet_;
  std::unique_ptr<RolloutPipeline> pipeline_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<ProgressBar> progress_;
  std::unique_ptr<rl::TrainerGroup> group_;    ///< multi.mode != single: the c10d group of trainers
  std::unique_ptr<rl::OuterOptimizer> outer_;  ///< diloco | pulseloco
  rl::CommCounters comm_at_step_start_;        ///< to attribute bytes to each step's row
};

}  // namespace pulse::app
