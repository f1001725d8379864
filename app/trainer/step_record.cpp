#include "app/trainer/step_record.h"

#include <cstdio>

namespace pulse::app {

nlohmann::json StepRecord::to_json() const {
  nlohmann::json row{{"step", step},
                     {"version", version},
                     {"rollout_version", rollout_version},
                     {"lag", lag},
                     {"reward_mean", reward_mean},
                     {"reward_std", reward_std},
                     {"loss", loss},
                     {"clip_fraction", clip_fraction},
                     {"kl", kl},
                     {"grad_norm", grad_norm},
                     {"lr", lr},
                     {"entropy", entropy},
                     {"tis_mismatch", tis_mismatch},
                     {"tis_clipped_fraction", tis_clipped_fraction},
                     {"response_tokens", response_tokens},
                     {"truncated", truncated},
                     {"zero_variance_groups", zero_variance_groups},
                     {"tokens_per_s", tokens_per_s},
                     {"changed", changed},
                     {"changed_fraction", changed_fraction},
                     {"refused_nonfinite", refused_nonfinite},
                     {"refused_reason", refused_reason},
                     {"refused_nonfinite_steps", refused_nonfinite_steps},
                     {"patch_changed", patch_changed},
                     {"patch_bytes", patch_bytes},
                     {"patch_index_bytes_raw", patch_index_bytes_raw},
                     {"patch_value_bytes_raw", patch_value_bytes_raw},
                     {"patch_payload_raw_bytes", patch_payload_raw_bytes},
                     {"patch_payload_compressed_bytes", patch_payload_compressed_bytes},
                     {"dense_bytes", dense_bytes},
                     {"encode_ms", encode_ms},
                     {"transfer_ms", transfer_ms},
                     {"apply_ms", apply_ms},
                     {"load_ms", load_ms},
                     {"generate_ms", generate_ms},
                     {"train_ms", train_ms},
                     {"generate_wait_ms", generate_wait_ms},
                     {"prefetched_workers", prefetched_workers},
                     {"device_patch_loads", device_patch_loads},
                     {"full_copy_loads", full_copy_loads},
                     {"step_ms", step_ms},
                     {"worker_versions", worker_versions},
                     {"bit_identical", bit_identical},
                     {"elapsed_s", elapsed_s}};
  for (const auto& [k, v] : extra.items()) row[k] = v;
  return row;
}

std::string StepRecord::status_line() const {
  char status[160];
  std::snprintf(status, sizeof status, "reward %.3f  changed %.2e  patch %.1f KB (%.0fx)", reward_mean,
                changed_fraction, static_cast<double>(patch_bytes) / 1e3,
                static_cast<double>(dense_bytes) / static_cast<double>(std::max<uint64_t>(1, patch_bytes)));
  return status;
}

}  // namespace pulse::app
