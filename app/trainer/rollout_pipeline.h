// Where a GRPO step's rollouts come from, with or without the off-policy lag (rl.max_lag):
//   lag 0: the workers sync to version v, then sample step s at v; the trainer waits, then steps.
//   lag 1: while the trainer takes step s on rollouts sampled at version v-1, the workers sample step s+1
//          at version v (syncing to it first). The TIS weight pi_old / pi_sampler corrects the gap.
// The step's prompts are split into run.workers fixed shares in index order (app/wire/control.h gives them to
// the live workers and reassigns a dead worker's); their rollouts are reassembled in that order, so a
// step's batch does not depend on which or how many workers sampled it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/trainer/fleet.h"
#include "app/wire/messages.h"
#include "app/wire/report_check.h"
#include "rl/problem.h"
#include "rl/rollout.h"

namespace pulse::app {

/// One step's rollouts as the workers reported them.
struct StepRollouts {
  int64_t step = -1;
  uint64_t version = 0;               ///< the version the workers sampled with
  std::vector<WorkerReport> reports;  ///< by worker index
  std::vector<rl::Rollout> rollouts;  ///< problem_index into the train set, groups renumbered
  int64_t tokens = 0;                 ///< response tokens
  double generate_ms = 0;             ///< the slowest worker's generation time
  bool identical = true;              ///< every worker held the trainer's weights when it sampled
};

/// What a worker's rollouts must respect (from the model): token ids in [0, vocab_size), prompt +
/// response at most max_tokens.
struct RolloutLimits {
  int64_t vocab_size = 0;
  int64_t max_tokens = 0;
};

/// Not thread-safe; used by the trainer thread only.
class RolloutPipeline {
 public:
  RolloutPipeline(const Config& config, WorkerFleet& fleet, const std::vector<rl::Problem>& train,
                  RolloutLimits limits);

  bool lagged() const { return lagged_; }

  /// (The constructor gives the fleet's control server the limits every report is checked against.)

  /// Lag 1 only, before the first step: the rollouts for `step` come from `pending` (a checkpoint's
  /// pending_json(); must be for `step`) when it is not null, else they are sampled now at `version`
  /// (hash = the trainer's root hash of that version).
  void prime(int64_t step, uint64_t version, const std::string& hash, const nlohmann::json& pending,
             const std::string& pending_source);

  /// The rollouts of step s, the trainer holding version `version` with root hash `hash`. Lag 0: sampled
  /// now. Lag 1: the primed/previous batch; unless `last`, step s+1's generation starts at `version`.
  StepRollouts begin_step(int64_t s, uint64_t version, const std::string& hash, bool last);

  /// After the trainer published `next_version` (root hash `next_hash`): lag 0 or the last step: the
  /// workers sync to it and report; lag 1: waits for step s+1's rollouts (checked against the version
  /// they sampled). Returns the reports (sync stats) and sets *identical.
  std::vector<WorkerReport> end_step(int64_t s, uint64_t next_version, const std::string& next_hash,
                                     bool last, bool* identical);

  /// Lag 1: the rollouts already sampled for the next step, as a checkpoint stores them (null otherwise).
  nlohmann::json pending_json() const;

 private:
  uint64_t post_generate(int64_t s, uint64_t version);
  StepRollouts assemble(int64_t s, uint64_t version, std::vector<WorkerReport> reports) const;
  void check_report(const WorkerReport& report, size_t worker, size_t share, int64_t s) const;
  ReportLimits report_limits() const;

  const Config& config_;
  WorkerFleet& fleet_;
  const std::vector<rl::Problem>& train_;
  const bool lagged_;
  const RolloutLimits limits_;
  StepRollouts pending_;
  bool have_pending_ = false;
  uint64_t next_seq_ = 0;  ///< lag 1: the generate job posted by begin_step
  uint64_t posted_version_ = 0;
  std::string posted_hash_;
};

}  // namespace pulse::app
