#include "sync/transport_prefetch.h"

#include <chrono>

namespace pulse::sync {

void PrefetchingSource::start(uint64_t from, int poll_ms) {
  stop();
  have_ = false;
  blob_.clear();
  cancel_ = false;
  helper_ = std::thread([this, from, poll_ms] {
    try {
      while (!cancel_) {
        VersionHead h = inner_.head();
        if (h.version > from) {
          uint64_t to = inner_.serves_composed() ? h.version : from + 1;
          blob_ = inner_.patch(from, to);
          from_ = from;
          to_ = to;
          have_ = true;
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
      }
    } catch (const std::exception&) {
      have_ = false;  // the sync at the job boundary fetches (and reports) for itself
    }
  });
}

void PrefetchingSource::stop() {
  cancel_ = true;
  if (helper_.joinable()) helper_.join();
}

VersionHead PrefetchingSource::head() {
  stop();
  return inner_.head();
}

std::vector<uint8_t> PrefetchingSource::patch(uint64_t from, uint64_t to) {
  stop();
  if (have_ && from == from_ && to == to_) {
    have_ = false;
    ++hits_;
    return std::move(blob_);
  }
  return inner_.patch(from, to);
}

std::vector<uint8_t> PrefetchingSource::anchor(uint64_t version) {
  stop();
  return inner_.anchor(version);
}

void PrefetchingSource::confirm(const std::string& worker_id, uint64_t version, uint64_t root_hash) {
  stop();
  inner_.confirm(worker_id, version, root_hash);
}

}  // namespace pulse::sync
