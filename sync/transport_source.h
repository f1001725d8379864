// Where a worker gets patches and anchors from, whatever carries them (HTTP: sync/transport_http.h, a shared
// folder: sync/transport_fs.h), and the errors every transport reports.
#pragma once
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "sync/version_store.h"

namespace pulse::sync {

/// A transport failure that retrying will not fix (bad request, unauthorized, unknown route) or that
/// persisted past the retry budget. `status` is the HTTP status (0 when no response came back).
struct TransportError : std::runtime_error {
  TransportError(int status_code, const std::string& message)
      : std::runtime_error(message), status(status_code) {}
  int status = 0;
};

/// The requested base version is no longer reconstructible on the trainer (HTTP 410 Gone): take an anchor.
struct VersionGoneError : TransportError {
  using TransportError::TransportError;
};

/// Asks for "the newest anchor" in PatchSource::anchor.
inline constexpr uint64_t kLatestAnchor = std::numeric_limits<uint64_t>::max();

/// A worker's view of the trainer's VersionStore. Implementations document their thread safety.
class PatchSource {
 public:
  virtual ~PatchSource() = default;
  /// Newest published version and root hash. Throws TransportError.
  virtual VersionHead head() = 0;
  /// The patch from -> to (bytes in the sync/FORMAT.md container). Throws VersionGoneError when `from` can
  /// no longer be served, TransportError otherwise.
  virtual std::vector<uint8_t> patch(uint64_t from, uint64_t to) = 0;
  /// The anchor at exactly `version`, or the newest one for kLatestAnchor. Throws TransportError.
  virtual std::vector<uint8_t> anchor(uint64_t version) = 0;
  /// Reports that `worker_id` holds `version` with `root_hash` (its baseline on the trainer advances).
  virtual void confirm(const std::string& worker_id, uint64_t version, uint64_t root_hash) = 0;
  /// False when patch(from, to) only exists for to == from + 1 (the worker then replays one by one).
  virtual bool serves_composed() const { return true; }
};

/// The trainer's VersionStore in the same process, without any transport (tests, single-process runs).
/// Thread-safe as the store is.
class LocalPatchSource : public PatchSource {
 public:
  explicit LocalPatchSource(VersionStore& store) : store_(store) {}
  VersionHead head() override;
  std::vector<uint8_t> patch(uint64_t from, uint64_t to) override;
  std::vector<uint8_t> anchor(uint64_t version) override;
  void confirm(const std::string& worker_id, uint64_t version, uint64_t root_hash) override;

 private:
  VersionStore& store_;
};

}  // namespace pulse::sync
