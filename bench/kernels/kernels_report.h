// `pulse bench kernels`: the hot kernels' speed on this machine against a copy measured in the same run,
// as one JSON object (or a table). CPU: every variant of the BF16 diff-and-emit scan (kernels/diff_emit16.h,
// at ~7% and ~1% changed), of the PULSELoCo gate (kernels/loco_gate.h) and of XXH3-64 (kernels/xxh3_long.h)
// vs a memcpy of the same input,
// as bench/kernels_bench.cpp measures them. GPU (a PULSE_CUDA build on a machine with a CUDA device):
// the CUDA kernels (kernels/*_cuda.h) vs a device-to-device cudaMemcpy, each output compared with its
// CPU reference. Torch-free.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace pulse::bench {

/// Settings of `pulse bench kernels`.
struct KernelsBenchOptions {
  uint64_t elements = uint64_t{1} << 24;  ///< elements per tensor (BF16 / FP32)
  int reps = 5;                           ///< repetitions; the best time of each is reported
  bool cpu = true;                        ///< run the CPU variants
  bool gpu = true;                        ///< run the CUDA kernels (when built with them and a GPU is there)
  /// Elements per tensor of a second GPU pass at real sizes (1-2 G: launch and tail effects gone), its
  /// rows under "gpu_large"; 0 = none. The "gpu" rows keep `elements`.
  uint64_t gpu_elements = 0;
  /// "" or "qwen2.5-7b": also the end-to-end sync stages on that model's tensor set
  /// (bench/kernels/model_stages.h) under "model": {"cpu", "gpu"}.
  std::string model;
  int model_scale = 1;          ///< qwen25_7b_shapes(scale): 1 = real sizes; tests run it at 64+
  double model_changed = 0.01;  ///< fraction of BF16 elements the model step changes
  bool model_cpu = true;        ///< run the model stages on the CPU too (7B at scale 1 needs ~80 GB)
};

/// The CPU part: {"diff_emit16": [...], "loco_gate": [...], "xxh3_long": [...]} with, per variant and
/// density (xxh3_long: per variant plus libxxhash, over the whole 2 x elements bytes and over one 64 KiB
/// block hashed repeatedly in cache), ms, GB/s of the kernel's input, memcpy GB/s of the same bytes in the
/// same run and their ratio (bench/kernels/cpu_bench.cpp).
nlohmann::json run_cpu_kernels_bench(const KernelsBenchOptions& options);

/// The GPU part: {"available": false, "reason": ...} without a CUDA build or device; otherwise the device,
/// the same-run device-to-device copy bandwidth (read + write bytes per second) and, per kernel, ms,
/// bytes moved (read + written), GB/s, ratio to the copy and "matches_cpu" (bench/kernels/gpu_bench.cpp).
nlohmann::json run_gpu_kernels_bench(const KernelsBenchOptions& options);

/// Both parts as one object: {"elements", "reps", "cpu", "gpu"}, plus "gpu_large" and "model" when asked
/// for. Throws std::invalid_argument for an unknown model name.
nlohmann::json run_kernels_bench(const KernelsBenchOptions& options);

/// A readable table of run_kernels_bench's result.
std::string kernels_bench_table(const nlohmann::json& result);

}  // namespace pulse::bench
