// An inference worker's BF16 weights and how they catch up with the trainer, whatever the transport.
//
// Catch-up rule (issue 5): a worker at version c asks for the patch c -> target (a stored one-step patch or
// a composed one). When c is no longer reconstructible on the trainer (410), when the worker is empty, or
// when a patch keeps failing validation, it takes the newest anchor and continues from there. Every applied
// patch is validated by apply_patch (weights untouched on rejection); after applying, the worker computes
// its root hash and confirms it, which is what advances its baseline on the trainer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sync/transport_source.h"
#include "sync/version_store.h"

namespace pulse::sync {

/// Not thread-safe: one owner thread (the worker loop); views stay valid until the next sync_to.
class WorkerReplica {
 public:
  /// Starts empty (version() == 0, no tensors); the first sync_to bootstraps from the newest anchor.
  explicit WorkerReplica(std::string worker_id);

  /// What one sync_to did.
  struct SyncStats {
    uint64_t from = 0, to = 0;  ///< versions before and after
    uint64_t bytes = 0;         ///< patch/anchor bytes fetched (rejected ones included)
    double fetch_ms = 0, apply_ms = 0;
    bool used_anchor = false;  ///< bootstrapped or fell back to an anchor
    int rejected = 0;          ///< patches that apply_patch rejected (refetched)
    int steps = 0;             ///< patches/anchors applied
    /// The patch blobs (never anchors) this sync applied, in the order applied, moved in rather than
    /// copied. Only those after the last anchor applied: an anchor clears the list. Rejected blobs are
    /// never listed. Applied in order to weights at `from` (or, when used_anchor, at the anchor's
    /// version) they give this replica's bytes: what a copy of the weights on a GPU applies
    /// (app/worker/device_weights.h). Empty when nothing was applied.
    std::vector<std::vector<uint8_t>> applied_patches;
  };

  /// Brings the weights to `target_version` and confirms it. Throws TransportError when the source fails
  /// past its retries, PatchError when a version keeps being rejected after a refetch and the anchor
  /// fallback fails too. A replica already at or past target does nothing (from == to).
  SyncStats sync_to(PatchSource& source, uint64_t target_version);

  const std::string& id() const { return id_; }
  /// The id it confirms under from now on: a worker the trainer dropped registers again under a new id
  /// and keeps its verified weights (its next sync is a patch from its version, not an anchor).
  void set_id(std::string id) { id_ = std::move(id); }
  bool empty() const { return weights_.empty(); }
  uint64_t version() const { return version_; }
  /// Root hash of the current weights (computed after every apply).
  uint64_t root_hash() const { return root_hash_; }
  /// BF16 buffers (owned), sorted by HF name.
  std::vector<MutableTensorView> weights();
  std::vector<TensorView> views() const;

 private:
  /// Applies a fetched blob; true on success, false when apply_patch rejected it (weights unchanged). An
  /// applied patch is moved into stats.applied_patches (`blob` is then empty); an anchor clears that list.
  bool try_apply(std::vector<uint8_t>& blob, SyncStats& stats);
  void take_anchor(PatchSource& source, SyncStats& stats);

  std::string id_;
  OwnedTensors weights_;
  uint64_t version_ = 0;
  uint64_t root_hash_ = 0;
  /// The format version of the patch root_hash_ came from: a root is trusted only by a patch whose
  /// tensor hashes are of the same scheme (sync/hash.h), e.g. not across the switch to format 3.
  uint32_t root_format_ = 0;
};

}  // namespace pulse::sync
