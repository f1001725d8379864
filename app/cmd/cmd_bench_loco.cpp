// `pulse bench loco [--json]`: runs ddp, diloco, pulseloco (FP32 values) and pulseloco-ulp (BF16 step
// counts) with `pulse launch` from the same seed and compares them (bench/loco_bench.h).
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <memory>

#include "app/cmd/commands.h"
#include "app/cmd/launch.h"
#include "bench/loco_bench.h"

namespace fs = std::filesystem;

namespace pulse::app {

namespace {

struct LocoBenchOptions {
  std::string config = "configs/diloco-2x.toml";
  int nproc = 2;
  int64_t steps = 20;
  int64_t inner_steps = 10;
  double lr = 3e-6;
  std::string dir;  ///< "" = a fresh folder under runs/
  /// multi.mode values, plus pulseloco-ulp (pulseloco with multi.values = ulp; pulseloco runs fp32)
  std::vector<std::string> modes = {"ddp", "diloco", "pulseloco", bench::kLocoUlpMode};
  std::vector<std::string> overrides;
  bool json = false;
};

int run_loco_bench(const LocoBenchOptions& o) {
  const std::string root = o.dir.empty() ? "runs/bench-loco-" + std::to_string(::time(nullptr)) : o.dir;
  fs::create_directories(root);
  std::vector<bench::LocoModeResult> results;
  for (const auto& mode : o.modes) {
    const std::string run_dir = root + "/" + mode;
    LaunchOptions lo;
    lo.nproc = o.nproc;
    lo.args = {"run", o.config, "--quiet"};
    for (const auto& s : bench::loco_mode_settings(mode)) {
      lo.args.push_back("--set");
      lo.args.push_back(s);
    }
    lo.args.insert(lo.args.end(), {"--set", "rl.steps=" + std::to_string(o.steps), "--set",
                                   "multi.inner_steps=" + std::to_string(o.inner_steps), "--set",
                                   "run.checkpoint_every=" + std::to_string(o.inner_steps), "--set",
                                   "optimizer.lr=" + std::to_string(o.lr), "--set", "run.dir=" + run_dir});
    for (const auto& s : o.overrides) {
      lo.args.push_back("--set");
      lo.args.push_back(s);
    }
    std::cerr << "pulse bench loco: " << mode << " -> " << run_dir << std::endl;
    const int rc = launch(lo);
    if (rc != 0)
      throw std::runtime_error("bench loco: the " + mode + " run failed (exit " + std::to_string(rc) + ")");
    results.push_back(bench::read_loco_run(run_dir, mode, o.inner_steps));
  }
  std::cout << (o.json ? bench::loco_json(results, o.inner_steps, o.lr) + "\n"
                       : bench::loco_table(results, o.inner_steps, o.lr));
  return 0;
}

}  // namespace

void register_loco_bench(CLI::App& bench) {
  auto o = std::make_shared<LocoBenchOptions>();
  auto* cmd = bench.add_subcommand(
      "loco",
      "ddp vs diloco vs pulseloco (fp32 values) vs pulseloco-ulp (BF16 step counts) from the same seed: "
      "bytes per trainer per round and over the same window of steps, fired fraction, bytes per fired "
      "entry, reward curves (real `pulse launch` runs)");
  cmd->add_flag("--json", o->json, "print one JSON object instead of a table");
  cmd->add_option("--config", o->config, "multi-trainer config")->capture_default_str();
  cmd->add_option("--nproc", o->nproc, "trainers")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--steps", o->steps, "GRPO steps per trainer (a multiple of --inner-steps)")
      ->capture_default_str();
  cmd->add_option("--inner-steps", o->inner_steps, "H")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--lr", o->lr, "GRPO learning rate (RL scale)")->capture_default_str();
  cmd->add_option("--dir", o->dir, "folder for the runs (default runs/bench-loco-<time>)");
  cmd->add_option("--modes", o->modes, "modes to run")->capture_default_str();
  cmd->add_option("--set", o->overrides, "more config overrides (section.key=value)");
  cmd->callback([o] {
    if (o->steps % o->inner_steps != 0)
      throw CLI::ValidationError("--steps", "must be a multiple of --inner-steps");
    int rc = run_loco_bench(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace pulse::app
