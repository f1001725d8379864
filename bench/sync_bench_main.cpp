// sync_bench: the PULSESync benchmark as its own executable (the same as `pulse sync bench`), built
// without LibTorch from sync/, kernels/ and bench/sync_bench*.cpp.
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "bench/sync_bench_cli.h"

int main(int argc, char** argv) {
  // As in app/main.cpp: keep freed memory in the heap so that repeated patches do not page-fault again.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  CLI::App app(
      "sync_bench: PULSESync patch size and speed vs the entropy bound, the reference format, zstd "
      "and memcpy");
  pulse::bench::SyncBenchCli cli;
  pulse::bench::add_sync_bench_options(app, cli);
  CLI11_PARSE(app, argc, argv);
  try {
    return pulse::bench::run_sync_bench_cli(cli, std::cout, std::cerr);
  } catch (const CLI::Error& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "sync_bench: " << e.what() << "\n";
    return 2;
  }
}
