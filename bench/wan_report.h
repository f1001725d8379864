// `pulse bench wan`: what one run measured, read from its files, and the JSON / table / HTML report.
//
// Definitions (per GRPO step, means over the measured steps; times in ms):
//   sync path (trainer -> inference workers):
//     worker_wait   a worker's whole sync at a step (fetch + validate + apply its weights), mean over
//                   workers: time it cannot generate because its next weights are not there yet;
//     trainer_wait  step - train - encode - generate: the part of a step the trainer spends neither on its
//                   own work nor on rollouts being sampled, i.e. waiting for its weights to reach the
//                   workers;
//     transfer      a worker's fetch of the step's bytes (mean over workers);
//     bytes/step    bytes a worker fetched per step (patch, or the full anchor for the dense baseline);
//     busy          1 - wait / step, for the trainer and for the workers.
//   loco path (trainer <-> trainer): comm per round = the outer round's exchange (outer_step_ms) for
//     diloco/pulseloco; ddp's all-reduce is inside every step and is not timed apart (null).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pulse::bench::wan {

/// The 7B reference of the scaled links: BF16 dense bytes of a 7B-parameter model.
constexpr double kDense7bBytes = 14e9;

/// A link: its stated real rate, the rate on the emulated link, and its one-way delay.
struct LinkCase {
  double real_gbit = 0;       ///< the rate it stands for
  bool scaled = false;        ///< emulated at real_gbit * model dense bytes / 7B dense bytes
  double link_gbit = 0;       ///< the rate emulated
  double delay_ms = 0;        ///< one-way
  std::string label() const;  ///< "0.2 Gbit/s scaled (86.2 kbit/s), 50 ms"
};

/// The scaled rate: real_gbit * model_dense_bytes / kDense7bBytes (Gbit/s).
double scaled_gbit(double real_gbit, double model_dense_bytes);
/// The formula, as printed with every report.
std::string scaling_formula(double model_dense_bytes);

/// One mode on one link.
struct WanRun {
  std::string path;  ///< "sync" | "loco"
  std::string mode;  ///< pulsesync | dense | ddp | diloco | pulseloco
  LinkCase link;
  bool complete = false;  ///< finished every step within the cap
  int64_t steps = 0;      ///< steps measured
  std::optional<double> step_ms, trainer_wait_ms, worker_wait_ms, transfer_ms, bytes_per_step;
  std::optional<double> busy_trainer, busy_workers;
  std::optional<double> transfer_ms_expected;  ///< bytes / rate of the dense weights or patch (no overhead)
  int64_t rounds = 0;                          ///< loco: outer rounds measured
  std::optional<double> comm_ms_per_round, bytes_per_round;
  bool bit_identical = false;  ///< every worker's root hash matched the trainer's at every step
  double wall_s = 0;           ///< from the link's shaping to the end
  int64_t max_lag = 0;         ///< sync: the runs' rl.max_lag
  std::string values;          ///< pulseloco: multi.values (fp32 | ulp); "" for the other modes
  std::string note;            ///< why a number is missing or a bound
};

/// Sync-path numbers from the trainer's metrics.jsonl rows and the workers' --log-json "applied" events
/// (version 0, the bootstrap over the unshaped link, is left out). Skips the first step when 3 or more
/// were measured (start-up effects).
void fill_sync_run(WanRun& run, const std::vector<nlohmann::json>& trainer_rows,
                   const std::vector<std::vector<nlohmann::json>>& worker_events);

/// Loco-path numbers from rank 0's metrics.jsonl rows; inner_steps = H.
void fill_loco_run(WanRun& run, const std::vector<nlohmann::json>& rank0_rows, int64_t inner_steps);

/// The JSON object: {"formula", "model_dense_bytes", "runs": [{path, mode, link_gbit, real_gbit, scaled,
/// delay_ms, step_ms, busy_trainer, busy_workers, transfer_ms, bytes_per_step, bit_identical, ...}]}; a
/// number not measured is null.
nlohmann::json wan_json(const std::vector<WanRun>& runs, double model_dense_bytes);

/// The text table (one line per run) with the formula under it.
std::string wan_table(const std::vector<WanRun>& runs, double model_dense_bytes);

/// report.html in the style of a run's report.html: busy-fraction and comm-time bar plots (gnuplot svg,
/// inline) and the table. Written atomically to `path`; throws std::runtime_error when gnuplot fails.
void write_wan_html(const std::string& path, const std::vector<WanRun>& runs, double model_dense_bytes);

/// Reads a JSON-lines file; lines that are not JSON objects (log text) are skipped.
std::vector<nlohmann::json> read_json_lines(const std::string& path);

}  // namespace pulse::bench::wan
