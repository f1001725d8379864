// `pulse bench wan [--quick] [--json] [--out DIR]`: geo-distributed RL over emulated slow links
// (bench/wan_bench.h): PULSESync patches vs a dense baseline trainer -> workers, and ddp / diloco /
// pulseloco trainer <-> trainer, each on the same links from the same seed. Root, ip and tc required.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <memory>

#include "app/cmd/commands.h"
#include "bench/wan_bench.h"
#include "sync/io/atomic_file.h"
#include "sync/loco_values.h"

namespace fs = std::filesystem;

namespace pulse::app {

namespace {

struct WanCliOptions {
  bench::wan::WanOptions bench;
  bool quick = false;
  bool json = false;
  std::string out;  ///< "" = runs/bench-wan-<time>
};

/// --quick: the CI form, about two minutes on 2 cores: both sync modes and both exchanges on one
/// face-value link with the 50 ms delay, short runs.
void apply_quick(bench::wan::WanOptions& o) {
  o.sync_links = {"0.2@50"};
  o.loco_links = {"2.6@50"};
  o.loco_modes = {"diloco", "pulseloco"};
  o.workers = 2;
  o.sync_steps = 2;
  o.loco_rounds = 1;
  o.inner_steps = 2;
  o.sft_steps = 10;
  o.cap_s = 60;
}

int run_wan(WanCliOptions& c) {
  if (c.quick) apply_quick(c.bench);
  if (c.bench.pulse.empty()) c.bench.pulse = fs::read_symlink("/proc/self/exe").string();
  double model_bytes = 0;
  const auto runs = bench::wan::run_wan_bench(c.bench, std::cerr, &model_bytes);
  const std::string out = c.out.empty() ? "runs/bench-wan-" + std::to_string(::time(nullptr)) : c.out;
  fs::create_directories(out);
  const auto j = bench::wan::wan_json(runs, model_bytes);
  sync::write_file_atomic(out + "/wan.json", j.dump(2) + "\n");
  // The numbers first: a report that cannot be drawn loses nothing.
  std::cout << (c.json ? j.dump() + "\n" : bench::wan::wan_table(runs, model_bytes)) << std::flush;
  bench::wan::write_wan_html(out + "/report.html", runs, model_bytes);
  std::cerr << "pulse bench wan: " << out << "/wan.json and " << out << "/report.html" << std::endl;
  return 0;
}

}  // namespace

void register_wan_bench(CLI::App& bench) {
  auto c = std::make_shared<WanCliOptions>();
  auto& o = c->bench;
  auto* cmd = bench.add_subcommand(
      "wan",
      "geo-distributed RL over emulated slow links (root: network namespaces, tc): PULSESync vs dense "
      "trainer -> workers, ddp/diloco/pulseloco trainer <-> trainer; busy fractions, transfer and comm "
      "times");
  cmd->add_flag("--quick", c->quick, "the short CI form (one face-value link with 50 ms delay, short runs)");
  cmd->add_flag("--json", c->json, "print the JSON object instead of the table");
  cmd->add_option("--out", c->out, "folder for wan.json and report.html (default runs/bench-wan-<time>)");
  cmd->add_option("--sync-links", o.sync_links,
                  "links of the sync path: RATE[s]@DELAY (Gbit/s; s = scaled "
                  "to the model; one-way ms)")
      ->capture_default_str();
  cmd->add_option("--loco-links", o.loco_links, "links of the loco path: RATE[s]@DELAY")
      ->capture_default_str();
  cmd->add_option("--sync-modes", o.sync_modes, "pulsesync, dense (none: skip the path)")
      ->capture_default_str();
  cmd->add_option("--loco-modes", o.loco_modes, "ddp, diloco, pulseloco")->capture_default_str();
  cmd->add_option("--workers", o.workers, "worker hosts of the sync path")
      ->capture_default_str()
      ->check(CLI::Range(1, 8));
  cmd->add_option("--sync-steps", o.sync_steps, "GRPO steps per sync run")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--sync-lag", o.sync_max_lag,
                  "rl.max_lag of the sync runs (1: workers prefetch the next patch while they generate; 0: "
                  "on-policy)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);  // the upper bound is rl.max_lag's rule, checked by the trainer
  cmd->add_option("--loco-values", o.loco_values, "multi.values of the pulseloco runs: fp32 | ulp")
      ->capture_default_str()
      ->check(CLI::IsMember(
          std::vector<std::string>(sync::kLocoValuesNames.begin(), sync::kLocoValuesNames.end())));
  cmd->add_option("--loco-rounds", o.loco_rounds, "outer rounds per loco run")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  cmd->add_option("--inner-steps", o.inner_steps, "H of the loco runs")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  cmd->add_option("--sft-steps", o.sft_steps, "SFT warm-start steps of every run")->capture_default_str();
  cmd->add_option("--lr", o.lr, "GRPO learning rate (RL scale)")->capture_default_str();
  cmd->add_option("--cap", o.cap_s,
                  "seconds a run may take on the shaped link before it is stopped and "
                  "reported incomplete")
      ->capture_default_str();
  cmd->add_option("--sync-config", o.sync_config, "config of the sync path")->capture_default_str();
  cmd->add_option("--loco-config", o.loco_config, "config of the loco path")->capture_default_str();
  cmd->add_option("--prefix", o.prefix, "name prefix of its namespaces and folders")->capture_default_str();
  cmd->add_option("--pulse", o.pulse, "pulse binary the hosts run (default: this one)");
  cmd->add_option("--set", o.overrides, "more config overrides for every run (section.key=value)");
  cmd->callback([c] {
    if (c->bench.sync_modes.size() == 1 && c->bench.sync_modes[0] == "none") c->bench.sync_modes.clear();
    if (c->bench.loco_modes.size() == 1 && c->bench.loco_modes[0] == "none") c->bench.loco_modes.clear();
    throw Exit{run_wan(*c)};
  });
}

}  // namespace pulse::app
