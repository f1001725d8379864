// Filesystem transport: the trainer publishes patches and anchors into a shared folder (NFS, an
// object-store mount) and workers poll it.
//
// Layout of `dir` (versions zero-padded to 20 digits so that names sort by version):
//   patch-<from>-<to>.pulse        the patch bytes (sync/FORMAT.md container)
//   patch-<from>-<to>.pulse.ready  READY marker: {"bytes":N,"xxh3":"<hex>","base_version":A,"version":B,
//                                                 "root_hash":"<hex>"}
//   anchor-<v>.pulse, anchor-<v>.pulse.ready
//   workers/<id>.json              a worker's confirmation {"worker":..,"version":V,"root_hash":"<hex>"}
// Writing order: data to a temp name, fsync, rename, fsync the folder, then the marker the same way. A
// reader only trusts data whose marker exists and whose size and xxh3 match the marker, so it never sees a
// partial file, even on mounts where rename is not atomic.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sync/transport_source.h"

namespace pulse::sync {

/// The trainer side. Not thread-safe (one publishing thread).
class FsPublisher {
 public:
  /// Creates `dir` (and dir/workers) when missing. Throws std::runtime_error naming the folder.
  explicit FsPublisher(std::string dir);
  /// Writes the patch from -> to, then its READY marker. Throws PatchError when `patch` is not a valid
  /// container, std::runtime_error on I/O errors.
  void publish(uint64_t from, uint64_t to, const std::vector<uint8_t>& patch);
  /// Writes the anchor of version v, then its READY marker.
  void publish_anchor(uint64_t v, const std::vector<uint8_t>& anchor);
  /// Deletes patches with target <= version and anchors < version (marker first, then data).
  void remove_before(uint64_t version);
  /// Retention: deletes patches with target <= `patches_after` and every anchor not in `anchors` (marker
  /// first, then data); what a reader at version >= patches_after, or one joining from a kept anchor,
  /// needs stays. Files that are not pulse's own are left alone.
  void retain(uint64_t patches_after, const std::vector<uint64_t>& anchors);
  /// Confirmations the workers wrote: worker id -> (version, root hash).
  std::map<std::string, VersionHead> confirmations() const;
  const std::string& dir() const { return dir_; }

 private:
  void write_with_marker(const std::string& name, const std::vector<uint8_t>& bytes);
  std::string dir_;
};

/// The worker side: polls the folder. Thread-safe (stateless apart from the path).
class FsSubscriber {
 public:
  explicit FsSubscriber(std::string dir);
  /// The patch from -> to when its READY marker exists and the data matches it; nullopt otherwise.
  std::optional<std::vector<uint8_t>> try_patch(uint64_t from, uint64_t to) const;
  /// The anchor of version v, same rule.
  std::optional<std::vector<uint8_t>> try_anchor(uint64_t v) const;
  /// Newest version with a READY patch or anchor (0 when none; see any_ready()).
  uint64_t latest_ready() const;
  bool any_ready() const;
  /// Root hash recorded in the marker of the newest READY patch or anchor (0 when none).
  VersionHead latest_ready_head() const;
  /// Newest READY anchor version.
  std::optional<uint64_t> latest_anchor() const;
  /// Oldest READY anchor version (patches older than it may have been removed).
  std::optional<uint64_t> oldest_anchor() const;
  const std::string& dir() const { return dir_; }

 private:
  std::optional<std::vector<uint8_t>> try_read(const std::string& name) const;
  std::string dir_;
};

/// A PatchSource over a shared folder: one-step patches only (serves_composed() is false; the worker
/// replays them), anchors, and confirmations written to dir/workers/<id>.json. A missing patch is
/// polled for up to `wait_s` seconds before a TransportError; a patch older than the oldest anchor that
/// is gone raises VersionGoneError.
class FsPatchSource : public PatchSource {
 public:
  explicit FsPatchSource(std::string dir, double wait_s = 10, double poll_s = 0.01);
  VersionHead head() override;
  std::vector<uint8_t> patch(uint64_t from, uint64_t to) override;
  std::vector<uint8_t> anchor(uint64_t version) override;
  void confirm(const std::string& worker_id, uint64_t version, uint64_t root_hash) override;
  bool serves_composed() const override { return false; }

 private:
  FsSubscriber sub_;
  double wait_s_, poll_s_;
};

}  // namespace pulse::sync
