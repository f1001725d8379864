// The trainer's record of published weight versions: per-step patches, periodic anchors, composed
// patches for workers several versions behind, worker confirmations and chain-safe retention.
//
// Versions: the trainer publishes v0 (stored as an anchor), then v0+1, v0+2, ... Each publish stores the
// patch (v-1 -> v); every `anchor_every` versions it also stores an anchor (a full snapshot, see
// sync/FORMAT.md). Any retained version is rebuilt as "nearest anchor <= v, then replay the patches".
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sync/patch.h"
#include "sync/io/tensor_view.h"

namespace pulse::sync {

/// Named tensors whose bytes this object owns (the trainer's published copy, a worker's replica).
/// Tensors are kept sorted by name. Not thread-safe; copyable.
class OwnedTensors {
 public:
  OwnedTensors() = default;
  /// A deep copy of `tensors` (any order). Throws std::invalid_argument on duplicate names or a view
  /// whose nbytes disagrees with its shape and dtype.
  static OwnedTensors copy_of(const std::vector<TensorView>& tensors);
  /// Zero-filled tensors with the names/dtypes/shapes listed in a patch or anchor header.
  static OwnedTensors zeros_like(const PatchInfo& info);

  std::vector<TensorView> views() const;
  std::vector<MutableTensorView> mutable_views();
  size_t size() const { return entries_.size(); }
  size_t nbytes() const;  ///< total bytes of all tensors
  bool empty() const { return entries_.empty(); }

 private:
  struct Entry {
    std::string name;
    DType dtype = DType::BF16;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Entry> entries_;
};

/// How many anchors the store writes and keeps.
struct RetentionPolicy {
  uint64_t anchor_every = 10;  ///< an anchor at every version divisible by this (0 = only the first publish)
  uint64_t keep_anchors = 2;   ///< newest anchors always kept (at least 1), plus whatever a worker needs
};

/// The newest published version and its root hash (sync/hash.h root_hash).
struct VersionHead {
  uint64_t version = 0;
  uint64_t root_hash = 0;
};

/// A worker confirmed a root hash that differs from the trainer's for that version.
struct HashMismatchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Counters for logs and tests.
struct VersionStoreStats {
  uint64_t patches_stored = 0, anchors_stored = 0;       ///< currently retained
  uint64_t composed_built = 0, composed_cache_hits = 0;  ///< composed patches encoded / served from cache
  uint64_t oldest_reconstructible = 0;                   ///< oldest version patch(from, head) still serves
};

/// Immutable bytes shared between the store, the HTTP server and in-flight responses.
using Blob = std::shared_ptr<const std::vector<uint8_t>>;

/// Thread-safe (one internal mutex; encoding runs outside it). publish() is meant for one trainer thread.
class VersionStore {
 public:
  /// dir: where patches and anchors are also written as files (atomically: sync/io/atomic_file.h), named
  /// patch-<from>-<to>.pulse and anchor-<v>.pulse with 20-digit zero-padded versions, and removed again as
  /// retention drops them; "" = memory only. The files are a copy for inspection (`pulse sync inspect`):
  /// the store serves from memory and never reads them back. Such files left in `dir` by an earlier store
  /// (a killed run) are deleted here, so that the folder only ever holds this store's versions; nothing else
  /// in `dir` is touched. encode_options: codec settings for every patch and anchor (its base/target
  /// versions are set per call). Throws std::filesystem::filesystem_error when `dir` cannot be created or
  /// listed.
  VersionStore(std::string dir, RetentionPolicy policy, PatchOptions encode_options);

  /// Publishes `weights` (BF16 views, HF names, any order) as `version`: it must be head+1, or anything for
  /// the first publish, which is stored as an anchor. Encodes the patch head -> version against the
  /// previously published weights (kept as an owned copy), and an anchor when version % anchor_every == 0.
  /// Returns the patch bytes (the anchor bytes for the first publish). Throws std::invalid_argument on a
  /// wrong version, PatchError when names/dtypes/shapes differ from the previous version.
  Blob publish(uint64_t version, const std::vector<TensorView>& weights);

