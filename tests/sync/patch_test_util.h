// Helpers shared by the sync tests that build small BF16 models and forge patch headers.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sync/hash.h"
#include "sync/patch.h"

namespace pulse::sync::test {

/// Named BF16 tensors (1-D) with a base and a target, ~1/`one_in` of the elements one ULP apart.
struct Bf16Model {
  std::vector<std::string> names;
  std::vector<std::vector<uint16_t>> base, target;

  Bf16Model(std::vector<std::string> tensor_names, const std::vector<size_t>& elements, uint32_t seed,
            unsigned one_in)
      : names(std::move(tensor_names)) {
    std::mt19937 rng(seed);
    for (size_t i = 0; i < names.size(); ++i) {
      base.emplace_back(elements[i]);
      for (auto& x : base.back()) x = static_cast<uint16_t>(0x3c00 + rng() % 512);
      target.push_back(base.back());
      for (auto& x : target.back())
        if (rng() % one_in == 0) ++x;
    }
  }
  /// Views of `data` (base, target or a working copy) under the model's names.
  std::vector<TensorView> views(const std::vector<std::vector<uint16_t>>& data) const {
    std::vector<TensorView> v;
    for (size_t i = 0; i < data.size(); ++i)
      v.push_back({names[i],
                   DType::BF16,
                   {static_cast<int64_t>(data[i].size())},
                   reinterpret_cast<const uint8_t*>(data[i].data()),
                   data[i].size() * 2});
    return v;
  }
  std::vector<MutableTensorView> mutable_views(std::vector<std::vector<uint16_t>>& data) const {
    std::vector<MutableTensorView> v;
    for (size_t i = 0; i < data.size(); ++i)
      v.push_back({names[i],
                   DType::BF16,
                   {static_cast<int64_t>(data[i].size())},
                   reinterpret_cast<uint8_t*>(data[i].data()),
                   data[i].size() * 2});
    return v;
  }
};

inline uint64_t get_u64(const std::vector<uint8_t>& p, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[at + i]) << (8 * i);
  return v;
}

inline void put_u64(std::vector<uint8_t>& p, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

/// Recomputes the header checksum after a header field was edited (FORMAT.md: header_bytes at offset
/// 16, the checksum in its last 8 bytes): the forged patch then passes the checksum.
inline void reseal_header(std::vector<uint8_t>& patch) {
  const uint64_t header_bytes = get_u64(patch, 16);
  put_u64(patch, header_bytes - 8, xxh3_64(patch.data(), header_bytes - 8));
}

}  // namespace pulse::sync::test
