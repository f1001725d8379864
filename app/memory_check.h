// Sizes refused before memory is spent: what a run will need, estimated from its model config and
// settings alone, against what the machine offers (and run.max_memory_gb). Called by `pulse config
// --check`, and by `pulse run|trainer|eval` before the run folder is made and again before the model is
// built (with the tokenizer's exact vocabulary).
#pragma once
#include <optional>
#include <string>

#include "app/config.h"
#include "model/config.h"

namespace pulse::app {

/// Which process the estimate is for: what it holds besides the model.
struct MemoryRole {
  bool trains = true;              ///< gradients, FP32 masters + Adam moments, SFT/GRPO activations
  int64_t in_process_workers = 0;  ///< `pulse run`: run.workers model replicas + KV caches in this process
};

/// Estimated bytes of a run's largest simultaneous use, by part. Errs on the low side, so that a refusal
/// is justified: prompts are taken as empty (responses at full rl.max_new_tokens), the PULSESync version
/// store, SFT, allocator overhead, LibTorch's own buffers and the data are left out. For Qwen2.5-Math-1.5B
/// under configs/qwen2.5-math-grpo.toml it gives 56.9 GB, near the README's ~60 GB by hand. Units: bytes
/// (doubles: absurd shapes overflow int64).
struct MemoryEstimate {
  double parameters = 0;   ///< model::parameter_count
  double weights = 0;      ///< policy in the compute dtype (model.dtype)
  double gradients = 0;    ///< one gradient per parameter, compute dtype
  double optimizer = 0;    ///< FP32 masters + Adam first and second moments: 12 bytes per parameter
  double reference = 0;    ///< frozen KL reference model (rl.kl_coef > 0)
  double activations = 0;  ///< GRPO micro-batch saved for backward + its FP32 logits and log-probs; for
                           ///< an eval-only role the KV cache and logits of one eval.batch_size batch
  double workers = 0;      ///< in-process workers: replica weights, BF16 sync copy, KV caches, logits
  double on_device = 0;  ///< the part on run.device (all of it on the CPU; the sync copies stay on the host)
  double total() const { return weights + gradients + optimizer + reference + activations + workers; }
  /// "weights 1.2 GB + gradients 1.2 GB + ...", the non-zero parts.
  std::string breakdown() const;
};

/// The estimate for `mc` under `config` (model.dtype, rl.micro_batch, rl.max_new_tokens,
/// rl.prompts_per_step, rl.group_size, run.workers, rl.kl_coef, eval.batch_size). Thread-safe.
MemoryEstimate estimate_memory(const Config& config, const model::ModelConfig& mc, const MemoryRole& role);

/// Bytes a process can still get, and where the number comes from.
struct MemoryBudget {
  double bytes = 0;
  std::string source;  ///< "MemAvailable in /proc/meminfo", "cgroup memory.max - memory.current", ...
};

/// min(MemAvailable, the cgroup v2 or v1 limit minus current usage); nullopt when neither can be read.
std::optional<MemoryBudget> host_memory_available();

/// Total memory of CUDA device `ordinal` through the driver (libcuda.so.1, loaded at run time so that a
/// CPU build links nothing); nullopt without a driver or device.
std::optional<MemoryBudget> cuda_memory_total(int ordinal);

/// Throws ConfigError "SOURCE: MODEL (num_hidden_layers = .., hidden_size = .., ..: N parameters) needs
/// about X GB (breakdown) but ... has Y GB (where from)" when the estimate exceeds the host's available
/// memory, run.max_memory_gb (when > 0), or with run.device = cuda the GPU's memory. `model_source` names
/// the model file and key, e.g. "model.config 'big.json'". Reads /proc and /sys only; allocates nothing
/// of the model's size.
void check_memory(const Config& config, const model::ModelConfig& mc, const MemoryRole& role,
                  const std::string& source, const std::string& model_source);

/// The model config a run will build, read and checked (values, types) without the tokenizer: model.path's
/// config.json, model.config, or the embedded tiny Llama; a fresh model's vocab_size is then
/// tokenizer.vocab_size when the run trains its tokenizer (the tokenizer's own size is applied later).
/// Sets *model_source to "model.path 'DIR' (config.json)" / "model.config 'FILE'" / "the embedded tiny
/// Llama". Throws ConfigError naming `source`, the key and the file (a missing one included).
model::ModelConfig read_model_config(const Config& config, const std::string& source,
                                     std::string* model_source);

/// How messages name the model a run builds: "model.path 'DIR/config.json'", "model.config 'FILE'" or "the
/// embedded tiny Llama (model.config = \"\")".
std::string model_source_name(const Config& config);

/// read_model_config + check_memory: what `pulse config --check` and the start of a run do before
/// anything is allocated or any folder made.
void check_model_inputs(const Config& config, const std::string& source, const MemoryRole& role);

}  // namespace pulse::app
