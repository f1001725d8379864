#include "sync/worker_replica.h"

#include <algorithm>
#include <chrono>

#include "sync/hash.h"
#include "sync/patch.h"

namespace pulse::sync {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Per sync_to. Rejected patches beyond this mean the trainer serves broken bytes; "gone" bases beyond the
// second bound mean retention outruns this worker (the trainer publishes faster than it can follow).
constexpr int kMaxRejectedFallbacks = 3;
constexpr int kMaxGoneFallbacks = 16;

}  // namespace

WorkerReplica::WorkerReplica(std::string worker_id) : id_(std::move(worker_id)) {}

std::vector<MutableTensorView> WorkerReplica::weights() {
  return weights_.mutable_views();
}
std::vector<TensorView> WorkerReplica::views() const {
  return weights_.views();
}

bool WorkerReplica::try_apply(std::vector<uint8_t>& blob, SyncStats& stats) {
  const auto t0 = std::chrono::steady_clock::now();
  bool anchor = false;
  try {
    const PatchInfo info = inspect_patch(blob.data(), blob.size());
    anchor = info.anchor;
    if (weights_.empty()) {
      if (!info.anchor) throw PatchError("an empty replica needs an anchor, got a patch");
      // Applied into a fresh buffer set, adopted only when the whole anchor validated.
      OwnedTensors fresh = OwnedTensors::zeros_like(info);
      auto mv = fresh.mutable_views();
      apply_patch(mv, blob.data(), blob.size());
      weights_ = std::move(fresh);
    } else {
      if (!info.anchor && info.base_version != version_) {
        throw PatchError("patch base version " + std::to_string(info.base_version) + " but replica '" + id_ +
                         "' is at version " + std::to_string(version_));
      }
      // The root was recomputed from these bytes after the last apply and only apply_patch writes them,
      // so it can be trusted: the base is not hashed again (every target hash is still verified). Not
      // for an anchor: it is the fallback when patches keep failing, possibly because the weights went
      // bad, and under a trusted root an anchor at the replica's version would be a no-op without
      // looking, never repairing them.
      auto mv = weights_.mutable_views();
      ApplyOptions options;
      if (!info.anchor && hash_scheme_of_format(info.format_version) == hash_scheme_of_format(root_format_))
        options.trusted_root = root_hash_;
      apply_patch(mv, blob.data(), blob.size(), options);
    }
    version_ = info.target_version;
    // apply_patch verified every tensor's bytes against its target hash (or, for a no-op under the
    // trusted root, the root itself), so the root follows from those hashes without reading the model
    // again (a full read per step: ~0.7 s for a 7B model); names, dtypes and shapes come from the weights.
    const std::vector<TensorView> views = weights_.views();
    std::vector<uint64_t> hashes(views.size(), 0);
    for (size_t i = 0; i < views.size(); ++i) {
      const auto it =
          std::lower_bound(info.tensors.begin(), info.tensors.end(), views[i].name,
                           [](const PatchTensorInfo& t, const std::string& n) { return t.name < n; });
      if (it == info.tensors.end() || it->name != views[i].name)
        throw std::logic_error("replica '" + id_ + "' holds tensor '" + views[i].name +
                               "' that the patch lacks");
      hashes[i] = it->target_hash;
    }
    root_hash_ = pulse::sync::root_hash(views, hashes);
    root_format_ = info.format_version;
    if (root_hash_ != info.target_root_hash) {
      // apply_patch verified every tensor hash, so this means names/dtypes/shapes disagree: a codec bug.
      throw std::logic_error("replica '" + id_ + "' root hash " + hash_hex(root_hash_) + " != patch target " +
                             hash_hex(info.target_root_hash) + " at version " + std::to_string(version_));
    }
  } catch (const PatchError&) {
    ++stats.rejected;
    stats.apply_ms += ms_since(t0);
    return false;
  }
  ++stats.steps;
  stats.apply_ms += ms_since(t0);
  // Handed over without a copy: the bytes a follower of this replica (a GPU copy) applies next. After an
  // anchor the patches before it no longer lead anywhere.
  if (anchor)
    stats.applied_patches.clear();
  else
    stats.applied_patches.push_back(std::move(blob));
  return true;
}

void WorkerReplica::take_anchor(PatchSource& source, SyncStats& stats) {
  stats.used_anchor = true;
  for (int attempt = 0; attempt < 2; ++attempt) {  // a rejected anchor is fetched once more
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<uint8_t> blob = source.anchor(kLatestAnchor);
    stats.fetch_ms += ms_since(t0);
    stats.bytes += blob.size();
    if (try_apply(blob, stats)) return;
  }
  throw PatchError("replica '" + id_ + "': the newest anchor was rejected twice");
}

WorkerReplica::SyncStats WorkerReplica::sync_to(PatchSource& source, uint64_t target_version) {
  SyncStats stats;
  stats.from = version_;
  int rejected_fallbacks = 0, gone_fallbacks = 0;
  if (weights_.empty()) take_anchor(source, stats);
  while (version_ < target_version) {
    const uint64_t step_to = source.serves_composed() ? target_version : version_ + 1;
    bool applied = false, gone = false;
    for (int attempt = 0; attempt < 2 && !applied; ++attempt) {  // a rejected patch is fetched once more
      std::vector<uint8_t> blob;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        blob = source.patch(version_, step_to);
      } catch (const VersionGoneError&) {
        gone = true;
        break;
      }
      stats.fetch_ms += ms_since(t0);
      stats.bytes += blob.size();
      applied = try_apply(blob, stats);
    }
    if (applied) continue;
    // Our base is gone (410), or the patch keeps failing validation: restart from the newest anchor.
    if (gone && ++gone_fallbacks > kMaxGoneFallbacks) {
      throw TransportError(410, "replica '" + id_ + "' cannot reach version " +
                                    std::to_string(target_version) +
                                    ": its base keeps being retired before it can catch up");
    }
    if (!gone && ++rejected_fallbacks > kMaxRejectedFallbacks) {
      throw PatchError("replica '" + id_ + "' cannot reach version " + std::to_string(target_version) +
                       ": patches from version " + std::to_string(version_) + " keep failing validation");
    }
    take_anchor(source, stats);
  }
  stats.to = version_;
  if (stats.to != stats.from || stats.steps > 0) source.confirm(id_, version_, root_hash_);
  return stats;
}

}  // namespace pulse::sync
