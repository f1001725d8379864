#include "sync/hash.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace pulse::sync {

uint64_t tensor_hash(const TensorView& tensor) {
  return XXH3_64bits(tensor.data, tensor.nbytes);
}

namespace {
void update_u64(XXH3_state_t* state, uint64_t v) {
  uint8_t bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(v >> (8 * i));  // little-endian on any host
  XXH3_64bits_update(state, bytes, 8);
}
}  // namespace

uint64_t root_hash(const std::vector<TensorView>& tensors, const std::vector<uint64_t>& tensor_hashes) {
  if (tensors.size() != tensor_hashes.size())
    throw std::invalid_argument("root_hash: one hash per tensor needed");
  std::vector<std::pair<const TensorView*, uint64_t>> sorted;
  sorted.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) sorted.emplace_back(&tensors[i], tensor_hashes[i]);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first->name < b.first->name; });
  XXH3_state_t* state = XXH3_createState();
  if (!state) throw std::bad_alloc();
  XXH3_64bits_reset(state);
  update_u64(state, sorted.size());
  for (const auto& [t, h] : sorted) {
    update_u64(state, t->name.size());
    XXH3_64bits_update(state, t->name.data(), t->name.size());
    update_u64(state, static_cast<uint8_t>(t->dtype));
    update_u64(state, t->shape.size());
    for (int64_t d : t->shape) update_u64(state, static_cast<uint64_t>(d));
    update_u64(state, h);
  }
  const uint64_t root = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return root;
}

uint64_t root_hash(const std::vector<TensorView>& tensors) {
  std::vector<uint64_t> hashes;
  hashes.reserve(tensors.size());
  for (const auto& t : tensors) hashes.push_back(tensor_hash(t));
  return root_hash(tensors, hashes);
}

std::string hash_hex(uint64_t hash) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

}  // namespace pulse::sync
