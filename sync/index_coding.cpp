#include "sync/index_coding.h"

namespace pulse::sync {

uint64_t bitmap_bytes(uint64_t numel) {
  return numel / 8 + (numel % 8 != 0);
}

void validate_index_stream(const std::string& tensor, uint8_t coding, const uint8_t* index,
                           uint64_t index_bytes, uint64_t changed, uint64_t numel, uint64_t payload_offset) {
  auto fail = [&](const std::string& what, uint64_t at) {
    return PatchError("patch tensor '" + tensor + "': index stream " + what + " at payload byte offset " +
                      std::to_string(payload_offset + at));
  };
  if (changed > numel)
    throw fail("claims " + std::to_string(changed) + " changes in " + std::to_string(numel) + " elements", 0);
  if (coding == kIndexDense) {
    if (index_bytes != 0) throw fail("of a dense tensor is not empty", 0);
    return;
  }
  if (coding == kIndexBitmap) {
    if (index_bytes != bitmap_bytes(numel)) throw fail("has the wrong bitmap size", 0);
    uint64_t ones = 0;
    uint64_t i = 0;
    for (; i + 8 <= index_bytes; i += 8) {
      uint64_t w;
      std::memcpy(&w, index + i, 8);
      ones += static_cast<uint64_t>(__builtin_popcountll(w));
    }
    for (; i < index_bytes; ++i) ones += static_cast<uint64_t>(__builtin_popcount(index[i]));
    if (numel % 8 && (index[index_bytes - 1] >> (numel % 8)) != 0)
      throw fail("has padding bits set", index_bytes - 1);
    if (ones != changed)
      throw fail("has " + std::to_string(ones) + " bits set, header says " + std::to_string(changed), 0);
    return;
  }
  if (coding != kIndexVarintGaps) throw fail("has unknown coding " + std::to_string(coding), 0);
  if (index_bytes < changed) throw fail("is shorter than one byte per change", 0);
  const uint8_t* tail = index + changed;
  const uint8_t* tail_end = index + index_bytes;
  uint64_t next = 0;  // smallest legal next position
  for (uint64_t j = 0; j < changed; ++j) {
    const uint8_t h = index[j];
    uint64_t gap = h & 127;
    if (h & 128) {
      uint64_t rest = 0;
      int shift = 0;
      for (;;) {
        if (tail == tail_end) throw fail("varint tail truncated", static_cast<uint64_t>(tail - index));
        const uint8_t b = *tail++;
        if (shift >= 57 || (shift == 56 && (b & 127) > 1))
          throw fail("varint gap overflows 64 bits", static_cast<uint64_t>(tail - index - 1));
        rest |= static_cast<uint64_t>(b & 127) << shift;
        shift += 7;
        if (!(b & 128)) break;
      }
      gap |= rest << 7;
    }
    if (next >= numel || gap > numel - 1 - next)
      throw fail(
          "position out of bounds (change " + std::to_string(j) + ", " + std::to_string(numel) + " elements)",
          j);
    next = next + gap + 1;
  }
  if (tail != tail_end)
    throw fail("has " + std::to_string(tail_end - tail) + " trailing bytes",
               static_cast<uint64_t>(tail - index));
}

}  // namespace pulse::sync
