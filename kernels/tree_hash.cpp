#include "kernels/tree_hash.h"

#include <vector>

#include "kernels/xxh3_long.h"

namespace pulse::kernels {

uint64_t tree_hash_combine(const uint64_t* leaves, uint64_t count) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the leaves are hashed as little-endian u64");
  if (count == 0) return xxh3_64bits(nullptr, 0);
  if (count == 1) return leaves[0];
  return xxh3_64bits(leaves, 8 * count);
}

uint64_t tree_hash64(const void* data, uint64_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  const uint64_t chunks = tree_hash_chunks(len);
  if (chunks <= 1) return xxh3_64bits(p, len);
  constexpr uint64_t kOnStack = 64;
  uint64_t local[kOnStack];
  std::vector<uint64_t> heap(chunks > kOnStack ? chunks : 0);
  uint64_t* leaves = chunks > kOnStack ? heap.data() : local;
  for (uint64_t c = 0; c < chunks; ++c)
    leaves[c] = xxh3_64bits(p + c * kTreeHashChunkBytes, tree_hash_chunk_len(len, c));
  return tree_hash_combine(leaves, chunks);
}

}  // namespace pulse::kernels
