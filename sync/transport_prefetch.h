// Patch prefetch for an inference worker: while the worker generates, a helper thread watches the trainer's
// head and downloads the next patch into memory, so that the sync at the next job boundary validates and
// applies it without waiting on the network. The apply itself stays at the job boundary (never during
// generation: the model reads the weights), which also keeps the version each step samples with exact.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "sync/transport_source.h"

namespace pulse::sync {

/// A PatchSource that serves patch(from, to) from a prefetched copy when one matches, else from `inner`.
/// One user thread plus the helper thread it starts; the helper and the user never use `inner` at once
/// (every call first stops the helper).
class PrefetchingSource : public PatchSource {
 public:
  explicit PrefetchingSource(PatchSource& inner) : inner_(inner) {}
  ~PrefetchingSource() override { stop(); }

  /// Starts the helper: it polls head() every `poll_ms` until the head is past `from`, then fetches
  /// patch(from, head) into memory. A failed fetch is dropped (the next sync fetches normally).
  void start(uint64_t from, int poll_ms = 20);
  /// Stops polling and joins the helper (a fetch in progress completes first).
  void stop();
  /// Patches served from the prefetched copy so far.
  uint64_t hits() const { return hits_; }

  VersionHead head() override;
  std::vector<uint8_t> patch(uint64_t from, uint64_t to) override;
  std::vector<uint8_t> anchor(uint64_t version) override;
  void confirm(const std::string& worker_id, uint64_t version, uint64_t root_hash) override;
  bool serves_composed() const override { return inner_.serves_composed(); }

 private:
  PatchSource& inner_;
  std::thread helper_;
  std::atomic<bool> cancel_{false};
  bool have_ = false;  ///< written by the helper, read after the join
  uint64_t from_ = 0, to_ = 0;
  std::vector<uint8_t> blob_;
  uint64_t hits_ = 0;
};

}  // namespace pulse::sync
