// `pulse bench loco`: DDP vs DiLoCo vs PULSELoCo from the same seed, side by side: bytes each trainer sends
// per round and over the same window of steps, fired fraction, reward curves. The runs themselves are
// real multi-trainer runs (`pulse launch`, app/cmd/cmd_bench_loco.cpp); this file reads their run folders and
// builds the comparison.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pulse::bench {

/// The bench's mode names: multi.mode values, plus "pulseloco-ulp" = pulseloco with multi.values = ulp
/// ("pulseloco" itself runs multi.values = fp32).
constexpr const char* kLocoUlpMode = "pulseloco-ulp";

/// The config overrides ("section.key=value") that select bench mode `mode`.
std::vector<std::string> loco_mode_settings(const std::string& mode);

/// One mode's numbers, from rank 0's run folder (every rank sends the same kind and about the same bytes).
struct LocoModeResult {
  std::string mode;
  int64_t steps = 0, rounds = 0, world_size = 0;
  uint64_t payload_bytes = 0;  ///< bytes rank 0 handed to the collectives over the run (the window)
  uint64_t wire_bytes = 0;     ///< its wire estimate (rl/process_group.h)
  double bytes_per_round = 0;  ///< payload_bytes / rounds (rounds of inner_steps steps; ddp too)
  double fired_fraction = 0;   ///< mean over rounds (1 for diloco; NaN for ddp: not applicable, null in JSON)
  uint64_t fired_total = 0;    ///< entries rank 0 sent over the run (sum of the rounds' "fired"; 0 for ddp)
  double bytes_per_fired = 0;  ///< payload_bytes / fired_total (NaN without rounds: ddp)
  std::vector<double> reward;  ///< reward_mean per step
  double reward_last = 0;      ///< summary.json reward_last (mean of the last window)
  double pass_at_1_before = 0, pass_at_1_after = 0;
  double wall_seconds = 0;
};

/// Reads RUN_DIR/rank-0/{summary.json,metrics.jsonl}. Throws std::runtime_error naming the file.
LocoModeResult read_loco_run(const std::string& run_dir, const std::string& mode, int64_t inner_steps);

/// The side-by-side table (ratios diloco/X and ddp/X over the same window for X = pulseloco and
/// pulseloco-ulp, when they ran).
std::string loco_table(const std::vector<LocoModeResult>& modes, int64_t inner_steps, double lr);

/// JSON: <mode>_bytes (per trainer, over the same window), fired_fraction, bytes_per_fired, reward_last
/// (an object per mode), rounds, inner_steps, diloco_over_<X> / ddp_over_<X> for X = pulseloco,
/// pulseloco-ulp, plus per-mode details.
std::string loco_json(const std::vector<LocoModeResult>& modes, int64_t inner_steps, double lr);

}  // namespace pulse::bench
