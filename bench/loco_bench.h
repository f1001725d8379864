// `pulse bench loco`: DDP vs DiLoCo vs PULSELoCo from the same seed, side by side: bytes each trainer sends
// per round and over the same window of steps, fired fraction, reward curves. The runs themselves are
// real multi-trainer runs (`pulse launch`, app/cmd/cmd_bench_loco.cpp); this file reads their run folders and
// builds the comparison.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rl/outer_config.h"

namespace pulse::bench {

/// One mode's numbers, from rank 0's run folder (every rank sends the same kind and about the same bytes).
struct LocoModeResult {
  rl::MultiMode mode = rl::MultiMode::Ddp;
  int64_t steps = 0, rounds = 0, world_size = 0;
  uint64_t payload_bytes = 0;  ///< bytes rank 0 handed to the collectives over the run (the window)
  uint64_t wire_bytes = 0;     ///< its wire estimate (rl/process_group.h)
  double bytes_per_round = 0;  ///< payload_bytes / rounds (rounds of inner_steps steps; ddp too)
  double fired_fraction = 0;   ///< mean over rounds (1 for diloco; NaN for ddp: not applicable, null in JSON)
  std::vector<double> reward;  ///< reward_mean per step
  double reward_last = 0;      ///< summary.json reward_last (mean of the last window)
  double pass_at_1_before = 0, pass_at_1_after = 0;
  double wall_seconds = 0;
};

/// Reads RUN_DIR/rank-0/{summary.json,metrics.jsonl}. Throws std::runtime_error naming the file.
LocoModeResult read_loco_run(const std::string& run_dir, rl::MultiMode mode, int64_t inner_steps);

/// The side-by-side table (ratios diloco/pulseloco and ddp/pulseloco over the same window).
std::string loco_table(const std::vector<LocoModeResult>& modes, int64_t inner_steps, double lr);

/// JSON: ddp_bytes, diloco_bytes, pulseloco_bytes (per trainer, over the same window), fired_fraction,
/// reward_last (an object per mode), rounds, inner_steps, plus per-mode details.
std::string loco_json(const std::vector<LocoModeResult>& modes, int64_t inner_steps, double lr);

}  // namespace pulse::bench
