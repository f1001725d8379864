// End-to-end sync stages on a model-shaped tensor set (bench/kernels/model_shapes.h) at a given density:
// how long each stage of "FP32 masters -> patch streams in host memory" (cast, diff, hash, compaction,
// entropy stage, device-to-host copy) and of "patch streams -> applied and verified weights" takes for the
// whole set, each printed, beside the totals the sync targets are stated in (issue 33: a 7B-shaped set at
// 1% changed, extract + encode <= 20 ms, apply + verify <= 10 ms on one H200). Built on the kernels
// themselves (kernels/*.h, kernels/*_cuda.h), not on sync/'s container: what the stages cost, not the
// container's bookkeeping. Torch-free.
#pragma once
#include <cstdint>

#include <nlohmann/json.hpp>

namespace pulse::bench {

/// Settings of the model-shaped stage benchmark.
struct ModelStagesOptions {
  int scale = 1;                  ///< qwen25_7b_shapes(scale): 1 = the real 7B sizes
  double changed = 0.01;          ///< fraction of BF16 elements the step changes (one ULP each)
  int reps = 3;                   ///< repetitions per stage, the best kept
  uint64_t pattern = 1ull << 24;  ///< elements of the generated weights, repeated over every tensor
};

/// The CPU stages (one thread, the CPU's fastest kernel variants): {"tensors", "elements", "bytes_bf16",
/// "changed", "stages": [{"stage", "ms", "gbps"}...], "extract_ms", "apply_verify_ms", "matches"}:
/// cast (kernels/bf16.h), diff + compaction (kernels/diff_emit16.h), hash (tree hash of every target,
/// kernels/tree_hash.h), entropy (zstd level 3 of every tensor's streams), apply (kernels/apply_kernels.h),
/// verify (tree hash of the applied weights); "matches": the applied weights hash as the targets.
nlohmann::json run_model_stages_cpu(const ModelStagesOptions& options);

/// The same on the GPU (a PULSE_CUDA build and a device, else {"available": false, "reason"}): cast +
/// diff + compaction fused (kernels/diff_emit16_cuda.h), hash (kernels/tree_hash_cuda.h, one batch),
/// device-to-host copy of the streams (pinned host memory), entropy (host zstd as above), host-to-device
/// copy of the streams, apply (kernels/patch_apply_cuda.h, device-validated scatter), verify (tree hash
/// of the applied weights), with the same-run device copy of the BF16 weights for scale.
nlohmann::json run_model_stages_gpu(const ModelStagesOptions& options);

}  // namespace pulse::bench
