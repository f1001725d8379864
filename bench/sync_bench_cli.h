// The command line of the PULSESync benchmark, shared by `pulse sync bench` and the standalone
// `sync_bench` executable (bench/sync_bench_main.cpp, no LibTorch).
#pragma once
#include <iosfwd>

#include "bench/sync_bench.h"

namespace CLI {
class App;
}

namespace pulse::bench {

/// Parsed options of the benchmark's command line.
struct SyncBenchCli {
  SyncBenchOptions options;
  bool json = false;
};

/// Registers --elements, --seed, --lr, --threads, --checkpoints, --isa, --no-patch-from and --json on `cmd`.
void add_sync_bench_options(CLI::App& cmd, SyncBenchCli& cli);

/// Runs the benchmark: progress to `log`, the table (or with --json one JSON object) to `out`. Returns
/// the exit status: 0, or 1 when a patch did not round-trip bit-identically. Throws CLI::ValidationError
/// for a single --checkpoints path, std::invalid_argument for sizes that cannot run.
int run_sync_bench_cli(const SyncBenchCli& cli, std::ostream& out, std::ostream& log);

}  // namespace pulse::bench
