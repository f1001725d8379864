// The trainer's side of a multi-trainer run (multi.mode != single): joining the c10d group of trainers
// (rl/process_group.h), and what the ranks agree on through it before and after the steps: one config,
// one run folder, whether setup succeeded, rank 0's initial weights, each rank's prompt shard, and the
// bytes each rank handed to the collectives (metrics rows and summary.json "multi").
#pragma once
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/run/run_dir.h"
#include "app/trainer/step_record.h"
#include "rl/problem.h"
#include "rl/process_group.h"

namespace pulse::rl {
class MasterAdam;
}

namespace pulse::app {

/// This trainer's device and, with multi.mode != single, its group.
struct GroupMembership {
  c10::Device device{c10::DeviceType::CPU};  ///< run.device resolved for this rank (app/device.h)
  std::unique_ptr<rl::TrainerGroup> group;   ///< null for multi.mode = single
};

/// run.device for this rank (LOCAL_RANK's GPU on cuda); multi.mode != single: joins the group of trainers
/// (c10d TCPStore rendezvous + Gloo, plus NCCL for CUDA gradients in a build with it) configured by
/// torchrun's variables, and checks every rank runs the same config (bar run.dir). Throws ConfigError for
/// multi.mode = single with WORLD_SIZE > 1 or differing configs, rl::GroupError when the group fails.
GroupMembership join_trainer_group(const Config& config);

/// The run folder rank 0 resolved (`base` on rank 0), sent to every rank; `base` itself without a group.
std::string agree_run_dir(rl::TrainerGroup* group, std::string base);

/// Every rank says whether its setup (policy, servers) succeeded, so that when one fails (its port taken,
/// say) the others fail at once too, and a new run's ranks all remove their folders, instead of the others
/// training on into SFT and a checkpoint nobody can resume. A barrier after the removal keeps every rank
/// alive until all have removed theirs (`pulse launch` stops the others once one exits). A failing rank
/// whose peers are gone just goes on failing with its own error. Without a group (null): a failed setup
/// discards the new run's folder. `ok` = false: returns after the discard (the caller rethrows its own
/// error); `ok` = true and another rank failed: throws std::runtime_error naming that rank.
void agree_setup(rl::TrainerGroup* group, bool ok, RunDir& run_dir);

/// Every rank starts from rank 0's FP32 masters (sent as bytes, so that BF16 casts agree bit for bit);
/// the model then holds their BF16 cast. Throws std::runtime_error when rank 0's sizes differ.
void broadcast_initial_weights(rl::TrainerGroup& group, rl::MasterAdam& adam);

/// This rank's prompt shard: problems i with i % world_size == rank (disjoint by rank).
std::vector<rl::Problem> rank_shard(const rl::TrainerGroup& group, std::vector<rl::Problem> problems);

/// Adds to a metrics row the bytes this trainer handed to the collectives since `at_step_start` (DDP: its
/// gradients; a round's end: the pseudo-gradient exchange), as payload and as the wire estimate of
/// rl/process_group.h, with its rank and the world size.
void add_comm_bytes(StepRecord& r, const rl::TrainerGroup& group, const rl::CommCounters& at_step_start);

/// summary.json "multi": bytes this trainer sent over the run (`rows`: metrics.jsonl), rounds, mean fired
/// fraction, against the dense exchanges of the same run. `params`: parameters of the model;
/// `outer_rounds`: multi.mode is diloco or pulseloco.
nlohmann::json multi_summary(const Config& config, const rl::TrainerGroup& group, bool outer_rounds,
                             uint64_t params, const std::vector<nlohmann::json>& rows);

}  // namespace pulse::app
