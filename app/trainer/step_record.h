// What one GRPO step did: the metrics.jsonl row and the progress line are both built from this record.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace pulse::app {

struct StepRecord {
  int64_t step = 0;              ///< 0-based GRPO step
  uint64_t version = 0;          ///< weights version published after it
  uint64_t rollout_version = 0;  ///< oldest version its rollouts were sampled with
  int64_t lag = 0;               ///< step - rollout_version (off-policy lag)
  // GRPO (rl::GrpoStepStats)
  double reward_mean = 0, reward_std = 0, loss = 0, clip_fraction = 0, kl = 0, grad_norm = 0, lr = 0;
  double entropy = 0, tis_mismatch = 0, tis_clipped_fraction = 0;
  int64_t response_tokens = 0, truncated = 0, zero_variance_groups = 0;
  double tokens_per_s = 0;  ///< generation throughput of the slowest worker
  uint64_t changed = 0;     ///< BF16 elements the optimizer step changed
  double changed_fraction = 0;
  /// The optimizer refused the step rather than write NaN/Inf into a master (rl::OptimizerStepStats
  /// skipped): the weights stayed as they were, so the step's patch is empty.
  bool refused_nonfinite = false;
  std::string refused_reason = "none";  ///< rl::step_skip_name: none | nonfinite_gradient | nonfinite_update
  int64_t refused_nonfinite_steps = 0;  ///< refused steps in the run so far, this one included
  // PULSESync (app/trainer/publisher.h PublishStats)
  uint64_t patch_changed = 0, patch_bytes = 0, patch_index_bytes_raw = 0, patch_value_bytes_raw = 0;
  uint64_t patch_payload_raw_bytes = 0, patch_payload_compressed_bytes = 0, dense_bytes = 0;
  // timings (ms)
  double encode_ms = 0, transfer_ms = 0, apply_ms = 0, load_ms = 0, generate_ms = 0, train_ms = 0;
  double generate_wait_ms = 0, step_ms = 0;
  int64_t prefetched_workers = 0;                   ///< workers whose patch came from their prefetch
  int64_t device_patch_loads = 0;                   ///< worker syncs that patched the model on its GPU
  int64_t full_copy_loads = 0;                      ///< worker syncs that copied in the whole replica
  std::map<std::string, uint64_t> worker_versions;  ///< worker id -> version it holds
  bool bit_identical = true;                        ///< every worker's root hash matched the trainer's
  double elapsed_s = 0;                             ///< wall time of the run so far (across resumes)
  nlohmann::json extra = nlohmann::json::object();  ///< role-specific fields merged into the row

  /// The metrics.jsonl row (the keys of pulse's metrics format, README "run folder").
  nlohmann::json to_json() const;
  /// "reward 0.316  changed 1.17e-01  patch 681.2 KB (9x)".
  std::string status_line() const;
};

}  // namespace pulse::app
