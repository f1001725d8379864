// `pulse bench model`: speed of the transformer on this machine, each number next to a baseline timed in
// the same run (generation with vs without KV cache; achieved model GFLOP/s vs a large matmul).
#pragma once
#include <cstdint>
#include <string>

#include "model/config.h"

namespace pulse::bench {

struct ModelBenchOptions {
  int64_t gen_batch = 16;          ///< prompts generated together
  int64_t prompt_tokens = 32;      ///< tokens per prompt (random ids, same prompts for both paths)
  int64_t new_tokens = 64;         ///< greedy tokens per prompt
  int64_t train_batch = 8;         ///< sequences per training step
  int64_t train_tokens = 256;      ///< tokens per training sequence
  int64_t train_steps = 3;         ///< timed forward+backward steps per dtype (after one warm-up)
  int64_t matmul_n = 1024;         ///< n of the n x n x n reference matmul
  std::string gen_dtype = "bf16";  ///< "bf16" or "fp32" for the generation part
};

struct ModelBenchResult {
  model::ModelConfig config;
  int64_t n_params = 0;
  std::string gen_dtype;
  double gen_cached_tokens_per_s = 0;     ///< generate(): prefill + KV-cache decode
  double gen_recompute_tokens_per_s = 0;  ///< full forward over the whole sequence per new token
  double gen_speedup = 0;                 ///< cached / recompute
  bool gen_outputs_match = false;         ///< both paths produced the same greedy tokens
  double train_fp32_tokens_per_s = 0, train_bf16_tokens_per_s = 0;  ///< forward+backward
  double train_fp32_gflops = 0, train_bf16_gflops = 0;    ///< achieved model FLOP/s (6N + attention)
  double matmul_fp32_gflops = 0, matmul_bf16_gflops = 0;  ///< n^3 matmul, same run
  int threads = 0;                                        ///< LibTorch intra-op threads
};

/// Runs the benchmark on the embedded default model (configs/tiny-llama.json) on the CPU.
ModelBenchResult run_model_bench(const ModelBenchOptions& options);

/// One JSON object (keys as the struct fields).
std::string to_json(const ModelBenchResult& r);
/// Human-readable table.
std::string to_text(const ModelBenchResult& r);

}  // namespace pulse::bench
