#include "sync/transport_source.h"

namespace pulse::sync {

VersionHead LocalPatchSource::head() {
  return store_.head();
}

std::vector<uint8_t> LocalPatchSource::patch(uint64_t from, uint64_t to) {
  try {
    return *store_.patch(from, to);
  } catch (const std::out_of_range& e) {
    throw VersionGoneError(410, e.what());
  } catch (const std::invalid_argument& e) {
    throw TransportError(400, e.what());
  }
}

std::vector<uint8_t> LocalPatchSource::anchor(uint64_t version) {
  try {
    return *store_.anchor(version == kLatestAnchor ? store_.latest_anchor_version() : version);
  } catch (const std::out_of_range& e) {
    throw TransportError(404, e.what());
  }
}

void LocalPatchSource::confirm(const std::string& worker_id, uint64_t version, uint64_t root_hash) {
  store_.confirm(worker_id, version, root_hash);
}

}  // namespace pulse::sync
