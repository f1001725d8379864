#include "bench/sync_bench_cli.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <ostream>
#include <string>

namespace pulse::bench {

void add_sync_bench_options(CLI::App& cmd, SyncBenchCli& cli) {
  SyncBenchOptions& o = cli.options;
  // The text is checked before it is read: an unsigned parse would wrap "-5" to 2^64 - 5.
  cmd.add_option("--elements", o.elements, "BF16 elements of the synthetic workload")
      ->check(CLI::Validator(
          [](std::string& text) {
            return text.find('-') == std::string::npos ? "" : "must be a positive integer";
          },
          "POSITIVE"))
      ->check(CLI::Range(uint64_t{1}, ~uint64_t{0}))
      ->capture_default_str();
  cmd.add_option("--seed", o.seed, "synthetic workload seed")->capture_default_str();
  cmd.add_option("--lr", o.lr, "Adam learning rate of the synthetic workload (3e-6: ~7% changed, 3e-7: ~1%)")
      ->check(CLI::Validator(
          [](std::string& text) {
            double v = 0;
            try {
              v = std::stod(text);
            } catch (const std::exception&) {
              return std::string("must be a number");
            }
            return std::isfinite(v) && v > 0 ? std::string() : std::string("must be a finite number > 0");
          },
          "POSITIVE"))
      ->capture_default_str();
  cmd.add_option("--threads", o.threads, "threads (0 = all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd.add_option("--checkpoints", o.checkpoints,
                 "consecutive checkpoints of a run (the `run` workload), e.g. step1.safetensors step2...");
  cmd.add_option("--isa", o.isa,
                 "force the kernel variant (avx512, avx2, portable; default: the CPU's fastest)")
      ->check(CLI::IsMember({"avx512", "avx2", "portable"}));
  cmd.add_option("--repeat", o.repeat,
                 "codec repetitions per value mode (best kept, each paired with a memcpy)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd.add_flag("--no-patch-from", o.skip_zstd_patch_from, "skip the `zstd --patch-from` baseline");
  cmd.add_flag("--json", cli.json, "print one JSON object instead of a table");
}

int run_sync_bench_cli(const SyncBenchCli& cli, std::ostream& out, std::ostream& log) {
  if (cli.options.checkpoints.size() == 1)
    throw CLI::ValidationError("--checkpoints", "give at least two checkpoints");
  const auto results = run_sync_bench(cli.options, log);
  out << (cli.json ? sync_bench_json(results) + "\n" : sync_bench_table(results));
  for (const auto& r : results)
    if (!r.bit_identical) return 1;
  return 0;
}

}  // namespace pulse::bench
