// PULSESync patches: lossless sparse updates of a set of named tensors from a base version to a
// target version. Byte layout and versioning rule: sync/FORMAT.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sync/io/tensor_view.h"

namespace pulse::sync {

/// How changed values are stored.
enum class ValueMode : uint8_t {
  Absolute = 0,  ///< the new bit patterns: idempotent, what the PULSE reference deployment ships
  Delta = 1,     ///< change relative to the base bit pattern: smaller, valid only on the exact base
};

/// Encoder settings.
struct PatchOptions {
  ValueMode values = ValueMode::Absolute;
  int zstd_level = 3;    ///< 1..22; 0 = no compression ("none")
  std::string model_id;  ///< free text identifying the model lineage
  uint64_t base_version = 0;
  uint64_t target_version = 0;
  size_t chunk_bytes = 4u << 20;  ///< payload chunk size before compression (bytes)
  int threads = 0;                ///< 0 = all hardware threads
  /// Index coding for every tensor: -1 = choose per tensor by size (default); 0 varint gaps, 1 bitmap,
  /// 2 dense (FORMAT.md). Forcing exists for tests and benchmarks.
  int force_index_coding = -1;
  /// Trust model of the two fields below: the base hash written into the header is the caller's claim.
  /// The encoder does not check it (that would cost the read of the base it saves); the worker still
  /// verifies its own weights' root against the header's base root before applying (apply_patch), so a
  /// wrong claim makes the patch rejected at apply time (weights unchanged), never silently applied.
  /// Use them when the caller published the base itself, e.g. the previous encode's target hashes.
  ///
  /// Unset (default): the encoder hashes the base while it scans it. Set: the base's root hash
  /// (sync/hash.h root_hash) as the caller knows it; the base is not hashed. Wins over the field below.
  std::optional<uint64_t> known_base_root;
  /// Unset (default) or one tensor_hash per base tensor, in the order of the `base` argument of
  /// encode_patch (e.g. the target_hash entries, matched by name, of the header of the patch that
  /// produced the base: inspect_patch(...).tensors); the base is
  /// not hashed and its root is computed from these. Another size: PatchError.
  std::optional<std::vector<uint64_t>> known_base_tensor_hashes;

  /// The one range rule of each setting (sync/patch_options.cpp), checked by both encoders
  /// (encode_patch, encode_patch_cuda) and by the run config: zstd_level 0..22, threads 0..1024,
  /// chunk_bytes 1..2^31, force_index_coding -1..2. Throws PatchError "KEY: must be ..." where KEY is the
  /// TOML key (sync.zstd_level, sync.threads) or, for the two settings without one, the member's name.
  void validate() const;
};

/// Any rejected patch: bad magic/version/checksum, truncation, out-of-bounds index, name/dtype/shape
/// mismatch, base mismatch, target hash mismatch. what() names the version(s), tensor and byte offset.
struct PatchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Per-tensor entry of a patch header.
struct PatchTensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t changed = 0;      ///< elements whose bit pattern changes (stored ones; dense stores all)
  uint8_t index_coding = 0;  ///< see FORMAT.md
  uint64_t index_bytes = 0;  ///< uncompressed bytes of the index stream
  uint64_t value_bytes = 0;  ///< uncompressed bytes of the value stream
  uint64_t target_hash = 0;  ///< tensor_hash after apply
  uint64_t raw_offset = 0;   ///< byte offset of the index stream in the uncompressed payload
};

/// Decoded header of a patch or anchor.
struct PatchInfo {
  uint32_t format_version = 0;
  bool anchor = false;
  ValueMode values = ValueMode::Absolute;
  std::string model_id;
  uint64_t base_version = 0, base_root_hash = 0;
  uint64_t target_version = 0, target_root_hash = 0;
  std::vector<PatchTensorInfo> tensors;
  uint64_t total_bytes = 0;  ///< whole patch on the wire
  uint64_t payload_compressed_bytes = 0, payload_raw_bytes = 0;
  int zstd_level = 0;        ///< level the payload was compressed with (0 = none)
  uint64_t chunk_bytes = 0;  ///< raw bytes per payload chunk (the last may be shorter)
  uint64_t n_chunks = 0;
  uint64_t header_bytes = 0;  ///< container header including its checksum
};

/// Encodes target - base. base and target must hold the same names/dtypes/shapes (any order).
/// Throws PatchError on mismatch.
std::vector<uint8_t> encode_patch(const std::vector<TensorView>& base, const std::vector<TensorView>& target,
                                  const PatchOptions& options);

/// A full snapshot of `target` in the same container (dense coding, absolute values, base_version 0).
std::vector<uint8_t> encode_anchor(const std::vector<TensorView>& target, const PatchOptions& options);

/// Parses and checksums the header (not the payload). Throws PatchError.
PatchInfo inspect_patch(const uint8_t* data, size_t size);

/// Checks the payload too: the file holds every chunk the header lists (nothing after), each chunk's
/// checksum matches and each decompresses to its raw size. Returns "" when it does, else what is wrong
/// (the PatchError text, naming the chunk and byte offset). Does not check the streams against weights
/// (apply_patch does). `threads`: 0 = all hardware threads. Thread safe.
std::string check_patch_payload(const uint8_t* data, size_t size, int threads = 0);

/// Settings of apply_patch.
struct ApplyOptions {
  int threads = 0;  ///< 0 = all hardware threads
  /// Unset (the default, safe): apply_patch hashes the weights' base bytes as it applies (in the same
  /// pass, block by block) to learn their root, and rolls back after the pass when it is not the
  /// patch's base (or is already its target: then returns false). Set: the root hash the caller already
  /// knows its weights to have, e.g. the target root of the patch it applied last (which apply_patch
  /// verified then) and nothing has written to the weights since. apply_patch then skips hashing the
  /// base of the tensors the patch changes: this root equal to the patch's target root = no-op (returns
  /// false without looking or writing); equal to its base root = apply; else a base mismatch error. Every
  /// changed tensor's target hash is still verified after apply, so a wrong claim cannot leave wrong weights
  /// behind (it is rejected and rolled back); only the no-op answer rests on the claim alone.
  std::optional<uint64_t> trusted_root;
};

/// Validates everything (checksums, indices in bounds, names/dtypes/shapes, base root hash unless the
/// patch is an anchor or already at target), applies, verifies every target hash. Returns true if the
/// weights changed, false when they were already at the target (no-op). On any failure throws
/// PatchError and the weights are unchanged.
bool apply_patch(std::vector<MutableTensorView>& weights, const uint8_t* data, size_t size,
                 const ApplyOptions& options);

/// The same with default options and `threads` threads (0 = all).
bool apply_patch(std::vector<MutableTensorView>& weights, const uint8_t* data, size_t size, int threads = 0);

}  // namespace pulse::sync
