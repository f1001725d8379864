// `pulse bench wan`: geo-distributed RL over emulated slow links (bench/wan_net.h), every mode on every
// link from the same seed, with real `pulse trainer` / `pulse worker` / `pulse run` processes.
//
// sync path: `pulse trainer` on host t, one `pulse worker` per host w<i>, each worker on its own link to t
//   (its own access link; the trainer's side is shaped per link). Modes: pulsesync (patches) and dense
//   (sync.dense: the full anchor every step, the trainer without PULSESync).
// loco path: two trainers (`pulse run` with torchrun's environment, as `pulse launch` starts them, rank 0's
//   TCPStore at MASTER_ADDR on the link, Gloo on the link's device), each with its in-process worker.
//   Modes: ddp, diloco, pulseloco.
// Every run starts on the unshaped link (the workers' bootstrap anchor, the trainers' initial weights)
// and is shaped once the trainer logs its first GRPO line: the steps are measured on the slow link, the
// one-off start-up is not (a real deployment seeds it from a checkpoint mirror). A run that has not
// finished `cap_s` after shaping is stopped and reported incomplete, with what it measured so far and the
// transfer time its bytes imply at the rate. Everything a run made (namespaces, links, processes, its
// folder) is removed when it ends, on errors and on SIGINT/SIGTERM/SIGHUP too.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "bench/wan_report.h"

namespace pulse::bench::wan {

/// A link to run on: "RATE[s]@DELAY", e.g. "0.2s@50" = 0.2 Gbit/s scaled to the model, 50 ms one-way;
/// "2.6@0" = 2.6 Gbit/s at face value, no delay.
struct LinkSpec {
  double real_gbit = 0;
  bool scaled = false;
  double delay_ms = 0;
};
/// Parses "RATE[s]@DELAY"; throws std::invalid_argument naming the text.
LinkSpec parse_link(const std::string& text);

struct WanOptions {
  std::string pulse;                                   ///< the pulse binary the hosts run
  std::string sync_config = "configs/default.toml";    ///< trainer -> workers
  std::string loco_config = "configs/diloco-2x.toml";  ///< trainer <-> trainer
  std::string prefix = "pulsewan";                     ///< namespace/folder name prefix
  std::vector<std::string> sync_modes = {"pulsesync", "dense"};
  std::vector<std::string> loco_modes = {"diloco", "pulseloco"};
  // The target links (about 9 minutes on 2 loaded cores); more with --sync-links / --loco-links.
  std::vector<std::string> sync_links = {"0.2s@50"};
  std::vector<std::string> loco_links = {"2.6s@50"};
  int64_t workers = 2;     ///< sync path: worker hosts
  int64_t sync_steps = 4;  ///< GRPO steps per sync run
  /// rl.max_lag of the sync runs (both modes). 1: the workers sample step s+1 at version s while the
  /// trainer takes step s, and fetch the next patch meanwhile (PULSE's asynchronous setting: a transfer
  /// shorter than a generation is hidden); 0: on-policy, every transfer waits between steps.
  int64_t sync_max_lag = 1;
  int64_t loco_rounds = 1;          ///< outer rounds per loco run
  int64_t inner_steps = 3;          ///< H of the loco runs
  std::string loco_values = "ulp";  ///< multi.values of the pulseloco runs: fp32 | ulp
  int64_t sft_steps = 40;           ///< SFT warm-start steps (same in every run: same weights at step 0)
  double lr = 3e-6;                 ///< GRPO lr, both paths (an RL-scale rate)
  double cap_s = 150;        ///< per run, from shaping to a forced stop (diloco's scaled round: ~100 s)
  double setup_cap_s = 300;  ///< per run, from start to the first GRPO step
  std::vector<std::string> overrides;  ///< more --set for every run
};

/// Runs every mode on every link (sync runs first), printing progress to `log`. Needs root, ip, tc
/// (missing_prerequisites()); sweeps stale sets of `prefix` first. Throws std::runtime_error on a failed
/// run (naming the process, with its stderr tail) or a stop signal, after removing everything.
std::vector<WanRun> run_wan_bench(const WanOptions& options, std::ostream& log, double* model_dense_bytes);

}  // namespace pulse::bench::wan
