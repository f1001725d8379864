// `pulse bench generate`: model::generate() tokens/s per decode path (eager, static, cuda_graph) on a
// random-init model of any HF config.json, one side of the side-by-side with Hugging Face transformers'
// generate (bench/hf_generate_peer.py prints the other side; bench/gpu_check.sh runs both).
//
// Every call generates exactly new_tokens tokens per row (no stop ids, no tokenizer), from prompts of
// prompt_tokens random ids, so that tokens/s = batch * new_tokens / wall seconds of the whole call
// (prefill included, the device synchronised before and after).
#pragma once
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/decode_mode.h"
#include "model/generate.h"

namespace pulse::bench {

/// The ranges `pulse bench generate` accepts (one place: the CLI's validators and check() use them).
inline constexpr int64_t kGenerateBenchMaxBatch = 4096;    ///< --batch: 1..this rows
inline constexpr int64_t kGenerateBenchMaxTokens = 32768;  ///< --prompt-tokens, --new-tokens: 1..this
inline constexpr int64_t kGenerateBenchMaxRepeats = 100;   ///< --repeats: 1..this timed calls

/// What to run. Option names in errors are the CLI's (`pulse bench generate --batch ...`).
struct GenerateBenchOptions {
  model::ModelConfig config;              ///< the model's shape; weights are random (HF's init rule)
  std::string config_name;                ///< how results name it (the --model-config path)
  std::vector<int64_t> batches{64, 384};  ///< rows per call; each batch is a separate set of runs
  int64_t prompt_tokens = 64;             ///< ids per prompt (random, < vocab_size), all rows alike
  int64_t new_tokens = 256;               ///< tokens generated per row, exactly
  /// Decode paths in the order given (eager is moved first: the others are compared with it). Empty:
  /// default_decode_modes(device).
  std::vector<model::DecodeMode> modes;
  c10::Device device{c10::DeviceType::CPU};
  c10::ScalarType dtype = c10::ScalarType::Float;  ///< kBFloat16 or kFloat (compute dtype)
  double temperature = 1.0;                        ///< 0 = greedy; top-p 1, top-k off
  uint64_t seed = 0;                               ///< weights, prompts and each row's sampling stream
  int64_t repeats = 1;                             ///< timed calls after one untimed warm-up call

  /// Throws std::invalid_argument naming the option ("--batch 0: must be in 1..4096") for a batch, token
  /// count or repeat count out of range, prompt_tokens + new_tokens above the config's
  /// max_position_embeddings (or its sliding_window), a negative or non-finite temperature, a dtype other
  /// than bfloat16/float32, or an explicitly asked decode path this device cannot run (cuda_graph on a CPU).
  void check() const;
};

/// eager, static, cuda_graph on a CUDA device (cuda_graph only when model::cuda_graphs_available()),
/// eager, static elsewhere.
std::vector<model::DecodeMode> default_decode_modes(const c10::Device& device);

/// "eager,static" -> {Eager, Static} (the names of model::kDecodeModeNames, each at most once). Throws
/// std::invalid_argument "--decode: 'x' is not one of auto, eager, static, cuda_graph".
std::vector<model::DecodeMode> parse_decode_modes(const std::vector<std::string>& names);

/// One (batch, decode path): its timed calls.
struct GenerateBenchRun {
  int64_t batch = 0;
  model::DecodeMode decode = model::DecodeMode::Eager;  ///< the path asked for
  model::GenerateStats stats;  ///< of the median timed call (stats.mode: the path taken)
  std::vector<double> wall_s;  ///< wall seconds of each timed call, device synchronised
  double median_wall_s = 0;    ///< median of wall_s (the upper one of two middles)
  double tokens_per_s = 0;     ///< batch * new_tokens / median_wall_s
  /// Fraction of rows whose tokens equal the eager run's of the same batch and seeds; nullopt when no
  /// eager run of this batch succeeded (1 for eager itself).
  std::optional<double> tokens_equal_to_eager;
  std::string error;  ///< non-empty: the call threw this (the numbers are then 0); later runs still run
};

/// The benchmark's output.
struct GenerateBenchResult {
  GenerateBenchOptions options;        ///< with modes resolved (the default list filled in)
  int64_t parameters = 0;              ///< parameter elements (tied weights once)
  int threads = 0;                     ///< LibTorch intra-op threads
  std::vector<GenerateBenchRun> runs;  ///< per batch (in order), per mode (eager first)
  /// Default decode paths left out on this build/device, with why (e.g. cuda_graph without CUDA graphs).
  std::vector<std::string> notes;
  bool all_ok() const;  ///< no run has an error
};

/// Builds the model (torch::manual_seed(seed), then moved to options.device), then per batch and mode
/// one warm-up and `repeats` timed model::generate() calls. Calls options.check() first. A mode that
/// throws is recorded in its run's `error` and the others go on. Allocates the model and, per call, a
/// KV cache of batch x (prompt_tokens + new_tokens) slots.
GenerateBenchResult run_generate_bench(const GenerateBenchOptions& options);

/// One JSON object: {"bench": "generate", "model_config", "model_type", "parameters", "device", "dtype",
/// "prompt_tokens", "new_tokens", "temperature", "seed", "repeats", "threads", "notes", "runs": [{"batch",
/// "decode", "mode", "tokens_per_s", "wall_s", "wall_s_each", "prefill_ms", "decode_ms", "capture_ms",
/// "graphs", "steps", "new_tokens", "tokens_equal_to_eager" (null when unknown), "error" (null when
/// none)}]} on one line.
std::string generate_bench_json(const GenerateBenchResult& r);

/// A readable table of the same, one line per run.
std::string generate_bench_table(const GenerateBenchResult& r);

}  // namespace pulse::bench
