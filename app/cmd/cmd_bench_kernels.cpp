// `pulse bench kernels [--json]`: bench/kernels/kernels_report.h on this machine.
#include "app/cmd/cmd_bench_kernels.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "bench/kernels/kernels_report.h"

namespace pulse::app {

void register_kernels_bench(CLI::App& bench) {
  auto opts = std::make_shared<bench::KernelsBenchOptions>();
  auto json = std::make_shared<bool>(false);
  auto no_cpu = std::make_shared<bool>(false), no_gpu = std::make_shared<bool>(false);
  auto* cmd = bench.add_subcommand(
      "kernels",
      "hot kernels (diff/emit, apply, PULSELoCo gate, hash) per CPU variant and on the GPU vs a "
      "same-run copy");
  cmd->add_flag("--json", *json, "print one JSON object instead of a table");
  cmd->add_option("--elements", opts->elements, "elements per tensor")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 31))
      ->capture_default_str();
  cmd->add_option("--reps", opts->reps, "repetitions (best reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--gpu-elements", opts->gpu_elements,
                  "elements per tensor of a second GPU pass at real sizes (e.g. 1073741824; 0 = none)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 31))
      ->capture_default_str();
  cmd->add_option("--model", opts->model, "also the end-to-end sync stages on this model's tensor set")
      ->check(CLI::IsMember({"qwen2.5-7b"}));
  cmd->add_option("--model-scale", opts->model_scale, "divide the model's sizes by this (1 = real)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--model-changed", opts->model_changed, "fraction of elements the model step changes")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  cmd->add_flag(
      "--no-model-cpu", [opts](int64_t) { opts->model_cpu = false; },
      "model stages on the GPU only (a real-size CPU run needs ~80 GB)");
  cmd->add_flag("--no-cpu", *no_cpu, "skip the CPU variants");
  cmd->add_flag("--no-gpu", *no_gpu, "skip the CUDA kernels");
  cmd->callback([opts, json, no_cpu, no_gpu] {
    opts->cpu = !*no_cpu;
    opts->gpu = !*no_gpu;
    const auto r = bench::run_kernels_bench(*opts);
    std::cout << (*json ? r.dump() + "\n" : bench::kernels_bench_table(r));
  });
}

}  // namespace pulse::app
