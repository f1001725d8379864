// `pulse bench generate`: model::generate() tokens/s per decode path on a random-init model of an HF
// config.json (bench/generate_bench.h), the pulse side of the comparison with bench/hf_generate_peer.py.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/cli_checks.h"
#include "app/cmd/commands.h"
#include "app/config.h"
#include "app/config_error.h"
#include "app/device.h"
#include "app/memory_check.h"
#include "bench/generate_bench.h"
#include "model/config.h"

namespace pulse::app {
namespace {

/// Command-line settings of `pulse bench generate`; empty strings take the device's default.
struct GenerateBenchCli {
  std::string model_config = "configs/qwen2.5-0.5b.json";
  std::vector<int64_t> batches{64, 384};
  int64_t prompt_tokens = 64;
  int64_t new_tokens = 256;
  std::vector<std::string> decode;  ///< empty: bench::default_decode_modes(device)
  std::string device = "auto";
  std::string dtype;  ///< empty: bfloat16 on CUDA, float32 on the CPU
  double temperature = 1.0;
  uint64_t seed = 0;
  int64_t repeats = 1;
  bool json = false;
};

/// The device of --device, refused naming the option (resolve_device's own message names run.device).
c10::Device bench_device(const std::string& setting) {
  if (setting == "cuda") {
    const std::string why = cuda_unavailable_reason();
    if (!why.empty()) throw CLI::ValidationError("--device", "cuda cannot be used: " + why);
  }
  return resolve_device(setting, local_rank_from_env());
}

/// Refuses a model, batch and length that would not fit the host (or the GPU) before anything of that
/// size is allocated: app/memory_check.h's estimate of an evaluation-only process (weights, KV cache and
/// logits of the largest batch over prompt + new tokens, rounded up to whole attention spans for the
/// fixed-shape paths; a CUDA graph's pool adds one step's temporaries, which the estimate leaves out).
void check_bench_memory(const bench::GenerateBenchOptions& o) {
  Config sizing;
  sizing.model.dtype = o.dtype == c10::ScalarType::BFloat16 ? "bfloat16" : "float32";
  sizing.run.device = o.device.is_cuda() ? "cuda" : "cpu";
  sizing.eval.pass_at_1.batch_size = *std::max_element(o.batches.begin(), o.batches.end());
  // The fixed-shape paths round their cache up to whole attention spans (model/static_decode.h).
  int64_t slots = o.prompt_tokens + o.new_tokens;
  const bool fixed_shape = std::any_of(o.modes.begin(), o.modes.end(), [](model::DecodeMode m) {
    return m == model::DecodeMode::Static || m == model::DecodeMode::CudaGraph;
  });
  if (fixed_shape || o.modes.empty()) slots = model::static_cache_slots(slots);
  sizing.eval.pass_at_1.sampling.max_new_tokens = slots;
  try {
    check_memory(sizing, o.config, MemoryRole{/*trains=*/false, /*in_process_workers=*/0},
                 "pulse bench generate", "--model-config '" + o.config_name + "'");
  } catch (const ConfigError& e) {
    // Its advice names a run's keys; this command's are its options.
    std::string what = e.what();
    what = what.substr(0, what.find("; use a smaller model"));
    throw ConfigError(what + "; use a smaller model or a smaller --batch, --prompt-tokens or --new-tokens");
  }
}

void run_generate_bench_cli(const GenerateBenchCli& c) {
  bench::GenerateBenchOptions o;
  o.device = bench_device(c.device);
  o.config_name = c.model_config;
  try {
    o.config = model::ModelConfig::from_hf_json(c.model_config);
  } catch (const std::exception& e) {
    throw ConfigError(std::string("--model-config: ") + e.what());
  }
  o.batches = c.batches;
  o.prompt_tokens = c.prompt_tokens;
  o.new_tokens = c.new_tokens;
  const std::string dtype = !c.dtype.empty() ? c.dtype : o.device.is_cuda() ? "bfloat16" : "float32";
  o.dtype = dtype == "bfloat16" ? c10::ScalarType::BFloat16 : c10::ScalarType::Float;
  o.temperature = c.temperature;
  o.seed = c.seed;
  o.repeats = c.repeats;
  try {
    o.modes = bench::parse_decode_modes(c.decode);
    o.check();
  } catch (const std::invalid_argument& e) {
    throw CLI::ValidationError("bench generate", e.what());
  }
  check_bench_memory(o);
  const auto r = bench::run_generate_bench(o);
  std::cout << (c.json ? bench::generate_bench_json(r) + "\n" : bench::generate_bench_table(r)) << std::flush;
  if (!r.all_ok()) {
    std::cerr << "pulse: error: bench generate: some runs failed (their \"error\" says why)\n";
    throw Exit{1};
  }
}

}  // namespace

void register_generate_bench(CLI::App& bench) {
  auto c = std::make_shared<GenerateBenchCli>();
  auto* cmd = bench.add_subcommand(
      "generate",
      "generation tokens/s per decode path (eager, static, cuda_graph) on a random-init model of an HF "
      "config.json; compare with bench/hf_generate_peer.py");
  cmd->add_option("--model-config", c->model_config, "HF config.json of the model (weights are random)")
      ->check(CLI::ExistingFile)
      ->capture_default_str();
  cmd->add_option("--batch", c->batches, "rows per generate() call; a list runs each: 64,384")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, bench::kGenerateBenchMaxBatch))
      ->capture_default_str();
  cmd->add_option("--prompt-tokens", c->prompt_tokens, "random prompt ids per row")
      ->check(CLI::Range(int64_t{1}, bench::kGenerateBenchMaxTokens))
      ->capture_default_str();
  cmd->add_option("--new-tokens", c->new_tokens, "tokens generated per row (exactly: no stop ids)")
      ->check(CLI::Range(int64_t{1}, bench::kGenerateBenchMaxTokens))
      ->capture_default_str();
  cmd->add_option("--decode", c->decode,
                  "decode paths, comma-separated, of auto|eager|static|cuda_graph (default: "
                  "eager,static,cuda_graph on CUDA, eager,static on the CPU)")
      ->delimiter(',')
      ->check(CLI::IsMember(
          std::vector<std::string>(model::kDecodeModeNames.begin(), model::kDecodeModeNames.end())));
  cmd->add_option("--device", c->device, "cpu, cuda or auto (cuda when one is usable)")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kDeviceSettings), std::end(kDeviceSettings))))
      ->capture_default_str();
  cmd->add_option("--dtype", c->dtype, "compute dtype (default: bfloat16 on CUDA, float32 on the CPU)")
      ->check(CLI::IsMember({"bfloat16", "float32"}));
  cmd->add_option("--temperature", c->temperature, "sampling temperature (0 = greedy; top-p 1, top-k off)")
      ->capture_default_str();  // range: GenerateBenchOptions::check()
  cmd->add_option("--seed", c->seed, "seed of the weights, the prompts and the sampling")
      ->check(non_negative_integer())
      ->capture_default_str();
  cmd->add_option("--repeats", c->repeats, "timed calls per run after one warm-up (the median is reported)")
      ->check(CLI::Range(int64_t{1}, bench::kGenerateBenchMaxRepeats))
      ->capture_default_str();
  cmd->add_flag("--json", c->json, "print one JSON object instead of a table");
  cmd->callback([c] { run_generate_bench_cli(*c); });
}

}  // namespace pulse::app