  /// Encodes the patch of `version` (head+1) somewhere else: `encode` gets the store's codec options with
  /// base/target versions and known_base_root (the head's root) set, and returns the patch; the weights
  /// live where it runs (a GPU: sync/gpu_encode.h), so only the patch reaches host memory. The store
  /// applies it to a copy of its head weights (apply_patch with the head's root as trusted_root: every
  /// changed tensor's target hash verified, sync/patch.h), runs `check` on the result (the publisher's
  /// NaN/Inf backstop; it throws to refuse), then stores the patch and, when version % anchor_every == 0, an
  /// anchor of the result: the same state as publish() of those weights. Throws std::logic_error before the
  /// first publish(), std::invalid_argument on a wrong version or a patch for other versions, PatchError /
  /// HashMismatchError from the apply, and what `encode` or `check` throw; nothing is stored then.
  Blob publish_encoded(uint64_t version,
                       const std::function<std::vector<uint8_t>(const PatchOptions&)>& encode,
                       const std::function<void(const std::vector<TensorView>&)>& check = {});

  /// Latest version and root hash. Before the first publish: {0, 0} and published() == false.
  VersionHead head() const;
  bool published() const;

  /// A patch from `from` to `to`: the stored one when to == from+1, else a composed patch (encode_patch of
  /// the two reconstructed states; cached). Throws std::invalid_argument unless from < to <= head, and
  /// std::out_of_range when `from` is no longer reconstructible (the client then takes an anchor).
  Blob patch(uint64_t from, uint64_t to);

  /// The anchor stored for exactly `version`. Throws std::out_of_range when there is none.
  Blob anchor(uint64_t version) const;
  /// Newest stored anchor. Throws std::out_of_range before the first publish.
  uint64_t latest_anchor_version() const;
  /// Versions with a retained anchor, ascending.
  std::vector<uint64_t> anchor_versions() const;

  /// Root hash of a published version. Throws std::out_of_range for a version never published.
  uint64_t root_hash_of(uint64_t version) const;

  /// Records that `worker_id` now holds `version` with `root_hash`: its baseline advances only here.
  /// Throws std::invalid_argument for a version never published, HashMismatchError when the hash differs.
  void confirm(const std::string& worker_id, uint64_t version, uint64_t root_hash);
  /// Confirmed version per worker.
  std::map<std::string, uint64_t> worker_versions() const;
  /// Drops a worker (gone for good) so that retention stops keeping its baseline.
  void forget_worker(const std::string& worker_id);

  /// True when patch(version, head) can be served (an anchor <= version with an unbroken patch chain).
  bool reconstructible(uint64_t version) const;

  VersionStoreStats stats() const;

 private:
  struct Plan;  // the blobs needed to rebuild a version, gathered under the lock
  bool plan_locked(uint64_t from, uint64_t to, Plan& plan) const;
  void remove_stale_files() const;
  void retain_locked();
  /// The anchor of `weights` as `version` when version % anchor_every == 0, else nullptr.
  Blob anchor_if_due(uint64_t version, const std::vector<TensorView>& weights) const;
  /// Writes the new version's blobs (on disk when the store has a dir), then makes it the head under the
  /// lock. Throws std::logic_error when another publish got in between.
  void commit(bool first, const VersionHead& prev, uint64_t version, uint64_t root,
              std::shared_ptr<const OwnedTensors> snapshot, const Blob& patch, const Blob& anchor);
  void write_blob(const std::string& name, const Blob& blob) const;
  void remove_blob(const std::string& name) const;
  static std::string patch_name(uint64_t from, uint64_t to);
  static std::string anchor_name(uint64_t version);

  std::string dir_;
  RetentionPolicy policy_;
  PatchOptions options_;

  mutable std::mutex mu_;
  bool published_ = false;
  uint64_t first_version_ = 0;
  VersionHead head_;
  std::shared_ptr<const OwnedTensors> latest_;              ///< the weights of head_ (base of the next patch)
  std::map<uint64_t, Blob> patches_;                        ///< key: target version v of the patch v-1 -> v
  std::map<uint64_t, Blob> anchors_;                        ///< key: version
  std::map<uint64_t, uint64_t> root_hashes_;                ///< every published version -> root hash
  std::map<std::string, uint64_t> workers_;                 ///< confirmed version per worker
  std::map<std::pair<uint64_t, uint64_t>, Blob> composed_;  ///< (from, to) -> composed patch
  std::deque<std::pair<uint64_t, uint64_t>> composed_order_;  ///< FIFO eviction of composed_
  VersionStoreStats stats_;
};

}  // namespace pulse::sync
