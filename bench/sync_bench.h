// `pulse sync bench`: PULSESync patch size and speed against its baselines, timed in the same run
// (memcpy bandwidth, dense zstd-1, `zstd --patch-from`, the reference deployment's format).
// Plain C++ (no LibTorch), so that the codec's numbers do not depend on the training stack.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "sync/io/tensor_view.h"

namespace pulse::bench {

/// Settings of one benchmark run.
struct SyncBenchOptions {
  uint64_t elements = 100'000'000;  ///< BF16 elements of the synthetic workload (>= 1)
  uint64_t seed = 1;                ///< synthetic workload seed
  /// Adam learning rate of the synthetic workload: 3e-6 changes ~7% of the BF16 elements per step,
  /// 4e-7 about 1% (realistic RL density).
  double lr = 3e-6;
  int threads = 0;                       ///< codec and memcpy threads (0 = all cores)
  bool skip_zstd_patch_from = false;     ///< skip the `zstd --patch-from` baseline (reported as -1)
  std::vector<std::string> checkpoints;  ///< `run` workload: consecutive checkpoints (>= 2 to run it)
  /// Kernel variant to force for the whole run: "avx512", "avx2", "portable", or "" for the CPU's fastest.
  /// Every kernel family (kernels/diff_emit16.h, apply_kernels.h, diff_scan.h) runs that variant, or
  /// where a family has none by that name its fastest one below it (diff_scan has no "avx512"). Hashing
  /// outside the kernels uses libxxhash's own dispatch either way.
  std::string isa;
  /// Codec repetitions per value mode (>= 1); speeds are the best of them, and each is also paired with
  /// a memcpy sampled just before it (SyncBenchResult::encode_memcpy_paired).
  int repeat = 5;
};

/// One workload's numbers; JSON keys are the field names (issue 2). Byte counts are whole patches on
/// the wire; *_gbps are GB/s (1e9 bytes) of target tensor bytes.
struct SyncBenchResult {
  std::string workload;
  uint64_t elements = 0;                      ///< elements per step (summed over checkpoint pairs)
  uint64_t changed = 0;                       ///< elements whose bit pattern changed
  double bytes_per_change = 0;                ///< delta patch bytes / changed
  double entropy_bound_bytes_per_change = 0;  ///< (sum log2 C(n,k) + k * H(value changes)) / 8 / k
  int64_t ref_pulse_bytes = 0;  ///< reference deployment's format (COO gaps, abs values, zstd-1)
  int64_t patch_bytes_absolute = 0;
  int64_t patch_bytes_delta = 0;
  int64_t dense_zstd1_bytes = 0;       ///< zstd -1 of the target tensors
  int64_t zstd_patch_from_bytes = -1;  ///< `zstd --patch-from=BASE TARGET`; -1 when unavailable
  double encode_gbps = 0;              ///< slower of the two value modes
  double decode_gbps = 0;              ///< apply_patch incl. validation and hashes; slower mode
  double memcpy_gbps = 0;              ///< multithreaded memcpy of the same bytes
  /// The same three per CPU second of the process (all threads' CPU time summed): robust on a loaded
  /// machine, where wall time measures the other tenants. Table only.
  double encode_cpu_gbps = 0, decode_cpu_gbps = 0, memcpy_cpu_gbps = 0;
  /// Decode when the worker passes the root it verified last time (ApplyOptions::trusted_root, no
  /// re-hash of the base): wall and per CPU second, slower mode. The wall speed is in the JSON too.
  double decode_trusted_gbps = 0, decode_trusted_cpu_gbps = 0;
  /// Encode when the trainer passes the base root it published (PatchOptions::known_base_root, no
  /// hash of the base): wall and per CPU second, slower mode. The wall speed is in the JSON too.
  double encode_known_gbps = 0, encode_known_cpu_gbps = 0;
  /// Codec / memcpy wall-time ratios of each repetition against the memcpy sampled just before it:
  /// median, lowest and highest (slower mode for the median). On a shared host the machine's compute
  /// speed drifts for seconds at a time while memcpy barely moves (measured on a 2-core VM: the same
  /// encode at 8.7 or 15 ms in consecutive phases), so best-of speeds can pair a fast memcpy with a slow
  /// codec phase; these show the spread. In the table and the JSON.
  double encode_memcpy_paired = 0, encode_memcpy_paired_lo = 0, encode_memcpy_paired_hi = 0;
  double decode_memcpy_paired = 0, decode_memcpy_paired_lo = 0, decode_memcpy_paired_hi = 0;
  int threads = 0;             ///< threads the codec and memcpy ran on
  bool bit_identical = false;  ///< both modes reproduce the target exactly
  // Reported in the table only.
  double encode_gbps_absolute = 0, encode_gbps_delta = 0, decode_gbps_absolute = 0, decode_gbps_delta = 0;
  /// Encode stages, wall seconds (best of the repetitions) per value mode: the whole encode, and the
  /// same encode with zstd level 0 (scan, emit, hashes and container, streams stored raw); the
  /// difference is the zstd stage. Table only.
  double encode_s_absolute = 0, encode_s_delta = 0, encode_raw_s_absolute = 0, encode_raw_s_delta = 0;
  /// The same four in process CPU seconds (all threads; robust on a loaded machine). Table only.
  double encode_cpu_s_absolute = 0, encode_cpu_s_delta = 0, encode_raw_cpu_s_absolute = 0,
         encode_raw_cpu_s_delta = 0;
  /// The encode's floor, process CPU seconds (best of the repetitions, same threads): XXH3-64 of every
  /// base and target tensor read from memory (sync::tensor_hash, the kernel variant that runs), and of
  /// the target alone (the trainer's path, PatchOptions::known_base_root). The format needs both hashes
  /// (FORMAT.md, Hashes) and zstd needs its stage, so no encoder of this format with this zstd can use
  /// less CPU than hash + zstd stage, even with a free compare and emission: memcpy CPU / (hash + zstd)
  /// bounds encode/memcpy per CPU second. In the table and the JSON ("encode_floor").
  double hash_both_cpu_s = 0, hash_target_cpu_s = 0;
  /// The zstd stage in that floor: the smaller of the two value modes' (encode - the same encode at
  /// level 0, CPU seconds, >= 0), so that the bounds hold for either mode; and the bounds themselves,
  /// memcpy CPU seconds / (hash + zstd stage) with both sides hashed and with the target alone (0 when
  /// not measured).
  double floor_zstd_cpu_s = 0, max_encode_memcpy_cpu = 0, max_encode_known_base_memcpy_cpu = 0;
  std::string note;
  std::string kernels;  ///< the variants that ran, e.g. "diff_emit16 avx2, apply avx2, diff_masks avx2".
};

/// Measures one base -> target step (tensors paired by name). Writes progress to `log`.
SyncBenchResult measure_sync_step(const std::string& workload, const std::vector<sync::TensorView>& base,
                                  const std::vector<sync::TensorView>& target,
                                  const SyncBenchOptions& options, std::ostream& log);

/// Runs the synthetic workload (seeded Adam steps over FP32 masters ~N(0, 0.02), lr 3e-6, BF16 cast)
/// and, with >= 2 checkpoints, the `run` workload over consecutive pairs, on the kernel variants of
/// options.isa (restored to the CPU's fastest afterwards). Throws std::invalid_argument when elements is
/// 0, base + target (4 bytes per element) exceed the machine's physical memory, or this CPU cannot run
/// options.isa.
std::vector<SyncBenchResult> run_sync_bench(const SyncBenchOptions& options, std::ostream& log);

/// {"synthetic": {...}, "run": {...}}: per workload the keys (elements .. bit_identical), then
/// threads, kernels, encode_memcpy / decode_memcpy (best codec vs best memcpy, wall), their paired
/// spread encode_memcpy_paired / decode_memcpy_paired {median, lowest, highest}, and
/// encode_known_base_gbps / decode_trusted_root_gbps, and encode_floor {hash_base_target_cpu_ms,
/// hash_target_cpu_ms, zstd_cpu_ms, max_encode_memcpy_cpu, max_encode_known_base_memcpy_cpu} (see
/// SyncBenchResult::hash_both_cpu_s; absent when the hash or memcpy CPU time measured 0).
std::string sync_bench_json(const std::vector<SyncBenchResult>& results);

/// A human-readable table with the ratios to the targets.
std::string sync_bench_table(const std::vector<SyncBenchResult>& results);

}  // namespace pulse::bench
