// `pulse bench model [--json]`: transformer speed on this machine (bench/model_bench.h).
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "app/cmd/commands.h"
#include "bench/model_bench.h"

namespace pulse::app {

void register_model_bench(CLI::App& bench) {
  auto opts = std::make_shared<bench::ModelBenchOptions>();
  auto json = std::make_shared<bool>(false);
  auto* cmd = bench.add_subcommand(
      "model", "generation tokens/s with vs without KV cache, training tokens/s and GFLOP/s vs a matmul");
  cmd->add_flag("--json", *json, "print one JSON object instead of a table");
  cmd->add_option("--batch", opts->gen_batch, "prompts generated together")->capture_default_str();
  cmd->add_option("--new-tokens", opts->new_tokens, "greedy tokens per prompt")->capture_default_str();
  cmd->add_option("--dtype", opts->gen_dtype, "generation dtype")
      ->check(CLI::IsMember({"bf16", "fp32"}))
      ->capture_default_str();
  cmd->callback([opts, json] {
    const auto r = bench::run_model_bench(*opts);
    std::cout << (*json ? bench::to_json(r) + "\n" : bench::to_text(r));
  });
}

}  // namespace pulse::app
